"""How a LedgerHandle finishes a replica write queued on the add batcher (client/handle.py), against a
scripted batcher: acknowledgement, a bookie failure (handed to the retry task), the batcher closing
(abandoned, as a cancelled task's write was) and an unexpected exception (fails the handle)."""

import asyncio

from autorecovery.client.handle import LedgerHandle
from autorecovery.errors import BookieError
from autorecovery.ledger.metadata import LedgerMetadata, Segment
from autorecovery.aio import wait_for

ENSEMBLE = ("a:1", "b:1", "c:1")


class ScriptedAdds:
    """Hands out one future per submitted write, for the test to resolve."""

    def __init__(self) -> None:
        self.writes: dict[tuple[str, int], asyncio.Future] = {}

    def submit(self, bookie, ledger_id, entry_id, master_key, body, *, recovery=False):
        fut = asyncio.get_running_loop().create_future()
        self.writes[(bookie, entry_id)] = fut
        return fut


class FakeBK:
    def __init__(self) -> None:
        self.adds = ScriptedAdds()


def handle() -> tuple[LedgerHandle, ScriptedAdds]:
    bk = FakeBK()
    lh = LedgerHandle(bk, 7, LedgerMetadata(3, 2, 2, (Segment(0, ENSEMBLE),), password=b"k"), 0)
    return lh, bk.adds


def test_acknowledged_writes_complete_the_add_in_order_without_tasks():
    async def go():
        lh, adds = handle()
        add0 = asyncio.ensure_future(lh.add_entry(b"x"))
        add1 = asyncio.ensure_future(lh.add_entry(b"y"))
        assert await wait_for(lambda: len(adds.writes) == 4, 5)
        assert sorted(adds.writes) == [("a:1", 0), ("b:1", 0), ("b:1", 1), ("c:1", 1)]
        for key in (("b:1", 1), ("c:1", 1)):
            adds.writes[key].set_result(None)
        assert await wait_for(lambda: not lh._writes & {adds.writes[("b:1", 1)], adds.writes[("c:1", 1)]}, 5)
        assert not add1.done() and lh.lac == -1  # entry 1 is acknowledged but waits for entry 0
        adds.writes[("a:1", 0)].set_result(None)
        adds.writes[("b:1", 0)].set_result(None)
        assert await add0 == 0 and await add1 == 1 and lh.lac == 1
        assert not lh._tasks and not lh._writes

    asyncio.run(go())


def test_a_bookie_failure_goes_to_the_retry_path_with_the_failed_bookie():
    async def go():
        lh, adds = handle()
        seen = []

        async def send(op, idx, first_error=None):
            seen.append((op.entry_id, idx, first_error))

        lh._send = send
        add = asyncio.ensure_future(lh.add_entry(b"x"))
        assert await wait_for(lambda: len(adds.writes) == 2, 5)
        err = BookieError("b:1", "EIO", "disk")
        adds.writes[("b:1", 0)].set_exception(err)
        assert await wait_for(lambda: seen, 5)
        assert seen == [(0, 1, ("b:1", err))]
        add.cancel()

    asyncio.run(go())


def test_a_closing_batcher_abandons_the_write_and_a_bug_fails_the_handle():
    async def go():
        lh, adds = handle()
        add = asyncio.ensure_future(lh.add_entry(b"x"))
        assert await wait_for(lambda: len(adds.writes) == 2, 5)
        adds.writes[("a:1", 0)].set_exception(asyncio.CancelledError())
        assert await wait_for(lambda: adds.writes[("a:1", 0)] not in lh._writes, 5)
        assert lh._error is None and not add.done()  # abandoned, not an error of the handle
        adds.writes[("b:1", 0)].set_exception(KeyError("bug"))
        try:
            await add
        except KeyError:
            pass
        else:
            raise AssertionError("the add should fail with the unexpected exception")
        assert isinstance(lh._error, KeyError)

    asyncio.run(go())
