"""``localBookieLossDetectionEnabled`` (on by default): a daemon deletes the registration its own bookie's
dead process left, long before the session expiry; never a live bookie's, never one it did not see while
the bookie answered, never a restarted bookie's, never one whose process still runs after closing its port
(a graceful stop), never a bookie's on another host. A real ZooKeeper and real processes, killed."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autorecovery.roles.local_bookie import LocalBookieWatch, listening_inodes, parse_stat
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
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


async def test_on_by_default_and_the_key_turns_it_off(cluster_factory):
    """A daemon started with the default settings next to bookie 0 says at start that the watch is on
    (INFO naming the bookie) and deletes the registration bookie 0's killed process left (a WARNING
    naming it); bookie 1, whose daemon runs with ``localBookieLossDetectionEnabled=false``, keeps its
    registration until its session expires."""
    c = await asyncio.to_thread(cluster_factory, bookies=2)
    c.bookie_session_timeout_ms = SESSION_MS
    for i in (0, 1):
        await asyncio.to_thread(c.restart_bookie, i)
    await asyncio.to_thread(c.start_daemon, 0, {"httpServerPort": "0"})
    await asyncio.to_thread(c.start_daemon, 1, {"localBookieLossDetectionEnabled": "false", "httpServerPort": "0"})
    paths = Paths(c.ledgers_root)
    zk = await ZkClient(c.zk_connect, session_timeout_ms=10000).start()
    try:
        reg0, reg1 = paths.available_bookie(c.bookie_id(0)), paths.available_bookie(c.bookie_id(1))
        log0, log1 = Path(c.daemons[0].log), Path(c.daemons[1].log)

        def said(log: Path, what: str) -> bool:
            return what in log.read_text(errors="replace")

        assert await wait_for(lambda: said(log0, "local bookie watch on") and said(log0, c.bookie_id(0)), 10)
        assert not said(log1, "local bookie watch on")
        await asyncio.to_thread(c.kill_bookie, 0)
        await asyncio.to_thread(c.kill_bookie, 1)

        async def gone0() -> bool:
            return await zk.exists(reg0) is None

        assert await wait_for(gone0, 15, interval_s=0.05)
        assert await wait_for(lambda: said(log0, "registration was deleted now"), 10)
        assert await zk.exists(reg1) is not None  # the key off: left to its 30 s session
    finally:
        await zk.stop()


#: a stand-in bookie process: registers (ephemeral, its own session), listens, and on "close" on its
#: stdin closes its port and keeps running with its session, as upstream's graceful stop does while it
#: flushes
_STAND_IN = textwrap.dedent("""
    import socket, sys
    from kazoo.client import KazooClient
    zk_connect, path, host = sys.argv[1:4]
    zk = KazooClient(zk_connect, timeout=30.0)
    zk.start(15)
    srv = socket.socket()
    srv.bind((host, 0))
    srv.listen(16)
    zk.create(path.replace("PORT", str(srv.getsockname()[1])), b"", ephemeral=True, makepath=True)
    print(srv.getsockname()[1], flush=True)
    for line in sys.stdin:
        if line.strip() == "close":
            srv.close()
            print("closed", flush=True)
""")


async def test_a_process_that_closes_its_port_and_runs_on_is_left_alone_until_it_dies(zk_connect, tmp_path):
    """The stand-in closes its port and keeps running (a graceful stop still flushing): the watch reaches
    its port verdict and deletes nothing; SIGKILLed then (a stop timeout), its registration goes in
    well under a second, though its session would live 30 s more."""
    paths = Paths("/local-bookie-graceful")
    template = paths.available_bookie("127.0.0.1:PORT")
    proc = subprocess.Popen([sys.executable, "-c", _STAND_IN, zk_connect, template, "127.0.0.1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    zk = await ZkClient(zk_connect, session_timeout_ms=10000).start()
    w: LocalBookieWatch | None = None
    try:
        assert proc.stdout is not None and proc.stdin is not None
        port = int(await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30))
        bookie_id = f"127.0.0.1:{port}"
        reg = paths.available_bookie(bookie_id)
        w = await LocalBookieWatch(zk, paths, bookie_id).start()
        assert await wait_for(lambda: reg in w.owners and w.processes, 10)
        assert {pid for pid, _ in w.processes} == {proc.pid}
        proc.stdin.write("close\n")
        proc.stdin.flush()
        assert await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 10) == "closed\n"
        assert await wait_for(lambda: w.spared == 1, 10)
        for _ in range(5):  # several looks at the still-running process, none deleting
            n = w.spared
            await asyncio.sleep(0.1)  # the watch looks every 0.1 s: give it a few looks
            assert w.spared == n
        assert w.verdicts == 1 and w.removed == 0 and await zk.exists(reg) is not None
        t0 = time.monotonic()
        proc.kill()

        async def gone() -> bool:
            return await zk.exists(reg) is None

        assert await wait_for(gone, 10, interval_s=0.02)
        took = time.monotonic() - t0
        print(f"registration gone {took:.2f}s after the SIGKILL")
        assert w.removed == 1 and took < 1.0, f"{took:.2f}s"
    finally:
        proc.kill()
        proc.wait()
        if w is not None:
            await w.stop()
        await zk.stop()


async def test_a_bookie_on_another_host_is_not_watched(zk_connect):
    """A bookie id whose address is not one of this host's: the watch turns itself off, saying why."""
    zk = await ZkClient(zk_connect, session_timeout_ms=10000).start()
    w = LocalBookieWatch(zk, Paths("/local-bookie-remote"), "192.0.2.7:3181")  # TEST-NET-1: never local
    try:
        await w.start()
        assert await wait_for(lambda: not w.active, 10)
        assert "192.0.2.7" in w.off_reason and "not an address of this host" in w.off_reason
        assert w.address is None and w.verdicts == 0 and w.removed == 0
    finally:
        await w.stop()
        await zk.stop()


def test_proc_net_tcp_listeners_are_read_by_address_and_port():
    """Lines as Linux prints them: 127.0.0.2:3181 and the v6 wildcard at 3181 listen (0A); an
    established socket on 3181 and a listener at another port do not count."""
    v4 = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
          "   0: 0200007F:0C6D 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1\n"
          "   1: 0300007F:0C6D 0200007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 222 1\n"
          "   2: 0200007F:0C6E 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 333 1\n")
    v6 = ("  sl  local_address                         remote_address                        st ...\n"
          "   0: 00000000000000000000000000000000:0C6D 00000000000000000000000000000000:0000 0A "
          "00000000:00000000 00:00000000 00000000  1000        0 444 1\n"
          "   1: 0000000000000000FFFF00000300007F:0C6D 00000000000000000000000000000000:0000 0A "
          "00000000:00000000 00:00000000 00000000  1000        0 555 1\n")
    assert listening_inodes(v4, "127.0.0.2", 3181) == {111}
    assert listening_inodes(v4, "127.0.0.3", 3181) == set()
    assert listening_inodes(v6, "127.0.0.3", 3181) == {444, 555}  # the wildcard, and v4-mapped 127.0.0.3
    assert listening_inodes(v6, "127.0.0.2", 3181) == {444}
    assert listening_inodes(v4 + "garbage line\n", "127.0.0.2", 3182) == {333}  # the other port, read alone


def test_proc_stat_gives_the_state_and_the_start_time():
    """``/proc/<pid>/stat``: the command name may hold spaces and parentheses; field 22 is the start time."""
    line = "4242 (java (main) x) S 1 4242 4242 0 -1 4194560 " + " ".join(["0"] * 12) + " 987654 123 456"
    assert parse_stat(line) == ("S", 987654)
    assert parse_stat("4242 (java) Z 1") is None
