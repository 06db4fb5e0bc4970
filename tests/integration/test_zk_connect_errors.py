"""A command that cannot reach ZooKeeper prints one line naming the cause and the server, and what to
check, and exits 1; kazoo's retry lines only show at DEBUG (issue 28).

Before, every such command printed one kazoo WARNING per attempt (``Cannot resolve zk1``, ``Connection
dropped: socket connection error: Connection refused``...) and ended with ``Connection time-out``
whatever the cause. The servers here are real sockets: a port nothing listens on (refused), a name in
the ``.invalid`` top-level domain (RFC 2606: never resolves), and a listening socket that never answers
(the kernel completes the TCP handshake into its backlog; nothing is ever read or written: a black hole).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from autorecovery.testing.zk_server import free_port
from autorecovery.zk import probe

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _autorecovery(*args: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "autorecovery", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def black_hole():
    """``127.0.0.1:<port>`` of a socket that listens and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield f"127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


def _assert_one_line(res: subprocess.CompletedProcess, server: str, cause: str) -> str:
    assert res.returncode == 1, (res.returncode, res.stderr[-2000:])
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, "expected exactly one line on stderr:\n" + res.stderr[-3000:]
    line = lines[0]
    assert line.startswith(f"ERROR: cannot connect to ZooKeeper at {server}: {cause}"), line
    assert " - check " in line, line
    for noise in ("kazoo", "Traceback", "Connection time-out", "Connection dropped", "Cannot resolve"):
        assert noise not in res.stderr, res.stderr
    return line


@pytest.mark.parametrize("case", ["refused", "unresolvable", "black hole"])
def test_shell_command_says_why_in_one_line(case, tmp_path, request):
    server = {"refused": lambda: f"127.0.0.1:{free_port()}",
              "unresolvable": lambda: "no-such-host.invalid:2181",
              "black hole": lambda: request.getfixturevalue("black_hole")}[case]()
    cause = {"refused": "connection refused", "unresolvable": "cannot resolve host",
             "black hole": "timed out"}[case]
    res = _autorecovery("shell", "listunderreplicated", "--zk", server, "-D", "zkTimeout=2000", cwd=tmp_path)
    line = _assert_one_line(res, server, cause)
    if case == "refused":
        assert "local-cluster status" in line and "port" in line
    if case == "unresolvable":
        assert "connect string" in line
    if case == "black hole":
        assert "accepted" in line  # the TCP connection was accepted, ZooKeeper never answered


def test_every_kind_of_command_gives_the_same_line(tmp_path):
    """``config check --cluster``, ``export`` and ``workload`` connect too; ``run`` logs JSON (a daemon)
    but its ``ERROR:`` line is the same and no kazoo line is among its logs."""
    server = f"127.0.0.1:{free_port()}"
    for args in (["config", "check", "--cluster", "--zk", server, "-D", "zkTimeout=2000"],
                 ["export", "--zk", server, "-D", "zkTimeout=2000", "--out", str(tmp_path / "snap")],
                 ["workload", "verify", "--zk", server, "--manifest", str(_manifest(tmp_path))]):
        res = _autorecovery(*args, cwd=tmp_path)
        assert res.returncode == 1, (args, res.stderr[-2000:])
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("ERROR")]
        assert errors == [f"ERROR: cannot connect to ZooKeeper at {server}: connection refused - check "
                          "that ZooKeeper runs and listens on that port (its clientPort; for a local cluster "
                          "`autorecovery local-cluster status`)"], (args, res.stderr[-3000:])
        assert "kazoo" not in res.stderr and "Traceback" not in res.stderr, (args, res.stderr[-3000:])
    res = _autorecovery("run", "--zk", server, "-D", "zkTimeout=2000", "--http-port", "0", cwd=tmp_path)
    assert res.returncode == 1
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("ERROR")] == [
        f"ERROR: cannot connect to ZooKeeper at {server}: connection refused - check that ZooKeeper runs and "
        "listens on that port (its clientPort; for a local cluster `autorecovery local-cluster status`)"]
    assert "kazoo" not in res.stderr and "Traceback" not in res.stderr, res.stderr[-3000:]


def _manifest(tmp_path: Path) -> Path:
    m = tmp_path / "workload.json"
    m.write_text('{"ledgers": []}')
    return m


def test_kazoo_lines_show_at_debug(tmp_path):
    server = f"127.0.0.1:{free_port()}"
    res = _autorecovery("workload", "--log-level", "DEBUG", "verify", "--zk", server, "--manifest",
                        str(_manifest(tmp_path)), cwd=tmp_path)
    assert res.returncode == 1
    kazoo = [json.loads(ln) for ln in res.stderr.splitlines() if ln.startswith("{") and '"logger": "kazoo' in ln]
    assert kazoo, res.stderr[-2000:]  # its per-attempt lines are there at DEBUG...
    assert {e["level"] for e in kazoo} == {"debug"}, kazoo[:5]  # ...and only as DEBUG lines


def test_several_servers_each_named_with_its_cause(tmp_path):
    refused = f"127.0.0.1:{free_port()}"
    hosts = f"{refused},no-such-host.invalid:2181"
    res = _autorecovery("shell", "whoisauditor", "--zk", hosts, "-D", "zkTimeout=2000", cwd=tmp_path)
    line = _assert_one_line(res, hosts, f"{refused}: connection refused; no-such-host.invalid:2181: cannot resolve host")
    assert "host names in the connect string" in line and "listens on that port" in line


def test_connect_string_parsing():
    assert probe.servers("a:1,b,[::1]:2182/chroot/x") == [("a:1", "a", 1), ("b", "b", 2181),
                                                          ("[::1]:2182", "::1", 2182)]


def test_probe_answers_for_a_real_zookeeper_and_closes_its_session(zk_server):
    """The probe's ConnectRequest is ZooKeeper's: a real server answers it (so a failure it reports is
    real), and the session it made is closed at once (``dump`` lists no extra session afterwards, long
    before the session timeout would expire it)."""
    import asyncio

    from autorecovery.testing.zk_server import four_letter_word
    from test_shell_support import wait_until

    host, port = zk_server.connect_string.rsplit(":", 1)

    def sessions() -> int:  # the SessionTracker part of `dump`: one "\t0x<id>" line per live session
        tracker = four_letter_word(host, int(port), "dump", timeout_s=5).split("ephemeral nodes dump")[0]
        return sum(1 for ln in tracker.splitlines() if ln.startswith("\t0x"))

    before = sessions()
    (res,) = asyncio.run(probe.probe(zk_server.connect_string, timeout_s=5))
    assert res.cause == probe.ANSWERED, res
    wait_until(lambda: sessions() <= before, 3, 0.1, "the probe's session to be closed")


def test_a_server_that_closes_at_once_is_named(tmp_path):
    """Something that accepts and closes without a ZooKeeper answer (a server not serving, or one
    expecting TLS) is ``closed the connection``, not a time-out."""
    import asyncio

    async def go():
        async def close_at_once(reader, writer):
            writer.close()

        server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await probe.probe(f"127.0.0.1:{port}", timeout_s=3), port
        finally:
            server.close()

    (res,), port = asyncio.run(go())
    assert res == probe.ServerProbe(f"127.0.0.1:{port}", probe.CLOSED, "no ZooKeeper answer"), res
    line = probe.explain(f"127.0.0.1:{port}", [res], "Connection time-out")
    assert line.startswith(f"cannot connect to ZooKeeper at 127.0.0.1:{port}: closed the connection"), line
    assert "quorum" in line
