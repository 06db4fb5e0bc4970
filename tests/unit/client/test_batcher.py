"""Group send of adds (autorecovery.client.batcher) against a scripted bookie client."""

import asyncio

import pytest

from autorecovery.client.batcher import AddBatcher
from autorecovery.errors import BookieError, LedgerFencedError


class ScriptedBookies:
    """Records calls; a call waits for `gate` so later adds queue behind it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        self.gate = asyncio.Event()
        self.fail_after: int | None = None
        self.error: BookieError | None = None

    async def open_add_stream(self, bookie, ledger, key, *, recovery=False):
        return None  # a bookie without ADD_STREAM: one call at a time

    async def add_entry(self, bookie, ledger, eid, key, body, *, recovery=False):
        self.calls.append(("one", [eid]))
        await self.gate.wait()

    async def add_entries(self, bookie, ledger, key, entries, *, recovery=True):
        ids = [e for e, _ in entries]
        self.calls.append(("many", ids))
        await self.gate.wait()
        if self.fail_after is not None:
            exc = self.error or BookieError(bookie, "EIO", "disk")
            exc.entries_written = self.fail_after
            raise exc
        return len(ids), sum(len(b) for _, b in entries)


def test_lone_add_is_a_plain_call_and_queued_adds_share_the_next_call():
    async def go():
        bk = ScriptedBookies()
        b = AddBatcher(bk)
        first = asyncio.ensure_future(b.add("b:1", 7, 0, b"k", b"x"))
        await asyncio.sleep(0)  # let the first call start (scheduling, not timing)
        rest = [asyncio.ensure_future(b.add("b:1", 7, e, b"k", b"x")) for e in range(1, 5)]
        other = asyncio.ensure_future(b.add("b:2", 7, 0, b"k", b"x"))
        await asyncio.sleep(0)
        bk.gate.set()
        await asyncio.gather(first, *rest, other)
        assert ("one", [0]) in bk.calls and ("many", [1, 2, 3, 4]) in bk.calls
        assert len(bk.calls) == 3  # b:1 twice, b:2 once
        assert b._queues == {}

    asyncio.run(go())


@pytest.mark.parametrize("written", [0, 2, -1])
def test_entries_before_the_failure_succeed_and_the_rest_get_the_error(written):
    async def go():
        bk = ScriptedBookies()
        bk.fail_after = written
        bk.error = LedgerFencedError("b:1", "EFENCED", "fenced")
        b = AddBatcher(bk)
        blocker = asyncio.ensure_future(b.add("b:1", 7, 0, b"k", b"x"))
        await asyncio.sleep(0)
        adds = [asyncio.ensure_future(b.add("b:1", 7, e, b"k", b"x")) for e in range(1, 5)]
        await asyncio.sleep(0)
        bk.gate.set()
        await blocker
        res = await asyncio.gather(*adds, return_exceptions=True)
        ok = max(0, written)
        assert res[:ok] == [None] * ok
        assert all(isinstance(r, LedgerFencedError) for r in res[ok:])

    asyncio.run(go())
