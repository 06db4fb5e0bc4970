"""The chaos campaign's stock cluster: Apache BookKeeper 4.17.2 Java bookies, upstream's Java client
writing, upstream's AutoRecoveryMain beside our daemons (EDGE; issue 40; docs/chaos.md).

:class:`StockChaosCluster` is a :class:`ChaosCluster` whose bookies are a :class:`JavaCluster`'s
(``bookies`` stock bookies, DbLedgerStorage and stock bk_server.conf storage keys, in ``racks`` racks,
on the campaign's ZooKeeper ensemble under the root ``/stock``) and whose daemon on each node of
``java_nodes`` is upstream's ``AutoRecoveryMain`` (our daemon runs on every other node: the migration
state). It keeps the :class:`LocalCluster` interface the runner and the injectors use (``bookies`` and
``daemons`` as :class:`ProcInfo` with live pids, ``start_bookie``/``kill_bookie``/``start_daemon``/
``stop_daemon``...), so the fault kinds and the report are the campaign's own.

The disk bookie (the last one, when ``disk_mb`` > 0) has its ledger dir and its journal dir each on a
size-limited tmpfs (:mod:`chaos_disk`), for the ``ledger_dir_full`` and ``journal_dir_full`` kinds.

:class:`StockWriter` runs ``BkTool continuous`` (interop/java/.../ContinuousWriter.java): several
writers, E3/WQ2/AQ2 and E5/WQ3/AQ2, CRC32C and MAC, Pulsar's custom metadata and roll-over, every
acknowledged entry in an ack log. :func:`verify_stock_acks` has upstream's client read every acknowledged
entry back (recovery open, digests and payloads checked); :func:`upstream_under_replicated` asks
upstream's shell ``listunderreplicated``, and :func:`upstream_placement_violations` runs upstream's
Auditor placement check over every closed ledger.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autorecovery.testing.chaos import disk as chaos_disk
from autorecovery.testing.chaos.cluster import BOOKIE_NETNS_KINDS, NETNS_BOOKIE, ChaosCluster
from autorecovery.testing.chaos.netfilter import NetfilterError
from autorecovery.testing.chaos.stock_net import LoopbackLink, LoopbackPartition, NoZkLink
from autorecovery.testing.chaos.schedule import DAEMON_NETNS_KINDS
from autorecovery.testing.local_cluster import ProcInfo
from autorecovery.testing.upstream_cluster import JavaAutoRecovery, JavaCluster
from autorecovery.testing.upstream_java import JavaProcess, UpstreamProcessError, expected_payload, wait_until

#: the znode under which the stock cluster lives (ledgers root ``/stock/ledgers``, racks ``/stock/bookies``)
STOCK_ROOT = "/stock"
#: the network kinds the stock cluster injects on loopback (bookie 0's data port)
LOOPBACK_KINDS = ("partition_bookie_from_workers", "one_way_loss")
#: what AutoRecoveryMain logs when its ZooKeeper session expires: its session-state listener then shuts it down
#: (``shutdown(ExitCode.ZK_EXPIRED)``; 4.17's component stack exits 0 all the same), leaving the restart to its
#: supervisor (systemd, a pod's restart policy)
ZK_EXPIRED_LINE = "Client connection to the Metadata server has expired, so shutting down AutoRecoveryMain"
#: the password of every ledger the stock writer creates
STOCK_PASSWORD = "chaos-pw"
#: upstream's client-side rack-aware placement (our daemons read the same racks from ``/stock/bookies``)
RACKAWARE = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"

#: bk_server.conf keys of every stock bookie: the disk checker every second (a full ledger dir turns the
#: bookie read-only within seconds, a freed one writable again); the rest is JavaBookie's stock set
STOCK_BOOKIE_CONF = {
    "diskCheckInterval": 1000,
    "isForceGCAllowWhenNoSpace": True,
}
#: bk_server.conf keys of the disk bookie, whose ledger and journal dirs are tmpfs of their own: upstream's
#: default thresholds (the others share one real disk, so only a nearly full one may turn them read-only)
DISK_BOOKIE_CONF = {"diskUsageThreshold": 0.95, "diskUsageWarnThreshold": 0.90}
#: the ``ledger_dir_full`` fault fills the disk bookie's ledger dir to this fraction: past
#: ``diskUsageThreshold`` (read-only within ``diskCheckInterval``) with more room left than the write cache
#: it may still flush (16 MB of 512 MiB). Filled to the last byte, a stock 4.17 bookie's entry logger
#: publishes stale locations after the short write and serves entries it acknowledged as EIO (found by
#: the stock hour): a bookie bug no recovery tool can see before it reads them, not a disk that fills.
LEDGER_FILL_FRACTION = 0.96


class StockChaosCluster(ChaosCluster):
    """See the module docstring.

    Args:
        base_dir: the campaign directory (the Java cluster under ``java/``).
        bookies: stock bookies (one daemon each). racks: racks, round robin.
        zk_members: ZooKeeper servers (3 for the ensemble kinds).
        java_nodes: nodes whose daemon is upstream's AutoRecoveryMain.
        disk_mb: size (MiB) of the disk bookie's ledger-dir and journal-dir tmpfs (0: none).
    """

    def __init__(self, base_dir: Path | str, *, bookies: int = 6, racks: int = 3, zk_members: int = 3,
                 java_nodes: Iterable[int] = (5,), disk_mb: int = 0) -> None:
        super().__init__(base_dir, bookies=bookies, racks=racks, zk_members=zk_members)
        self.java_nodes = tuple(java_nodes)
        bad = [n for n in self.java_nodes if not 0 <= n < bookies]
        if bad:
            raise ValueError(f"--java-nodes {bad}: nodes are 0..{bookies - 1}")
        self.disk_mb = disk_mb
        self.java: JavaCluster | None = None
        self.ledgers_root = f"{STOCK_ROOT}/ledgers"
        self.bookie_session_timeout_ms = 4000
        #: node → the AutoRecoveryMain running there (the Java daemons)
        self.autorecoveries: dict[int, JavaAutoRecovery] = {}
        #: node → (metadataServiceUri, extra conf) of its AutoRecoveryMain, kept for restarts
        self._ar_conf: dict[int, dict[str, Any]] = {}
        #: one start of an AutoRecoveryMain at a time (the fault lane and the supervisor both start them)
        self._ar_lock = threading.RLock()
        #: node → size of its AutoRecoveryMain log when its current life started (the log is appended to)
        self._ar_log_from: dict[int, int] = {}
        #: tmpfs mount points made by :meth:`format` (unmounted by :meth:`down`)
        self.mounts: list[Path] = []
        #: the bookie whose ledger and journal dirs are tmpfs, or None
        self.disk_bookie: int | None = None
        self.disk_refused: str | None = None
        #: the loopback drops on bookie 0's data port, or None
        self.lo_link: LoopbackLink | None = None

    # -- the Java cluster -------------------------------------------------------------------------
    def format(self) -> None:
        """Build and start the Java cluster (upstream's ``initnewcluster`` formats ``/stock/ledgers``,
        the bookies start and register, the racks are published); mounts the disk bookie's tmpfs first.

        Raises:
            UpstreamProcessError / UpstreamNotInstalled: from :meth:`JavaCluster.up`.
        """
        hosts = self.zk_connect
        jc = JavaCluster(self.base / "java", hosts, bookies=self.num_bookies, racks=self.num_racks, root=STOCK_ROOT,
                         ledger_storage="db", bookie_conf=STOCK_BOOKIE_CONF, zk_timeout_ms=self.bookie_session_timeout_ms,
                         first_ip="127.0.0.20")
        # upstream separates the servers of a metadata service URI with ';'
        jc.metadata_uri = f"zk+hierarchical://{hosts.replace(',', ';')}{jc.ledgers_root}"
        if self.disk_mb > 0:
            d = self.num_bookies - 1
            for sub in ("ledgers", "journal"):
                why = chaos_disk.mount_tmpfs(jc.workdir / f"bookie-{d}" / sub, self.disk_mb)
                if why is not None:
                    self.disk_refused = f"cannot mount a tmpfs {sub} dir: {why}"
                    break
                self.mounts.append(jc.workdir / f"bookie-{d}" / sub)
            if self.disk_refused is None:
                self.disk_bookie = d
                jc.bookie_conf_of[d] = dict(DISK_BOOKIE_CONF)
        self.java = jc
        jc.up()
        for i in range(self.num_bookies):
            self._sync_bookie(i)
        self.save()

    def _sync_bookie(self, i: int) -> None:
        assert self.java is not None
        b = self.java.bookies[i]
        self.bookies[i] = ProcInfo(name=f"bookie-{i}", pid=b.process.pid or 0, host=b.host, port=b.port,
                                   data_dir=str(b.workdir / "ledgers"), log=str(b.workdir / "bookie.log"))

    def setup_namespaces(self, kinds: tuple[str, ...], zk_servers: list[tuple[str, int]]) -> list[tuple[str, tuple[str, ...]]]:
        """No namespace on the stock cluster: ``partition_bookie_from_workers`` and ``one_way_loss`` hit
        bookie 0's data port with nftables rules on loopback (:mod:`chaos_stock_net`; call after
        :meth:`format`); the kinds loopback cannot offer are refused with the reason (returned as
        ``[(reason, kinds)]``, as :meth:`ChaosCluster.setup_namespaces`)."""
        refused: list[tuple[str, tuple[str, ...]]] = []
        on_lo = tuple(k for k in LOOPBACK_KINDS if k in kinds)
        if on_lo:
            b = self.bookies[NETNS_BOOKIE]
            try:
                link = LoopbackLink(b.host, b.port).up()
            except NetfilterError as exc:
                refused.append((f"nftables on loopback refused: {exc}", on_lo))
            else:
                self.lo_link = link
                self.netns = (NETNS_BOOKIE, LoopbackPartition(link))  # type: ignore[assignment]
                self.bookie_links = (link, NoZkLink())  # type: ignore[assignment]
        asked = tuple(k for k in (*BOOKIE_NETNS_KINDS, *DAEMON_NETNS_KINDS) if k in kinds and k not in LOOPBACK_KINDS)
        if asked:
            refused.append(("the stock cluster runs no Java bookie or daemon in a network namespace: on loopback a "
                            "bookie's ZooKeeper traffic and one worker's traffic cannot be told apart, and tc on lo "
                            "would slow every process", asked))
        return refused

    def teardown_namespaces(self) -> None:
        """Delete the loopback nftables table (idempotent)."""
        if self.lo_link is not None:
            self.lo_link.down()
        self.netns, self.bookie_links = None, None

    def start_bookies(self) -> list[str]:
        """The Java bookies started in :meth:`format`: their ids."""
        return self.bookie_ids()

    def start_bookie(self, i: int, timeout_s: float = 60.0, extra_args: list[str] | None = None) -> str:
        """Start stock bookie ``i`` on its data and address; waits until it registers (writable or read-only).

        Raises:
            RuntimeError: it exited or did not register within ``timeout_s`` (its log's tail).
        """
        assert self.java is not None
        b = self.java.bookies[i]
        b.start(wait=False)
        self._sync_bookie(i)
        self.save()
        try:
            wait_until(lambda: _registered_any(b), timeout_s, f"bookie {b.bookie_id} registering", b.process)
        except UpstreamProcessError as exc:
            raise RuntimeError(str(exc)) from exc
        return b.bookie_id

    def kill_bookie(self, i: int, sig: int = signal.SIGKILL) -> str:
        """Stop stock bookie ``i`` with ``sig`` (SIGKILL: a crash; SIGTERM: a graceful stop) and reap it."""
        assert self.java is not None
        b = self.java.bookies[i]
        if sig == signal.SIGKILL:
            b.process.kill()
        else:
            b.process.stop(30.0)
        return b.bookie_id

    def bookie_alive(self, i: int) -> bool:
        return self.java is not None and i < len(self.java.bookies) and self.java.bookies[i].process.alive

    def ledger_dir(self, i: int) -> Path:
        assert self.java is not None
        return self.java.bookies[i].workdir / "ledgers"

    def journal_dir(self, i: int) -> Path:
        assert self.java is not None
        return self.java.bookies[i].workdir / "journal"

    def bookie_log(self, i: int) -> Path:
        assert self.java is not None
        return self.java.bookies[i].process.log_path

    def operator_reformat(self, i: int) -> str:
        """The operator's fix for a bookie refused for a cookie mismatch after its ledger disk was replaced
        (upstream's admin guide: wipe the bookie's dirs, delete its cookie, start it empty; the auditor then
        has its ledgers re-replicated): ``bookieformat -nonInteractive -force -deleteCookie`` with the
        bookie's own conf. Returns the shell's last output line.

        Raises:
            RuntimeError: the shell failed (its output).
        """
        assert self.java is not None
        b = self.java.bookies[i]
        r = self.java.shell("bookieformat", "-nonInteractive", "-force", "-deleteCookie", conf=b.conf_path, timeout_s=120)
        if r.returncode != 0:
            raise RuntimeError(f"bookieformat of {b.bookie_id} failed (exit {r.returncode}): {(r.stdout + r.stderr)[-1500:]}")
        return (r.stdout.strip().splitlines() or [""])[-1][-200:]

    # -- daemons: ours, or upstream's AutoRecoveryMain on java_nodes ---------------------------------
    def start_daemon(self, i: int, properties: dict[str, str] | None = None, timeout_s: float = 60.0) -> ProcInfo:
        """Our daemon on node ``i`` (``properties`` as the runner gives them, pointed at ``/stock`` by a
        chroot, rack-aware), or upstream's AutoRecoveryMain on a node of ``java_nodes`` (its ZooKeeper:
        ``properties["zkServers"]``, the runner's proxies). ``None`` restarts it on its existing conf.

        Raises:
            RuntimeError: it did not start (its log's tail).
        """
        if i not in self.java_nodes:
            if properties is not None:
                properties = {**properties, "zkServers": properties["zkServers"] + STOCK_ROOT,
                              "zkLedgersRootPath": "/ledgers", "ensemblePlacementPolicy": RACKAWARE}
            return super().start_daemon(i, properties, timeout_s)
        assert self.java is not None
        if properties is not None:
            zk = properties["zkServers"].replace(",", ";")
            self._ar_conf[i] = {"metadataServiceUri": f"zk+hierarchical://{zk}{self.ledgers_root}",
                                "zkTimeout": properties.get("zkTimeout", 3000),
                                "auditorPeriodicCheckInterval": 0, "auditorPeriodicBookieCheckInterval": 0,
                                "rwRereplicateBackoffMs": properties.get("rwRereplicateBackoffMs", 200),
                                "openLedgerRereplicationGracePeriod":
                                    properties.get("openLedgerRereplicationGracePeriod", 1000),
                                "lockReleaseOfFailedLedgerGracePeriod":
                                    properties.get("lockReleaseOfFailedLedgerGracePeriod", 2000),
                                "auditorReplicasCheckInterval": properties.get("auditorReplicasCheckInterval", 0),
                                **{k: properties[k] for k in ("auditorPeriodicPlacementPolicyCheckInterval",
                                                              "repairedPlacementPolicyNotAdheringBookieEnabled")
                                   if k in properties}}
        with self._ar_lock:
            old = self.autorecoveries.get(i)
            if old is not None and old.alive:
                old.kill()
            # a failed start leaves its exited process in the Java cluster's list, the previous one gone already
            self.java.autorecoveries = [a for a in self.java.autorecoveries if a is not old and a.process.alive]
            log = self.java.workdir / f"autorecovery-{len(self.java.autorecoveries)}.log"  # the one it will write
            self._ar_log_from[i] = log.stat().st_size if log.exists() else 0
            try:
                ar = self.java.start_autorecovery(i, lost_bookie_recovery_delay=0, timeout_s=timeout_s,
                                                  **self._ar_conf[i])
            except UpstreamProcessError as exc:
                raise RuntimeError(f"AutoRecoveryMain on node {i} did not start: {exc}") from exc
            self.autorecoveries[i] = ar
            info = ProcInfo(name=f"autorecoverymain-{i}", pid=ar.process.pid or 0, host="127.0.0.1", port=0,
                            data_dir=str(ar.conf_path), log=str(ar.process.log_path))
            self.daemons[i] = info
            self.save()
            return info

    def restart_expired_autorecoveries(self) -> list[int]:
        """Start again, on its conf, every AutoRecoveryMain that exited by itself (not by a signal) after
        logging :data:`ZK_EXPIRED_LINE` in its current life (it shuts itself down when its ZooKeeper session
        expires: upstream's ``AutoRecoveryMain`` session-state listener), as its supervisor would; nodes
        restarted. Any other exit is left for the campaign's readiness check to report (a crash is a
        finding, not something to restart quietly).

        Raises:
            RuntimeError: a restart did not start (its log's tail).
        """
        return [i for i in self.expired_autorecoveries() if self.restart_if_expired(i)]

    def expired_autorecoveries(self) -> list[int]:
        """Nodes whose AutoRecoveryMain exited by itself (not by a signal) after logging
        :data:`ZK_EXPIRED_LINE` in its current life."""
        with self._ar_lock:
            return [i for i, ar in self.autorecoveries.items() if self._expired(i, ar)]

    def restart_if_expired(self, i: int) -> bool:
        """Start node ``i``'s AutoRecoveryMain again if it is (still) :meth:`expired_autorecoveries`'s;
        whether it was started.

        Raises:
            RuntimeError: it did not start (its log's tail).
        """
        with self._ar_lock:
            ar = self.autorecoveries.get(i)
            if ar is None or not self._expired(i, ar):
                return False
            self.start_daemon(i, None)
            return True

    def _expired(self, i: int, ar: JavaAutoRecovery) -> bool:
        proc = ar.process.proc
        rc = proc.poll() if proc is not None else None
        return rc is not None and rc >= 0 and self._logged_expiry(i, ar.process.log_path)

    def _logged_expiry(self, i: int, log: Path) -> bool:
        """Whether node ``i``'s AutoRecoveryMain logged :data:`ZK_EXPIRED_LINE` since its current start."""
        try:
            with open(log, "rb") as f:
                f.seek(self._ar_log_from.get(i, 0))
                return ZK_EXPIRED_LINE.encode() in f.read()
        except OSError:
            return False

    def stop_daemon(self, i: int, sig: int = signal.SIGTERM) -> None:
        ar = self.autorecoveries.get(i)
        if i not in self.java_nodes or ar is None:
            super().stop_daemon(i, sig)
        elif sig == signal.SIGKILL:
            ar.process.kill()
        else:
            ar.process.stop(30.0)

    def daemon_alive(self, i: int) -> bool:
        if i in self.java_nodes:
            ar = self.autorecoveries.get(i)
            return ar is not None and ar.process.alive
        return super().daemon_alive(i)

    def our_daemons(self) -> list[int]:
        """Nodes running our daemon (not AutoRecoveryMain)."""
        return [i for i in sorted(self.daemons) if i not in self.java_nodes]

    def down(self) -> list[str]:
        """Stop our daemons, the Java processes, ZooKeeper; unmount the tmpfs dirs."""
        for i in self.java_nodes:
            self.daemons.pop(i, None)
        bookies, self.bookies = self.bookies, {}
        stopped = super().down()
        self.bookies = bookies
        if self.java is not None:
            self.java.down()
            stopped.append("java cluster")
        for m in self.mounts:
            chaos_disk.unmount(m)
        self.mounts = []
        return stopped


def _registered_any(b: Any) -> bool:
    """True when the bookie's current process owns its writable or read-only registration."""
    for ro in (False, True):
        owner = b._owner_of(ro)
        if owner is not None and owner not in b._stale:
            return True
    return False


def registered_readonly(cluster: StockChaosCluster, i: int) -> bool:
    """True when stock bookie ``i`` is registered read-only (``available/readonly/<id>``) by its process."""
    assert cluster.java is not None
    b = cluster.java.bookies[i]
    owner = b._owner_of(True)
    return owner is not None and owner not in b._stale


def registered_writable(cluster: StockChaosCluster, i: int) -> bool:
    """True when stock bookie ``i`` is registered writable by its process (and not read-only)."""
    assert cluster.java is not None
    b = cluster.java.bookies[i]
    owner = b._owner_of(False)
    return owner is not None and owner not in b._stale and not registered_readonly(cluster, i)


def wipe(directory: Path) -> None:
    """Delete everything inside ``directory`` (a tmpfs mount point stays mounted)."""
    for p in directory.iterdir() if directory.exists() else ():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


# -- the writer ---------------------------------------------------------------------------------------
class StockWriter:
    """``BkTool continuous`` as a child process (see the module docstring).

    Args:
        cluster: the stock cluster (its client conf: rack-aware placement, the ZooKeeper ensemble).
        ack_log, stop_file: the ack log it appends to, the file whose existence stops it.
        writers: writer threads; rate: entries/s per writer; roll_entries: entries before a roll-over.
    """

    def __init__(self, cluster: StockChaosCluster, ack_log: Path, stop_file: Path, *, writers: int = 4,
                 rate: float = 20.0, entry_size: int = 512, roll_entries: int = 1000) -> None:
        assert cluster.java is not None
        self.java, self.ack_log, self.stop_file = cluster.java, Path(ack_log), Path(stop_file)
        self.entry_size = entry_size
        log = self.java.workdir / "runs" / "continuous-writer.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        args = ["--ack-log", str(self.ack_log), "--stop-file", str(self.stop_file), "--writers", str(writers),
                "--rate", str(rate), "--entry-size", str(entry_size), "--roll-entries", str(roll_entries),
                "--password", STOCK_PASSWORD]
        cmd = self.java._tool_cmd("continuous", args, log)
        # BkTool continuous takes --conf among its own options (the tool puts it after the command)
        self.process = JavaProcess(cmd, "continuous writer", log.with_suffix(".out"), log.with_suffix(".err"), log)

    def start(self) -> StockWriter:
        self.stop_file.unlink(missing_ok=True)
        self.process.start()
        return self

    def stop(self, timeout_s: float = 180.0) -> dict[str, Any]:
        """Create the stop file, wait (``timeout_s`` bound) for the writer to close its ledgers and exit;
        returns its JSON summary (``{"ok": False, "error": ...}`` when it gave none: it is killed then)."""
        self.stop_file.touch()
        try:
            wait_until(lambda: not self.process.alive, timeout_s, "the continuous writer to stop")
        except UpstreamProcessError as exc:
            self.process.kill()
            return {"ok": False, "error": str(exc)[-500:]}
        lines = [ln for ln in self.process.out_path.read_text(errors="replace").splitlines() if ln.startswith("{")]
        if not lines:
            return {"ok": False, "error": f"no result: {self.process.describe_failure()[-1500:]}"}
        out: dict[str, Any] = json.loads(lines[-1])
        return out

    def kill(self) -> None:
        self.process.kill()


@dataclass
class StockAcks:
    """The ack log read: ledger → digest type and acknowledged entry ids; lines whose CRC32 is not the
    payload's (the writer logged a wrong hash)."""

    ledgers: dict[int, tuple[str, set[int]]] = field(default_factory=dict)
    bad_hashes: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(len(e) for _, e in self.ledgers.values())


_ACK = re.compile(r"^(\d+) (\d+) ([0-9a-f]{8}) (\w+)$")


def read_stock_acks(path: Path, entry_size: int) -> StockAcks:
    """Parse the writer's ack log (a torn last line, from a writer killed mid-write, is ignored); each
    line's CRC32 is checked against :func:`expected_payload`."""
    out = StockAcks()
    text = path.read_text(errors="replace") if path.exists() else ""
    for line in text.splitlines():
        m = _ACK.match(line)
        if not m:
            continue
        lid, eid, crc, digest = int(m[1]), int(m[2]), int(m[3], 16), m[4]
        if zlib.crc32(expected_payload(lid, eid, entry_size)) != crc:
            out.bad_hashes.append(line)
        out.ledgers.setdefault(lid, (digest, set()))[1].add(eid)
    return out


@dataclass
class StockVerdict:
    """What upstream's reader found: entries read back, lost ones (a sample), content/digest failures."""

    read_back: int = 0
    lost: int = 0
    lost_sample: list[str] = field(default_factory=list)
    bad_entries: int = 0


def verify_stock_acks(java: JavaCluster, acks: StockAcks, timeout_s: float = 900.0) -> StockVerdict:
    """Upstream's client opens every acknowledged ledger with recovery (one reader run per digest type)
    and reads every entry, each checked by its digest and against its payload; an acknowledged entry past
    the ledger's last entry, or in a ledger that fails to read, is lost."""
    v = StockVerdict()
    by_digest: dict[str, list[int]] = {}
    for lid, (digest, _) in acks.ledgers.items():
        by_digest.setdefault(digest, []).append(lid)
    for digest, ids in sorted(by_digest.items()):
        r = java.reader(sorted(ids), recover=True, digest=digest, password=STOCK_PASSWORD, timeout_s=timeout_s)
        seen = {int(lg["ledger"]): lg for lg in r.get("ledgers", [])}
        if not seen and not r.get("ok"):
            v.lost_sample.append(f"reader ({digest}) failed: {str(r.get('error'))[:300]}")
        for lid in ids:
            entries = acks.ledgers[lid][1]
            lg = seen.get(lid)
            if lg is None or lg.get("errors"):
                v.lost += len(entries)
                why = "not read" if lg is None else "; ".join(map(str, lg["errors"]))[:200]
                if len(v.lost_sample) < 10:
                    v.lost_sample.append(f"ledger {lid}: {len(entries)} acknowledged entries unread: {why}")
                continue
            last = lg.get("last_entry_id")
            last = -1 if last is None else int(last)
            gone = sorted(e for e in entries if e > last)
            v.lost += len(gone)
            if gone and len(v.lost_sample) < 10:
                v.lost_sample.append(f"ledger {lid}: acknowledged entries {gone[:5]} past its last entry {last}")
            v.bad_entries += int(lg.get("bad_entries") or 0)
            v.read_back += len(entries) - len(gone)
    return v


def upstream_under_replicated(java: JavaCluster) -> list[str]:
    """Upstream's shell ``listunderreplicated``: [] when it reports no under-replicated ledger, else its
    result lines (or the failure)."""
    r = java.shell("listunderreplicated", timeout_s=120)
    if r.returncode == 0 and "Under replicated ledger count: 0" in r.stdout:
        return []
    lines = [ln for ln in r.stdout.splitlines() if "INFO" in ln or "ledger" in ln.lower()]
    return [f"listunderreplicated exit {r.returncode}: " + " | ".join(lines[-5:])[:600] or r.stderr[-300:]]


def upstream_placement_violations(java: JavaCluster) -> list[str]:
    """Upstream's placement check over every ledger (:meth:`JavaCluster.placement_check`): [] when no
    closed ledger has a segment that FAILs the rack-aware policy, else one line per failing segment
    (``ledger L segment F ensemble [...]``) or per ledger it could not read."""
    r = java.placement_check()
    out = [f"ledger {f['ledger']} segment {f['first_entry']} ensemble {f['ensemble']}" for f in r.get("fail", [])]
    return out + [str(e) for e in r.get("errors", [])]
