"""``localBookieLossDetectionEnabled`` (issue 29): a daemon deletes the registration its own bookie's dead
process left, long before the session expiry; never a live bookie's, never one it did not see while the
bookie answered, never a restarted bookie's. A real ZooKeeper and real bookie processes, killed."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest

from autorecovery.roles.local_bookie import LocalBookieWatch
from autorecovery.zk.bridge import ZkClient, wait_for
from autorecovery.zk.paths import Paths

pytestmark = pytest.mark.integration

#: the bookies' session timeout here: only the watch can remove a registration within the test's waits
SESSION_MS = 30000


async def test_a_killed_bookie_leaves_at_once_a_live_or_restarted_one_stays(cluster_factory):
    """Bookie 0 is killed (SIGKILL): its watch deletes its registration within seconds, though its
    session would live 30 s more; bookie 1's watch touches nothing; bookie 0 started again registers under
    a new session, which its watch records and leaves alone."""
    c = await asyncio.to_thread(cluster_factory, bookies=2)
    c.bookie_session_timeout_ms = SESSION_MS
    for i in (0, 1):
        await asyncio.to_thread(c.restart_bookie, i)
    paths = Paths(c.ledgers_root)
    b0, b1 = c.bookie_id(0), c.bookie_id(1)
    reg0, reg1 = paths.available_bookie(b0), paths.available_bookie(b1)
    zk = await ZkClient(c.zk_connect, session_timeout_ms=10000).start()
    w0 = await LocalBookieWatch(zk, paths, b0).start()
    w1 = await LocalBookieWatch(zk, paths, b1).start()
    try:
        assert await wait_for(lambda: reg0 in w0.owners and reg1 in w1.owners, 10)
        first = w0.owners[reg0]
        t0 = time.monotonic()
        await asyncio.to_thread(c.kill_bookie, 0)

        async def gone() -> bool:
            return await zk.exists(reg0) is None

        assert await wait_for(gone, 15, interval_s=0.05)
        took = time.monotonic() - t0
        print(f"registration gone {took:.2f}s after the kill (the session would live {SESSION_MS / 1000:.0f}s)")
        assert w0.removed == 1 and w0.verdicts == 1, "the registration went some other way"
        assert took < SESSION_MS / 1000 / 3, f"{took:.1f}s from the kill"
        assert w1.removed == 0 and w1.verdicts == 0 and (await zk.exists(reg1)) is not None

        await asyncio.to_thread(c.start_bookie, 0)
        assert await wait_for(lambda: w0.owners.get(reg0) not in (None, first), 20)
        stat = await zk.exists(reg0)
        assert stat is not None and stat.ephemeralOwner == w0.owners[reg0] and w0.removed == 1
    finally:
        await w0.stop()
        await w1.stop()
        await zk.stop()


async def test_a_registration_never_seen_answering_is_left_to_the_expiry(zk_connect):
    """A bookie id whose port refuses from the start (no process ever answered) and whose registration
    is held by another session: the watch reaches its verdict and deletes nothing."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connects to it are refused
    bookie_id = f"127.0.0.1:{port}"
    paths = Paths("/local-bookie-test")
    owner = await ZkClient(zk_connect, session_timeout_ms=10000).start()
    zk = await ZkClient(zk_connect, session_timeout_ms=10000).start()
    w = LocalBookieWatch(zk, paths, bookie_id)
    try:
        await owner.ensure_path(paths.available)
        await owner.create(paths.available_bookie(bookie_id), b"", ephemeral=True)
        await w.start()
        assert await wait_for(lambda: w.verdicts >= 1, 10)
        assert await zk.exists(paths.available_bookie(bookie_id)) is not None
        assert w.removed == 0
    finally:
        await w.stop()
        await zk.stop()
        await owner.stop()


async def test_the_daemon_key_turns_it_on(cluster_factory):
    """A daemon started with ``localBookieLossDetectionEnabled=true`` next to bookie 0 deletes the
    registration bookie 0's killed process left (logging a WARNING naming it); bookie 1, whose daemon
    runs without the key, keeps its registration until its session expires."""
    c = await asyncio.to_thread(cluster_factory, bookies=2)
    c.bookie_session_timeout_ms = SESSION_MS
    for i in (0, 1):
        await asyncio.to_thread(c.restart_bookie, i)
    await asyncio.to_thread(c.start_daemon, 0, {"localBookieLossDetectionEnabled": "true", "httpServerPort": "0"})
    await asyncio.to_thread(c.start_daemon, 1, {"httpServerPort": "0"})
    paths = Paths(c.ledgers_root)
    zk = await ZkClient(c.zk_connect, session_timeout_ms=10000).start()
    try:
        reg0, reg1 = paths.available_bookie(c.bookie_id(0)), paths.available_bookie(c.bookie_id(1))
        log0 = Path(c.daemons[0].log)

        def warned() -> bool:
            return "registration was deleted now" in log0.read_text(errors="replace")

        await asyncio.to_thread(c.kill_bookie, 0)
        await asyncio.to_thread(c.kill_bookie, 1)

        async def gone0() -> bool:
            return await zk.exists(reg0) is None

        assert await wait_for(gone0, 15, interval_s=0.05)
        assert await wait_for(warned, 10)
        assert await zk.exists(reg1) is not None  # no key: left to its 30 s session
    finally:
        await zk.stop()
