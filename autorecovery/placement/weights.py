"""Disk-weight based random selection (upstream ``WeightedRandomSelectionImpl``; design: weight-based placement §1.2).

A bookie's weight is its free disk space in bytes (``BookieInfo.free_disk_space``). Selection math, as
upstream:

* total = sum of weights; min_nz = smallest non-zero weight; median over **all** weights, zeros included
  (mean of the two middle values for an even count).
* total == 0: every bookie is equally likely.
* Otherwise a bookie's effective weight is its weight, or ``min_nz`` when it has weight 0 (a bookie without
  disk info: new, or it failed to answer); then it is capped at ``multiple * median`` (seed §1.2, option 2:
  the cap is relative to the median, not to the minimum). The cap applies only when it is > 0, i.e. when
  ``bookieMaxMultipleForWeightBasedPlacement > 0`` and the median is > 0.
* Capped values are **not** renormalised: a draw picks in ``[0, sum(effective))``.

Example: weights 50, 100, 100, 200, 500 with multiple 4 give effective weights 50, 100, 100, 200, 400.
"""

from __future__ import annotations

import bisect
import math
import random
from itertools import accumulate
from typing import TypeVar
from collections.abc import Hashable, Iterable, Mapping, Sequence

__all__ = ["WeightedRandomSelection", "effective_weights", "median"]

K = TypeVar("K", bound=Hashable)


def median(values: Sequence[float]) -> float:
    """Median of ``values`` (mean of the two middle values for an even count); 0 for an empty list."""
    if not values:
        return 0.0
    s = sorted(values)
    n = len(s)
    mid = n // 2
    if n % 2:
        return float(s[mid])
    return (s[mid - 1] + s[mid]) / 2.0


def effective_weights(weights: Mapping[K, float], max_multiple: float, *, integer_median: bool = False) -> dict[K, float]:
    """Effective (capped) weights per upstream ``WeightedRandomSelectionImpl.updateMap``.

    Args:
        weights: key -> raw weight (free bytes); 0 means "no info".
        max_multiple: ``bookieMaxMultipleForWeightBasedPlacement``; <= 0 disables the cap.
        integer_median: truncate the median to an integer (upstream ``DynamicWeightedRandomSelectionImpl``
            uses Guava's median cast to long).
    """
    if not weights:
        return {}
    values = [float(w) for w in weights.values()]
    total = sum(values)
    if total <= 0:
        return {k: 1.0 for k in weights}
    min_nz = min(v for v in values if v > 0)
    med = median(values)
    if integer_median:
        med = float(math.floor(med))
    cap = max_multiple * med if max_multiple > 0 else 0.0
    out: dict[K, float] = {}
    for k, w in weights.items():
        e = float(w) if w > 0 else min_nz
        if cap > 0 and e > cap:
            e = cap
        out[k] = e
    return out


class WeightedRandomSelection:
    """Weighted random choice among keys by capped free-disk weight.

    Args:
        weights: key (bookie id) -> raw weight (free disk bytes, 0 = no info).
        max_probability_multiplier: cap multiple of the median weight (``bookieMaxMultipleForWeightBasedPlacement``);
            <= 0 disables the cap.
        rng: random source (seed it for reproducible draws).
        integer_median: truncate the median (upstream ``DynamicWeightedRandomSelectionImpl``, zone-aware).

    Raises:
        ValueError: ``select`` on an empty selection, or with no known choice.
    """

    __slots__ = ("_keys", "_cum", "_total", "effective", "rng", "max_multiple")

    def __init__(self, weights: Mapping[K, float], max_probability_multiplier: float,
                 rng: random.Random | None = None, *, integer_median: bool = False) -> None:
        self.rng = rng or random.Random()
        self.max_multiple = float(max_probability_multiplier)
        self.effective: dict = effective_weights(weights, self.max_multiple, integer_median=integer_median)
        self._keys = list(self.effective)
        self._cum = list(accumulate(self.effective[k] for k in self._keys))
        self._total = self._cum[-1] if self._cum else 0.0

    def __len__(self) -> int:
        return len(self._keys)

    def probabilities(self) -> dict:
        """key -> probability of being drawn by ``select()`` (effective weight / sum of effective weights)."""
        if self._total <= 0:
            return {}
        return {k: self.effective[k] / self._total for k in self._keys}

    def select(self, choices: Iterable[K] | None = None):
        """Draw one key.

        Args:
            choices: restrict the draw to these keys (keys unknown to the selection are ignored). The
                probabilities keep the weights, cap and median of the whole selection, so this equals
                upstream's rejection sampling (draw from the whole map, skip excluded keys) without its
                retry loop.

        Raises:
            ValueError: nothing to choose from.
        """
        if choices is None:
            if not self._keys:
                raise ValueError("weighted selection is empty")
            x = self.rng.random() * self._total
            i = bisect.bisect_right(self._cum, x)
            return self._keys[min(i, len(self._keys) - 1)]
        eff = self.effective
        keys = [c for c in choices if c in eff]
        if not keys:
            raise ValueError("no known choice to select from")
        total = 0.0
        cum = []
        for k in keys:
            total += eff[k]
            cum.append(total)
        x = self.rng.random() * total
        i = bisect.bisect_right(cum, x)
        return keys[min(i, len(keys) - 1)]
