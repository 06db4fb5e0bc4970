"""Cancelling a task that is closing an add stream cancels it (``rpc/grpc_add_stream.py``), over real gRPC.

``AddStream.close`` waits for the bookie to acknowledge what is pending. It used to catch
``CancelledError`` there (and again while ending its reader), so a copy being aborted or a worker
stopping could not cancel a close waiting on a bookie that never answers: the cancellation was lost and
the task went on as if nothing had happened.
"""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.bookie.disk import DiskProbe
from autorecovery.bookie.service import BookieService, add_service
from autorecovery.bookie.grpc_server import build_grpc_server
from autorecovery.bookie.storage import BookieStorage
from autorecovery.errors import BookieUnavailableError
from autorecovery.ledger.digest import pack_entry
from autorecovery.aio import wait_for

pytestmark = pytest.mark.integration

MK = b"master-key"


class StalledBookieService(BookieService):
    """Takes an add stream and reads its messages, but never acknowledges nor ends it (a bookie stuck on
    its disk)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.half_closed = asyncio.Event()

    async def AddStream(self, request_iterator, context):
        async for _batch in request_iterator:
            pass
        self.half_closed.set()  # the client called done_writing
        await asyncio.Event().wait()
        yield  # pragma: no cover - never reached (an async generator, as the servicer's)


def _in_wait_for(task: asyncio.Task) -> bool:
    """Whether ``task`` (running ``AddStream.close``) is suspended inside ``asyncio.wait_for``."""
    coro = task.get_coro()
    inner = getattr(coro, "cr_await", None)
    return getattr(inner, "__qualname__", "") == "wait_for"


async def test_cancelling_a_close_that_waits_on_a_silent_bookie_propagates(tmp_path, client) -> None:
    storage = BookieStorage(tmp_path / "stalled", name="stalled")
    storage.open()
    server, port = build_grpc_server("127.0.0.1", 0, 5 * 1024 * 1024)
    svc = StalledBookieService(storage, f"127.0.0.1:{port}", disk=DiskProbe(tmp_path / "stalled"))
    add_service(server, svc)
    await server.start()
    try:
        st = await client.open_add_stream(svc.bookie_id, 3, MK)
        assert st is not None
        (fut,) = await st.send([(0, pack_entry(3, 0, -1, 10, b"x" * 10))])
        closing = asyncio.create_task(st.close(timeout_s=60))
        assert await wait_for(lambda: svc.half_closed.is_set() and _in_wait_for(closing), 10, interval_s=0.01)
        closing.cancel()
        done, _ = await asyncio.wait({closing}, timeout=10)
        assert closing in done, "the close did not end once cancelled"
        assert closing.cancelled(), f"the cancellation was swallowed: close returned {closing.result()!r}"
        # the call was ended on the way out: the pending entry fails, the stream takes no more adds
        with pytest.raises(BookieUnavailableError):
            await asyncio.wait_for(fut, 10)
        assert not st.usable
    finally:
        await server.stop(None)
        await storage.close()
