"""Exact minimum-swap repair of a non-adhering ensemble (BP-54 ``replaceToAdherePlacementPolicy``). PURE.

Problem. Given the current ensemble C (E bookie ids, ``None`` for an empty slot) and the write quorum WQ,
find an ensemble N that adheres (every write set judged at least MEETS_SOFT, or MEETS_STRICT for policies
without a soft level) and differs from C in as few positions as possible. Members that stay keep their
index. A position must change when its member is not *keepable* (not a writable known bookie, excluded,
in the default rack under enforcement, unresolved ...). New members come from the *pool*: eligible
bookies grouped by fault-domain *label* (``/rack`` for rack-aware, ``(zone, upgradeDomain)`` for
zone-aware, ``(region, rack)`` for region-aware). All members of N are distinct. Among repairs with the
minimum number of swaps, one reaching MEETS_STRICT is preferred to one reaching only MEETS_SOFT.

Why upstream can miss the minimum. Upstream (PR #2931) tries each base index greedily, position by
position, and keeps the best attempt; a greedy attempt can change a position that a better choice later
would have kept (e.g. racks r1,r1,r1,r2,r2,r2 with E=6, WQ=2 gives 2 or 3 changes depending on luck).

Method (exact). Search ordered by the number of swaps k = |forced|, |forced|+1, ..., E:

1. *Which positions change* - every subset S of size k that contains the forced positions, that hits
   every write set failing the target with its current members (a write set with no changed position
   keeps its verdict), and that keeps no bookie twice.
2. *Which labels the changed positions get* - a depth-first constraint search over S in index order; a
   write set is judged as soon as its last changed position is labelled. Adherence depends only on the
   labels, so bookies are picked only after the labels are fixed.

Pruning that keeps the search exact:

* Label symmetry. Labels that no kept member and no earlier choice uses are interchangeable except for
  how many bookies they offer, so one representative is tried per group of equal capacity (capped at E;
  for two-level labels, tops are grouped by the capped capacities of their sub-labels). Labels used by
  members of C are always tried individually.
* Own-label rule. A keepable position never receives a bookie with the label of its current member:
  such a repair can always be turned into one with one swap fewer (keep the member; if it moved elsewhere,
  give that position the new bookie instead), so it is never needed for a minimum. (Not applied to a
  member that appears twice in C: one of its copies must go even if the label is right.)
* Feasibility first. Before k reaches |forced|+2 a single search with every position free (which includes
  every possible final ensemble) proves whether any adhering ensemble exists; if not, the search stops.

Cost. At most ``sum_{j<=k*} C(E-f, j-f)`` subsets for a minimum of k* swaps with f forced positions, and
per subset a search over at most ``(u + g)^k`` label choices, where u <= E is the number of labels in C
and g the number of capacity groups (1 in a uniform cluster). Each node costs O(WQ) label look-ups and a
memoised judgement. A hard ``max_nodes`` budget (default 1,000,000 nodes) bounds every call: when it runs
out :class:`SearchBudgetExceeded` is raised and the policy returns the ensemble unchanged with
``exact=False`` rather than a repair it cannot prove minimal. For the ensembles BookKeeper uses (E <= 16,
a handful of swaps) the budget is never close.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import combinations
from typing import Any
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence

from .policy import Adherence
from .schedule import ensemble_write_sets

__all__ = ["RepairOutcome", "SearchBudgetExceeded", "solve_min_swaps", "LabelGroups", "DEFAULT_MAX_NODES"]

#: a fault domain: a rack (str), or a (region, rack) tuple in two-level mode; any hashable value
Label = Any
Judge = Callable[[tuple], Adherence]
DEFAULT_MAX_NODES = 1_000_000


@dataclass(frozen=True)
class RepairOutcome:
    """A minimum-swap repair: the new ensemble, the changed indexes and the adherence reached."""

    ensemble: list[str]
    changed: tuple[int, ...]
    adherence: Adherence


class SearchBudgetExceeded(Exception):
    """The exact search used more than ``max_nodes`` nodes (see the module docstring)."""


class LabelGroups:
    """Labels of a pool grouped by capacity capped at E (the label-symmetry classes), in pool order.

    Depends only on the pool and E, so a policy caches it per topology version and E. Labels whose capacity
    differs for one call (an excluded bookie) or that the current ensemble uses are skipped by the search
    and tried individually instead.
    """

    def __init__(self, pool: Mapping[Label, Sequence[str]], ensemble_size: int, two_level: bool) -> None:
        e = ensemble_size
        self.e = e
        self.two_level = two_level
        self._pool = pool
        self.groups: list[list[Label]] = []
        self.by_top: dict[Hashable, list[Label]] = {}
        self.top_groups: list[list[Hashable]] = []
        self._sub: dict[Hashable, list[list[Label]]] = {}
        if not two_level:
            groups: dict[int, list[Label]] = {}
            for lab, bs in pool.items():
                if bs:
                    groups.setdefault(min(len(bs), e), []).append(lab)
            self.groups = list(groups.values())
            return
        for lab, bs in pool.items():
            if bs:
                self.by_top.setdefault(lab[0], []).append(lab)
        tgroups: dict[tuple, list[Hashable]] = {}
        for t, labs in self.by_top.items():
            prof = tuple(sorted((min(len(pool[lab]), e) for lab in labs), reverse=True)[:e])
            tgroups.setdefault(prof, []).append(t)
        self.top_groups = list(tgroups.values())

    def sub_groups(self, top: Hashable) -> list[list[Label]]:
        """The labels of one top (zone, region) grouped by capped capacity."""
        got = self._sub.get(top)
        if got is None:
            groups: dict[int, list[Label]] = {}
            for lab in self.by_top.get(top, ()):
                groups.setdefault(min(len(self._pool[lab]), self.e), []).append(lab)
            got = list(groups.values())
            self._sub[top] = got
        return got


class _Search:
    def __init__(self, current: Sequence[str | None], write_quorum: int, labels: Sequence[Label | None],
                 pool: Mapping[Label, Sequence[str]], judge: Judge, two_level: bool, soft_possible: bool,
                 rng: random.Random, prefer_order: bool, max_nodes: int, groups: LabelGroups | None = None,
                 special: frozenset | set = frozenset()) -> None:
        self.E = E = len(current)
        self.current = list(current)
        self.labels = list(labels)
        self.pool = pool
        self.judge = judge
        self.two_level = two_level
        self.soft_possible = soft_possible
        self.rng = rng
        self.prefer_order = prefer_order
        self.max_nodes = max_nodes
        self.nodes = 0
        self.sets = ensemble_write_sets(E, write_quorum)
        self.set_masks = []
        for ws in self.sets:
            m = 0
            for p in ws:
                m |= 1 << p
            self.set_masks.append(m)
        self.forced = [i for i in range(E) if self.labels[i] is None]
        self.free = [i for i in range(E) if self.labels[i] is not None]
        self.forced_mask = 0
        for i in self.forced:
            self.forced_mask |= 1 << i
        by_bookie: dict[str, list[int]] = {}
        for i in self.free:
            by_bookie.setdefault(self.current[i], []).append(i)  # type: ignore[arg-type]
        self.dup_masks = []
        self.dup_positions: set[int] = set()
        for ps in by_bookie.values():
            if len(ps) > 1:
                self.dup_positions.update(ps)
                m = 0
                for p in ps:
                    m |= 1 << p
                self.dup_masks.append((m, len(ps)))
        self.R_all = {lab for lab in self.labels if lab is not None}
        self.explicit = self.R_all | set(special)
        self.R_tops = {lab[0] for lab in self.explicit} if two_level else set()
        self.used: dict[Label, int] = {}
        self.used_tops: dict[Hashable, int] = {}
        self.kept_count: dict[Label, int] = {}
        self.groups = groups if groups is not None and groups.e == E else LabelGroups(pool, E, two_level)
        self._offsets: dict[int, int] = {}
        # verdict of each write set with its current members (None when it has a forced position)
        self.orig: list[Adherence | None] = []
        for ws, m in zip(self.sets, self.set_masks, strict=True):
            if m & self.forced_mask:
                self.orig.append(None)
            else:
                self.orig.append(judge(tuple(self.labels[q] for q in ws)))

    # -- label symmetry groups ------------------------------------------------------------------------
    def _rep(self, group: list, skip: Callable[[Hashable], bool]) -> Hashable | None:
        """First member of ``group`` (from a random rotation unless ``prefer_order``) that ``skip`` accepts not."""
        n = len(group)
        if self.prefer_order or n < 2:
            start = 0
        else:
            got = self._offsets.get(id(group))
            if got is None:
                got = self._offsets[id(group)] = self.rng.randrange(n)
            start = got
        for i in range(n):
            x = group[(start + i) % n]
            if not skip(x):
                return x
        return None

    def _avail(self, lab: Label) -> int:
        bs = self.pool.get(lab)
        if not bs:
            return 0
        return len(bs) - self.kept_count.get(lab, 0) - self.used.get(lab, 0)

    def _domain(self, own: Label | None) -> list[Label]:
        used = self.used
        explicit = self.explicit

        def skip_label(lab: Hashable) -> bool:
            return lab in explicit or lab in used

        out: list[Label] = []
        if not self.two_level:
            for g in self.groups.groups:
                rep = self._rep(g, skip_label)
                if rep is not None:
                    out.append(rep)
        else:
            touched = self.R_tops.union(self.used_tops)
            for t in touched:
                for g in self.groups.sub_groups(t):
                    rep = self._rep(g, skip_label)
                    if rep is not None:
                        out.append(rep)
            for g in self.groups.top_groups:
                t = self._rep(g, touched.__contains__)
                if t is None:
                    continue
                for sg in self.groups.sub_groups(t):
                    rep = self._rep(sg, skip_label)
                    if rep is not None:
                        out.append(rep)
        for lab in explicit.union(used):
            if lab != own and self._avail(lab) > 0:
                out.append(lab)
        return out

    # -- search ---------------------------------------------------------------------------------------
    def _tick(self) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise SearchBudgetExceeded(f"exact repair search exceeded {self.max_nodes} nodes (E={self.E})")

    def _csp(self, changed: Sequence[int], target: Adherence, prune_own: bool) -> list | None:
        lab: list = list(self.labels)
        in_s = set(changed)
        kept: dict[Label, int] = {}
        for p in range(self.E):
            if p not in in_s:
                kept[self.labels[p]] = kept.get(self.labels[p], 0) + 1
                lab[p] = self.labels[p]
            else:
                lab[p] = None
        self.kept_count = kept
        self.used = {}
        self.used_tops = {}
        rank = {p: j for j, p in enumerate(changed)}
        checks: list[list[tuple[int, ...]]] = [[] for _ in changed]
        for ws in self.sets:
            js = [rank[p] for p in ws if p in rank]
            if js:
                checks[max(js)].append(ws)
        if self._dfs(0, changed, lab, checks, target, prune_own):
            return lab
        return None

    def _dfs(self, j: int, order: Sequence[int], lab: list, checks: list, target: Adherence, prune_own: bool) -> bool:
        if j == len(order):
            return True
        p = order[j]
        # own-label rule (module docstring); not for a duplicated member, which cannot simply be kept
        own = self.labels[p] if prune_own and p not in self.dup_positions else None
        judge = self.judge
        two = self.two_level
        for cand in self._domain(own):
            self._tick()
            lab[p] = cand
            self.used[cand] = self.used.get(cand, 0) + 1
            if two:
                self.used_tops[cand[0]] = self.used_tops.get(cand[0], 0) + 1
            ok = True
            for ws in checks[j]:
                if judge(tuple([lab[q] for q in ws])) < target:
                    ok = False
                    break
            if ok and self._dfs(j + 1, order, lab, checks, target, prune_own):
                return True
            n = self.used[cand] - 1
            if n:
                self.used[cand] = n
            else:
                del self.used[cand]
            if two:
                n = self.used_tops[cand[0]] - 1
                if n:
                    self.used_tops[cand[0]] = n
                else:
                    del self.used_tops[cand[0]]
        lab[p] = None
        return False

    def _subsets(self, k: int, must: list[int]) -> Iterator[list[int]]:
        need = k - len(self.forced)
        if need < 0 or need > len(self.free):
            return
        fm = self.forced_mask
        for combo in combinations(self.free, need):
            self._tick()
            m = fm
            for c in combo:
                m |= 1 << c
            if any(not (m & w) for w in must):
                continue
            if any(cnt - bin(dm & m).count("1") > 1 for dm, cnt in self.dup_masks):
                continue
            yield sorted(self.forced + list(combo))

    def _pick(self, lab: Label, taken: set[str]) -> str:
        bs = self.pool[lab]
        n = len(bs)
        start = 0 if self.prefer_order else self.rng.randrange(n)
        for i in range(n):
            b = bs[(start + i) % n]
            if b not in taken:
                return b
        raise AssertionError(f"label {lab!r} has no free bookie")  # capacity accounting prevents this

    def _finish(self, changed: list[int], lab: list) -> RepairOutcome:
        in_s = set(changed)
        taken: set[str] = {b for p in range(self.E) if p not in in_s and (b := self.current[p]) is not None}
        out: list[str] = list(self.current)  # type: ignore[arg-type]
        for p in changed:
            b = self._pick(lab[p], taken)
            taken.add(b)
            out[p] = b
        worst = Adherence.MEETS_STRICT
        for ws in self.sets:
            v = self.judge(tuple(lab[q] for q in ws))
            if v < worst:
                worst = v
        return RepairOutcome(out, tuple(changed), worst)

    def solve(self) -> RepairOutcome | None:
        if self.E == 0:
            return None
        lowest = Adherence.MEETS_SOFT if self.soft_possible else Adherence.MEETS_STRICT
        targets = (Adherence.MEETS_STRICT, Adherence.MEETS_SOFT) if self.soft_possible else (Adherence.MEETS_STRICT,)
        all_positions = list(range(self.E))
        checked_feasible = False
        for k in range(len(self.forced), self.E + 1):
            if not checked_feasible and k >= len(self.forced) + 2:
                checked_feasible = True
                if self._csp(all_positions, lowest, prune_own=False) is None:
                    return None
            for target in targets:
                must = [m for m, v in zip(self.set_masks, self.orig, strict=True) if v is not None and v < target]
                for changed in self._subsets(k, must):
                    lab = self._csp(changed, target, prune_own=True)
                    if lab is not None:
                        return self._finish(changed, lab)
        return None


def solve_min_swaps(current: Sequence[str | None], write_quorum: int, labels: Sequence[Label | None],
                    pool: Mapping[Label, Sequence[str]], judge: Judge, *, two_level: bool = False,
                    soft_possible: bool = False, rng: random.Random | None = None, prefer_order: bool = False,
                    max_nodes: int = DEFAULT_MAX_NODES, groups: LabelGroups | None = None,
                    special: frozenset | set = frozenset()) -> RepairOutcome | None:
    """Minimum number of position changes that make ``current`` adhere; None if no adhering ensemble exists.

    Args:
        current: the ensemble (bookie ids; None for an empty slot).
        write_quorum: WQ.
        labels: per position, the fault-domain label of a *keepable* member, or None when the position must
            change (dead, read-only, excluded, default rack under enforcement, empty slot ...).
        pool: label -> eligible target bookies of that label (keepable members included; excluded ones not).
            With ``prefer_order`` the lists are in preference order (most free disk first).
        judge: verdict for one write set given its members' labels (in write-set order).
        two_level: labels are ``(top, sub)`` pairs (zone/UD, region/rack) rather than single racks.
        soft_possible: the judge can answer MEETS_SOFT (then SOFT is acceptable, STRICT preferred).
        rng: random source for tie-breaking between equivalent labels and bookies.
        prefer_order: pick labels and bookies in pool order instead of at random.
        max_nodes: search budget (see the module docstring).
        groups: precomputed :class:`LabelGroups` of the *unadjusted* pool for this E (a cache); labels whose
            pool list differs from it must be listed in ``special``.
        special: labels to try individually (their capacity differs from ``groups``, e.g. an excluded bookie).

    Raises:
        SearchBudgetExceeded: the budget ran out before the minimum was proven.
    """
    search = _Search(current, write_quorum, labels, pool, judge, two_level, soft_possible,
                     rng or random.Random(), prefer_order, max_nodes, groups, special)
    return search.solve()
