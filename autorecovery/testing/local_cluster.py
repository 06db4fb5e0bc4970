"""A real local BookKeeper cluster as processes: ZooKeeper, bookies and autorecovery daemons (EDGE).

Shared by the pytest fixtures, the benchmarks, ``make demo`` and ``autorecovery local-cluster``. Each
bookie binds its own loopback address (``127.0.0.<10+i>``) and a free port, so tests run several
"hosts" on one machine; bookie ``i`` is in rack ``/rack<1 + i mod R>``. The rack mapping is written in
Pulsar's format to the ``/bookies`` znode, where the placement code's Pulsar resolver reads it.

The cluster's state (pids, ports, data dirs, connect string, the daemons' settings) is kept in
``<dir>/cluster.json`` so that ``local-cluster down`` stops exactly what ``up`` started, by pid, and
nothing else, and so that ``local-cluster start|stop|kill|restart`` from another process brings a bookie
or a daemon back on the same data dir, address and configuration.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autorecovery.testing.zk_ensemble import ZooKeeperEnsemble
from autorecovery.testing.zk_server import ZooKeeperServer, free_port


@dataclass
class ProcInfo:
    """One child process of the cluster."""

    name: str
    pid: int
    host: str
    port: int
    data_dir: str
    log: str
    args: list[str] = field(default_factory=list)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def wait_for_line(path: Path, needle: str, timeout_s: float, pid: int | None = None) -> bool:
    """Wait until ``needle`` appears in the file at ``path`` (a child's log), with a deadline.

    Returns False on timeout or when ``pid`` died first.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if needle in path.read_text(errors="replace"):
                return True
        except OSError:
            pass
        if pid is not None:
            _reap(pid)
            if not _alive(pid):
                return needle in path.read_text(errors="replace") if path.exists() else False
        time.sleep(0.02)  # polling a condition with a deadline
    return False


class LocalCluster:
    """ZooKeeper + N bookies (+ optional autorecovery daemons) on loopback.

    Args:
        base_dir: directory for every data dir, log and the state file.
        bookies: number of bookies. racks: number of racks (round robin).
        ledgers_root: ``zkLedgersRootPath``.
    """

    def __init__(self, base_dir: Path | str, *, bookies: int = 3, racks: int = 1,
                 ledgers_root: str = "/ledgers", ledger_manager: str | None = None, zk_members: int = 1) -> None:
        self.base = Path(base_dir).resolve()
        #: 1 = one standalone ZooKeeper; 3 (or 5) = a :class:`ZooKeeperEnsemble` on 127.0.0.2.. (issue 26)
        self.zk_members = zk_members
        self.zk_ensemble: ZooKeeperEnsemble | None = None
        #: ledger manager factory class written to LAYOUT by :meth:`format` (None = hierarchical)
        self.ledger_manager = ledger_manager
        self.num_bookies = bookies
        self.num_racks = max(1, racks)
        self.ledgers_root = ledgers_root
        self.zk: ZooKeeperServer | None = None
        self.zk_connect = ""
        self.bookies: dict[int, ProcInfo] = {}
        self.daemons: dict[int, ProcInfo] = {}
        self.extra_daemon_args: list[str] = []
        self.bookie_session_timeout_ms = 4000
        #: settings (upstream keys) every daemon started without explicit properties gets (``-D``)
        self.daemon_properties: dict[str, str] = {}
        self._zk_pid: int | None = None
        #: the ensemble's members as the state file recorded them (a handle that did not start it)
        self._zk_members: list[dict[str, object]] = []

    # -- state file --------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.base / "cluster.json"

    def save(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        state = {
            "zk_connect": self.zk_connect,
            "zk_pid": self.zk.proc.pid if self.zk and self.zk.proc else self._zk_pid,
            "ledgers_root": self.ledgers_root,
            "racks": self.num_racks,
            "bookies": {str(k): asdict(v) for k, v in self.bookies.items()},
            "daemons": {str(k): asdict(v) for k, v in self.daemons.items()},
            "daemon_properties": self.daemon_properties,
            # a replicated ZooKeeper (zk_members > 1): each member's myid, address and current pid
            "zk_ensemble": self.zk_ensemble_state(),
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    def zk_ensemble_state(self) -> list[dict[str, object]]:
        """``[{myid, address, pid (0 when down), data_dir}]`` of the ensemble, or ``[]`` (one server);
        loaded from the state file when this handle did not start it."""
        if self.zk_ensemble is None:
            return list(self._zk_members)
        return [{"myid": m.myid, "address": m.address, "pid": m.proc.pid if m.alive and m.proc else 0,
                 "data_dir": str(m.data_dir)} for m in self.zk_ensemble.members]

    @classmethod
    def load(cls, base_dir: Path | str) -> LocalCluster:
        """Rebuild a handle on a cluster started by another process from its state file.

        Raises:
            FileNotFoundError: naming the state file when no cluster was started there.
        """
        base = Path(base_dir).resolve()
        state = json.loads((base / "cluster.json").read_text())
        c = cls(base, bookies=len(state["bookies"]), racks=state["racks"], ledgers_root=state["ledgers_root"])
        c.zk_connect = state["zk_connect"]
        c._zk_pid = state["zk_pid"]
        c.bookies = {int(k): ProcInfo(**v) for k, v in state["bookies"].items()}
        c.daemons = {int(k): ProcInfo(**v) for k, v in state["daemons"].items()}
        c.daemon_properties = dict(state.get("daemon_properties", {}))
        c._zk_members = list(state.get("zk_ensemble") or [])
        return c

    # -- topology ----------------------------------------------------------------------------
    @staticmethod
    def bookie_host(i: int) -> str:
        return f"127.0.0.{10 + i}"

    def rack_of(self, i: int) -> str:
        return f"/rack{1 + i % self.num_racks}"

    def bookie_id(self, i: int) -> str:
        b = self.bookies[i]
        return f"{b.host}:{b.port}"

    def bookie_ids(self) -> list[str]:
        return [self.bookie_id(i) for i in sorted(self.bookies)]

    def rack_mapping(self) -> dict[str, str]:
        """bookie id → rack for every bookie started so far."""
        return {self.bookie_id(i): self.rack_of(i) for i in sorted(self.bookies)}

    def pulsar_rack_json(self) -> bytes:
        """Pulsar's ``/bookies`` rack-info document for the current bookies."""
        group = {bid: {"rack": rack, "hostname": bid.rsplit(":", 1)[0]} for bid, rack in self.rack_mapping().items()}
        return json.dumps({"default": group}, sort_keys=True).encode()

    # -- lifecycle ---------------------------------------------------------------------------
    def start_zookeeper(self) -> str:
        if self.zk_members > 1:
            self.zk_ensemble = ZooKeeperEnsemble(self.base / "zookeeper", self.zk_members).start()
            self.zk_connect = self.zk_ensemble.connect_string
            self.save()
            return self.zk_connect
        self.zk = ZooKeeperServer(self.base / "zookeeper").start()
        self.zk_connect = self.zk.connect_string
        self.save()
        return self.zk_connect

    def _run_async(self, coro):
        import asyncio

        return asyncio.run(coro)

    def format(self) -> None:
        """Format the cluster metadata (``/ledgers`` layout, instance id)."""
        from autorecovery.zk.bridge import ZkClient
        from autorecovery.zk.ledgers import init_cluster
        from autorecovery.zk.paths import Paths

        async def go() -> None:
            zk = await ZkClient(self.zk_connect).start()
            try:
                if self.ledger_manager:
                    await init_cluster(zk, Paths(self.ledgers_root), self.ledger_manager)
                else:
                    await init_cluster(zk, Paths(self.ledgers_root))
            finally:
                await zk.stop()

        self._run_async(go())

    def write_racks(self) -> None:
        """Write the Pulsar-format rack mapping to ``/bookies``."""
        from autorecovery.zk.bridge import NoNodeError, ZkClient

        data = self.pulsar_rack_json()

        async def go() -> None:
            zk = await ZkClient(self.zk_connect).start()
            try:
                try:
                    await zk.set("/bookies", data)
                except NoNodeError:
                    await zk.create("/bookies", data, makepath=True)
            finally:
                await zk.stop()

        self._run_async(go())

    def bookie_args(self, i: int) -> list[str]:
        b = self.bookies[i]
        return [
            sys.executable, "-m", "autorecovery.bookie",
            "--zk", self.zk_connect,
            "--ledgers-root", self.ledgers_root,
            "--host", b.host,
            "--port", str(b.port),
            "--data-dir", b.data_dir,
            # a killed bookie leaves available/ after one session timeout: keep it short locally
            "--zk-session-timeout-ms", str(self.bookie_session_timeout_ms),
            # the local cluster shares one real disk; only a nearly full disk makes bookies read-only
            "--disk-usage-threshold", "0.99", "--disk-usage-lwm-threshold", "0.98",
        ]

    def start_bookie(self, i: int, timeout_s: float = 30.0, extra_args: list[str] | None = None) -> str:
        """Start (or restart, on the same data dir and port) bookie ``i``; returns its bookie id.

        Raises:
            RuntimeError: with the tail of its log when it does not register within ``timeout_s``.
        """
        if i not in self.bookies:
            host = self.bookie_host(i)
            self.bookies[i] = ProcInfo(
                name=f"bookie-{i}", pid=0, host=host, port=free_port(host),
                data_dir=str(self.base / f"bookie-{i}"), log=str(self.base / f"bookie-{i}.log"),
            )
        b = self.bookies[i]
        Path(b.data_dir).mkdir(parents=True, exist_ok=True)
        args = self.bookie_args(i) + list(extra_args or [])
        logf = open(b.log, "ab")  # noqa: SIM115 - held while the process/object lives, closed when it stops
        start_mark = logf.tell()
        proc = subprocess.Popen(args, stdout=logf, stderr=logf, stdin=subprocess.DEVNULL, start_new_session=True)
        logf.close()
        b.pid, b.args = proc.pid, args
        self.save()
        ready = f"BOOKIE_READY {b.host}:{b.port}"
        if not self._wait_new_line(Path(b.log), start_mark, ready, timeout_s, proc.pid):
            tail = Path(b.log).read_text(errors="replace")[-3000:]
            raise RuntimeError(f"bookie {b.host}:{b.port} did not start in {timeout_s}s (pid {proc.pid}): {tail}")
        return f"{b.host}:{b.port}"

    @staticmethod
    def _wait_new_line(path: Path, offset: int, needle: str, timeout_s: float, pid: int) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    if needle.encode() in f.read():
                        return True
            except OSError:
                pass
            _reap(pid)
            if not _alive(pid):
                return False
            time.sleep(0.02)  # polling a condition with a deadline
        return False

    def start_bookies(self) -> list[str]:
        ids = [self.start_bookie(i) for i in range(self.num_bookies)]
        self.write_racks()
        return ids

    def up(self) -> LocalCluster:
        """Start ZooKeeper, format, start every bookie, write racks."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.start_zookeeper()
        self.format()
        self.start_bookies()
        self.save()
        return self

    def signal_proc(self, info: ProcInfo, sig: int, timeout_s: float = 15.0) -> None:
        """Send ``sig`` to a child and wait until it is gone (SIGKILL after ``timeout_s``)."""
        if not info.pid:
            return
        try:
            os.killpg(info.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            _reap(info.pid)
            if not _alive(info.pid):
                return
            time.sleep(0.02)  # waiting for the process to exit, with a deadline
        try:
            os.killpg(info.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        while _alive(info.pid):
            _reap(info.pid)
            time.sleep(0.02)

    def kill_bookie(self, i: int, sig: int = signal.SIGKILL) -> str:
        """Stop bookie ``i`` with ``sig`` (default SIGKILL: a crash) and wait for the process to exit."""
        self.signal_proc(self.bookies[i], sig)
        return self.bookie_id(i)

    def stop_bookie(self, i: int) -> str:
        """Stop bookie ``i`` cleanly (SIGTERM: it unregisters) and wait for it to exit; returns its id."""
        return self.kill_bookie(i, signal.SIGTERM)

    def restart_bookie(self, i: int, timeout_s: float = 30.0) -> str:
        """Stop bookie ``i`` (SIGTERM) if it runs, then start it on the same data dir and address."""
        if self.bookie_alive(i):
            self.stop_bookie(i)
        return self.start_bookie(i, timeout_s)

    def bookie_alive(self, i: int) -> bool:
        info = self.bookies.get(i)
        if info is None or not info.pid:
            return False
        _reap(info.pid)
        return _alive(info.pid)

    # -- autorecovery daemons ------------------------------------------------------------------
    def daemon_args(self, i: int, conf: Path) -> list[str]:
        return [sys.executable, "-m", "autorecovery", "run", "-c", str(conf), *list(self.extra_daemon_args)]

    def daemon_conf(self, i: int) -> Path:
        """Path of daemon ``i``'s generated bk_server.conf."""
        return self.base / f"autorecovery-{i}.conf"

    def start_daemon(self, i: int, properties: dict[str, str] | None = None, timeout_s: float = 30.0) -> ProcInfo:
        """Start an autorecovery daemon next to bookie ``i`` with a bk_server.conf built from
        ``properties`` (upstream keys); waits for its ``AUTORECOVERY_READY`` line.

        ``properties=None`` restarts the daemon on its existing conf file, or, when it has none yet,
        writes one from :attr:`daemon_properties`. The HTTP port from the ready line is kept in the
        state (``daemons[i].port``).

        Raises:
            RuntimeError: with the tail of its log when it is not ready within ``timeout_s``.
        """
        conf = self.daemon_conf(i)
        if properties is not None or not conf.exists():
            props = {
                "zkServers": self.zk_connect,
                "zkLedgersRootPath": self.ledgers_root,
                "bookieId": self.bookie_id(i) if i in self.bookies else f"127.0.0.{10 + i}:0",
                **(self.daemon_properties if properties is None else properties),
            }
            conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log = self.base / f"autorecovery-{i}.log"
        logf = open(log, "ab")  # noqa: SIM115 - held while the process/object lives, closed when it stops
        start_mark = logf.tell()
        args = self.daemon_args(i, conf)
        proc = subprocess.Popen(args, stdout=logf, stderr=logf, stdin=subprocess.DEVNULL, start_new_session=True)
        logf.close()
        info = ProcInfo(name=f"autorecovery-{i}", pid=proc.pid, host="127.0.0.1", port=0, data_dir=str(conf),
                        log=str(log), args=args)
        self.daemons[i] = info
        self.save()
        if not self._wait_new_line(log, start_mark, "AUTORECOVERY_READY", timeout_s, proc.pid):
            raise RuntimeError(f"autorecovery daemon {i} did not start: {log.read_text(errors='replace')[-3000:]}")
        with open(log, "rb") as f:
            f.seek(start_mark)
            m = re.search(rb"AUTORECOVERY_READY \S+ http=[\d.]+:(\d+)", f.read())
        if m:
            info.port = int(m.group(1))
            self.save()
        return info

    def stop_daemon(self, i: int, sig: int = signal.SIGTERM) -> None:
        """Stop daemon ``i`` with ``sig`` (default SIGTERM) and wait for the process to exit."""
        self.signal_proc(self.daemons[i], sig)

    def restart_daemon(self, i: int, timeout_s: float = 30.0) -> ProcInfo:
        """Stop daemon ``i`` (SIGTERM) if it runs, then start it again on the same conf file."""
        if self.daemon_alive(i):
            self.stop_daemon(i)
        return self.start_daemon(i, None, timeout_s)

    def daemon_alive(self, i: int) -> bool:
        info = self.daemons.get(i)
        if info is None or not info.pid:
            return False
        _reap(info.pid)
        return _alive(info.pid)

    def down(self) -> list[str]:
        """Stop every process this cluster started (daemons, bookies, ZooKeeper), by pid. Returns names."""
        stopped = []
        for info in list(self.daemons.values()) + list(self.bookies.values()):
            if info.pid and _alive(info.pid):
                self.signal_proc(info, signal.SIGTERM)
                stopped.append(info.name)
        if self.zk_ensemble is not None:
            self.zk_ensemble.stop()
            stopped.append("zookeeper")
        elif self.zk is not None:
            self.zk.stop()
            stopped.append("zookeeper")
        elif self._zk_pid and _alive(self._zk_pid):
            self.signal_proc(ProcInfo("zookeeper", self._zk_pid, "", 0, "", ""), signal.SIGTERM)
            stopped.append("zookeeper")
        for m in self._zk_members:
            pid = int(str(m.get("pid") or 0))
            if pid and _alive(pid):
                self.signal_proc(ProcInfo(f"zookeeper-{m['myid']}", pid, "", 0, "", ""), signal.SIGTERM)
                stopped.append(f"zookeeper-{m['myid']}")
        return stopped

    def status(self) -> dict[str, bool]:
        """name → alive, for every process in the state."""
        out = {}
        for info in list(self.bookies.values()) + list(self.daemons.values()):
            out[info.name] = bool(info.pid) and _alive(info.pid)
        zk_pid = self.zk.proc.pid if self.zk and self.zk.proc else self._zk_pid
        out["zookeeper"] = bool(zk_pid) and _alive(zk_pid or 0)
        for m in self.zk_ensemble_state():
            pid = int(str(m.get("pid") or 0))
            out[f"zookeeper-{m['myid']}"] = bool(pid) and _alive(pid)
        return out
