"""Region-aware placement (upstream ``RegionAwareEnsemblePlacementPolicy``). PURE.

Locations are ``/region/rack``. The region of a bookie is the first path component; a bookie in the
default rack (``/default-region/default-rack`` or ``/default-rack``) is in the pseudo-region
``UnknownRegion`` (upstream). Durability: with ``reppRegionsToWrite`` set, ``d =
reppMinimumRegionsForDurability`` (default 2) regions must hold every acknowledged entry.

**Adherence is really checked (ours).** Upstream's ``isEnsembleAdheringToPlacementPolicy`` is a stub that
always answers MEETS_STRICT (issue #1898), so the Auditor can never flag a region-aware ledger and BP-54
can never repair one. Ours judges every write set, counting only members that are writable known bookies
(as rack-aware does):

* FAIL if it spans fewer than ``min(WQ, minNumRacksPerWriteQuorum)`` racks (full ``/region/rack`` paths),
  or, with ``enforceMinNumRacksPerWriteQuorum``, contains the default rack (the rack-aware rule);
* FAIL if durability is on (d >= 2) and some d-1 regions hold AQ or more of its members, i.e. an
  acknowledged entry could live in fewer than d regions (upstream's durability predicate, applied to the
  finished ensemble);
* MEETS_SOFT if its WQ members are not in WQ distinct regions (a replica shares a region, or is gone);
* MEETS_STRICT otherwise: every replica of every entry in its own region.

Placement follows upstream's shape with two changes. Allocation per region is upstream's: as even as
possible (ceil shares), the local region first, then a pointer that rotates between calls, regions that
run out of bookies give their share to the others. Then (ours) the regions are *interleaved* along the
ensemble instead of placed in contiguous blocks, so write sets span regions; inside a region bookies are
chosen rack-aware (racks not used by nearby positions first, upstream's coverage predicate next). If the
result does not adhere it is repaired with the fewest swaps (:mod:`.repair`); if no adhering ensemble exists
the call raises NotEnoughBookiesError when enforcement or durability is on and otherwise returns the FAIL
ensemble (upstream's best effort). Inside the client's own region the first bookie comes from the
client's own rack when it has a candidate (upstream: the local region's rack-aware policy starts at the
local node's rack).

Dynamic features (upstream ``FeatureProvider``; :class:`~.features.FeatureSwitches`, passed as
``features=`` or preset from ``reppDisableDurability`` / ``reppDisallowedRegions``):

* disable durability (root feature named by ``reppDisableDurabilityFeatureName``): while on, the effective
  durability is 1 region (argument checks, placement, adherence) and ``replace_bookie`` does not enforce
  durability, as upstream;
* disallow a region (per-region feature named by ``reppDisallowBookiePlacementInRegionFeatureName``, or
  ``disallowBookiePlacementInRegion`` when that key is unset): no new bookie is chosen in that region by
  ``new_ensemble``, ``replace_bookie`` or the repair; bookies already there stay. If every region holding
  candidates is disallowed, ``new_ensemble`` ignores the switch (upstream falls back to random selection).

Where the Javadoc and the code disagree we follow the code: allocation is ceil-based with back-off (not
"equal-sized"), region parsing needs only ``/region/rack``, and reads promote only the first remote bookie,
to position <= 2 (not "a remote bookie after every 2 local ones").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from autorecovery.errors import ConfigError, NotEnoughBookiesError

from .coverage import CoverageTracker
from .features import DEFAULT_DISALLOW_FEATURE, FeatureSwitches
from .policy import Adherence, BookiesHealthInfo, PlacementResult
from .topology import DEFAULT_RACK, DEFAULT_REGION_AND_RACK, NetworkTopology, location_parts
from .topology_aware import TopologyAwarePolicy
from autorecovery.placement.read_order import UNKNOWN_REGION

__all__ = ["RegionawarePolicy", "region_of_location"]

REMOTE_NODE_IN_REORDER_SEQUENCE = 2


def region_of_location(location: str | None) -> str:
    """Region of a network location (``/region/rack`` -> ``region``); ``UnknownRegion`` for the default rack."""
    if not location or location in (DEFAULT_RACK, DEFAULT_REGION_AND_RACK):
        return UNKNOWN_REGION
    parts = location_parts(location)
    return parts[0] if parts else UNKNOWN_REGION


class RegionawarePolicy(TopologyAwarePolicy):
    """Region-aware placement with per-write-set region adherence (module docstring).

    Raises:
        ConfigError: fewer regions in ``reppRegionsToWrite`` than ``reppMinimumRegionsForDurability``, or an
            unconfigured script resolver under enforcement (upstream).
    """

    upstream_class = "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy"
    DEFAULT_LOCATION = DEFAULT_REGION_AND_RACK
    _two_level = True
    _soft_possible = True

    def __init__(self, *args, features: FeatureSwitches | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._check_resolver()
        regions = self.config.repp_regions_to_write
        self._min_regions = self.config.effective_min_regions_for_durability
        if regions and len(regions) < self._min_regions:
            raise ConfigError(f"config key reppMinimumRegionsForDurability: {self._min_regions} regions needed, "
                              f"reppRegionsToWrite lists {len(regions)}")
        self._disallow_name = self.config.repp_disallow_bookie_placement_in_region_feature_name or DEFAULT_DISALLOW_FEATURE
        #: the feature switches (upstream feature provider); flip them at run time with ``features.set``
        self.features = features if features is not None else FeatureSwitches.from_config(
            self.config.repp_disable_durability_feature_name, self.config.repp_disable_durability,
            self._disallow_name, self.config.repp_disallowed_regions)
        self._features_seen = self.features.version
        if self.local_location and not self.config.ignore_local_node_in_placement_policy:
            self.my_region = region_of_location(self.local_location)
        else:
            self.my_region = UNKNOWN_REGION
        self._pointer = 0

    @property
    def enforce(self) -> bool:
        return self.config.enforce_min_num_racks_per_write_quorum

    @property
    def durability_disabled(self) -> bool:
        """Whether the disable-durability feature is on (upstream ``disableDurabilityFeature.isAvailable()``)."""
        return self.features.is_on(self.config.repp_disable_durability_feature_name)

    @property
    def durability(self) -> int:
        """Effective regions for durability d: 1 while durability is disabled, else the configured d (upstream)."""
        return 1 if self.durability_disabled else self._min_regions

    def disallowed_regions(self) -> frozenset[str]:
        """Regions whose disallow-placement feature is on."""
        return self.features.scopes_with(self._disallow_name)

    def _sync_features(self) -> None:
        """Drop cached judgements and the repair index when a feature switch flipped."""
        if self.features.version != self._features_seen:
            self._features_seen = self.features.version
            self._judges.clear()
            self._changed()

    def region_of(self, bookie: str) -> str:
        """Region of any bookie (topology, else resolver)."""
        return region_of_location(self.location_of(bookie))

    # -- adherence ------------------------------------------------------------------------------------
    def _label_of(self, bookie: str):
        rack = self.topology.rack_of(bookie)
        if rack is None:
            return None
        return (region_of_location(rack), rack)

    def _label_of_location(self, location: str):
        return (region_of_location(location), location)

    def _eligible(self, bookie: str) -> bool:
        rack = self.topology.rack_of(bookie)
        if rack is None or (self.enforce and rack == self.default_rack):
            return False
        return region_of_location(rack) not in self.disallowed_regions()

    def _durability_ok(self, labels: Iterable, ack_quorum_size: int) -> bool:
        d = self.durability
        if d < 2:
            return True
        counts = Counter(lab[0] for lab in labels if lab is not None)
        return sum(sorted(counts.values(), reverse=True)[:d - 1]) < ack_quorum_size

    def _judge_raw(self, labels: tuple, write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        present = [lab for lab in labels if lab is not None]
        racks = set(present)
        if len(racks) < min(write_quorum_size, self.config.min_num_racks_per_write_quorum):
            return Adherence.FAIL
        if self.enforce and any(lab[1] == self.default_rack for lab in racks):
            return Adherence.FAIL
        if not self._durability_ok(present, ack_quorum_size):
            return Adherence.FAIL
        if len({lab[0] for lab in present}) < write_quorum_size:
            return Adherence.MEETS_SOFT
        return Adherence.MEETS_STRICT

    def is_ensemble_adhering(self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        """Per-write-set region and rack adherence (module docstring; upstream always says MEETS_STRICT)."""
        self._sync_features()
        return super().is_ensemble_adhering(ensemble, write_quorum_size, ack_quorum_size)

    def are_acked_bookies_adhering(self, acked: set[str], write_quorum_size: int, ack_quorum_size: int) -> bool:
        """Upstream's rack-aware rule over ``/region/rack`` paths: known acked bookies span
        ``min(WQ, minNumRacksPerWriteQuorum)`` racks."""
        racks = {self.topology.rack_of(b) for b in acked if b in self.topology}
        return len(racks) >= min(write_quorum_size, self.config.min_num_racks_per_write_quorum)

    # -- new ensemble ---------------------------------------------------------------------------------
    def _check_args(self, e: int, wq: int, aq: int) -> None:
        d = self.durability
        if d > 0 and aq < d:
            raise ValueError(f"ack quorum {aq} is smaller than reppMinimumRegionsForDurability {d}")
        if e < wq:
            raise ValueError(f"write quorum {wq} cannot exceed ensemble size {e}")
        if wq < aq:
            raise ValueError(f"ack quorum {aq} cannot exceed write quorum {wq}")
        if d > 0 and aq <= wq - wq // d:
            raise ValueError(f"ack quorum {aq} violates durability across {d} regions in degraded mode (WQ={wq})")

    def new_ensemble(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                     exclude: Iterable[str] = frozenset(), custom_metadata: Mapping[str, bytes] | None = None
                     ) -> PlacementResult:
        """Choose E bookies spread over regions, then racks (module docstring).

        Raises:
            ValueError: bad (E, WQ, AQ) for the durability settings (upstream IllegalArgumentException).
            NotEnoughBookiesError: fewer than E candidates, or no adhering ensemble under enforcement/durability.
        """
        if ensemble_size <= 0:
            return PlacementResult([], Adherence.FAIL)
        self._sync_features()
        self._check_args(ensemble_size, write_quorum_size, ack_quorum_size)
        excl = set(exclude)
        return self._on_topologies(lambda topo, primary: self._new_on(
            topo, ensemble_size, write_quorum_size, ack_quorum_size, excl, primary))

    def _allocate(self, caps: dict[str, int], e: int) -> dict[str, int]:
        regions = sorted(caps)
        order: list[str] = []
        if self.my_region in caps:
            order.append(self.my_region)
        others = [r for r in regions if r != self.my_region]
        if others:
            k = self._pointer % len(others)
            self._pointer += 1
            order.extend(others[k:] + others[:k])
        alloc = {r: 0 for r in order}
        remaining = e
        maxed: set[str] = set()
        while remaining > 0:
            active = [r for r in order if r not in maxed]
            if not active:
                break
            progress = False
            for j, r in enumerate(active):
                if remaining == 0:
                    break
                want = min(remaining, math.ceil(remaining / (len(active) - j)))
                give = min(want, caps[r] - alloc[r])
                if give > 0:
                    alloc[r] += give
                    remaining -= give
                    progress = True
                if caps[r] - alloc[r] == 0:
                    maxed.add(r)
            if not progress:
                break
        if remaining > 0:
            raise NotEnoughBookiesError(f"only {e - remaining} of {e} bookies available across regions")
        return {r: alloc[r] for r in order if alloc[r] > 0}

    def _new_on(self, topo: NetworkTopology, e: int, wq: int, aq: int, exclude: set[str],
                primary: bool) -> PlacementResult:
        excl = set(exclude)
        if self.enforce:
            excl |= set(topo.bookies_in_rack(self.default_rack))
        racks_by_region: dict[str, list[str]] = {}
        caps: dict[str, int] = {}
        for rack in topo.racks():
            n = sum(1 for b in topo.bookies_in_rack(rack) if b not in excl)
            if n:
                reg = region_of_location(rack)
                racks_by_region.setdefault(reg, []).append(rack)
                caps[reg] = caps.get(reg, 0) + n
        barred = self.disallowed_regions() & set(caps)
        if barred and barred != set(caps):  # every region barred: ignore the switch (upstream: random)
            for reg in barred:
                excl |= {b for r in racks_by_region.pop(reg) for b in topo.bookies_in_rack(r)}
                del caps[reg]
        if sum(caps.values()) < e:
            raise NotEnoughBookiesError(f"need {e} bookies, only {sum(caps.values())} writable and not excluded")
        alloc = self._allocate(caps, e)
        seq: list[str] = []
        left = dict(alloc)
        while len(seq) < e:
            for r in alloc:
                if left[r] > 0:
                    seq.append(r)
                    left[r] -= 1
        ens = self._fill(topo, seq, racks_by_region, wq, excl)
        adherence = self.is_ensemble_adhering(ens, wq, aq)
        if adherence == Adherence.FAIL and primary:
            fixed = self._make_adhere(ens, wq, aq, exclude)
            if fixed is not None:
                ens, adherence = fixed.ensemble, fixed.adherence
        if adherence == Adherence.FAIL and (self.enforce or self.durability > 0):
            raise NotEnoughBookiesError(f"no region-aware ensemble of {e} bookies meets the placement rules")
        if self.config.repp_enable_validation:
            if len(set(ens)) != len(ens):
                raise NotEnoughBookiesError(f"ensemble validation failed (duplicates): {ens}")
            if self.durability > 0 and len({self.region_of(b) for b in ens}) < self.durability:
                raise NotEnoughBookiesError(f"ensemble validation failed: fewer than {self.durability} regions")
        return PlacementResult(ens, adherence)

    def _fill(self, topo: NetworkTopology, seq: list[str], racks_by_region: dict[str, list[str]], wq: int,
              excl: set[str]) -> list[str]:
        e = len(seq)
        m = min(wq, self.config.min_num_racks_per_write_quorum)
        tracker = CoverageTracker(e, wq, m)
        ens: list[str] = []
        chosen: set[str] = set()

        def accept(b: str) -> bool:
            return b not in chosen and tracker.accepts(topo.rack_of(b))  # type: ignore[arg-type]

        local_rack = self._local_rack if self.my_region != UNKNOWN_REGION else None
        for p, region in enumerate(seq):
            racks = racks_by_region[region]
            near = {topo.rack_of(ens[q % e]) for q in range(p - wq + 1, p + wq) if q != p and q % e < len(ens)}
            fresh = [r for r in racks if r not in near]
            b = None
            if local_rack is not None and local_rack in racks and region == self.my_region:
                # only the local region's first pick starts at the local rack (upstream)
                first_rack, local_rack = local_rack, None
                b = self._pick_from_racks(topo, [first_rack], excl, accept)
            if b is None:
                b = self._pick_from_racks(topo, fresh, excl, accept)
            if b is None:
                b = self._pick_from_racks(topo, racks, excl, accept)
            if b is None:
                b = self._pick_from_racks(topo, racks, excl, lambda x: x not in chosen, weights_over_leaves=False)
            if b is None:  # pragma: no cover - allocation guarantees a bookie
                raise NotEnoughBookiesError(f"no bookie left in region {region}")
            tracker.add(topo.rack_of(b))  # type: ignore[arg-type]
            ens.append(b)
            chosen.add(b)
        return ens

    # -- replace bookie -------------------------------------------------------------------------------
    def _replace_on(self, topo: NetworkTopology, wq: int, aq: int, current_ensemble: Sequence[str], bookie: str,
                    exclude: Iterable[str]) -> PlacementResult:
        """Upstream: a bookie of the replaced bookie's rack, else of its region; otherwise any region, with the
        durability predicate when ``reppEnableDurabilityEnforcementInReplace`` is on (and the current
        ensemble is not already anomalous).

        Raises:
            NotEnoughBookiesError: no candidate.
            ValueError: ``bookie_to_replace`` is not in a non-empty ``current_ensemble``.
        """
        self._sync_features()
        current = list(current_ensemble)
        if current and bookie not in current:
            raise ValueError(f"bookie {bookie} is not in the ensemble {current}")
        excl = set(exclude) | set(current) | {bookie}
        if self.enforce:
            excl |= set(topo.bookies_in_rack(self.default_rack))
        barred = self.disallowed_regions()
        if barred:
            excl |= {b for r in topo.racks() if region_of_location(r) in barred for b in topo.bookies_in_rack(r)}
        idx = current.index(bookie) if current else 0
        if not current:
            current = [bookie]
        labels = [(region_of_location(self.location_of(b)), self.location_of(b)) for b in current]
        enforce_dur = (self.config.repp_enable_durability_enforcement_in_replace and self._min_regions > 0
                       and not self.durability_disabled)
        if enforce_dur and _durability_broken(self, labels, idx, wq, aq, skip_idx=True):
            enforce_dur = False  # anomalous ensemble: upstream drops enforcement for this call
        own_rack = self.location_of(bookie)
        own_region = region_of_location(own_rack)
        region_racks = [r for r in topo.racks() if region_of_location(r) == own_region]
        cand = None
        if region_racks:
            cand = self._pick_from_racks(topo, [own_rack] if topo.bookies_in_rack(own_rack) else [], excl)
            if cand is None:
                cand = self._pick_from_racks(topo, region_racks, excl, weights_over_leaves=False)
        if cand is None:
            accept = None
            if enforce_dur:
                def accept(b: str) -> bool:
                    trial = list(labels)
                    rack = topo.rack_of(b)
                    trial[idx] = (region_of_location(rack), rack)  # type: ignore[assignment]  # b is in topo: it has a rack
                    return not _durability_broken(self, trial, idx, wq, aq, skip_idx=False)
            cand = self._pick_from_racks(topo, topo.racks(), excl, accept, weights_over_leaves=False)
        if cand is None:
            raise NotEnoughBookiesError(f"no bookie to replace {bookie}")
        current[idx] = cand
        return PlacementResult(current, self.is_ensemble_adhering(current, wq, aq), bookie=cand, replaced=(idx,))

    # -- reads ----------------------------------------------------------------------------------------
    def reorder_read_sequence(self, ensemble: Sequence[str], health: BookiesHealthInfo,
                              write_set: Sequence[int]) -> list[int]:
        """Upstream region-aware read order: with a known client region, local healthy bookies first, the
        first remote bookie promoted to position <= 2, then the rest by class (read-only, slow, gone); with
        an unknown client region, the rack-aware order."""
        if self.my_region == UNKNOWN_REGION:
            return self._reorder(ensemble, health, write_set, None, "", len(write_set))
        return self._reorder(ensemble, health, write_set, self.region_of, self.my_region,
                             REMOTE_NODE_IN_REORDER_SEQUENCE)


def _durability_broken(policy: RegionawarePolicy, labels: list, idx: int, wq: int, aq: int, *, skip_idx: bool) -> bool:
    """True if a write set containing ``idx`` breaks the durability rule (``skip_idx``: ignore position idx)."""
    e = len(labels)
    for s in range(idx - wq + 1, idx + 1):
        members = [labels[(s + t) % e] for t in range(min(wq, e)) if not (skip_idx and (s + t) % e == idx)]
        if not policy._durability_ok(members, aq):
            return True
    return False
