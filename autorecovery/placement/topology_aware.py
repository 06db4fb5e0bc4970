"""Shared machinery of the topology-aware policies (upstream ``TopologyAwareEnsemblePlacementPolicy``). PURE.

Holds the topology of writable bookies, resolves and caches network locations, keeps departed bookies for
the stabilize period, judges adherence write set by write set, runs the exact minimum-swap repair
(:mod:`.repair`); reads are ordered by :mod:`.read_order` (upstream ``reorderReadSequenceWithRegion``).
"""

from __future__ import annotations

import random
import time
from typing import ClassVar
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

import structlog

from autorecovery.errors import ConfigError, NotEnoughBookiesError

from .config import PlacementConfig
from .policy import Adherence, BookieInfo, BookiesHealthInfo, PlacementPolicy, PlacementResult, RepairJob
from .read_order import reorder_with_region
from .repair import DEFAULT_MAX_NODES, LabelGroups, RepairOutcome, SearchBudgetExceeded, solve_min_swaps
from .resolvers import Resolver, ScriptResolver
from .schedule import ensemble_write_sets
from .topology import DEFAULT_REGION_AND_RACK, NetworkTopology, normalize_location

log = structlog.get_logger("autorecovery.placement")

__all__ = ["TopologyAwarePolicy"]

Label = Hashable


class _RepairIndex:
    __slots__ = ("version", "by_label", "label", "groups")

    def __init__(self, version: int, by_label: dict, label: dict) -> None:
        self.version = version
        self.by_label = by_label
        self.label = label
        self.groups: dict[int, LabelGroups] = {}


class TopologyAwarePolicy(PlacementPolicy):
    """Base of the rack-, region- and zone-aware policies.

    Extra keyword args (ours, not upstream keys):
        default_rack: location given to bookies the resolver does not know (default: the policy's
            ``DEFAULT_LOCATION``; upstream ``withDefaultRack`` / ``withDefaultFaultDomain``).
        repair_max_nodes: search budget of :meth:`replace_to_adhere` (see :mod:`.repair`).
    """

    DEFAULT_LOCATION: ClassVar[str] = DEFAULT_REGION_AND_RACK
    _two_level: ClassVar[bool] = False
    _soft_possible: ClassVar[bool] = False
    _tracks_slow: ClassVar[bool] = True

    def __init__(self, config: PlacementConfig | None = None, resolver: Resolver | None = None,
                 local_location: str | None = None, rng: random.Random | None = None, *,
                 clock: Callable[[], float] = time.monotonic, default_rack: str | None = None,
                 repair_max_nodes: int = DEFAULT_MAX_NODES) -> None:
        super().__init__(config, resolver, local_location, rng, clock=clock)
        self.default_rack = normalize_location(default_rack) if default_rack else self.DEFAULT_LOCATION
        self.topology = NetworkTopology()
        self.rejected: set[str] = set()
        self._locations: dict[str, str] = {}
        self._departed: dict[str, float] = {}
        self._matured: set[str] = set()
        self._judges: dict[tuple[int, int], Callable[[tuple], Adherence]] = {}
        self._repair_idx: _RepairIndex | None = None
        self.repair_max_nodes = repair_max_nodes
        self._local_rack: str | None = None
        if local_location and not self.config.ignore_local_node_in_placement_policy:
            try:
                loc = normalize_location(local_location)
            except ValueError:
                loc = ""
            if loc and loc != self.default_rack:
                self._local_rack = loc

    def _check_resolver(self) -> None:
        """Rack/region-aware: an unconfigured script resolver is fatal under enforcement (upstream)."""
        if (isinstance(self.resolver, ScriptResolver) and not self.resolver.configured
                and self.config.enforce_min_num_racks_per_write_quorum):
            raise ConfigError("config key networkTopologyScriptFileName: ScriptBasedMapping has no script "
                              "and enforceMinNumRacksPerWriteQuorum is on")

    # -- locations ------------------------------------------------------------------------------------
    @property
    def default_location(self) -> str:
        return self.default_rack

    def _resolve(self, bookies: Iterable[str]) -> dict[str, str]:
        bookies = list(bookies)
        need = [b for b in bookies if b not in self._locations]
        if need:
            try:
                locs = list(self.resolver.resolve(need))
            except Exception as exc:  # noqa: BLE001 - a failing resolver means "unknown" (upstream's DNSResolverDecorator)
                log.warning("could not resolve network locations; using the default rack for them",
                            bookies=need, default_rack=self.default_rack, error=f"{type(exc).__name__}: {exc}")
                locs = []
            if len(locs) != len(need):
                locs = [None] * len(need)
            for b, loc in zip(need, locs, strict=True):
                try:
                    norm = normalize_location(loc) if loc else ""
                except ValueError:
                    norm = ""
                self._locations[b] = norm or self.default_rack
        return {b: self._locations[b] for b in bookies}

    def location_of(self, bookie_id: str) -> str:
        """The bookie's rack in the topology, else its last known or resolved location, else the default rack."""
        rack = self.topology.rack_of(bookie_id)
        if rack is not None:
            return rack
        return self._resolve([bookie_id])[bookie_id]

    def on_bookie_rack_change(self, bookies: Iterable[str] | None = None) -> None:
        """Re-resolve bookies whose location may have changed and move them (upstream ``onBookieRackChange``).

        Args:
            bookies: the bookies to re-resolve; None re-resolves every bookie seen so far.
        """
        targets = sorted(self._locations) if bookies is None else sorted(set(bookies))
        for b in targets:
            self._locations.pop(b, None)
        locs = self._resolve(targets)
        moving = [b for b in targets if b in self.topology or b in self.rejected]
        for b in moving:  # remove first: a depth change of every bookie must not reject all but the last
            self.topology.remove(b)
        for b in moving:
            if self.topology.add(b, locs[b]):
                self.rejected.discard(b)
            else:
                self.rejected.add(b)
        self._retry_rejected()
        self._changed()

    def _retry_rejected(self) -> None:
        """Re-add bookies refused for a depth mismatch once the topology's depth allows them."""
        for b in sorted(self.rejected):
            if self.topology.add(b, self._locations.get(b, self.default_rack)):
                self.rejected.discard(b)

    # -- membership -----------------------------------------------------------------------------------
    def _changed(self) -> None:
        self._version += 1
        self._selector = None

    def _handle_left(self, left: set[str]) -> None:
        now = self.clock()
        for b in left:
            self.topology.remove(b)
            self.rejected.discard(b)
            if self.config.network_topology_stabilize_period_s > 0:
                self._departed[b] = now
        if self.rejected and left:
            self._retry_rejected()

    def _handle_joined(self, joined: set[str]) -> None:
        locs = self._resolve(sorted(joined))
        for b in sorted(joined):
            self._departed.pop(b, None)
            self._matured.discard(b)
            if self.topology.add(b, locs[b]):
                self.rejected.discard(b)
            else:
                self.rejected.add(b)

    def on_cluster_changed(self, writable: set[str], readonly: set[str]) -> set[str]:
        """Take a new view of the cluster; returns the dead bookies (upstream ``onClusterChanged``).

        With ``networkTopologyStabilizePeriodSeconds`` > 0 a bookie that leaves is *not* reported dead by
        the call that sees it leave, nor by any call within the stabilize period (upstream: the stabilized
        wrapper's answer is empty). Ours: a bookie whose period has run out and that is still neither
        writable nor read-only is reported once, by the next call (upstream never reports it).
        """
        self._in_stabilize_window()  # moves departed bookies whose period ran out to _matured
        dead = super().on_cluster_changed(writable, readonly)
        self._changed()
        if self.config.network_topology_stabilize_period_s > 0:
            matured = self._matured - set(writable) - set(readonly)
            self._matured.clear()
            dead = (dead - set(self._departed)) | matured
        return dead

    @property
    def known_bookies(self) -> frozenset[str]:
        """Writable bookies in the topology (writable minus ``rejected``)."""
        return frozenset(self.topology)

    def _in_stabilize_window(self) -> list[str]:
        period = self.config.network_topology_stabilize_period_s
        if period <= 0 or not self._departed:
            return []
        now = self.clock()
        out = []
        for b, t in list(self._departed.items()):
            if now - t < period:
                out.append(b)
            else:
                del self._departed[b]
                self._matured.add(b)
        return sorted(out)

    def replace_bookie(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                       current_ensemble: Sequence[str], bookie_to_replace: str, exclude: Iterable[str] = frozenset(),
                       custom_metadata: Mapping[str, bytes] | None = None) -> PlacementResult:
        """Pick a replacement for ``bookie_to_replace`` (upstream ``replaceBookie``); each policy's rule is
        in its ``_replace_on``. Bookies that left within ``networkTopologyStabilizePeriodSeconds`` are
        tried as a fallback, as upstream's stabilized topology does.

        Returns ``PlacementResult(new_ensemble, adherence, bookie=new)``.

        Raises:
            NotEnoughBookiesError: no candidate.
            ValueError: ``bookie_to_replace`` is not in a non-empty ``current_ensemble``.
        """
        return self._on_topologies(lambda topo, _primary: self._replace_on(
            topo, write_quorum_size, ack_quorum_size, current_ensemble, bookie_to_replace, exclude))

    def _on_topologies(self, attempt: Callable[[NetworkTopology, bool], PlacementResult]) -> PlacementResult:
        """``attempt(topology, primary=True)``; on NotEnoughBookiesError, once more on the topology that
        still holds bookies departed within the stabilize period (upstream's stabilized topology)."""
        try:
            return attempt(self.topology, True)
        except NotEnoughBookiesError:
            topo = self._secondary_topology()
            if topo is None:
                raise
            return attempt(topo, False)

    def _replace_on(self, topo: NetworkTopology, wq: int, aq: int, current_ensemble: Sequence[str],
                    bookie: str, exclude: Iterable[str]) -> PlacementResult:
        raise NotImplementedError

    def _secondary_topology(self) -> NetworkTopology | None:
        """Topology plus departed bookies still inside the stabilize period (upstream secondary instance)."""
        extra = self._in_stabilize_window()
        if not extra:
            return None
        topo = self.topology.copy()
        for b in extra:
            topo.add(b, self._locations.get(b, self.default_rack))
        return topo

    # -- weights --------------------------------------------------------------------------------------
    def update_bookie_info(self, info: Mapping[str, BookieInfo]) -> None:
        """Replace the disk info map (upstream rebuilds it: bookies missing from ``info`` get weight 0)."""
        self._bookie_info = dict(info)
        self._changed()

    # -- adherence ------------------------------------------------------------------------------------
    def _label_of(self, bookie: str) -> Label | None:
        """Label a member contributes to adherence checks (None: contributes nothing / unresolved)."""
        raise NotImplementedError

    def _judge_raw(self, labels: tuple, write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        raise NotImplementedError

    def _shape_ok(self, ensemble_size: int, write_quorum_size: int) -> bool:
        return True

    def _judge_fn(self, write_quorum_size: int, ack_quorum_size: int) -> Callable[[tuple], Adherence]:
        key = (write_quorum_size, ack_quorum_size)
        fn = self._judges.get(key)
        if fn is None:
            memo: dict[tuple, Adherence] = {}
            raw = self._judge_raw

            def fn(labels: tuple, memo=memo, raw=raw, wq=write_quorum_size, aq=ack_quorum_size) -> Adherence:
                v = memo.get(labels)
                if v is None:
                    if len(memo) > 200_000:
                        memo.clear()
                    v = raw(labels, wq, aq)
                    memo[labels] = v
                return v

            self._judges[key] = fn
        return fn

    def _adherence_of_labels(self, labels: Sequence, write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        e = len(labels)
        if e == 0 or write_quorum_size < 1 or not self._shape_ok(e, write_quorum_size):
            return Adherence.FAIL
        judge = self._judge_fn(write_quorum_size, ack_quorum_size)
        worst = Adherence.MEETS_STRICT
        for ws in ensemble_write_sets(e, write_quorum_size):
            v = judge(tuple([labels[p] for p in ws]))
            if v < worst:
                worst = v
                if v == Adherence.FAIL:
                    break
        return worst

    def is_ensemble_adhering(self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        return self._adherence_of_labels([self._label_of(b) for b in ensemble], write_quorum_size, ack_quorum_size)

    def placement_adherence(self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        """As :meth:`is_ensemble_adhering`, but a member the topology does not hold now (down, read-only, not
        seen yet) counts with its last known or resolved location; one the resolver cannot place (the
        default rack) still counts nothing (see :meth:`PlacementPolicy.placement_adherence`)."""
        return self._adherence_of_labels([self._placed_label(b) for b in ensemble], write_quorum_size, ack_quorum_size)

    def _placed_label(self, bookie: str) -> Label | None:
        lab = self._label_of(bookie)
        if lab is not None or bookie in self.topology:
            return lab
        loc = self.location_of(bookie)
        return None if loc == self.default_rack else self._label_of_location(loc)

    def _label_of_location(self, location: str) -> Label | None:
        """The label a member in ``location`` contributes (None: the policy has no such mapping, so a
        member outside the topology counts nothing, as upstream)."""
        return None

    # -- exact repair (BP-54) -------------------------------------------------------------------------
    def _eligible(self, bookie: str) -> bool:
        """May ``bookie`` be kept in, or added to, an ensemble by a repair? (writable and known by default)"""
        return bookie in self.topology

    def spread_pool(self) -> frozenset[str]:
        """Writable bookies in the topology that the policy's rules allow (``_eligible``)."""
        return frozenset(b for b in self.topology if self._eligible(b))

    def _target_label(self, bookie: str) -> Label:
        return self._label_of(bookie)

    def _repair_index(self) -> _RepairIndex:
        idx = self._repair_idx
        if idx is not None and idx.version == self._version:
            return idx
        by_label: dict[Label, list[str]] = {}
        label: dict[str, Label] = {}
        bookies = sorted(b for b in self.topology if self._eligible(b))
        if self.weighted:
            bookies.sort(key=lambda b: -self.weight_of(b))
        for b in bookies:
            lab = self._target_label(b)
            if lab is None:
                continue
            label[b] = lab
            by_label.setdefault(lab, []).append(b)
        idx = _RepairIndex(self._version, by_label, label)
        self._repair_idx = idx
        return idx

    def _solve(self, current: Sequence[str | None], write_quorum_size: int, ack_quorum_size: int,
               exclude: Iterable[str]) -> RepairOutcome | None:
        """Minimum-swap adhering ensemble from ``current`` (None slots must be filled). Raises SearchBudgetExceeded."""
        return self._solver(current, write_quorum_size, ack_quorum_size, exclude)()

    def _solver(self, current: Sequence[str | None], write_quorum_size: int, ack_quorum_size: int,
                exclude: Iterable[str]) -> Callable[[], RepairOutcome | None]:
        """:meth:`_solve` split: the snapshot is taken now (the repair index of this membership version,
        labels, pool, groups, the judge); the returned function runs the search on it alone, so it may
        run in a worker thread (raises SearchBudgetExceeded)."""
        idx = self._repair_index()
        excl = set(exclude)
        labels = [idx.label.get(b) if (b is not None and b not in excl) else None for b in current]
        pool: Mapping[Label, Sequence[str]] = idx.by_label
        hit = {idx.label[b] for b in excl if b in idx.label}
        if hit:
            pool = dict(pool)
            for lab in hit:
                pool[lab] = [b for b in pool[lab] if b not in excl]
        e = len(current)
        groups = idx.groups.get(e)
        if groups is None:
            groups = idx.groups[e] = LabelGroups(idx.by_label, e, self._two_level)
        current = list(current)
        judge = self._judge_fn(write_quorum_size, ack_quorum_size)
        two_level, soft, rng, weighted, budget = (self._two_level, self._soft_possible, self.rng, self.weighted,
                                                  self.repair_max_nodes)
        return lambda: solve_min_swaps(current, write_quorum_size, labels, pool, judge, two_level=two_level,
                                       soft_possible=soft, rng=rng, prefer_order=weighted, max_nodes=budget,
                                       groups=groups, special=hit)

    def replace_to_adhere(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                          exclude: Iterable[str], current_ensemble: Sequence[str]) -> PlacementResult:
        """BP-54 repair with a provably minimal number of swaps (ours; upstream is a greedy heuristic).

        Steps: if ``current_ensemble`` already adheres (not FAIL) it is returned unchanged with its
        adherence, as upstream. Otherwise every member that is not a writable known bookie, or is in
        ``exclude`` (or in the default rack when ``enforceMinNumRacksPerWriteQuorum`` is on) must be
        replaced, as upstream; surviving members stay at their index; new members are writable, not
        excluded, not read-only; with disk weights on, targets with more free disk are preferred. The
        repair changes as few indexes as possible (see :mod:`.repair` for the method and its cost bound).
        Only writable bookies are used: unlike upstream's stabilized wrapper there is no second attempt with
        departed bookies of the stabilize period (a repair should not target a bookie that just left).

        Returns:
            ``PlacementResult(ensemble, adherence, replaced=indexes)``; when no adhering ensemble exists
            (for example only one rack left) the unchanged ensemble with FAIL (upstream returns an empty list).

        Raises:
            ValueError: ``len(current_ensemble) != ensemble_size``.
        """
        return self.plan_replace_to_adhere(ensemble_size, write_quorum_size, ack_quorum_size, exclude,
                                           current_ensemble).run()

    def plan_replace_to_adhere(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                               exclude: Iterable[str], current_ensemble: Sequence[str]) -> RepairJob:
        """:meth:`replace_to_adhere` as a :class:`~.policy.RepairJob`: the checks and the snapshot now, the
        exact search in :meth:`RepairJob.run` (which the ReplicationWorker runs off the event loop).

        Raises:
            ValueError: ``len(current_ensemble) != ensemble_size``.
        """
        current = list(current_ensemble)
        if len(current) != ensemble_size:
            raise ValueError(f"ensemble has {len(current)} bookies, expected E={ensemble_size}")
        adherence = self.is_ensemble_adhering(current, write_quorum_size, ack_quorum_size)
        if adherence != Adherence.FAIL or ensemble_size == 0:
            return RepairJob(result=PlacementResult(current, adherence))
        if not self._shape_ok(ensemble_size, write_quorum_size):
            return RepairJob(result=PlacementResult(current, Adherence.FAIL))
        search = self._solver(current, write_quorum_size, ack_quorum_size, exclude)

        def solve() -> RepairOutcome | SearchBudgetExceeded | None:
            try:
                return search()
            except SearchBudgetExceeded as exc:
                return exc

        def finish(out: RepairOutcome | SearchBudgetExceeded | None) -> PlacementResult:
            if isinstance(out, SearchBudgetExceeded):
                return PlacementResult(current, Adherence.FAIL, exact=False)
            if out is None:
                return PlacementResult(current, Adherence.FAIL)
            return PlacementResult(out.ensemble, out.adherence, replaced=out.changed)

        return RepairJob(solve=solve, finish=finish)

    def _make_adhere(self, ensemble: Sequence[str | None], write_quorum_size: int, ack_quorum_size: int,
                     exclude: Iterable[str]) -> RepairOutcome | None:
        """new_ensemble fallback: the closest adhering ensemble to ``ensemble``, or None if none exists."""
        if not self._shape_ok(len(ensemble), write_quorum_size):
            return None
        try:
            return self._solve(ensemble, write_quorum_size, ack_quorum_size, exclude)
        except SearchBudgetExceeded:
            return None

    # -- selection helpers ----------------------------------------------------------------------------
    def _pick_from_racks(self, topo: NetworkTopology, racks: Sequence[str], excluded: set[str] | frozenset[str],
                         accept: Callable[[str], bool] | None = None, *, weights_over_leaves: bool = True) -> str | None:
        """A random bookie of ``racks`` not in ``excluded`` and accepted by ``accept``.

        Unweighted: uniform. Weighted: by capped free-disk weight; ``weights_over_leaves`` computes the
        weights over every leaf of the racks, excluded ones included (upstream ``selectRandomFromRack``
        rejection sampling), otherwise over the non-excluded candidates only (upstream
        ``selectRandomInternal`` with an explicit list).
        """
        if not racks:
            return None
        if self.weighted:
            leaves = [b for r in racks for b in topo.bookies_in_rack(r)]
            base = [b for b in leaves if b not in excluded]
            cands = [b for b in base if accept is None or accept(b)]
            if not cands:
                return None
            return self._selection(leaves if weights_over_leaves else base).select(cands)
        rng = self.rng
        if 2 * len(racks) >= topo.num_racks:
            # a wide scope: rejection-sample uniform bookies of the whole topology (O(1) per try)
            allowed = racks if isinstance(racks, (set, frozenset)) else set(racks)
            for _ in range(12):
                b = topo.random_bookie(rng)
                if b is None:
                    return None
                if topo.rack_of(b) in allowed and b not in excluded and (accept is None or accept(b)):
                    return b
        cands = [b for r in racks for b in topo.bookies_in_rack(r)
                 if b not in excluded and (accept is None or accept(b))]
        return rng.choice(cands) if cands else None

    # -- reads ----------------------------------------------------------------------------------------
    def register_slow_bookie(self, bookie: str, entry_id: int) -> None:
        """Remember a slow bookie for ``bookieFailureHistoryExpirationMSec`` ms (only while the pending-request
        reordering threshold is off, as upstream)."""
        if not self._tracks_slow:
            return
        if self.config.read_reorder_threshold_pending_requests <= 0:
            expiry = self.clock() + self.config.bookie_failure_history_expiration_ms / 1000.0
            self._slow[bookie] = (entry_id, expiry)

    def _reorder(self, ensemble: Sequence[str], health: BookiesHealthInfo, write_set: Sequence[int],
                 region_of: Callable[[str], str] | None, my_region: str, remote_node_in_reorder: int) -> list[int]:
        """Upstream ``reorderReadSequenceWithRegion`` (:func:`.read_order.reorder_with_region`)."""
        return reorder_with_region(self, ensemble, health, write_set, region_of, my_region, remote_node_in_reorder)
