"""What each bookie holds of a ledger, asked once and kept as ranges (EDGE; issue 25).

A bookie answers ``GetListOfEntriesOfLedger`` with the entry ids it stores as sorted inclusive ranges.
The worker uses the answers to find, before choosing any target, the entries that no bookie of their
write set holds (:func:`absent`: a ledger whose metadata claims more than was ever written, up to
``lastEntryId`` = 2**62, is data loss found in O(E × WQ) requests), and the copier to stream only
what a source stores (:func:`held`). A stock bookie (upstream protocol) is not asked: its
DbLedgerStorage never answers the request (one timeout per connection); its ranges are read instead.

Memory: what is kept per bookie is joined over the ids its ensemble index does not store
(:func:`join_over_foreign_ids`: an E3/WQ2 bookie lists a hole every third id), so it is O(holes in
its own share); the answer itself is bounded by the bookie client's ``max_message_bytes`` (a larger
answer fails, and the ranges are then read).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from autorecovery.errors import BookieError
from autorecovery.ledger.striping import count_on_index, residues_in_range, write_set
from autorecovery.plan.entry_runs import Gap, Run, merge_gaps, split_gaps
from autorecovery.rpc.transport import GRPC

#: bookie id -> (ranges it stores, or None when it cannot say; reason for ids outside them)
Cache = dict[str, tuple[list[tuple[int, int]] | None, str]]


async def held(bookies, bookie: str, ledger_id: int, cache: Cache,
               striping: tuple[int, int, int]) -> tuple[list[tuple[int, int]] | None, str]:
    """The id ranges ``bookie`` stores of the ledger (one ``GetListOfEntriesOfLedger`` per bookie per
    ``cache``) and the reason for ids outside them: ``([], "ENOLEDGER")`` for a bookie that does not
    know the ledger, ``(None, "")`` when the bookie cannot say (a stock bookie, an error: the ids are
    then read).

    Args:
        bookies: the bookie client (``get_list_of_entries``; ``transport_name`` when it has one).
        striping: ``(index, E, WQ)``, the bookie's place in the segment (see :func:`join_over_foreign_ids`).
    """
    if bookie in cache:
        return cache[bookie]
    val: tuple[list[tuple[int, int]] | None, str]
    transport = getattr(bookies, "transport_name", None)
    try:
        if transport is not None and await transport(bookie) != GRPC:
            cache[bookie] = (None, "")
            return cache[bookie]
        got = await bookies.get_list_of_entries(bookie, ledger_id)
        val = (join_over_foreign_ids(got, *striping), "ENOENTRY")
    except BookieError as exc:
        val = ([], "ENOLEDGER") if exc.status == "ENOLEDGER" else (None, "")
    except Exception:  # noqa: BLE001 - a client without the call: read the range instead
        val = (None, "")
    cache[bookie] = val
    return val


async def absent(bookies, ledger_id: int, ensemble: tuple[str, ...], wq: int, first: int, last: int,
                 registered: Callable[[], Collection[str]], cache: Cache | None = None) -> list[Gap]:
    """The entries of ``[first, last]`` that no bookie of their write set holds, as runs (one residue
    each) with every replica's reason: ``NOT_REGISTERED``, or ``ENOENTRY``/``ENOLEDGER`` from its
    listing. A bookie that cannot say counts as holding them. One listing per bookie,
    O(E × WQ × pieces) whatever the range's length. ``cache``: listings to use and fill (the copy of
    the same segment that follows reuses them: issue 29, one request less per source and ledger)."""
    e_size = len(ensemble)
    reg = set(registered())
    cache = {} if cache is None else cache
    out: list[Gap] = []
    for r in residues_in_range(first, last, e_size):
        run = Run(first, last, r, 1, e_size).clip(first, last)
        if run is None:
            continue
        pending = [Gap(run)]
        for j in dict.fromkeys(write_set(r, e_size, wq)):
            b = ensemble[j]
            if b not in reg:
                pending = [g.because(b, "NOT_REGISTERED") for g in pending]
                continue
            stores, why = await held(bookies, b, ledger_id, cache, (j, e_size, wq))
            _present, pending = split_gaps(pending, stores, b, why)  # held somewhere: not absent
            if not pending:
                break
        out.extend(merge_gaps(pending))
    return out


def join_over_foreign_ids(ranges: Iterable, index: int, e_size: int, wq: int) -> list[tuple[int, int]]:
    """Sorted ``(first, last)`` ranges with neighbours joined when no id between them is stored on
    ensemble ``index`` (:func:`~autorecovery.ledger.striping.count_on_index`)."""
    out: list[tuple[int, int]] = []
    for a, b in ranges:  # sorted by the protocol; checked below
        a, b = int(a), int(b)
        if out and a < out[-1][0]:
            return join_over_foreign_ids(sorted((int(x), int(y)) for x, y in ranges), index, e_size, wq)
        if out and (a <= out[-1][1] + 1 or count_on_index(out[-1][1] + 1, a - 1, index, e_size, wq) == 0):
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
