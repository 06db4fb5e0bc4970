"""Round-robin distribution schedule: which ensemble indexes store an entry (PURE).

Upstream ``RoundRobinDistributionSchedule``. The rule itself lives in :mod:`autorecovery.ledger.striping`;
this module keeps the placement-side names and the per-ensemble write-set tables. The write set of
entry ``e`` in an ensemble of size E with write quorum WQ is the WQ consecutive ensemble indexes
starting at ``e mod E``, wrapping around: ``[(e + w) mod E for w in 0..WQ-1]``. Example E=3, WQ=2: entry 0 -> [0, 1], entry 1 -> [1, 2],
entry 2 -> [2, 0].

Difference from upstream: upstream's ``hasEntry`` helper casts ``e + w`` to 32 bits before taking the
modulus, so it can give wrong answers for entry ids >= 2**31. Python integers do not overflow, so
:func:`bookie_has_entry` is correct for every entry id.
"""

from __future__ import annotations

from functools import lru_cache

from autorecovery.ledger import striping

__all__ = [
    "write_set",
    "bookie_has_entry",
    "ensemble_write_sets",
    "write_sets_containing",
]


def write_set(entry_id: int, ensemble_size: int, write_quorum_size: int) -> list[int]:
    """Ensemble indexes that store ``entry_id``, in write order (upstream ``getWriteSet``).

    The rule is :func:`autorecovery.ledger.striping.write_set` (WQ > E, only in adherence checks of
    short lists, repeats indexes as upstream).

    Raises:
        ValueError: E < 1 or WQ < 1.
    """
    return striping.write_set(entry_id, ensemble_size, write_quorum_size)


def bookie_has_entry(index: int, entry_id: int, ensemble_size: int, write_quorum_size: int) -> bool:
    """True iff ensemble index ``index`` is in the write set of ``entry_id`` (upstream ``hasEntry``).

    The rule is :func:`autorecovery.ledger.striping.index_stores`: an index outside ``[0, E)`` stores
    nothing, and with WQ >= E every index of the ensemble stores every entry. Correct for every entry
    id (upstream overflows for ids >= 2**31, see the module docstring).

    Raises:
        ValueError: E < 1 or WQ < 1.
    """
    return striping.index_stores(index, entry_id, ensemble_size, write_quorum_size)


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
        ws = tuple(striping.write_set(start, ensemble_size, write_quorum_size))
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
