"""Zone-aware placement (upstream ``ZoneawareEnsemblePlacementPolicy`` / ``...Impl``). PURE.

Locations are exactly ``/zone/upgradeDomain``; anything else, and the default fault domain
``/default-zone/default-upgradedomain``, is *unresolved*. Let ``M = minNumZonesPerWriteQuorum`` and
``D = min(WQ, desiredNumZonesPerWriteQuorum)``.

Adherence (the only upstream policy with MEETS_SOFT, reference §9.3): FAIL for an empty list, when
``E mod WQ != 0`` or ``WQ <= M``; per write set FAIL if a member is unresolved, if it spans fewer than M
zones, or if a zone with several members has them all in one upgrade domain; MEETS_SOFT if it spans fewer
than D zones; otherwise MEETS_STRICT.

Strict mode (``enforceStrictZoneawarePlacement``, default): ``new_ensemble`` requires ``E mod WQ == 0`` and
``WQ > M`` (ValueError otherwise, upstream IllegalArgumentException), never uses unresolved bookies, and
fills positions with upstream's per-position rule (avoid the zones of the nearest neighbours, relaxing from
D-1 to M-1 neighbours each side, then avoid the upgrade domains a zone already has nearby). Non-strict
mode picks random bookies (unresolved allowed).

Where the Javadoc and the code disagree we follow the code: the default fault domain is excluded in strict
mode regardless of ``enforceMinNumRacksPerWriteQuorum``, and never in non-strict mode.

Ours: a non-adhering ``new_ensemble`` result is repaired with the fewest swaps when an adhering ensemble
exists (else upstream's outcome: NotEnoughBookiesError in strict mode, FAIL adherence otherwise), and
``replace_to_adhere`` is implemented (exact minimum swaps; upstream throws UnsupportedOperationException).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from autorecovery.errors import ConfigError, NotEnoughBookiesError

from .policy import Adherence, PlacementResult
from .topology import DEFAULT_ZONE, DEFAULT_ZONE_AND_UPGRADEDOMAIN, NetworkTopology, location_parts
from .topology_aware import TopologyAwarePolicy
from .weights import WeightedRandomSelection

__all__ = ["ZoneawarePolicy"]


class _Stuck(Exception):
    def __init__(self, partial: list) -> None:
        super().__init__("no candidate")
        self.partial = partial


class ZoneawarePolicy(TopologyAwarePolicy):
    """Zone/upgrade-domain aware placement. ``default_rack`` defaults to ``/default-zone/default-upgradedomain``.

    Raises:
        ConfigError: ``minNumZonesPerWriteQuorum`` > ``desiredNumZonesPerWriteQuorum`` (upstream rejects it).
    """

    upstream_class = "org.apache.bookkeeper.client.ZoneawareEnsemblePlacementPolicy"
    DEFAULT_LOCATION = DEFAULT_ZONE_AND_UPGRADEDOMAIN
    _two_level = True
    _soft_possible = True
    _tracks_slow = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.config.min_num_zones_per_write_quorum > self.config.desired_num_zones_per_write_quorum:
            raise ConfigError(
                f"config key minNumZonesPerWriteQuorum: {self.config.min_num_zones_per_write_quorum} is greater than "
                f"desiredNumZonesPerWriteQuorum {self.config.desired_num_zones_per_write_quorum}")

    @property
    def strict(self) -> bool:
        return self.config.enforce_strict_zoneaware_placement

    # -- locations ------------------------------------------------------------------------------------
    def zone_and_ud(self, bookie: str) -> tuple[str, str] | None:
        """``(zone, upgradeDomain)`` of any bookie (resolved through the resolver, cached); None if unresolved."""
        loc = self.location_of(bookie)
        if loc == self.default_rack:
            return None
        parts = location_parts(loc)
        if len(parts) != 2:
            return None
        return ("/" + parts[0], "/" + parts[1])

    def zone_of(self, bookie: str) -> str:
        zu = self.zone_and_ud(bookie)
        return zu[0] if zu is not None else DEFAULT_ZONE

    def _label_of(self, bookie: str):
        return self.zone_and_ud(bookie)

    def _eligible(self, bookie: str) -> bool:
        return bookie in self.topology and self.zone_and_ud(bookie) is not None

    # -- adherence ------------------------------------------------------------------------------------
    def _shape_ok(self, ensemble_size: int, write_quorum_size: int) -> bool:
        return (ensemble_size > 0 and write_quorum_size > 0 and ensemble_size % write_quorum_size == 0
                and write_quorum_size > self.config.min_num_zones_per_write_quorum)

    def _judge_raw(self, labels: tuple, write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        zones: dict[str, list[str]] = {}
        for lab in labels:
            if lab is None:
                return Adherence.FAIL
            zones.setdefault(lab[0], []).append(lab[1])
        if len(zones) < self.config.min_num_zones_per_write_quorum:
            return Adherence.FAIL
        for uds in zones.values():
            if len(uds) >= 2 and len(set(uds)) == 1:
                return Adherence.FAIL
        if len(zones) < min(write_quorum_size, self.config.desired_num_zones_per_write_quorum):
            return Adherence.MEETS_SOFT
        return Adherence.MEETS_STRICT

    def is_ensemble_adhering(self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        """Upstream zone-aware adherence (module docstring); it does not depend on the strict flag."""
        return super().is_ensemble_adhering(ensemble, write_quorum_size, ack_quorum_size)

    def are_acked_bookies_adhering(self, acked: set[str], write_quorum_size: int, ack_quorum_size: int) -> bool:
        """True iff the acked bookies span ``min(WQ, minNumZonesPerWriteQuorum)`` zones and number at least AQ."""
        zones = {self.zone_of(b) for b in acked}
        return len(zones) >= min(write_quorum_size, self.config.min_num_zones_per_write_quorum) \
            and len(acked) >= ack_quorum_size

    # -- selection ------------------------------------------------------------------------------------
    def _choose(self, cands: list[str]) -> str:
        if not self.weighted:
            return self.rng.choice(cands)
        sel = WeightedRandomSelection({b: self.weight_of(b) for b in cands},
                                      self.config.bookie_max_multiple_for_weight_based_placement, self.rng,
                                      integer_median=True)
        return sel.select()

    def _pick_position(self, i: int, ens: list, cands: list[str], wq: int) -> str | None:
        """Upstream per-position rule (reference §9.1) for index ``i`` of ``ens`` (None = unfilled)."""
        e = len(ens)
        desired = min(wq, self.config.desired_num_zones_per_write_quorum)
        min_zones = self.config.min_num_zones_per_write_quorum
        zu = {b: self.zone_and_ud(b) for b in cands}
        filled_zu = {p: self.zone_and_ud(ens[p]) for p in range(e) if ens[p] is not None}

        def zone_at(p: int) -> str | None:
            lab = filled_zu.get(p % e)
            return lab[0] if lab is not None else (DEFAULT_ZONE if (p % e) in filled_zu else None)

        for n in range(desired - 1, min_zones - 2, -1):
            ex = set()
            for d in range(1, n + 1):
                for q in (i - d, i + d):
                    z = zone_at(q)
                    if z is not None:
                        ex.add(z)
            c = [b for b in cands if zu[b][0] not in ex]  # type: ignore[index]
            c = self._filter_uds(i, e, filled_zu, c, zu, wq)
            if c:
                return self._choose(c)
        ex = set()
        for s in range(i - wq + 1, i + 1):
            zs = set()
            for t in range(wq):
                q = (s + t) % e
                if q != i and q in filled_zu:
                    lab = filled_zu[q]
                    zs.add(lab[0] if lab is not None else DEFAULT_ZONE)
            if len(zs) <= min_zones - 1:
                ex |= zs
        c = [b for b in cands if zu[b][0] not in ex]  # type: ignore[index]
        c = self._filter_uds(i, e, filled_zu, c, zu, wq)
        if c:
            return self._choose(c)
        return None

    @staticmethod
    def _filter_uds(i: int, e: int, filled: dict, cands: list[str], zu: dict, wq: int) -> list[str]:
        if not cands:
            return cands
        near: dict[str, set[str]] = {}
        for d in range(1, wq):
            for q in ((i - d) % e, (i + d) % e):
                lab = filled.get(q)
                if lab is not None and q != i:
                    near.setdefault(lab[0], set()).add(lab[1])
        out = [b for b in cands if zu[b][1] not in near.get(zu[b][0], ())]
        if out:
            return out
        bad: set[tuple[str, str]] = set()
        for s in range(i - wq + 1, i + 1):
            by_zone: dict[str, set[str]] = {}
            for t in range(wq):
                q = (s + t) % e
                lab = filled.get(q)
                if q != i and lab is not None:
                    by_zone.setdefault(lab[0], set()).add(lab[1])
            for z, uds in by_zone.items():
                if len(uds) == 1:
                    bad.add((z, next(iter(uds))))
        return [b for b in cands if zu[b] not in bad]

    # -- new ensemble ---------------------------------------------------------------------------------
    def new_ensemble(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                     exclude: Iterable[str] = frozenset(), custom_metadata: Mapping[str, bytes] | None = None
                     ) -> PlacementResult:
        """Choose E bookies spread over zones and upgrade domains (module docstring).

        Raises:
            ValueError: strict mode and (``E mod WQ != 0`` or ``WQ <= minNumZonesPerWriteQuorum``).
            NotEnoughBookiesError: not enough candidates, or strict mode and no position rule / repair succeeds.
        """
        if self.strict and (ensemble_size <= 0 or write_quorum_size <= 0 or ensemble_size % write_quorum_size != 0
                            or write_quorum_size <= self.config.min_num_zones_per_write_quorum):
            raise ValueError(f"zone-aware strict placement needs E mod WQ == 0 and WQ > minNumZonesPerWriteQuorum "
                             f"(E={ensemble_size}, WQ={write_quorum_size}, "
                             f"min={self.config.min_num_zones_per_write_quorum})")
        if ensemble_size <= 0:
            return PlacementResult([], Adherence.FAIL)
        excl = set(exclude)
        return self._on_topologies(lambda topo, primary: self._new_on(
            topo, ensemble_size, write_quorum_size, ack_quorum_size, excl, primary))

    def _new_on(self, topo: NetworkTopology, e: int, wq: int, aq: int, excl: set[str], primary: bool) -> PlacementResult:
        if not self.strict:
            cands = [b for b in topo if b not in excl]
            if len(cands) < e:
                raise NotEnoughBookiesError(f"need {e} bookies, only {len(cands)} writable and not excluded")
            ens: list[str] = []
            for _ in range(e):
                b = self._choose(cands)
                ens.append(b)
                cands.remove(b)
        else:
            cands = [b for b in topo if b not in excl and self.zone_and_ud(b) is not None]
            if len(cands) < e:
                raise NotEnoughBookiesError(f"need {e} bookies, only {len(cands)} writable, resolved and not excluded")
            slots: list = [None] * e
            try:
                for i in range(e):
                    picked = self._pick_position(i, slots, cands, wq)
                    if picked is None:
                        raise _Stuck(slots)
                    slots[i] = picked
                    cands.remove(picked)
            except _Stuck as stuck:
                if primary:
                    fixed = self._make_adhere(list(stuck.partial), wq, aq, excl)
                    if fixed is not None:
                        return PlacementResult(fixed.ensemble, fixed.adherence)
                raise NotEnoughBookiesError(f"no zone-aware placement of {e} bookies with WQ={wq}") from None
            ens = slots
        adherence = self.is_ensemble_adhering(ens, wq, aq)
        if adherence == Adherence.FAIL and primary:
            fixed = self._make_adhere(ens, wq, aq, excl)
            if fixed is not None:
                return PlacementResult(fixed.ensemble, fixed.adherence)
        return PlacementResult(ens, adherence)

    # -- replace bookie -------------------------------------------------------------------------------
    def _replace_on(self, topo: NetworkTopology, wq: int, aq: int, current_ensemble: Sequence[str], bookie: str,
                    exclude: Iterable[str]) -> PlacementResult:
        """Strict mode: the per-position rule at the replaced index (whole ensemble excluded); non-strict: a random
        writable bookie outside the ensemble and ``exclude``.

        Raises:
            NotEnoughBookiesError: no candidate.
            ValueError: ``bookie_to_replace`` is not in a non-empty ``current_ensemble``.
        """
        current = list(current_ensemble)
        if current and bookie not in current:
            raise ValueError(f"bookie {bookie} is not in the ensemble {current}")
        excl = set(exclude) | set(current) | {bookie}
        idx = current.index(bookie) if current else 0
        if not current:
            current = [bookie]
        if self.strict:
            cands = [b for b in topo if b not in excl and self.zone_and_ud(b) is not None]
            slots: list = list(current)
            slots[idx] = None
            cand = self._pick_position(idx, slots, cands, wq) if cands else None
        else:
            cands = [b for b in topo if b not in excl]
            cand = self._choose(cands) if cands else None
        if cand is None:
            raise NotEnoughBookiesError(f"no bookie to replace {bookie}")
        current[idx] = cand
        return PlacementResult(current, self.is_ensemble_adhering(current, wq, aq), bookie=cand, replaced=(idx,))
