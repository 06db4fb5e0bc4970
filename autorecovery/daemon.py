"""The autorecovery daemon (upstream ``AutoRecoveryMain``): election + Auditor + ReplicationWorker +
BookieInfoReader + HTTP in one asyncio process.

Composition, in start order (stop runs it backwards)::

    ZkClient ─► UnderreplicationManager.init ─► BookieWatcher ─► placement policy (config + racks:
    Pulsar /bookies if present, else configured/default resolver) ─► BookieClient ─► BookieInfoReader
    (feeds the policy) ─► ReplicationWorker ─► elector_loop (elected → Auditor.start, lost → stop)
    ─► HTTP (/metrics, /healthz, /readyz, /api/v1/...) ─► prints ``AUTORECOVERY_READY``

Stopping (SIGTERM or SIGINT; :meth:`Daemon.stop`, idempotent) is bounded by ``shutdownTimeoutSeconds``
(20 s): readiness goes false; the HTTP server stops taking requests and cancels background admin jobs;
the election task is cancelled, which stops the Auditor and deletes this node's vote; the worker stops
taking ledgers and finishes or aborts its in-flight copies (every metadata write is a CAS on the znode
version, so an aborted copy never leaves metadata half-written) and releases its locks; then the
reader, the watcher, the bookie channels and finally the ZooKeeper session close (closing the session
removes any ephemeral vote or lock a step could not delete in time). The process exits 0.

Better than upstream: upstream's death watcher kills the process when the ZooKeeper session expires
(#3799, #3351). Here the election loop stops the Auditor, the worker is restarted on the new session
and the node rejoins the election (``sessionRejoinEnabled``, default true). A role that dies for
another reason still ends the process with exit code 1 so that a supervisor restarts it.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import structlog

from autorecovery import metrics
from autorecovery.admin import ops
from autorecovery.admin.http import AdminHttpServer, PrometheusHttpServer
from autorecovery.admin.http_jobs import Jobs
from autorecovery.admin.http_routes import HttpDeps
from autorecovery.admin.http_auth import CredentialReloader, Credentials, ReloadableTls, refresh_period_s
from autorecovery.config.settings import Settings
from autorecovery.daemon_roles import START_RETRY_BUDGET_S as START_RETRY_BUDGET_S
from autorecovery.daemon_roles import RoleFactory as RoleFactory
from autorecovery.daemon_roles import default_auditor_factory as default_auditor_factory
from autorecovery.daemon_roles import default_worker_factory as default_worker_factory
from autorecovery.daemon_roles import role_running, start_retrying
from autorecovery.roles.bookie_info import BookieInfoReader
from autorecovery.roles.cluster_gauges import NodeGauges
from autorecovery.roles.local_bookie import LocalBookieWatch
from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.topology_source import RackInfoWatcher
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.election import elector_loop
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

log = structlog.get_logger("autorecovery.daemon")

READY_MARKER = "AUTORECOVERY_READY"

#: Exit codes: 0 clean stop, 1 a role died / start failed, 2 bad configuration, 3 ZooKeeper session
#: expired and rejoin is off (upstream ``ExitCode.ZK_EXPIRED`` is 4; ours keeps small numbers).
EXIT_OK, EXIT_ROLE_DIED, EXIT_CONFIG, EXIT_ZK_EXPIRED = 0, 1, 2, 3

async def _maybe_await(x: Any) -> Any:
    """Teardown steps mix coroutine and plain stop functions of the daemon's own parts."""
    if asyncio.iscoroutine(x) or isinstance(x, asyncio.Future):
        return await x
    return x


class Daemon:
    """One autorecovery node.

    Args:
        settings: the effective configuration.
        auditor_factory / worker_factory: build the roles (tests inject fakes; defaults import
            ``autorecovery.roles.auditor`` / ``autorecovery.roles.worker``).
        registry: metrics registry served on /metrics.
        out: where the ``AUTORECOVERY_READY`` line is printed (stdout).

    Attributes:
        exit_code: what :meth:`run` returns. http_port: the bound HTTP port (None when HTTP is off).
    """

    def __init__(self, settings: Settings, *, auditor_factory: RoleFactory = default_auditor_factory,
                 worker_factory: RoleFactory = default_worker_factory,
                 registry: metrics.MetricsRegistry | None = None, out: TextIO | None = None) -> None:
        self.settings = settings
        self.auditor_factory = auditor_factory
        self.worker_factory = worker_factory
        self.registry = registry or metrics.REGISTRY
        self.out = out if out is not None else sys.stdout
        self.bookie_id = settings.bookie_id
        self.paths = Paths(settings.ledgers_root)
        self.zk: ZkClient | None = None
        self.urm: UnderreplicationManager | None = None
        self.node_gauges: NodeGauges | None = None
        self.watcher: BookieWatcher | None = None
        self.placement: ops.PlacementSetup | None = None
        self.policy: Any = None
        self.bookies: Any = None
        self.reader: BookieInfoReader | None = None
        self.worker: Any = None
        self.auditor: Any = None
        self.http: AdminHttpServer | None = None
        self.http_port: int | None = None
        #: upstream PrometheusMetricsProvider's /metrics listener (statsProviderClass, prometheusStatsHttp*)
        self.prometheus: PrometheusHttpServer | None = None
        self.prometheus_port: int | None = None
        self.ctx: ops.AdminContext | None = None
        self.exit_code = EXIT_OK
        self._tasks: dict[str, asyncio.Task] = {}
        self._stop_requested = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stopping = False
        self._started = False
        self._stop_lock = asyncio.Lock()
        self._role_lock = asyncio.Lock()
        self.racks: RackInfoWatcher | None = None
        self.local_bookie: LocalBookieWatch | None = None  # localBookieLossDetectionEnabled
        self._rack_prefetch: asyncio.Future | None = None
        self._started_at = time.time()
        self.stop_reason = ""
        self._connected_once = False

    # -- start ----------------------------------------------------------------------------------------
    async def start(self) -> Daemon:
        """Bring every part up; prints ``AUTORECOVERY_READY ...`` on success.

        Raises:
            ConfigError: bad role settings (names the key). ZooKeeperError: ZooKeeper unreachable.
            NoClusterError / CompatibilityError: no ``LAYOUT`` under the ledgers root, or one this
            version does not support (names the znode).
            OSError: the HTTP port cannot be bound. Anything partially started is stopped first.
        """
        s = self.settings
        try:
            # the client's bound on outstanding ZooKeeper operations follows the auditor's own bound on
            # concurrent ledger reads (upstream's key), so raising one does not silently stall at the other
            self.zk = ZkClient.from_settings(
                s, max_concurrent_ops=s.auditor.auditor_max_number_of_concurrent_open_ledger_operations)
            await self.zk.start(timeout_s=max(10.0, s.zk_timeout_ms / 1000.0))
            self._connected_once = True
            # refuse a wrong ledgers root or a layout we cannot lay out ledger paths for before anything
            # is created under it (the under-replication tree, a vote) — issue 9
            self.paths = self.paths.with_layout(await ops.check_cluster(self.zk, self.paths, s))
            self.urm = UnderreplicationManager(
                self.zk, self.paths, store_ctime=bool(s.get("storeSystemTimeAsLedgerUnderreplicatedMarkTime")))
            await self.urm.init()
            # autorecovery_auditor_elected / autorecovery_enabled on every node; the auditor-only
            # cluster gauges are registered at 0 here (roles/cluster_gauges.py)
            self.node_gauges = await NodeGauges(self.zk, self.paths, self.registry).start()
            self.watcher = BookieWatcher(self.zk, self.paths)
            await self.watcher.start()
            self.placement = await ops.build_placement(s, self.zk)
            self.policy = self.placement.policy
            # the one membership -> policy subscription (roles do not subscribe for it)
            await self._prefetch_racks()
            self.policy.on_cluster_changed(set(self.watcher.writable), set(self.watcher.readonly))
            self.watcher.add_listener(self._on_membership)
            self.racks = await RackInfoWatcher(self.zk, self.placement).start()

            from autorecovery.rpc.transport import BookieClient

            self.bookies = BookieClient(tls=s.tls, resolve=self.watcher.advertised)
            bi = s.bookie_info
            self.reader = BookieInfoReader(
                self.bookies, self.watcher, consumers=[self.policy], interval_s=bi.interval_s,
                retry_interval_s=bi.retry_interval_s, timeout_s=bi.timeout_s,
                weighted=bool(s.get("diskWeightBasedPlacementEnabled")),
                max_multiple=float(s.get("bookieMaxMultipleForWeightBasedPlacement")), registry=self.registry)
            await self.reader.start()

            self.worker = self.worker_factory(self.zk, self.paths, s, self.policy, self.bookies, self.watcher)
            await self.worker.start()
            if s.get("localBookieLossDetectionEnabled"):
                self.local_bookie = await LocalBookieWatch(self.zk, self.paths, self.bookie_id).start()

            self._tasks["election"] = asyncio.ensure_future(elector_loop(
                self.zk, self.paths, self.bookie_id, self._on_elected, self._on_lost,
                on_session_lost=self._on_session_lost))

            self.ctx = ops.AdminContext(zk=self.zk, paths=self.paths, urm=self.urm,
                                        ledgers=LedgerStore(self.zk, self.paths), settings=s,
                                        bookies=self.bookies, watcher=self.watcher, policy=self.policy,
                                        reader=self.reader, progress_source=self._progress)
            if s.http.enabled:
                tls = (ReloadableTls(str(s.http.cert_path), str(s.http.key_path), s.http.client_ca_path)
                       if s.http.tls else None)
                creds = Credentials(admin_token=s.http.token, read_token=s.http.read_token,
                                    client_certs=tls is not None and tls.client_certs,
                                    admin_subjects=s.http.admin_subjects)
                deps = HttpDeps(ctx=self.ctx, mutations_enabled=s.http.mutations_enabled,
                                liveness=self.liveness, readiness=self.readiness, registry=self.registry,
                                jobs=Jobs(), token=s.http.token, credentials=creds,
                                debug_endpoints=s.http.debug_endpoints)
                reloader = CredentialReloader(creds, admin_token_path=s.http.token_path,
                                              read_token_path=s.http.read_token_path, tls=tls)
                self.http = AdminHttpServer(deps, s.http.address, s.http.port,
                                            ssl_context=tls.server_context if tls else None, reloader=reloader,
                                            reload_period_s=refresh_period_s(s), audit_file=s.http.audit_file)
                await self.http.start()
                self.http_port = self.http.port
            await self._start_prometheus()
            self._tasks["watchdog"] = asyncio.ensure_future(self._watchdog())
        except BaseException:
            await self._teardown(budget_s=s.shutdown_timeout_s)
            self._stopped.set()
            raise
        self._started = True
        http = f"{s.http.address}:{self.http_port}" if self.http_port is not None else "off"
        prom = f" prometheus={s.stats.address}:{self.prometheus_port}" if self.prometheus_port is not None else ""
        log.info("autorecovery started", bookie_id=self.bookie_id, zk=s.zk_servers, ledgers_root=s.ledgers_root,
                 http=http, prometheus=prom.partition("=")[2] or "off", policy=type(self.policy).__name__,
                 racks=self.placement.source)
        print(f"{READY_MARKER} bookie_id={self.bookie_id} http={http}{prom}", file=self.out, flush=True)
        return self

    async def start_retrying(self, budget_s: float = START_RETRY_BUDGET_S) -> Daemon:
        """:meth:`start`, started again when ZooKeeper drops during start-up
        (:func:`autorecovery.daemon_roles.start_retrying`: the rule, the budget and the errors raised)."""
        await start_retrying(self, budget_s)
        return self

    def _forget_parts(self) -> None:
        """After a failed start's teardown: every part is gone, so a new :meth:`start` builds them anew."""
        self.zk = self.urm = self.node_gauges = self.watcher = self.placement = None
        self.policy = self.bookies = self.reader = self.worker = self.auditor = None
        self.http = self.prometheus = self.ctx = self.racks = self._rack_prefetch = None
        self.http_port = self.prometheus_port = None
        self._tasks = {}
        self._stopping = False
        self._stopped.clear()

    async def _start_prometheus(self) -> None:
        """Open upstream's Prometheus listener when the settings ask for it (``Settings.stats``); when its
        port is the admin HTTP port, the admin server's ``/metrics`` already answers there: serve once.

        Raises:
            OSError: naming the address and port when it cannot be bound.
        """
        s = self.settings
        if not s.stats.prometheus_enabled:
            return
        if self.http is not None and s.stats.port != 0 and s.stats.port == s.http.port:
            log.info("prometheus listener shares the admin HTTP port; /metrics served once",
                     port=s.http.port, address=s.http.address, prometheus_address=s.stats.address)
            return
        self.prometheus = PrometheusHttpServer(self.registry, s.stats.address, s.stats.port)
        await self.prometheus.start()
        self.prometheus_port = self.prometheus.port

    # -- roles ----------------------------------------------------------------------------------------
    async def _on_elected(self) -> None:
        async with self._role_lock:
            if self._stopping:
                return
            log.info("this node is the auditor", bookie_id=self.bookie_id)
            auditor = self.auditor_factory(self.zk, self.paths, self.settings, self.policy, self.bookies,
                                           self.bookie_id)
            await auditor.start()
            self.auditor = auditor
            if self.node_gauges is not None:
                self.node_gauges.set_elected(True)

    async def _on_lost(self) -> None:
        async with self._role_lock:
            auditor, self.auditor = self.auditor, None
            if self.node_gauges is not None:
                self.node_gauges.set_elected(False)
            if auditor is not None:
                log.info("stopping the auditor", bookie_id=self.bookie_id)
                await auditor.stop()

    async def _on_session_lost(self) -> None:
        """The ZooKeeper session expired: locks and the vote are gone. Restart the worker on the new
        session (or stop the daemon when ``sessionRejoinEnabled`` is false, as upstream does)."""
        if self._stopping:
            return
        if not self.settings.session_rejoin:
            log.error("Client connection to the Metadata server has expired; exiting (sessionRejoinEnabled=false)",
                      bookie_id=self.bookie_id)
            self.exit_code = EXIT_ZK_EXPIRED
            self.request_stop("zookeeper session expired")
            return
        log.warning("ZooKeeper session expired; restarting the worker and rejoining the election",
                    bookie_id=self.bookie_id)
        async with self._role_lock:
            old, self.worker = self.worker, None
            if old is not None:
                try:
                    await old.stop()
                except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.warning("the old worker did not stop cleanly", error=repr(cleanup_exc))
            if self._stopping:
                return
            assert self.zk is not None  # set by start(), before any session expiry can restart the worker
            await self.zk.connected.wait()
            self.worker = self.worker_factory(self.zk, self.paths, self.settings, self.policy, self.bookies,
                                              self.watcher)
            await self.worker.start()

    def _on_membership(self, writable: frozenset[str], readonly: frozenset[str]) -> None:
        """Tell the placement policy about membership. When a new bookie's rack needs the topology script
        (``ScriptResolver.pending``), the script runs in a worker thread first and the policy is told
        afterwards (with the membership current then): the event loop never waits for the script."""
        pending = getattr(self.placement.resolver, "pending", None) if self.placement is not None else None
        if pending is not None and pending(sorted(set(writable) | set(readonly))):
            if self._rack_prefetch is None or self._rack_prefetch.done():
                self._rack_prefetch = asyncio.ensure_future(self._prefetch_then_update())
            return
        self.policy.on_cluster_changed(set(writable), set(readonly))

    async def _prefetch_racks(self) -> None:
        """Resolve the racks of bookies the topology script has not answered for, off the event loop."""
        resolver = self.placement.resolver if self.placement is not None else None
        pending = getattr(resolver, "pending", None)
        if resolver is None or pending is None or self.watcher is None:
            return
        todo = pending(sorted(set(self.watcher.writable) | set(self.watcher.readonly)))
        if todo:
            await asyncio.to_thread(resolver.resolve, todo)

    async def _prefetch_then_update(self) -> None:
        try:
            await self._prefetch_racks()
        except Exception as exc:  # noqa: BLE001 - a failed lookup is the default rack, as upstream
            log.warning("rack lookup failed", error=str(exc))
        if self.watcher is not None and not self._stopping:
            self.policy.on_cluster_changed(set(self.watcher.writable), set(self.watcher.readonly))

    def _progress(self) -> Any:
        w = self.worker
        return w.progress() if w is not None else None

    # -- health ---------------------------------------------------------------------------------------
    def liveness(self) -> dict[str, Any]:
        return {"status": "alive", "bookie_id": self.bookie_id, "uptime_s": round(time.time() - self._started_at, 1)}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready = started, not stopping, ZooKeeper session connected, every role running, and every
        available bookie speaks a bookie protocol we speak (ours, ``grpc``; upstream's, ``bookie-rpc``
        or no service info).

        A bookie whose registration advertises only other protocols cannot be checked or copied from
        here: its copies are skipped (never marked), and readiness is false with a ``reasons`` entry
        naming it, so the gap is visible instead of silent (issue 9).
        """
        zk_up = bool(self.zk is not None and self.zk.connected.is_set())
        election = self._tasks.get("election")
        roles = {
            "worker": role_running(self.worker),
            "election": bool(election is not None and not election.done()),
            "bookie_info_reader": bool(self.reader is not None and self.reader.running),
            "auditor": self.auditor is not None,
        }
        reasons: list[str] = []
        if not self._started:
            reasons.append("starting")
        if self._stopping:
            reasons.append("stopping")
        if not zk_up:
            reasons.append("ZooKeeper session not connected")
        reasons += [f"{k} not running" for k, v in roles.items() if k != "auditor" and not v]
        foreign = dict(getattr(self.watcher, "foreign", {}) or {}) if self.watcher is not None else {}
        for b, proto in sorted(foreign.items()):
            reasons.append(f"bookie {b} advertises neither our gRPC protocol nor upstream's bookie-rpc (advertises "
                           f"{', '.join(proto)}): its copies are not checked or read here")
        ready = not reasons
        return ready, {"zookeeper": "CONNECTED" if zk_up else "DISCONNECTED", "roles": roles,
                       "stopping": self._stopping, "bookie_id": self.bookie_id, "reasons": reasons,
                       "foreign_bookies": {b: list(p) for b, p in sorted(foreign.items())}}

    async def _watchdog(self) -> None:
        """Upstream's death watcher, every ``bookieDeathWatchInterval`` ms: a role that died (not a
        session expiry, which is handled by rejoining) stops the daemon with exit code 1."""
        interval = max(0.05, float(self.settings.get("bookieDeathWatchInterval")) / 1000.0)
        while not self._stopping:
            await asyncio.sleep(interval)
            if self._stopping:
                return
            election = self._tasks.get("election")
            if election is not None and election.done():
                exc = None if election.cancelled() else election.exception()
                log.error("the election loop ended", error=str(exc))
                self.exit_code = EXIT_ROLE_DIED
                self.request_stop("election loop died")
                return
            if self.zk is not None and self.zk.connected.is_set() and not self._role_lock.locked() \
                    and self.worker is not None and not role_running(self.worker):
                log.error("the replication worker stopped unexpectedly", bookie_id=self.bookie_id)
                self.exit_code = EXIT_ROLE_DIED
                self.request_stop("replication worker died")
                return

    # -- stop -----------------------------------------------------------------------------------------
    def request_stop(self, reason: str = "requested") -> None:
        """Ask :meth:`run` to stop (signal handlers call this). Safe to call many times."""
        if not self._stop_requested.is_set():
            self.stop_reason = reason
            log.info("stopping", reason=reason, bookie_id=self.bookie_id)
        self._stop_requested.set()

    async def stop(self) -> None:
        """Graceful, bounded stop (see the module docstring). Idempotent; concurrent callers wait."""
        async with self._stop_lock:
            if self._stopped.is_set():
                return
            self._stopping = True
            await self._teardown(budget_s=self.settings.shutdown_timeout_s)
            self._stopped.set()

    async def _teardown(self, budget_s: float) -> None:
        self._stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget_s

        async def step(name: str, fn: Callable[[], Any], share: float = 1.0) -> None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.error("shutdown budget exhausted; skipping", step=name)
                return
            try:
                await asyncio.wait_for(_maybe_await(fn()), max(0.05, remaining * share))
            except TimeoutError:
                log.error("shutdown step timed out", step=name, budget_s=round(remaining * share, 2))
            except Exception as exc:  # noqa: BLE001 - keep stopping the rest
                log.error("shutdown step failed", step=name, error=str(exc))

        wd = self._tasks.pop("watchdog", None)
        if wd is not None:
            wd.cancel()
            await asyncio.gather(wd, return_exceptions=True)
        if self.http is not None:
            await step("http", self.http.stop, 0.3)
        if self.prometheus is not None:
            await step("prometheus", self.prometheus.stop, 0.1)
        election = self._tasks.pop("election", None)
        if election is not None:
            async def stop_election() -> None:
                election.cancel()
                await asyncio.gather(election, return_exceptions=True)
            await step("election+auditor", stop_election, 0.5)
        if self.auditor is not None:  # election task timed out before on_lost ran
            await step("auditor", self._on_lost, 0.5)
        if self.worker is not None:
            worker = self.worker
            # let in-flight copies finish for half of what is left, then the worker aborts them
            drain = max(0.5, (deadline - loop.time()) * 0.5)

            await step("worker", lambda: worker.stop(drain_timeout_s=drain), 0.9)
        if self.reader is not None:
            await step("bookie-info-reader", self.reader.stop)
        if self.local_bookie is not None:
            await step("local-bookie-watch", self.local_bookie.stop)
        for name in list(self._tasks):
            t = self._tasks.pop(name)
            t.cancel()
            await asyncio.gather(t, return_exceptions=True)
        if self.node_gauges is not None:
            await step("node-gauges", self.node_gauges.stop)
        if self.urm is not None:
            await step("underreplication-manager", self.urm.close)
        if self.racks is not None:
            await step("rack-info-watcher", self.racks.stop)
        if self.watcher is not None:
            await step("bookie-watcher", self.watcher.stop)
        if self.bookies is not None:
            await step("bookie-client", self.bookies.close)
        if self.zk is not None:
            # always close the session: it removes any ephemeral vote/lock a late step left behind
            try:
                await asyncio.wait_for(self.zk.stop(), max(1.0, deadline - loop.time()))
            except Exception as exc:  # noqa: BLE001
                log.error("closing the ZooKeeper session failed", error=str(exc))
        log.info("autorecovery stopped", bookie_id=self.bookie_id, reason=self.stop_reason or "stop")

    # -- run --------------------------------------------------------------------------------------------
    async def run(self, install_signals: bool = True) -> int:
        """Start, wait for SIGTERM/SIGINT (or a fatal role error), stop; returns the exit code."""
        loop = asyncio.get_running_loop()
        installed = []
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self.request_stop, signal.Signals(sig).name)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):  # pragma: no cover - non-Unix
                    pass
        try:
            await self.start_retrying()
            await self._stop_requested.wait()
        finally:
            await self.stop()
            for sig in installed:
                loop.remove_signal_handler(sig)
        return self.exit_code
