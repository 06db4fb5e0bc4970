"""A replicated ZooKeeper ensemble (3 members by default) of Debian's ``zookeeper`` package (EDGE).

Member ``n`` (1-based, its ``myid``) binds loopback address ``127.0.0.<1 + n>`` (client, quorum and
election ports picked free at first start and kept), runs ``QuorumPeerMain`` in its own session with
its data dir and log in ``<base>/zk-<n>/``, and can be killed and started again on the same ports and
data (issue 26's leader / follower / quorum-loss / rolling-restart faults). Readiness and roles come
from the ``srvr`` four-letter word (``Mode: leader|follower|standalone``): waits poll it with deadlines.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from autorecovery.testing.zk_server import ZooKeeperNotInstalled, _classpath, four_letter_word, free_port


@dataclass
class Member:
    """One ensemble member: ``myid``, ``host``, its ports, data dir and the running process (or None)."""

    myid: int
    host: str
    client_port: int
    quorum_port: int
    election_port: int
    data_dir: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """``host:client_port``."""
        return f"{self.host}:{self.client_port}"

    def mode(self) -> str | None:
        """``leader``, ``follower`` or None (not serving: down, or no quorum)."""
        try:
            text = four_letter_word(self.host, self.client_port, "srvr", timeout_s=0.5)
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    @property
    def alive(self) -> bool:
        """True while the member's process runs (False before its first start and after it exited)."""
        return self.proc is not None and self.proc.poll() is None


class ZooKeeperEnsemble:
    """``size`` ZooKeeper members forming one quorum (see the module docstring).

    Args:
        base_dir: parent of every member's ``zk-<n>`` directory.
        size: members (odd, >= 3). tick_time_ms: tickTime (minimum session timeout is 2 ticks).
    """

    def __init__(self, base_dir: Path | str, size: int = 3, tick_time_ms: int = 250, heap_mb: int = 192) -> None:
        if size < 3 or size % 2 == 0:
            raise ValueError(f"a ZooKeeper ensemble needs an odd number >= 3 of members, got {size}")
        self.base = Path(base_dir)
        self.tick_time_ms = tick_time_ms
        self.heap_mb = heap_mb
        self.members: list[Member] = []
        for n in range(1, size + 1):
            host = f"127.0.0.{1 + n}"
            self.members.append(Member(n, host, free_port(host), free_port(host), free_port(host),
                                       self.base / f"zk-{n}"))

    @property
    def connect_string(self) -> str:
        """Every member's ``host:port``, comma-separated (a ZooKeeper connect string)."""
        return ",".join(m.address for m in self.members)

    def member(self, myid: int) -> Member:
        """The member whose ``myid`` (1..size) is given.

        Raises:
            ValueError: naming a ``myid`` outside 1..size.
        """
        if not 1 <= myid <= len(self.members):
            raise ValueError(f"no ZooKeeper member with myid {myid} (members 1..{len(self.members)})")
        return self.members[myid - 1]

    def _write_config(self, m: Member) -> Path:
        (m.data_dir / "data").mkdir(parents=True, exist_ok=True)
        (m.data_dir / "data" / "myid").write_text(f"{m.myid}\n")
        cfg = m.data_dir / "zoo.cfg"
        servers = [f"server.{o.myid}={o.host}:{o.quorum_port}:{o.election_port}" for o in self.members]
        cfg.write_text("\n".join([
            f"tickTime={self.tick_time_ms}", "initLimit=40", "syncLimit=20",
            f"dataDir={m.data_dir / 'data'}", f"clientPort={m.client_port}", f"clientPortAddress={m.host}",
            "maxClientCnxns=0", f"minSessionTimeout={2 * self.tick_time_ms}", "maxSessionTimeout=60000",
            "admin.enableServer=false", "4lw.commands.whitelist=*", "preAllocSize=4096", "forceSync=no",
            "quorumListenOnAllIPs=false", *servers, ""]))
        return cfg

    def spawn(self, myid: int) -> Member:
        """Start member ``myid`` (does not wait for it to serve).

        Raises:
            ZooKeeperNotInstalled: java or Debian's zookeeper package is missing.
        """
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperNotInstalled("java not found on PATH (ZooKeeper needs a JRE)")
        m = self.member(myid)
        cfg = self._write_config(m)
        with open(m.data_dir / "zookeeper.log", "ab") as log:
            m.proc = subprocess.Popen(
                [java, f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-Dzookeeper.jmx.log4j.disable=true", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                 "-Dzookeeper.4lw.commands.whitelist=*", "-cp", _classpath(),
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        return m

    def wait_serving(self, myids: list[int] | None = None, timeout_s: float = 60.0) -> None:
        """Wait until each member in ``myids`` (default all) serves as leader or follower.

        Raises:
            RuntimeError: naming the members not serving after ``timeout_s`` s, with a log tail.
        """
        want = [self.member(i) for i in (myids or [m.myid for m in self.members])]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(m.mode() in ("leader", "follower") for m in want):
                return
            time.sleep(0.1)  # polling a readiness condition with a deadline
        bad = [m for m in want if m.mode() not in ("leader", "follower")]
        tail = (bad[0].data_dir / "zookeeper.log").read_text(errors="replace")[-1500:] if bad else ""
        raise RuntimeError(f"ZooKeeper members {[m.myid for m in bad]} not serving after {timeout_s}s: {tail}")

    def start(self, timeout_s: float = 60.0) -> ZooKeeperEnsemble:
        """Start every member and wait until the quorum serves."""
        for m in self.members:
            self.spawn(m.myid)
        self.wait_serving(timeout_s=timeout_s)
        return self

    def leader(self) -> int | None:
        """myid of the member that says it leads, or None."""
        return next((m.myid for m in self.members if m.mode() == "leader"), None)

    def kill(self, myid: int, sig: int = signal.SIGKILL, timeout_s: float = 15.0) -> None:
        """Send ``sig`` to member ``myid``'s process group and reap it (SIGKILL after ``timeout_s``)."""
        m = self.member(myid)
        if not m.alive:
            return
        assert m.proc is not None
        try:
            os.killpg(m.proc.pid, sig)
            m.proc.wait(timeout_s)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            os.killpg(m.proc.pid, signal.SIGKILL)
            m.proc.wait(timeout_s)

    def stop(self) -> None:
        """Stop every member (SIGTERM). Idempotent."""
        for m in self.members:
            self.kill(m.myid, signal.SIGTERM)

    @property
    def pids(self) -> list[int]:
        """The pids of the members started at least once (a stopped member's last pid included)."""
        return [m.proc.pid for m in self.members if m.proc is not None]
