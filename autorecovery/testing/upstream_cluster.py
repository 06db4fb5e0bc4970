"""A stock Apache BookKeeper 4.17.2 cluster as processes, for tests that heal or race a Java cluster.

:class:`JavaCluster` formats a metadata root on an existing ZooKeeper with upstream's own shell
(``BookieShell initnewcluster``), starts N upstream bookies (``org.apache.bookkeeper.server.Main``) on
distinct loopback addresses (``127.0.0.2``, ``127.0.0.3``...: upstream's rack resolvers map by host),
puts them in racks round robin (``/rack-a``, ``/rack-b``...) and publishes the racks twice: as a rack
script for upstream's ``ScriptBasedMapping`` (Java bookies, client, shell, AutoRecoveryMain) and as
Pulsar's rack document at ``<root>/bookies`` for our daemon. It also runs upstream's shell, our Java
client tool (write/read/ensembles, :mod:`interop/java`) and ``AutoRecoveryMain``.

Layout on ZooKeeper: everything lives under ``root`` (``/t<hex>`` by default): the ledgers root
``<root>/ledgers`` (Java side: ``metadataServiceUri=zk+hierarchical://HOST:PORT<root>/ledgers``) and the
rack document ``<root>/bookies``. Our daemon sees the same cluster with ``zkServers=HOST:PORT<root>``
(a chroot) and ``zkLedgersRootPath=/ledgers``: :meth:`JavaCluster.daemon_properties`.

Every wait polls a condition with a deadline. :meth:`JavaCluster.down` kills every process it started
(also run at interpreter exit).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import re
import subprocess
import uuid
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from autorecovery.testing.upstream_java import (
    AUTORECOVERY_CLASS,
    LEDGER_STORAGE,
    SHELL_CLASS,
    TOOL_CLASS,
    JavaBookie,
    JavaProcess,
    ProcessHandle,
    UpstreamProcessError,
    java_cmd,
    tail,
    upstream_home,
    wait_until,
    write_properties,
)
from autorecovery.testing.zk_server import free_port

__all__ = ["TOOL_CLASS", "JavaAutoRecovery", "JavaBookie", "JavaCluster", "JavaWriter",
           "UpstreamProcessError", "java_cmd", "upstream_home"]

_VOTE_ID = re.compile(r'bookieId:\s*"([^"]+)"')


class JavaAutoRecovery(ProcessHandle):
    """One upstream ``AutoRecoveryMain`` (Auditor election + ReplicationWorker) process.

    Attributes:
        node_id: the id it votes with in the Auditor election (the bookie id of the node it runs on).
        conf_path: its bk_server.conf.
        process: the :class:`JavaProcess`.
    """

    def __init__(self, node_id: str, conf_path: Path, process: JavaProcess) -> None:
        self.node_id, self.conf_path, self.process = node_id, conf_path, process


class JavaWriter(ProcessHandle):
    """A writer left running with open ledgers (``write --open K``).

    Attributes:
        result: its JSON result (see :meth:`JavaCluster.writer`).
        process: the :class:`JavaProcess` (SIGSTOP it to freeze the open ledgers' writer).
    """

    def __init__(self, result: dict[str, Any], process: JavaProcess) -> None:
        self.result, self.process = result, process


def _with_int_segments(result: dict[str, Any]) -> dict[str, Any]:
    """JSON objects have string keys: make each ledger's ``ensembles`` {first entry id (int): [bookie ids]}."""
    for ledger in result.get("ledgers", []):
        if isinstance(ledger.get("ensembles"), dict):
            ledger["ensembles"] = {int(k): v for k, v in ledger["ensembles"].items()}
    return result


_live: weakref.WeakSet[JavaCluster] = weakref.WeakSet()


@atexit.register
def _down_all() -> None:
    for cluster in list(_live):
        cluster.down()


class JavaCluster:
    """N upstream bookies in R racks on a fresh metadata root of an existing ZooKeeper.

    Args:
        workdir: directory for confs, data and logs (one subdirectory per bookie).
        zk_connect_string: ``HOST:PORT`` of the ZooKeeper (no chroot).
        bookies: how many bookies :meth:`up` starts. racks: how many racks (round robin).
        root: the znode holding everything (``/t<hex>`` by default); must not exist yet.
        ledger_storage: ``"db"`` (DbLedgerStorage, RocksDB index) or ``"sorted"`` (SortedLedgerStorage).
        bookie_conf: extra bk_server.conf keys for every bookie.
        zk_timeout_ms: ``zkTimeout`` of every Java process (how soon a killed bookie disappears).
        first_ip: the first bookie's loopback address; bookie ``i`` gets the ``i``-th next one.
        heap: ``-Xmx`` of every JVM it starts (``"256m"``).
        jvm_opts: extra JVM flags of its bookies and AutoRecoveryMains (a benchmark's ``-XX:...``).
        production_jvm: its bookies, AutoRecoveryMains and client tools run with upstream's own JVM flags
            (G1, C1+C2: :func:`java_cmd` ``production``) instead of the fast-start test flags.
    """

    def __init__(self, workdir: Path | str, zk_connect_string: str, *, bookies: int = 4, racks: int = 2,
                 root: str | None = None, ledger_storage: str = "db", bookie_conf: Mapping[str, object] | None = None,
                 zk_timeout_ms: int = 5000, first_ip: str = "127.0.0.2", heap: str = "256m",
                 jvm_opts: Iterable[str] = (), production_jvm: bool = False) -> None:
        if "/" in zk_connect_string:
            raise ValueError(f"zk_connect_string must be HOST:PORT without a chroot (use root=): {zk_connect_string}")
        if bookies < 0 or racks < 1 or racks > 26:
            raise ValueError(f"need bookies >= 0 and 1 <= racks <= 26, got bookies={bookies} racks={racks}")
        root = root or f"/t{uuid.uuid4().hex[:12]}"
        if not root.startswith("/") or root.endswith("/"):
            raise ValueError(f"root must be an absolute znode path without a trailing slash: {root!r}")
        upstream_home()  # fail early, naming `make upstream`
        self.workdir = Path(workdir).resolve()
        self.zk_hosts, self.root, self.num_bookies, self.num_racks = zk_connect_string, root, bookies, racks
        self.ledgers_root = f"{root}/ledgers"
        self.metadata_uri = f"zk+hierarchical://{zk_connect_string}{self.ledgers_root}"
        self.ledger_storage, self.bookie_conf = ledger_storage, dict(bookie_conf or {})
        #: bookie index → bk_server.conf keys over :attr:`bookie_conf` for that bookie only (set before
        #: :meth:`up`; e.g. the chaos campaign's disk bookie, on its own small tmpfs)
        self.bookie_conf_of: dict[int, dict[str, object]] = {}
        self.zk_timeout_ms, self.heap, self.jvm_opts = zk_timeout_ms, heap, list(jvm_opts)
        self.production_jvm = production_jvm
        octets = [int(x) for x in first_ip.split(".") if x.isdigit() and int(x) < 256]
        if len(octets) != 4 or octets[0] != 127:
            raise ValueError(f"first_ip must be a 127.x.y.z loopback address: {first_ip!r}")
        if ledger_storage not in LEDGER_STORAGE:
            raise ValueError(f"ledger_storage must be one of {sorted(LEDGER_STORAGE)}, not {ledger_storage!r}")
        self._first_ip = octets
        self.bookies: list[JavaBookie] = []
        self.autorecoveries: list[JavaAutoRecovery] = []
        self.writers: list[JavaWriter] = []
        self._runs = 0
        self.kz: KazooClient | None = None
        self.conf_path = self.workdir / "client.conf"
        self.rack_script = self.workdir / "racks.sh"

    # -- topology --------------------------------------------------------------------------------
    def host_of(self, i: int) -> str:
        """Loopback address of bookie ``i``."""
        a, b, c, d = self._first_ip
        n = (b << 16 | c << 8 | d) + i
        return f"{a}.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"

    def rack_of(self, i: int) -> str:
        """Rack of bookie ``i``: ``/rack-a``, ``/rack-b``... round robin."""
        return f"/rack-{chr(ord('a') + i % self.num_racks)}"

    @property
    def bookie_ids(self) -> list[str]:
        return [b.bookie_id for b in self.bookies]

    def rack_mapping(self) -> dict[str, str]:
        """bookie id → rack, for every bookie added so far."""
        return {b.bookie_id: self.rack_of(i) for i, b in enumerate(self.bookies)}

    def placement_properties(self) -> dict[str, str]:
        """Client-side keys every Java process gets: rack-aware placement with the rack script."""
        return {
            "ensemblePlacementPolicy": "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy",
            "reppDnsResolverClass": "org.apache.bookkeeper.net.ScriptBasedMapping",
            "networkTopologyScriptFileName": str(self.rack_script),
        }

    def daemon_properties(self) -> dict[str, str]:
        """bk_server.conf keys that point our daemon (or shell) at this cluster (racks from ``<root>/bookies``)."""
        return {"zkServers": f"{self.zk_hosts}{self.root}", "zkLedgersRootPath": "/ledgers"}

    def _write_racks(self) -> None:
        # ScriptBasedMapping passes IP addresses (sometimes host names) and reads one rack per line
        cases = "".join(f'    {b.host}|{b.host}:*) echo "{self.rack_of(i)}" ;;\n' for i, b in enumerate(self.bookies))
        self.rack_script.write_text('#!/bin/sh\n# generated by JavaCluster: bookie address -> rack\nfor host in "$@"; do\n'
                                    f'  case "$host" in\n{cases}    *) echo /default-rack ;;\n  esac\ndone\n')
        self.rack_script.chmod(0o755)
        group = {bid: {"rack": rack, "hostname": bid.rsplit(":", 1)[0]} for bid, rack in self.rack_mapping().items()}
        assert self.kz is not None
        data = json.dumps({"default": group}, sort_keys=True).encode()
        path = f"{self.root}/bookies"
        if self.kz.exists(path):
            self.kz.set(path, data)
        else:
            self.kz.create(path, data, makepath=True)

    # -- lifecycle -------------------------------------------------------------------------------
    def up(self, timeout_s: float = 90.0) -> JavaCluster:
        """Format ``<root>/ledgers`` with upstream's shell, start the bookies (in parallel) and publish racks.

        Raises:
            UpstreamProcessError: the format failed or a bookie did not register in ``timeout_s`` s (every
                process started so far is killed first).
            ValueError: ``root`` already exists on the ZooKeeper, or the cluster is already up.
        """
        if self.kz is not None:
            raise ValueError(f"cluster {self.root} is already up")
        _live.add(self)
        try:
            return self._up(timeout_s)
        except BaseException:
            self.down()
            raise

    def _up(self, timeout_s: float) -> JavaCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kz = KazooClient(self.zk_hosts, timeout=10.0)
        self.kz.start(15)
        if self.kz.exists(self.root):
            raise ValueError(f"{self.root} already exists on {self.zk_hosts}: pick a fresh root")
        self.kz.ensure_path(self.root)
        for i in range(self.num_bookies):
            self._new_bookie(i)
        self._write_racks()
        self._write_client_conf()
        fmt = self.shell("initnewcluster")
        if fmt.returncode != 0 or not self.kz.exists(f"{self.ledgers_root}/INSTANCEID"):
            raise UpstreamProcessError(f"initnewcluster failed (exit {fmt.returncode}):\n{fmt.stdout[-2000:]}"
                                       f"\n{fmt.stderr[-1000:]}")
        for b in self.bookies:
            b.start(wait=False)
        for b in self.bookies:
            b.wait_registered(timeout_s)
        return self

    def _new_bookie(self, i: int) -> JavaBookie:
        host = self.host_of(i)
        conf = {**self.placement_properties(), **self.bookie_conf, **self.bookie_conf_of.get(i, {})}
        assert self.kz is not None
        b = JavaBookie(self.workdir / f"bookie-{i}", host, free_port(host), self.metadata_uri, self.kz, conf=conf,
                       zk_timeout_ms=self.zk_timeout_ms, heap=self.heap, ledger_storage=self.ledger_storage,
                       jvm_opts=self.jvm_opts, production_jvm=self.production_jvm)
        self.bookies.append(b)
        return b

    def add_bookie(self, timeout_s: float = 60.0) -> JavaBookie:
        """Start one more bookie (next address, next rack round robin) and republish the racks."""
        b = self._new_bookie(len(self.bookies))
        self._write_racks()
        return b.start(True, timeout_s)

    def _write_client_conf(self) -> None:
        write_properties(self.conf_path, {"metadataServiceUri": self.metadata_uri, "zkTimeout": self.zk_timeout_ms,
                                          **self.placement_properties()})

    def down(self) -> None:
        """Kill (SIGKILL) every process this cluster started and close its ZooKeeper client. Idempotent."""
        for p in [*self.writers, *self.autorecoveries, *self.bookies]:
            with contextlib.suppress(OSError, subprocess.SubprocessError):  # gone already, or slow to reap: keep killing the others
                p.kill()
        if self.kz is not None:
            self.kz.stop()
            self.kz.close()
            self.kz = None
        _live.discard(self)

    def __enter__(self) -> JavaCluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- tools -----------------------------------------------------------------------------------
    def _log(self, kind: str) -> Path:
        self._runs += 1
        return self.workdir / "runs" / f"{self._runs:03d}-{kind}.log"

    def shell(self, *args: str, timeout_s: float = 60.0, conf: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run upstream's ``BookieShell -conf <client conf> ARGS...``; its results are on stdout
        (upstream's CLI log layout, ``HH:mm:ss,SSS INFO message``). Never raises on a non-zero exit."""
        log = self._log("shell-" + (args[0] if args else ""))
        cmd = java_cmd(SHELL_CLASS, ["-conf", str(conf or self.conf_path), *args], self.heap, log_file=log,
                       console="stdout")
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)

    def _tool_cmd(self, command: str, args: Iterable[str], log: Path) -> list[str]:
        return java_cmd(TOOL_CLASS, [command, "--conf", str(self.conf_path), *args], self.heap, log_file=log,
                        production=self.production_jvm)

    def _run_tool(self, command: str, args: list[str], timeout_s: float, check: bool) -> dict[str, Any]:
        log = self._log(command)
        err = log.with_suffix(".err")
        with open(err, "wb") as errf:
            done = subprocess.run(self._tool_cmd(command, args, log), stdout=subprocess.PIPE, stderr=errf,
                                  text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            raise UpstreamProcessError(f"BkTool {command} gave no result (exit {done.returncode}): "
                                       f"{tail(err, 1500)}\nlog {log}:\n{tail(log, 2000)}")
        result = _with_int_segments(json.loads(lines[-1]))
        if check and not result.get("ok"):
            raise UpstreamProcessError(f"BkTool {command} failed: {lines[-1][:3000]}\nlog {log}")
        return result

    def writer(self, *, ledgers: int = 5, entries: int = 100, entry_size: int = 1024, ensemble: int = 3, wq: int = 2,
               aq: int = 2, digest: str = "CRC32C", password: str = "", window: int | None = None,
               timeout_s: float = 300.0, check: bool = True) -> dict[str, Any]:
        """Write ``ledgers`` ledgers of ``entries`` entries of ``entry_size`` bytes with upstream's client
        (payload: :func:`expected_payload`) and close them.

        Returns:
            ``{"ok", "error", "seconds", "bytes", "ledgers": [{"ledger", "closed", "last_acked", "lac",
            "ensembles": {first entry id: [bookie ids]}}]}``.

        Raises:
            UpstreamProcessError: no result, or (with ``check``) a failed add or close.
        """
        return self._run_tool("write", self._write_args(ledgers, entries, entry_size, ensemble, wq, aq, digest,
                                                        password, window), timeout_s, check)

    @staticmethod
    def _write_args(ledgers: int, entries: int, entry_size: int, ensemble: int, wq: int, aq: int, digest: str,
                    password: str, window: int | None) -> list[str]:
        args = ["--ledgers", str(ledgers), "--entries", str(entries), "--entry-size", str(entry_size),
                "--ensemble", str(ensemble), "--wq", str(wq), "--aq", str(aq), "--digest", digest,
                "--password", password]
        return args + (["--window", str(window)] if window else [])

    def open_writer(self, *, open_ledgers: int = 1, ledgers: int = 1, entries: int = 100, entry_size: int = 1024,
                    ensemble: int = 3, wq: int = 2, aq: int = 2, digest: str = "CRC32C", password: str = "",
                    window: int | None = None, timeout_s: float = 120.0) -> JavaWriter:
        """Like :meth:`writer`, but the last ``open_ledgers`` ledgers stay open and the writer keeps
        running (sleeping) until killed: returns once its JSON result is out.

        Bookies learn the last add confirmed only as it is piggybacked on later adds: with every add in
        flight at once (the default window), a no-recovery reader sees LAC -1 on the open ledgers;
        ``window=1`` makes it trail the writer by exactly one entry. A recovery open reads them all.

        Raises:
            UpstreamProcessError: it exited or gave no result within ``timeout_s`` s, or a write failed.
        """
        log = self._log("write-open")
        args = self._write_args(ledgers, entries, entry_size, ensemble, wq, aq, digest, password, window)
        proc = JavaProcess(self._tool_cmd("write", [*args, "--open", str(open_ledgers)], log), "writer",
                           log.with_suffix(".out"), log.with_suffix(".err"), log)
        proc.start()
        self.writers.append(w := JavaWriter({}, proc))
        line = _first_line(proc.out_path, proc, timeout_s)
        w.result = _with_int_segments(json.loads(line))
        if not w.result.get("ok"):
            raise UpstreamProcessError(f"open writer failed: {line[:3000]}")
        return w

    def reader(self, ledger_ids: Iterable[int] | None = None, *, recover: bool = False, digest: str = "CRC32C",
               password: str = "", timeout_s: float = 300.0, check: bool = False) -> dict[str, Any]:
        """Read every entry of the ledgers (all ledgers when None) with upstream's client and check content.

        ``recover`` opens with recovery (fencing, closing open ledgers); otherwise ``openLedgerNoRecovery``
        (an open ledger is read up to its last add confirmed).

        Returns:
            ``{"ok", "seconds", "bytes", "ledgers": [{"ledger", "closed", "lac", "last_entry_id" (None while
            open), "length", "entries_read", "bad_entries", "bad_entry_ids" (first 10), "errors": [str]}]}``.
        """
        args = ["--digest", digest, "--password", password, *(["--recover"] if recover else [])]
        args += ["--all"] if ledger_ids is None else [str(i) for i in ledger_ids]
        return self._run_tool("read", args, timeout_s, check)

    def ensembles(self, ledger_ids: Iterable[int] | None = None, *, timeout_s: float = 60.0) -> dict[str, Any]:
        """Each ledger's metadata as upstream's client reads it: ``{"ledgers": [{"ledger", "closed",
        "last_entry_id", "length", "ensemble_size", "write_quorum", "ack_quorum", "digest",
        "ensembles": {first entry id: [bookie ids]}} or {"ledger", "error"}]}``."""
        return self._run_tool("ensembles", ["--all"] if ledger_ids is None else [str(i) for i in ledger_ids],
                              timeout_s, False)

    def placement_check(self, ledger_ids: Iterable[int] | None = None, *, timeout_s: float = 120.0) -> dict[str, Any]:
        """Upstream's Auditor placement check run by upstream's client with this cluster's placement
        policy and racks (``AuditorPlacementPolicyCheckTask``: every segment of every closed ledger through
        ``BookKeeperAdmin.isEnsembleAdheringToPlacementPolicy``; open ledgers skipped, as upstream skips
        them): ``{"ok", "closed", "open", "soft", "fail": [{"ledger", "first_entry", "ensemble"}],
        "errors": [str]}``; ``ok`` when no segment FAILs and every ledger was read.

        Raises:
            UpstreamProcessError: the tool gave no result.
        """
        return self._run_tool("placement", ["--all"] if ledger_ids is None else [str(i) for i in ledger_ids],
                              timeout_s, False)

    # -- AutoRecoveryMain ------------------------------------------------------------------------
    def start_autorecovery(self, node: int = 0, *, lost_bookie_recovery_delay: int = 0, wait: bool = True,
                           timeout_s: float = 60.0, **conf: object) -> JavaAutoRecovery:
        """Start upstream's ``AutoRecoveryMain --conf`` as the AutoRecovery of bookie ``node``'s host
        (Auditor election + ReplicationWorker); with ``wait``, return once its election vote is in.

        Args:
            lost_bookie_recovery_delay: ``lostBookieRecoveryDelay`` (s).
            **conf: more bk_server.conf keys (``auditorPeriodicCheckInterval=0``...).
        """
        b = self.bookies[node]
        props = {
            "metadataServiceUri": self.metadata_uri,
            "zkTimeout": self.zk_timeout_ms,
            "advertisedAddress": b.host,
            "bookiePort": b.port,
            "allowLoopback": True,
            "useHostNameAsBookieID": False,
            "httpServerEnabled": False,
            "lostBookieRecoveryDelay": lost_bookie_recovery_delay,
            **self.placement_properties(),
            **conf,
        }
        n = len(self.autorecoveries)
        conf_path = write_properties(self.workdir / f"autorecovery-{n}.conf", props)
        log = self.workdir / f"autorecovery-{n}.log"
        proc = JavaProcess(java_cmd(AUTORECOVERY_CLASS, ["--conf", str(conf_path)], self.heap, log_file=log,
                                    jvm_opts=self.jvm_opts, production=self.production_jvm),
                           f"autorecovery {b.bookie_id}", log.with_suffix(".out"), log.with_suffix(".err"), log)
        ar = JavaAutoRecovery(b.bookie_id, conf_path, proc)
        self.autorecoveries.append(ar)
        proc.start()
        if wait:
            wait_until(lambda: b.bookie_id in self.election_votes(), timeout_s,
                       f"AutoRecoveryMain {b.bookie_id} voting", proc)
        return ar

    def election_votes(self) -> list[str]:
        """Voter ids of the Auditor election in sequence order (the first one is the Auditor)."""
        assert self.kz is not None
        path = f"{self.ledgers_root}/underreplication/auditorelection"
        if not self.kz.exists(path):
            return []
        out = []
        for child in sorted((c for c in self.kz.get_children(path) if c.startswith("V_")), key=lambda c: c[2:]):
            try:
                data, _ = self.kz.get(f"{path}/{child}")
            except NoNodeError:  # the vote vanished between the listing and the read
                continue
            m = _VOTE_ID.search(data.decode(errors="replace"))
            if m:
                out.append(m.group(1))
        return out

    def auditor(self) -> str | None:
        """The bookie id of the current Auditor (the first vote), or None."""
        votes = self.election_votes()
        return votes[0] if votes else None


def _first_line(path: Path, proc: JavaProcess, timeout_s: float) -> str:
    """The first complete line a child writes to the file at ``path``, waiting with a deadline."""
    found: list[str] = []

    def have_line() -> bool:
        text = path.read_text(errors="replace") if path.exists() else ""
        if "\n" in text:
            found.append(text.split("\n", 1)[0])
            return True
        return False

    wait_until(have_line, timeout_s, f"{proc.name} result line", proc)
    return found[0]

