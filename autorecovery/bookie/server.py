"""One reference bookie: storage + gRPC service + cookie + ZooKeeper registration + disk monitor (EDGE).

Start order (upstream ``BookieImpl``/``BookieServer``): bind the port (the bookie id is ``host:port``),
connect to ZooKeeper, require a formatted cluster (``<root>/INSTANCEID``), validate or stamp the cookie,
open the store, start serving, register as writable or read-only, then re-check the disk every
``disk_check_interval_s`` and move between ``available/`` and ``available/readonly/``.
Stop order: deregister (so nobody picks this bookie any more), stop the gRPC server with a grace period
for in-flight requests, close the store, close the ZooKeeper session.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil
import structlog

from autorecovery.bookie.cookie import check_and_stamp_cookie
from autorecovery.bookie.admission import AdmissionLimits
from autorecovery.bookie.disk import DiskProbe, DiskThresholds
from autorecovery.bookie.peers import RegisteredPeers
from autorecovery.bookie.service import BookieService, add_service
from autorecovery.bookie.grpc_server import build_grpc_server
from autorecovery.bookie.limits import DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_ENTRY_SIZE, GRPC_HEADROOM
from autorecovery.bookie.storage import BookieStorage
from autorecovery.config.settings import ZkSecurity
from autorecovery.errors import ZooKeeperError, is_retriable
from autorecovery.rpc.bookie_client import GrpcBookieClient
from autorecovery.rpc.convert import decode_service_properties, encode_service_info
from autorecovery.config.tls import BookieTls, ServerTls
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.paths import Paths
from autorecovery.zk.registration import BookieRegistration

log = structlog.get_logger("autorecovery.bookie")

#: Registration-data properties (ours) that let a restarted bookie recognise its dead predecessor.
PROP_PID = "autorecovery.pid"
PROP_BOOT_ID = "autorecovery.bootId"
PROP_PID_NS = "autorecovery.pidNamespace"
_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str:
    """This machine's boot id (Linux), or "" when unknown."""
    try:
        with open(_BOOT_ID_FILE) as f:
            return f.read().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """This process' pid namespace (``pid:[4026531836]``), or "" when unknown."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def registration_properties() -> dict[str, str]:
    """Properties this process puts into its registration znode's ``BookieServiceInfoFormat``."""
    return {PROP_PID: str(os.getpid()), PROP_BOOT_ID: boot_id(), PROP_PID_NS: pid_namespace()}


def written_by_dead_process(data: bytes) -> bool:
    """True only when a registration znode's data was written on this machine, during this boot, in
    this pid namespace, by a process that no longer runs (or is a zombie). Anything else (another
    machine or container, no properties, a live pid, a reused pid) is False, and the caller waits for
    the session to expire instead.
    """
    props = decode_service_properties(data)
    boot, ns = boot_id(), pid_namespace()
    if not boot or not ns or props.get(PROP_BOOT_ID) != boot or props.get(PROP_PID_NS) != ns:
        return False
    try:
        pid = int(props.get(PROP_PID, ""))
    except ValueError:
        return False
    if pid == os.getpid() or pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


@dataclass(frozen=True)
class BookieConfig:
    """Settings of one bookie (see ``autorecovery bookie --help`` for the matching flags).

    Attributes:
        zk: ZooKeeper connect string, optionally with a chroot (``127.0.0.1:2181/chroot``).
        data_dir: data directory (cookie in ``current/VERSION``, database in ``current/``).
        ledgers_root: ``zkLedgersRootPath`` (default ``/ledgers``).
        host: address to bind and to advertise; the bookie id is ``host:port``.
        port: gRPC port; 0 picks a free one (the id then changes on every start, so the cookie check
            only makes sense with a fixed port).
        max_entry_size: largest entry body accepted, in bytes.
        thresholds: when to turn read-only.
        disk_check_interval_s: period of the disk check, in seconds (upstream ``diskCheckInterval``).
        fake_disk_total_bytes / fake_disk_free_bytes: test hook, see ``bookie.disk``.
        zk_session_timeout_ms: ZooKeeper session timeout in ms (upstream ``zkTimeout``).
        shutdown_grace_s: how long in-flight requests may finish on stop, in seconds.
        limits: adds/reads in progress before ``ETOOMANYREQUESTS`` (upstream
            ``maxAddsInProgressLimit`` / ``maxReadsInProgressLimit``; see ``bookie.admission``).
        stream_idle_timeout_s: an AddEntries stream idle this long is answered and closed, s.
        max_concurrent_streams: gRPC streams per client connection (HTTP/2 SETTINGS; more wait).
        max_connections: client connections open at once (gRPC closes more at accept).
        zk_security: ZooKeeper identity, ACL and transport (``zkEnableSecurity``, digest or SASL,
            ``zookeeper.client.secure`` TLS): the registration znodes and
            the cookie are created with ``CREATOR_ALL_ACL`` when enabled (default: open, no auth).
        tls: serve the gRPC port with TLS (and mTLS with ``client_auth``); None = plaintext (issue 15).
        pull_entries: serve PullEntries (feature ``PULL_ENTRIES``): copy ranges from other bookies
            when a replication worker asks, so the data crosses the network once. A TLS bookie dials
            its peers with TLS, presenting its own certificate as client certificate and trusting its
            trust store (:func:`peer_tls`); without ``tls.trust_path`` it does not pull (it could not
            check its peers) and the workers copy through themselves.
    """

    zk: str
    data_dir: Path
    ledgers_root: str = "/ledgers"
    host: str = "127.0.0.1"
    port: int = 3181
    max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE
    thresholds: DiskThresholds = field(default_factory=DiskThresholds)
    disk_check_interval_s: float = 2.0
    fake_disk_total_bytes: int | None = None
    fake_disk_free_bytes: int | None = None
    zk_session_timeout_ms: int = 10000
    shutdown_grace_s: float = 5.0
    limits: AdmissionLimits = field(default_factory=AdmissionLimits)
    stream_idle_timeout_s: float = 120.0
    max_concurrent_streams: int = 1000
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    zk_security: ZkSecurity = field(default_factory=ZkSecurity)
    tls: ServerTls | None = None
    pull_entries: bool = True


def peer_tls(tls: ServerTls | None) -> BookieTls | None:
    """The TLS a bookie reads its PullEntries sources with (None: plaintext), from its own: its
    certificate and key as client certificate (so its certificate must allow client authentication:
    no extended key usage, or ``clientAuth`` among them), its trust store as roots (the CA of its peers'
    certificates), re-read as often as its server files."""
    if tls is None:
        return None
    return BookieTls(enabled=True, client_auth=True, cert_path=tls.cert_path, key_path=tls.key_path,
                     trust_path=tls.trust_path, refresh_s=tls.refresh_s)


#: Timeout of the client a bookie reads its peers with for PullEntries, s (see
#: ``rpc.bookie_client.PULL_SOURCE_GRACE_S``: the worker waits longer than this for a report).
PEER_TIMEOUT_S = 10.0


class BookieServer:
    """A running bookie. ``await start()``, then ``await stop()`` (idempotent).

    Attributes (after start): ``bookie_id`` (``host:port``), ``port``, ``storage``, ``service``,
    ``registration``, ``readonly``.

    Raises (from :meth:`start`, after undoing whatever had been started):
        ClusterNotFormattedError: ``<root>/INSTANCEID`` is missing.
        CookieError: cookie missing or mismatched (e.g. wiped data directory).
        ZooKeeperError: ZooKeeper unreachable or registration held by another live session.
        RuntimeError: the port cannot be bound.
        BookieStatusError: the database cannot be opened (``EIO``).
    """

    def __init__(self, config: BookieConfig) -> None:
        self.config = config
        self.data_dir = Path(config.data_dir).resolve()
        self.paths = Paths(config.ledgers_root)
        self.disk = DiskProbe(self.data_dir, config.fake_disk_total_bytes, config.fake_disk_free_bytes)
        self.port = config.port
        self.bookie_id = f"{config.host}:{config.port}"
        self.readonly = False
        self.storage: BookieStorage | None = None
        self.service: BookieService | None = None
        self.peers: GrpcBookieClient | None = None
        self.registration: BookieRegistration | None = None
        self.zk: ZkClient | None = None
        self._server: grpc.aio.Server | None = None
        self._server_started = False
        self._monitor: asyncio.Task | None = None
        self._stopped = False
        #: completed disk checks (tests wait on it)
        self.disk_checks = 0

    async def start(self) -> BookieServer:
        cfg = self.config
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._server, self.port = build_grpc_server(cfg.host, cfg.port, cfg.max_entry_size,
                                                        max_concurrent_streams=cfg.max_concurrent_streams,
                                                        max_connections=cfg.max_connections, tls=cfg.tls)
            self.bookie_id = f"{cfg.host}:{self.port}"
            log.info("starting bookie", bookie_id=self.bookie_id, data_dir=str(self.data_dir), zk=cfg.zk)
            self.zk = ZkClient(cfg.zk, session_timeout_ms=cfg.zk_session_timeout_ms, security=cfg.zk_security)
            await self.zk.start()
            await check_and_stamp_cookie(self.zk, self.paths, self.bookie_id, self.data_dir)
            self.storage = BookieStorage(self.data_dir, name=self.bookie_id)
            await asyncio.to_thread(self.storage.open)
            usage = await asyncio.to_thread(self.disk.probe)
            self.readonly = cfg.thresholds.readonly(usage, currently_readonly=False)
            if cfg.pull_entries and (cfg.tls is None or cfg.tls.trust_path):
                self.peers = GrpcBookieClient(timeout_s=PEER_TIMEOUT_S, tls=peer_tls(cfg.tls),
                                              max_message_bytes=cfg.max_entry_size + GRPC_HEADROOM)
            self.service = BookieService(
                self.storage,
                self.bookie_id,
                disk=self.disk,
                is_readonly=lambda: self.readonly,
                max_entry_size=cfg.max_entry_size,
                limits=cfg.limits,
                stream_idle_timeout_s=cfg.stream_idle_timeout_s,
                peers=self.peers,
                peer_check=RegisteredPeers(self.zk, self.paths).registered,
            )
            add_service(self._server, self.service)
            await self._server.start()
            self._server_started = True
            self.registration = BookieRegistration(
                self.zk,
                self.paths,
                self.bookie_id,
                encode_service_info(cfg.host, self.port, registration_properties()),
                is_dead_owner=written_by_dead_process,
            )
            await self.registration.start(readonly=self.readonly)
            self._monitor = asyncio.create_task(self._disk_monitor(), name=f"disk-monitor-{self.bookie_id}")
        except BaseException:
            await self.stop()
            raise
        log.info("bookie started", bookie_id=self.bookie_id, readonly=self.readonly)
        return self

    async def _disk_monitor(self) -> None:
        """Re-check the disk periodically; move between writable and read-only (upstream
        ``LedgerDirsMonitor`` + ``BookieStateManager``)."""
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.disk_check_interval_s)  # the check period itself
            try:
                usage = await asyncio.to_thread(self.disk.probe)
                want = cfg.thresholds.readonly(usage, currently_readonly=self.readonly)
                if want != self.readonly:
                    log.warning(
                        "bookie changes state",
                        bookie_id=self.bookie_id,
                        readonly=want,
                        free_bytes=usage.free_bytes,
                        total_bytes=usage.total_bytes,
                    )
                    # refuse/accept adds at once; the registration follows
                    self.readonly = want
                reg = self.registration
                if reg is not None and (reg.readonly != self.readonly or not reg.in_sync):
                    await reg.set_readonly(self.readonly)
                self.disk_checks += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried on the next tick
                if not (isinstance(exc, ZooKeeperError) and is_retriable(exc)):
                    log.error("disk check or registration update failed", bookie_id=self.bookie_id, error=str(exc))
                    continue
                # ZooKeeper unreachable for now (ConnectionLoss...): the next tick retries, nobody acts
                log.warning("registration update failed; retried on the next disk check", bookie_id=self.bookie_id,
                            error=str(exc))

    async def stop(self) -> None:
        """Deregister, stop serving (grace ``shutdown_grace_s``), close the store and the session.
        Idempotent; safe after a failed start."""
        if self._stopped:
            return
        self._stopped = True
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        if self.registration is not None:
            await self.registration.stop()
        if self.service is not None:
            self.service.begin_shutdown()  # idle long-lived add streams must not hold the grace period
        if self._server is not None:
            try:
                await self._server.stop(self.config.shutdown_grace_s if self._server_started else None)
            except Exception as exc:  # noqa: BLE001 - stopping a never-started server
                log.debug("gRPC server stop", error=str(exc))
        if self.peers is not None:
            await self.peers.close()
        if self.storage is not None:
            await self.storage.close()
        if self.zk is not None:
            await self.zk.stop()
        log.info("bookie stopped", bookie_id=self.bookie_id)
