"""Helpers shared by the placement unit tests (builders mirroring upstream's test set-up)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Mapping, Sequence

from autorecovery.placement import Adherence, PlacementConfig, StaticResolver

DEFAULT_RR = "/default-region/default-rack"


def bid(i: int | str, port: int = 3181) -> str:
    """Bookie id ``127.0.0.<i>:3181`` (upstream tests use 127.0.0.x addresses)."""
    return f"127.0.0.{i}:{port}"


def make(cls, mapping: Mapping[str, str], props: Mapping | None = None, *, writable: Iterable[str] | None = None,
         readonly: Iterable[str] = (), seed: int = 7, local: str | None = None, **kw):
    """Build ``cls`` with a StaticResolver over ``mapping`` and announce the cluster."""
    p = cls(PlacementConfig.from_properties(dict(props or {})), StaticResolver(mapping), local, random.Random(seed), **kw)
    p.on_cluster_changed(set(mapping if writable is None else writable), set(readonly))
    return p


def covered_write_quorums(ensemble: Sequence[str], wq: int, min_racks: int, rack_of: Mapping[str, str]) -> int:
    """Upstream ``getNumCoveredWriteQuorums``: write sets spanning ``max(min(WQ, minRacks), 2)`` racks."""
    e = len(ensemble)
    need = max(min(wq, min_racks), 2)
    n = 0
    for i in range(e):
        racks = {rack_of[ensemble[(i + j) % e]] for j in range(wq)}
        n += len(racks) >= need
    return n


class FakeClock:
    """Injectable monotonic clock (seconds)."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def brute_min_swaps(policy, current: Sequence[str], wq: int, aq: int, exclude: Iterable[str]) -> int | None:
    """Reference answer for replace_to_adhere: the fewest changed positions giving a non-FAIL ensemble.

    Enumerates every set of changed positions (forced ones included) and every assignment of eligible
    bookies (writable known, not excluded, policy-eligible) to them; independent of the solver's pruning.
    """
    e = len(current)
    if policy.is_ensemble_adhering(list(current), wq, aq) != Adherence.FAIL:
        return 0
    excl = set(exclude)
    elig = {b for b in policy.known_bookies if b not in excl and policy._eligible(b)}
    keep = [c in elig for c in current]
    for k in range(e + 1):
        for changed in itertools.combinations(range(e), k):
            if any(not keep[i] and i not in changed for i in range(e)):
                continue
            kept = [current[i] for i in range(e) if i not in changed]
            if len(set(kept)) != len(kept):
                continue
            pool = sorted(elig - set(kept))
            for assign in itertools.permutations(pool, k):
                trial = list(current)
                for i, b in zip(changed, assign, strict=True):
                    trial[i] = b
                if policy.is_ensemble_adhering(trial, wq, aq) != Adherence.FAIL:
                    return k
    return None


def any_adhering(policy, e: int, wq: int, aq: int, exclude: Iterable[str] = ()) -> bool:
    """Brute force: does any ensemble of E distinct eligible bookies adhere?"""
    excl = set(exclude)
    elig = sorted(b for b in policy.known_bookies if b not in excl and policy._eligible(b))
    return any(policy.is_ensemble_adhering(list(combo), wq, aq) != Adherence.FAIL for combo in itertools.permutations(elig, e))


def seeded(seed: int) -> random.Random:
    return random.Random(seed)
