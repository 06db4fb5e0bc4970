"""Spread the heal: a replacement chosen among every bookie that keeps the ensemble adhering (PURE).

Upstream ``RackawareEnsemblePlacementPolicyImpl.replaceBookie`` (and our :meth:`replace_bookie`, which
follows it) first picks a random bookie *in the replaced bookie's rack*. When that rack has one survivor,
every copy of a lost bookie lands on that one survivor: its disk and CPU bound the heal, and more
ReplicationWorkers heal no faster (issue 29: one bookie used 0.6–1.4 core-s, the others 0.05–0.33).

:class:`SpreadReplacer` has ``replace_bookie``'s signature (a drop-in for
:func:`autorecovery.plan.targets.choose_replacements`) and chooses instead among the whole *pool*:

1. the policy's own choice is made first (``policy.replace_bookie``): it raises
   ``NotEnoughBookiesError`` when nothing is eligible, and its adherence ``A0`` is the bar;
2. pool = every bookie the policy may place data on (:meth:`PlacementPolicy.spread_pool`: writable,
   known, eligible under the policy's rules — no default-rack bookie under enforcement, no disallowed
   region, a resolved zone), minus the ensemble, ``exclude`` and read-only bookies;
3. keep the bookies whose trial ensemble (the replacement at the replaced index) adheres at least as
   well as ``A0`` (``is_ensemble_adhering``): adherence is never made worse than the policy's own pick;
4. drop *full* bookies (disk info known, total > 0, free = 0);
5. draw one at random with weight ``free-space weight / (1 + copies in flight to it)``: the free-space
   weight is :func:`~autorecovery.placement.weights.effective_weights` over the candidates (capped at
   ``bookieMaxMultipleForWeightBasedPlacement`` × median; uniform when no disk info is known), and
   ``in_flight`` is what the caller knows of copies already streaming to each bookie (the worker: its
   own streams plus the cluster stream slots it has seen; see ``docs/operators.md``).

Nothing survives step 3–4 → the policy's own choice is returned unchanged. Draws use ``rng`` (default
the policy's), so a seeded policy gives the same choices. Each pick counts as one more copy in flight
for the replacer's later picks (the other bad indexes of the same fragment).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate

from .policy import Adherence, PlacementPolicy, PlacementResult
from .weights import effective_weights

__all__ = ["SpreadReplacer", "spread_weights"]


def spread_weights(policy: PlacementPolicy, candidates: Sequence[str], in_flight: Mapping[str, int]) -> dict[str, float]:
    """Draw weight per candidate: effective free-space weight / (1 + copies in flight to it).

    Full bookies (known disk info with total > 0 and free 0) are left out. Uniform free-space weight
    when no candidate has disk info.
    """
    info = policy.bookie_info
    usable = [b for b in candidates
              if not ((i := info.get(b)) is not None and i.total_disk_space > 0 and i.free_disk_space <= 0)]
    if not usable:
        return {}
    raw = {b: policy.weight_of(b) for b in usable}
    eff = effective_weights(raw, policy.config.bookie_max_multiple_for_weight_based_placement)
    return {b: eff[b] / (1.0 + max(0, int(in_flight.get(b, 0)))) for b in usable}


class SpreadReplacer:
    """``replace_bookie`` that spreads replacements over every adhering bookie (see the module doc).

    Args:
        policy: the placement policy (its membership, topology and disk info).
        in_flight: bookie id → copies already in flight to it (copied; the replacer adds its own picks).
        rng: random source (default: ``policy.rng``).
    """

    def __init__(self, policy: PlacementPolicy, in_flight: Mapping[str, int] | None = None,
                 rng: random.Random | None = None) -> None:
        self.policy = policy
        self.in_flight: dict[str, int] = {b: int(n) for b, n in (in_flight or {}).items()}
        self.rng = rng or policy.rng

    def candidates(self, write_quorum_size: int, ack_quorum_size: int, current: Sequence[str], idx: int,
                   exclude: Iterable[str], bar: Adherence) -> list[str]:
        """Pool bookies whose trial ensemble adheres at least as well as ``bar`` (sorted)."""
        pol = self.policy
        excl = set(exclude) | set(current) | set(pol.readonly_bookies)
        out = []
        trial = list(current)
        for b in sorted(pol.spread_pool()):
            if b in excl:
                continue
            trial[idx] = b
            if pol.is_ensemble_adhering(trial, write_quorum_size, ack_quorum_size) >= bar:
                out.append(b)
        return out

    def __call__(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                 current_ensemble: Sequence[str], bookie_to_replace: str, exclude: Iterable[str] = frozenset(),
                 custom_metadata: Mapping[str, bytes] | None = None) -> PlacementResult:
        """Choose a replacement for ``bookie_to_replace``.

        Returns ``PlacementResult(new_ensemble, adherence, bookie=new, replaced=(idx,))``.

        Raises:
            NotEnoughBookiesError: the policy finds no eligible bookie.
            ValueError: ``bookie_to_replace`` is not in a non-empty ``current_ensemble``.
        """
        exclude = frozenset(exclude)
        base = self.policy.replace_bookie(ensemble_size, write_quorum_size, ack_quorum_size, current_ensemble,
                                          bookie_to_replace, exclude, custom_metadata)
        current = list(current_ensemble)
        if not current or base.bookie is None:
            return self._count(base)
        idx = current.index(bookie_to_replace)
        cands = self.candidates(write_quorum_size, ack_quorum_size, current, idx, exclude, base.adherence)
        weights = spread_weights(self.policy, cands, self.in_flight)
        if not weights:
            return self._count(base)
        keys = sorted(weights)
        cum = list(accumulate(weights[k] for k in keys))
        pick = keys[min(bisect.bisect_right(cum, self.rng.random() * cum[-1]), len(keys) - 1)]
        current[idx] = pick
        adherence = self.policy.is_ensemble_adhering(current, write_quorum_size, ack_quorum_size)
        return self._count(PlacementResult(current, adherence, bookie=pick, replaced=(idx,)))

    def _count(self, res: PlacementResult) -> PlacementResult:
        if res.bookie is not None:
            self.in_flight[res.bookie] = self.in_flight.get(res.bookie, 0) + 1
        return res
