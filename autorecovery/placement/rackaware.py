"""Rack-aware placement (upstream ``RackawareEnsemblePlacementPolicy`` / ``...Impl``). PURE.

Every write set should span ``m = min(WQ, minNumRacksPerWriteQuorum)`` racks. Racks are full location paths
(``/region/rack`` and ``/rack`` both work, as long as every bookie has the same depth).

Where the Javadoc and upstream's code disagree we follow the code (reference §13):

* the Javadoc promises that a write quorum covers at least two racks; the code (and this class) is best
  effort unless ``enforceMinNumRacksPerWriteQuorum`` is on, and the target is ``min(WQ, minNumRacksPerWriteQuorum)``;
* the Javadoc says locations need two levels (``/rack0`` "not acceptable"); any depth works if all bookies
  share it;
* ``areAckedBookiesAdheringToPlacementPolicy`` counts ``min(WQ, minNumRacksPerWriteQuorum)`` racks, not
  ``minNumRacksPerWriteQuorum``.

Differences from upstream (ours):

* ``new_ensemble`` first builds the ensemble exactly like upstream (position by position, local rack first,
  then racks not used by the previous picks, coverage predicate, random fallback when enforcement is off).
  If the result does not adhere, or upstream would give up under enforcement, it runs the exact repair
  (:mod:`.repair`): the ensemble then adheres whenever any adhering ensemble exists; otherwise the call
  behaves as upstream (FAIL adherence, or NotEnoughBookiesError under enforcement).
* On the single-rack path upstream reports FAIL without checking (even for WQ = 1); we report the real
  adherence of the chosen ensemble.
* ``replace_to_adhere`` is exact (minimum swaps) instead of upstream's greedy; the greedy is kept as
  :meth:`RackawarePolicy.upstream_replace_to_adhere` for comparison (bench/placement.py).
* The caller's exclude set is never mutated (upstream ``replaceBookie`` adds the ensemble to it).
* With ``networkTopologyStabilizePeriodSeconds`` > 0, ``on_cluster_changed`` does not report a departed
  bookie as dead within the stabilize period, as upstream; once the period has run out, the next call
  reports it if it is still gone (upstream's wrapper never does: its answer is always empty).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from autorecovery.errors import NotEnoughBookiesError

from .coverage import CoverageTracker
from .policy import Adherence, BookiesHealthInfo, PlacementResult
from .topology import DEFAULT_REGION_AND_RACK, NetworkTopology
from .topology_aware import TopologyAwarePolicy

__all__ = ["RackawarePolicy"]


class _Stuck(Exception):
    def __init__(self, partial: list[str]) -> None:
        super().__init__("no candidate")
        self.partial = partial


class RackawarePolicy(TopologyAwarePolicy):
    """Rack-aware ensemble placement (upstream ``RackawareEnsemblePlacementPolicyImpl``).

    Args: see :class:`~autorecovery.placement.policy.PlacementPolicy` and
    :class:`~autorecovery.placement.topology_aware.TopologyAwarePolicy` (``default_rack`` defaults to
    ``/default-region/default-rack``).

    Raises:
        ConfigError: the resolver is an unconfigured script resolver and enforcement is on (upstream).
    """

    upstream_class = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
    DEFAULT_LOCATION = DEFAULT_REGION_AND_RACK

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._check_resolver()

    @property
    def enforce(self) -> bool:
        return self.config.enforce_min_num_racks_per_write_quorum

    def min_racks(self, write_quorum_size: int) -> int:
        """Effective racks per write set: ``min(WQ, minNumRacksPerWriteQuorum)``."""
        return min(write_quorum_size, self.config.min_num_racks_per_write_quorum)

    # -- adherence (upstream isEnsembleAdheringToPlacementPolicy) ------------------------------------
    def _label_of(self, bookie: str) -> str | None:
        return self.topology.rack_of(bookie)

    def _label_of_location(self, location: str) -> str | None:
        return location

    def _judge_raw(self, labels: tuple, write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        racks = {r for r in labels if r is not None}
        if len(racks) < self.min_racks(write_quorum_size):
            return Adherence.FAIL
        if self.enforce and self.default_rack in racks:
            return Adherence.FAIL
        return Adherence.MEETS_STRICT

    def is_ensemble_adhering(self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        """MEETS_STRICT iff every write set's *known* members span ``min(WQ, minNumRacksPerWriteQuorum)`` racks
        (and, under enforcement, none is in the default rack); FAIL otherwise or for an empty ensemble.
        Unknown, read-only or departed members contribute no rack (upstream). Never MEETS_SOFT."""
        return super().is_ensemble_adhering(ensemble, write_quorum_size, ack_quorum_size)

    def are_acked_bookies_adhering(self, acked: set[str], write_quorum_size: int, ack_quorum_size: int) -> bool:
        """True iff the known acked bookies span ``min(WQ, minNumRacksPerWriteQuorum)`` racks (AQ not used)."""
        racks = {self.topology.rack_of(b) for b in acked if b in self.topology}
        return len(racks) >= self.min_racks(write_quorum_size)

    def _eligible(self, bookie: str) -> bool:
        rack = self.topology.rack_of(bookie)
        return rack is not None and not (self.enforce and rack == self.default_rack)

    # -- helpers ----------------------------------------------------------------------------------------
    def _default_rack_bookies(self, topo: NetworkTopology) -> set[str]:
        return set(topo.bookies_in_rack(self.default_rack)) if self.enforce else set()

    def _rack_in(self, topo: NetworkTopology, bookie: str) -> str:
        return topo.rack_of(bookie) or self.location_of(bookie)

    def _random_distinct(self, topo: NetworkTopology, n: int, excluded: set[str]) -> list[str]:
        return self._draw_distinct((b for b in topo if b not in excluded), n)

    # -- new ensemble (upstream newEnsembleInternal) ----------------------------------------------------
    def new_ensemble(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                     exclude: Iterable[str] = frozenset(), custom_metadata: Mapping[str, bytes] | None = None
                     ) -> PlacementResult:
        """Choose E bookies so that every write set spans ``min(WQ, minNumRacksPerWriteQuorum)`` racks.

        Upstream semantics: default-rack bookies are excluded under enforcement; with fewer than 2 racks the
        ensemble is random (NotEnough under enforcement when m > 1); the first pick prefers the local rack;
        later picks avoid the racks of the previous picks; a position with no acceptable candidate falls back
        to a random bookie when enforcement is off. Read-only and excluded bookies are never chosen. Ours:
        a non-adhering result is repaired with the fewest swaps when possible (see the module docstring);
        with a stabilize period, departed bookies are used only if the writable ones are not enough.

        Raises:
            NotEnoughBookiesError: fewer than E candidates, or enforcement on and no adhering ensemble.
        """
        if ensemble_size <= 0:
            return PlacementResult([], Adherence.FAIL)
        excl = set(exclude)
        return self._on_topologies(lambda topo, primary: self._new_ensemble_on(
            topo, ensemble_size, write_quorum_size, ack_quorum_size, excl, primary))

    def _new_ensemble_on(self, topo: NetworkTopology, e: int, wq: int, aq: int, exclude: set[str],
                         primary: bool) -> PlacementResult:
        excl = exclude | self._default_rack_bookies(topo)
        m = self.min_racks(wq)
        if topo.num_racks < 2:
            if self.enforce and m > 1:
                raise NotEnoughBookiesError(f"only {topo.num_racks} rack and enforceMinNumRacksPerWriteQuorum is on")
            ens = self._random_distinct(topo, e, excl)
            return PlacementResult(ens, self.is_ensemble_adhering(ens, wq, aq))
        try:
            ens = self._greedy(topo, e, wq, m, excl)
        except _Stuck as stuck:
            if primary:
                fixed = self._make_adhere(stuck.partial + [None] * (e - len(stuck.partial)), wq, aq, exclude)
                if fixed is not None:
                    return PlacementResult(fixed.ensemble, fixed.adherence)
            raise NotEnoughBookiesError(
                f"cannot place {e} bookies over >= {m} racks per write set (enforceMinNumRacksPerWriteQuorum)") from None
        if len(ens) != e:
            raise NotEnoughBookiesError(f"only {len(ens)} of {e} bookies available")
        adherence = self.is_ensemble_adhering(ens, wq, aq)
        if adherence == Adherence.FAIL and primary:
            fixed = self._make_adhere(ens, wq, aq, exclude)
            if fixed is not None:
                return PlacementResult(fixed.ensemble, fixed.adherence)
        return PlacementResult(ens, adherence)

    def _greedy(self, topo: NetworkTopology, e: int, wq: int, m: int, excl: set[str]) -> list[str]:
        tracker = CoverageTracker(e, wq, m)
        ens: list[str] = []
        chosen: set[str] = set()
        all_racks = topo.racks()
        acc: list[str] = []
        local = self._local_rack

        def accept(b: str) -> bool:
            return b not in chosen and tracker.accepts(topo.rack_of(b))  # type: ignore[arg-type]

        for i in range(e):
            first = i == 0
            if first:
                scope = [local] if local is not None else all_racks
                is_root = local is None
            else:
                acc_set = set(acc)
                scope = [r for r in all_racks if r not in acc_set]
                is_root = False
            b = self._pick_from_racks(topo, scope, excl, accept)
            via_scope = b is not None
            if b is None and not is_root:
                b = self._pick_from_racks(topo, all_racks, excl, accept)
            if b is None:
                if not self.enforce or first:
                    b = self._pick_from_racks(topo, all_racks, excl, lambda x: x not in chosen,
                                              weights_over_leaves=False)
                if b is None:
                    raise _Stuck(ens)
            rack = topo.rack_of(b)
            tracker.add(rack)  # type: ignore[arg-type]
            ens.append(b)
            chosen.add(b)
            if first or not via_scope:
                acc = [rack]  # type: ignore[list-item]
            else:
                acc.append(rack)  # type: ignore[arg-type]
        return ens

    # -- replace bookie (upstream replaceBookie) --------------------------------------------------------
    def _replace_on(self, topo: NetworkTopology, wq: int, aq: int, current_ensemble: Sequence[str],
                    bookie: str, exclude: Iterable[str]) -> PlacementResult:
        """Pick a replacement: a bookie of the replaced bookie's rack, else one in a rack no other member
        uses, else (enforcement off) any bookie. Never an ensemble member, excluded or read-only bookie.

        Returns ``PlacementResult(new_ensemble, adherence, bookie=new)``; ``new_ensemble`` is the current one
        with the replacement at the replaced index (a one-element list when ``current_ensemble`` is empty).

        Raises:
            NotEnoughBookiesError: no candidate.
            ValueError: ``bookie_to_replace`` is not in a non-empty ``current_ensemble``.
        """
        current = list(current_ensemble)
        if current and bookie not in current:
            raise ValueError(f"bookie {bookie} is not in the ensemble {current}")
        excl = set(exclude) | self._default_rack_bookies(topo) | set(current) | {bookie}
        own_rack = self._rack_in(topo, bookie)
        avoid = {self._rack_in(topo, b) for b in current if b != bookie}
        cand = self._pick_from_racks(topo, [own_rack] if topo.bookies_in_rack(own_rack) else [], excl)
        if cand is None:
            allowed = [r for r in topo.racks() if r not in avoid]
            cand = self._pick_from_racks(topo, allowed, excl, weights_over_leaves=False)
        if cand is None and not self.enforce:
            cand = self._pick_from_racks(topo, topo.racks(), excl, weights_over_leaves=False)
        if cand is None:
            raise NotEnoughBookiesError(f"no bookie to replace {bookie}")
        if current:
            idx = current.index(bookie)
            current[idx] = cand
            replaced: tuple[int, ...] = (idx,)
        else:
            current = [cand]
            replaced = (0,)
        return PlacementResult(current, self.is_ensemble_adhering(current, wq, aq), bookie=cand, replaced=replaced)

    # -- reads ----------------------------------------------------------------------------------------
    def reorder_read_sequence(self, ensemble: Sequence[str], health: BookiesHealthInfo,
                              write_set: Sequence[int]) -> list[int]:
        """Upstream rack-aware read order: writable healthy, writable with failures, read-only, slow, gone.

        Follows upstream's code rather than its Javadoc: nothing is reordered (except by pending requests
        when ``readReorderThresholdPendingRequests`` > 0) unless a write-set member is gone or slow, so
        read-only members can stay first; slow bookies come after read-only ones; failed bookies keep their
        relative order.
        """
        return self._reorder(ensemble, health, write_set, None, "", len(write_set))

    # -- upstream-style BP-54 greedy (baseline for comparison) ----------------------------------------
    def upstream_replace_to_adhere(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                                   exclude: Iterable[str], current_ensemble: Sequence[str]) -> PlacementResult:
        """Upstream's greedy BP-54 algorithm (reference §7), kept only as a baseline for tests and benchmarks.

        Tries every base index with position-by-position greedy filling and keeps the attempt with the fewest
        changes (stops at one change). It can miss the minimum. Returns the ensemble unchanged with FAIL when
        no attempt succeeds (upstream returns an empty list).
        """
        current = list(current_ensemble)
        e = ensemble_size
        adherence = self.is_ensemble_adhering(current, write_quorum_size, ack_quorum_size)
        if adherence != Adherence.FAIL:
            return PlacementResult(current, adherence)
        x = set(exclude) | {b for b in current if b not in self.topology}
        m = self.min_racks(write_quorum_size)
        if self.topology.num_racks < 2 or self.topology.num_racks < m:
            return PlacementResult(current, Adherence.FAIL)
        best: list[str] | None = None
        best_d = e + 1
        for base in range(e):
            att = self._greedy_attempt(base, current, write_quorum_size, m, x)
            if att is None or self.is_ensemble_adhering(att, write_quorum_size, ack_quorum_size) == Adherence.FAIL:
                continue
            d = sum(1 for i in range(e) if att[i] != current[i])
            if d < best_d:
                best, best_d = att, d
                if d == 1:
                    break
        if best is None:
            return PlacementResult(current, Adherence.FAIL)
        changed = tuple(i for i in range(e) if best[i] != current[i])
        return PlacementResult(best, self.is_ensemble_adhering(best, write_quorum_size, ack_quorum_size),
                               replaced=changed)

    def _greedy_attempt(self, base: int, current: list[str], wq: int, m: int, x: set[str]) -> list[str] | None:
        topo = self.topology
        e = len(current)
        p = list(current)
        xx = x | self._default_rack_bookies(topo)
        tracker = CoverageTracker(e, wq, m)
        members: set[str] = set()
        last_rack: str | None = None

        def add(b: str) -> None:
            nonlocal last_rack
            r = topo.rack_of(b)
            tracker.add(r)  # type: ignore[arg-type]
            members.add(b)
            xx.add(b)
            last_rack = r

        def ok(b: str) -> bool:
            return b in topo and b not in xx and b not in members and tracker.accepts(topo.rack_of(b))  # type: ignore[arg-type]

        order = [(base + t) % e for t in range(e)]
        start = 0
        if ok(p[base]):
            add(p[base])
            start = 1
        for idx in order[start:]:
            if ok(p[idx]):
                add(p[idx])
                continue
            in_p = set(p)
            pools = []
            if m > 1:
                near = {self._rack_in(topo, p[(idx + d) % e]) for d in range(-(m - 1), m) if d != 0}
                pools.append(([r for r in topo.racks() if r not in near], True))
            if last_rack is None:
                scope = [self._local_rack] if self._local_rack is not None else topo.racks()
            else:
                scope = [r for r in topo.racks() if r != last_rack]
            pools.append((scope, True))
            pools.append((scope, False))
            chosen = None
            for racks, not_in_p in pools:
                def accept(b: str, nip: bool = not_in_p, in_p: set = in_p) -> bool:
                    return ok(b) and (not nip or b not in in_p)

                chosen = self._pick_from_racks(topo, racks, xx, accept)
                if chosen is not None:
                    break
            if chosen is None:
                return None
            p[idx] = chosen
            add(chosen)
        return p
