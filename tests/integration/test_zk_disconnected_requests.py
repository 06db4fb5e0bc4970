"""Requests made while the ZooKeeper connection is down never block the event loop (issue 26).

kazoo queues a request made while disconnected and wakes its I/O thread with one byte on a socket pair
it drains only once connected; some 280 such bytes fill the pair, and the next request's write blocked
the calling thread, here the event loop, until ZooKeeper came back. The one-hour chaos campaign froze
that way during a quorum loss: its sampler kept asking while the runner's own loop, which restarts the
ZooKeeper members, could no longer run. The connection here goes through a real proxy that refuses
every connection while cut; the server is the session's real ZooKeeper.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from autorecovery import aio
from autorecovery.testing.tcp_proxy import TcpProxy
from autorecovery.zk import wake
from autorecovery.zk.bridge import ZkClient
from autorecovery.errors import ZooKeeperError

pytestmark = pytest.mark.integration


async def _loop_gaps(stop: asyncio.Event) -> float:
    """Longest gap (s) between turns of a 20 ms ticker until ``stop``."""
    worst, last = 0.0, time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(0.02)
        now = time.monotonic()
        worst, last = max(worst, now - last), now
    return worst


@contextlib.asynccontextmanager
async def _cut_client(zk_server, session_timeout_ms: int = 20000):
    """A ZkClient to ``zk_server`` through a proxy, with ``/held`` created, then the proxy cut and the
    client seen disconnected (requests already with kazoo when the connection drops fail with
    ConnectionLoss, as upstream's client: the tests' requests are made after). Yields (client, proxy)."""
    host, port = zk_server.connect_string.split(":")
    proxy = TcpProxy((host, int(port))).start()
    zk = await ZkClient(proxy.address, session_timeout_ms=session_timeout_ms).start()
    try:
        await zk.ensure_path("/held")
        proxy.cut()
        assert await aio.wait_for(lambda: not zk.connected.is_set(), 10), "still connected 10 s after the cut"
        yield zk, proxy
    finally:
        proxy.close()
        await zk.stop()


async def _serve_burst(zk: ZkClient, proxy: TcpProxy, hold_s: float) -> None:
    """450 requests while cut (more than kazoo's wake-up pair holds), the cut held ``hold_s`` s, then
    restored: every request succeeds and the event loop never stalls for 1 s."""
    stop = asyncio.Event()
    ticker = asyncio.ensure_future(_loop_gaps(stop))
    calls = asyncio.gather(*(zk.get_children("/held") for _ in range(450)))
    if hold_s:
        await asyncio.sleep(hold_s)  # the ticker must keep turning through the outage (not a sync point)
        assert not calls.done()
    proxy.restore()
    results = await asyncio.wait_for(calls, 30)
    stop.set()
    assert await ticker < 1.0
    assert all(r == [] for r in results)


@pytest.mark.timeout(60)
async def test_many_requests_while_disconnected_wait_and_then_succeed(zk_server):
    async with _cut_client(zk_server) as (zk, proxy):
        await _serve_burst(zk, proxy, hold_s=2.0)


async def test_a_request_outliving_the_session_timeout_fails_naming_its_path(zk_server):
    async with _cut_client(zk_server, session_timeout_ms=4000) as (zk, _):
        t0 = time.monotonic()
        with pytest.raises(ZooKeeperError, match=r"/somewhere/else.*ConnectionLoss"):
            await asyncio.wait_for(zk.get("/somewhere/else"), 30)
        assert time.monotonic() - t0 < 10


@pytest.mark.timeout(60)
async def test_a_backed_up_wake_up_pair_moves_submissions_off_the_loop(zk_server):
    """Bytes left in kazoo's wake-up pair (a request kazoo failed when the connection dropped leaves its
    byte) are counted, and past the safe backlog requests are submitted from the submit thread."""
    async with _cut_client(zk_server) as (zk, proxy):
        # what 270 requests failed at the drop leave behind: one byte each, unread while disconnected
        zk._kz._connection._write_sock.send(b"\0" * 270)
        assert wake.wake_backlog(zk._kz) == 270
        await _serve_burst(zk, proxy, hold_s=0)
        assert zk.offloaded > 0
