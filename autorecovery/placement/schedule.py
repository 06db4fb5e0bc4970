"""Round-robin distribution schedule: which ensemble indexes store an entry (PURE).

Upstream ``RoundRobinDistributionSchedule``. The write set of entry ``e`` in an ensemble of size E with
write quorum WQ is the WQ consecutive ensemble indexes starting at ``e mod E``, wrapping around:
``[(e + w) mod E for w in 0..WQ-1]``. Example E=3, WQ=2: entry 0 -> [0, 1], entry 1 -> [1, 2],
entry 2 -> [2, 0].

Difference from upstream: upstream's ``hasEntry`` helper casts ``e + w`` to 32 bits before taking the
modulus, so it can give wrong answers for entry ids >= 2**31. Python integers do not overflow, so
:func:`bookie_has_entry` is correct for every entry id.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = [
    "write_set",
    "bookie_has_entry",
    "ensemble_write_sets",
    "write_sets_containing",
]


def write_set(entry_id: int, ensemble_size: int, write_quorum_size: int) -> list[int]:
    """Ensemble indexes that store ``entry_id``, in write order (upstream ``getWriteSet``).

    Args:
        entry_id: entry id (>= 0).
        ensemble_size: E (>= 1).
        write_quorum_size: WQ (>= 1). If WQ > E (only in adherence checks of short lists) indexes repeat,
            as upstream.

    Raises:
        ValueError: E < 1 or WQ < 1.
    """
    if ensemble_size < 1 or write_quorum_size < 1:
        raise ValueError(f"bad schedule E={ensemble_size} WQ={write_quorum_size}")
    start = entry_id % ensemble_size
    return [(start + w) % ensemble_size for w in range(write_quorum_size)]


def bookie_has_entry(index: int, entry_id: int, ensemble_size: int, write_quorum_size: int) -> bool:
    """True iff ensemble index ``index`` is in the write set of ``entry_id`` (upstream ``hasEntry``).

    Correct for every entry id (upstream overflows for ids >= 2**31, see the module docstring).

    Raises:
        ValueError: E < 1 or WQ < 1.
    """
    if ensemble_size < 1 or write_quorum_size < 1:
        raise ValueError(f"bad schedule E={ensemble_size} WQ={write_quorum_size}")
    if write_quorum_size >= ensemble_size:
        return 0 <= index < ensemble_size
    return (index - entry_id) % ensemble_size < write_quorum_size


@lru_cache(maxsize=512)
def ensemble_write_sets(ensemble_size: int, write_quorum_size: int) -> tuple[tuple[int, ...], ...]:
    """The distinct write sets of an ensemble, one per start index (as position tuples).

    For WQ < E there are E of them (start 0 .. E-1). For WQ >= E all start indexes give the same set of
    positions, so identical ones (same positions in any order) are kept once. Used by the adherence checks:
    an ensemble adheres iff every write set does.
    """
    if ensemble_size < 1 or write_quorum_size < 1:
        return ()
    seen: set[tuple[int, ...]] = set()
    out: list[tuple[int, ...]] = []
    for start in range(ensemble_size):
        ws = tuple((start + w) % ensemble_size for w in range(write_quorum_size))
        key = tuple(sorted(ws))
        if key in seen:
            continue
        seen.add(key)
        out.append(ws)
    return tuple(out)


@lru_cache(maxsize=512)
def write_sets_containing(ensemble_size: int, write_quorum_size: int) -> tuple[tuple[int, ...], ...]:
    """For each ensemble index, the indexes (into :func:`ensemble_write_sets`) of write sets containing it."""
    sets = ensemble_write_sets(ensemble_size, write_quorum_size)
    out: list[list[int]] = [[] for _ in range(ensemble_size)]
    for k, ws in enumerate(sets):
        for p in set(ws):
            out[p].append(k)
    return tuple(tuple(x) for x in out)
