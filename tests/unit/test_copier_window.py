"""The copier's reader → writer window hands the writer everything queued as one batch (issue 13)."""

from __future__ import annotations

import asyncio

from autorecovery.roles.copy_window import Window
from autorecovery.roles.holdings import join_over_foreign_ids as _join_over_foreign_ids


async def test_get_batch_takes_what_is_queued_within_the_byte_limit_and_stops_at_the_end_marker() -> None:
    w = Window(max_entries=10, max_bytes=10_000)
    for e in range(5):
        await w.put((e, b"x" * 300))
    await w.put(None)
    assert [e for e, _ in await w.get_batch(700)] == [0, 1]      # 600 bytes; a third would be 900
    assert [e for e, _ in await w.get_batch(10_000)] == [2, 3, 4]  # not past the end marker
    assert await w.get_batch(10_000) is None
    assert w._bytes == 0 and not w._items


async def test_get_batch_returns_a_lone_entry_larger_than_the_limit_and_frees_the_window() -> None:
    w = Window(max_entries=2, max_bytes=1000)
    await w.put((0, b"y" * 5000))  # an empty window admits any entry
    blocked = asyncio.ensure_future(w.put((1, b"z" * 10)))
    await asyncio.sleep(0)
    assert not blocked.done()  # full by bytes
    assert [e for e, _ in await w.get_batch(100)] == [0]
    await asyncio.wait_for(blocked, 5)  # room again: the reader goes on
    assert [e for e, _ in await w.get_batch(100)] == [1]


async def test_get_batch_waits_for_the_first_entry() -> None:
    w = Window(max_entries=4, max_bytes=1000)
    getter = asyncio.ensure_future(w.get_batch(1000))
    await asyncio.sleep(0)
    assert not getter.done()
    await w.put((7, b"a"))
    assert [e for e, _ in await asyncio.wait_for(getter, 5)] == [7]


def test_a_bookie_listing_is_joined_over_the_ids_its_index_does_not_store() -> None:
    """Issue 25: an E3/WQ2 bookie at index 0 stores 0, 2,3, 5,6, ... and lists a hole every third id;
    kept as one range, and a real hole (8 missing) stays one."""
    full = [(0, 0)] + [(3 * k + 2, 3 * k + 3) for k in range(10_000)]
    assert _join_over_foreign_ids(full, 0, 3, 2) == [(0, 30_000)]
    holed = [(0, 0), (2, 3), (5, 6), (9, 9), (11, 12)]
    assert _join_over_foreign_ids(holed, 0, 3, 2) == [(0, 6), (9, 12)]
    assert _join_over_foreign_ids([(5, 6), (0, 0)], 0, 3, 2) == [(0, 0), (5, 6)]  # unsorted: sorted first
