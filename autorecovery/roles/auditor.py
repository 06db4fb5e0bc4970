"""The Auditor: lost-bookie detection from an incremental index, and the periodic checks (EDGE).

Upstream ``replication/Auditor`` + ``AuditorBookieCheckTask``, ``AuditorCheckAllLedgersTask``,
``AuditorPlacementPolicyCheckTask``, ``AuditorReplicasCheckTask``, ``BookieLedgerIndexer``. The decisions
live in ``autorecovery.audit`` (pure); this module feeds them from ZooKeeper and the bookies and carries
out what they say. The class is composed of parts, each its own module:

* this module — lifecycle, watches, the bookie-change event loop and the lost-bookie audit;
* :mod:`autorecovery.roles.auditor_checks` — the periodic checks and their schedule;
* :mod:`autorecovery.roles.auditor_holds` — maintenance windows and the rack-loss guard;
* :mod:`autorecovery.roles.auditor_metrics` — the metric handles.

Better than upstream:

* **Incremental index.** :class:`~autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher` builds the bookie → ledgers index once (on
  election) and keeps it current from watches on the ledger tree (ZooKeeper 3.6+: one persistent
  recursive watch and batched multiRead reads; older servers: child watches on every hierarchy level
  and a data watch on every ledger znode). The index is compact (a packed record per ledger, bookie ids
  interned). A bookie loss is turned into markers with **no metadata reads**; a full reconcile runs on a
  slow schedule (``auditorLedgerIndexReconcileInterval``, ours).
* **Precise marking**: only ledgers whose lost bookie stores entries of some segment are marked.
* **Batched markers** in ZooKeeper ``multi`` transactions.
* **Independent tasks.** Bookie-change handling and each periodic check run in their own asyncio task
  with bounded concurrency; a week-long check never delays the handling of a bookie loss (upstream runs
  everything on one thread). Periodic checks still skip while a delayed lost-bookie audit is pending
  (#3818) and pause while AutoRecovery is disabled (the flag is cached from a watch, #3358).
* **Replicas check can mark** ledgers with entries below WQ (``auditorReplicasCheckMarkUnderReplicated``,
  ours, default off; upstream only reports).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from autorecovery import metrics
from autorecovery.aio import background
from autorecovery.audit.decisions import Decision, LostBookieTracker
from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.maintenance import Holds, Window
from autorecovery.audit.schedule import first_run_s
from autorecovery.config.sections import AuditorSettings
from autorecovery.errors import is_retriable
from autorecovery.roles.auditor_checks import CheckResult, PeriodicChecks
from autorecovery.roles.auditor_history import HealRecorder
from autorecovery.roles.auditor_holds import MaintenanceHolds
from autorecovery.roles.auditor_metrics import AuditorMetrics
from autorecovery.roles.checker import LedgerChecker
from autorecovery.roles.cluster_gauges import ClusterGauges
from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.bridge import EventType, NoNodeError, ZkClient
from autorecovery.zk.ledger_tree.tree_watcher import LedgerTreeWatcher
from autorecovery.zk.maintenance import MaintenanceStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

log = structlog.get_logger("autorecovery.auditor")


@dataclass
class AuditReport:
    """One lost-bookie audit: which bookies, how many ledgers, and its cost.

    ``find_ms`` is the index lookup (no ZooKeeper reads), ``write_ms`` the marker writes,
    ``zk_ops`` the ZooKeeper operations the client issued during the audit.
    """

    trigger: str
    lost: list[str]
    ledgers: int
    find_ms: float
    write_ms: float
    writes: int
    zk_ops: int


class Auditor(AuditorMetrics, MaintenanceHolds, PeriodicChecks):
    """The single auditor of the cluster (run it only while elected).

    Args:
        zk: started client (shared with the elector; its session is the auditor's).
        paths: cluster znode paths.
        settings: :class:`AuditorSettings`.
        policy: placement policy (``is_ensemble_adhering``, ``on_cluster_changed``); None disables the
            placement check.
        bookies: ``BookieClient`` (``read_entry``, ``read_lac``, ``get_list_of_entries``).
        bookie_id: this node's id (for logs).
        clock: monotonic seconds (injectable).
        wall_ms: wall clock in ms since the epoch (ctime znodes).
        registry: metrics registry (default: the process registry).
        update_policy: keep ``policy`` told about membership itself (standalone use). The daemon
            passes False: it owns the one membership → policy subscription (``roles/role.py``).

    Properties for admin/progress: :attr:`index`, :attr:`pending_audit_at`, :attr:`last_audit`,
    :attr:`last_results`, :attr:`running`.
    """

    def __init__(self, zk: ZkClient, paths: Paths, settings: AuditorSettings, policy, bookies, *, bookie_id: str,
                 clock: Callable[[], float] | None = None, wall_ms: Callable[[], int] | None = None,
                 registry: metrics.MetricsRegistry | None = None, update_policy: bool = True) -> None:
        self.zk = zk
        self.paths = paths
        self.settings = settings
        self.policy = policy
        self.update_policy = update_policy
        self.bookies = bookies
        self.bookie_id = bookie_id
        self.clock = clock or time.monotonic
        self.wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self.urm = UnderreplicationManager(zk, paths, store_ctime=settings.store_system_time_as_ledger_underreplicated_mark_time,
                                           now_ms=self.wall_ms)
        self.index = BookieLedgerIndex()
        self.tree = LedgerTreeWatcher(zk, paths, self.index,
                                      concurrency=settings.auditor_max_number_of_concurrent_open_ledger_operations)
        self.bookie_watcher: BookieWatcher | None = None
        self.tracker: LostBookieTracker | None = None
        self.checker = LedgerChecker(bookies, self._available, verification_percentage=settings.auditor_ledger_verification_percentage,
                                     in_flight=settings.in_flight_read_entry_num_in_ledger_checker,
                                     foreign=self._foreign, credentials=settings.recovery)
        self.last_audit: AuditReport | None = None
        self.last_results: dict[str, CheckResult] = {}
        self.audits = 0
        self._events: asyncio.Queue = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_token = 0
        self._enabled = True
        self._enabled_changed = asyncio.Event()
        self._started = False
        self._stopped = False
        self._unrecoverable_logged: set[str] = set()
        self.maintenance = MaintenanceStore(zk, paths)
        self.windows: list[Window] = []
        self.last_holds = Holds({}, {})
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._autoclose_timer: asyncio.TimerHandle | None = None
        self._pending_holds = Holds({}, {})
        self._lost_since: dict[str, float] = {}
        self._settle_timer: asyncio.TimerHandle | None = None
        self._check_lock = asyncio.Lock()  # marking by different tasks does not interleave per ledger set
        self._m = self._metrics(registry or metrics.REGISTRY)
        # cluster-wide gauges (under-replicated ledgers/bytes, unrecoverable, oldest marker age): only
        # the elected auditor exports them, refreshed on every marker change (roles/cluster_gauges.py)
        self.gauges = ClusterGauges(self.urm, zk, paths, self.index.total_length, registry or metrics.REGISTRY,
                                    self.wall_ms, quiet=self._check_lock,
                                    top_namespaces=settings.auditor_topic_metrics_max_namespaces)
        # heal episodes and the state every node's `shell overview` reads (roles/auditor_history.py)
        self.history = HealRecorder(zk, paths, self.urm, self.index, bookie_id=bookie_id, wall_ms=self.wall_ms,
                                    checks=lambda: self.last_results, figures=self._figures,
                                    registry=registry or metrics.REGISTRY)

    # -- properties -------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._started and not self._stopped

    @property
    def pending_audit_at(self) -> float | None:
        """Clock time (s) of the pending delayed lost-bookie audit, or None."""
        return self.tracker.pending_at if self.tracker else None

    def _figures(self) -> dict[str, int]:
        """The cluster gauges' under-replicated ledgers, bytes and unrecoverable ledgers (for the history state)."""
        from autorecovery.roles.cluster_gauges import UNRECOVERABLE, UR_BYTES, UR_LEDGERS

        return {"ledgers": int(self.gauges.g[UR_LEDGERS].value), "bytes": int(self.gauges.g[UR_BYTES].value),
                "unrecoverable": int(self.gauges.g[UNRECOVERABLE].value)}

    def _available(self) -> frozenset[str]:
        return self.bookie_watcher.available if self.bookie_watcher else frozenset()

    def _foreign(self) -> dict[str, tuple[str, ...]]:
        """Available bookies without our gRPC endpoint (their copies are skipped by every check)."""
        return self.bookie_watcher.foreign if self.bookie_watcher else {}

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Validate/create the UR layout, seed the delay znode, build the index, watch bookies and the
        delay znode, and start the periodic checks.

        Raises:
            CompatibilityError: bad under-replication LAYOUT. ZooKeeperError: ZooKeeper failures.
        """
        if self._started:
            return
        self._started = True
        s = self.settings
        await self.urm.init()
        await self.urm.init_lost_bookie_recovery_delay(s.lost_bookie_recovery_delay)
        delay = await self.urm.get_lost_bookie_recovery_delay()
        try:
            cookies = await self.zk.get_children(self.paths.cookies)
        except NoNodeError:
            cookies = []
        self.tracker = LostBookieTracker(cookies, delay)
        t0 = self.clock()
        n = await self.tree.build()
        self._m["BOOKIE_TO_LEDGERS_MAP_CREATION_TIME"].record((self.clock() - t0) * 1000)
        log.info("auditor index built", ledgers=n, bookies=len(self.index.bookies()), ms=round((self.clock() - t0) * 1000))
        await self._watch_disable()
        self.bookie_watcher = BookieWatcher(self.zk, self.paths)
        self.bookie_watcher.add_listener(self._on_bookies)
        await self.bookie_watcher.start()
        await self._watch_delay()
        await self._watch_unrecoverable()
        await self._watch_maintenance()
        try:
            await self.history.start(self.index.bookies() - self._available())
        except Exception as exc:  # noqa: BLE001 - history never stops the auditor
            log.warning("could not read the heal history", path=self.paths.history, error=repr(exc))
        # Upstream runs the first membership event (the watch fires right after registration) on the
        # auditor thread *before* the start-up bookie check, so a bookie that died with the previous
        # auditor is put under lostBookieRecoveryDelay first and the bookie check then skips (#3818).
        # Decide on the initial view here, synchronously, for the same order (issue 9: the new auditor
        # used to audit in the same millisecond it said it was delaying).
        await self._decide_initial_membership()
        self._spawn(self._event_loop(), "events")
        self._spawn(self.gauges.run(), "cluster_gauges")
        self._spawn(self.history.run(), "heal_history")
        now_s, now_ms = self.clock(), self.wall_ms()
        self._spawn(self._periodic("bookie_check", s.auditor_periodic_bookie_check_interval,
                                   first_run_s(s.auditor_periodic_bookie_check_interval, None, now_s, now_ms),
                                   self._bookie_check, ctime=None), "bookie_check")
        for name, interval, which, run in (
            ("check_all_ledgers", s.auditor_periodic_check_interval, "checkallledgers", self._check_all_ledgers),
            ("placement_check", s.auditor_periodic_placement_policy_check_interval, "placementpolicycheck",
             self._placement_check),
            ("replicas_check", s.auditor_replicas_check_interval, "replicascheck", self._replicas_check),
        ):
            if interval <= 0 or (name == "placement_check" and self.policy is None):
                continue
            ctime = await self.urm.get_check_ctime(which)
            at = first_run_s(interval, ctime, now_s, now_ms)
            log.info("scheduled periodic check", check=name, interval_s=interval, initial_delay_s=round(at - now_s, 3))
            self._spawn(self._periodic(name, interval, at, run, ctime=which), name)
        if s.auditor_ledger_index_check_interval > 0:
            iv = s.auditor_ledger_index_check_interval
            self._spawn(self._periodic("index_consistency", iv, now_s + iv, self._index_consistency, ctime=None,
                                       skip_rules=False), "index_consistency")
        if s.auditor_ledger_index_reconcile_interval > 0:
            iv = s.auditor_ledger_index_reconcile_interval
            self._spawn(self._periodic("index_reconcile", iv, now_s + iv, self._reconcile, ctime=None, skip_rules=False),
                        "index_reconcile")
        log.info("auditor started", bookie_id=self.bookie_id)

    async def stop(self, drain_timeout_s: float = 10.0) -> None:
        """Cancel every task and watch consumer; idempotent. Markers already written stay (each marker
        write is atomic, so nothing needs draining: ``drain_timeout_s`` is accepted for the
        :class:`~autorecovery.roles.role.Role` protocol)."""
        if self._stopped:
            return
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        if self._autoclose_timer is not None:
            self._autoclose_timer.cancel()
        if self._settle_timer is not None:
            self._settle_timer.cancel()
        for g in ("maint_windows", "maint_held", "guard_domains", "guard_held"):
            self._m[g].set(0)  # this node is not the auditor any more: its figures are not the cluster's
        self.tree.stop()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.gauges.reset()
        self.history.reset()
        await self.tree.settle()
        if self.bookie_watcher is not None:
            await self.bookie_watcher.stop()
        try:
            await self.urm.close()
        except Exception as exc:  # noqa: BLE001 - the session may be gone
            log.debug("under-replication manager not closed cleanly", error=str(exc))
        log.info("auditor stopped", bookie_id=self.bookie_id)

    def _spawn(self, coro, name: str) -> None:
        """Run ``coro`` as an auditor task owned by :meth:`stop` (cancelled and awaited there); a task
        that fails is logged once, when it fails."""
        t = asyncio.ensure_future(coro)
        t.add_done_callback(lambda task: self._task_done(task, name))
        self._tasks.append(t)

    def _task_done(self, task: asyncio.Task, name: str) -> None:
        if task.cancelled():
            return
        exc = task.exception()  # retrieved here, so asyncio never reports it as "never retrieved"
        if exc is not None and not self._stopped:
            log.error("auditor task failed", task=name, error=repr(exc))

    # -- watches ----------------------------------------------------------------------------
    def _on_bookies(self, writable: frozenset[str], readonly: frozenset[str]) -> None:
        if self.policy is not None and self.update_policy:
            try:
                self.policy.on_cluster_changed(set(writable), set(readonly))
            except Exception as exc:  # noqa: BLE001
                log.warning("placement policy rejected the cluster change", error=str(exc))
        available = writable | readonly
        self.history.note_bookies(available, self.index.bookies())
        now = self.clock()
        for b in list(self._lost_since):
            if b in available:
                del self._lost_since[b]
        for b in self.index.bookies() - available:
            self._lost_since.setdefault(b, now)  # when this auditor first saw it gone (rack-loss guard)
        self._events.put_nowait(("bookies", None))
        if any(w.auto_close for w in self.windows):
            self._events.put_nowait(("maintenance", None))  # note a planned stop, or auto-close its window

    async def _watch_delay(self) -> None:
        def cb(event) -> None:
            if self._stopped:
                return
            if event.type in (EventType.CHANGED, EventType.CREATED):
                self._events.put_nowait(("delay", None))
            background(self._rearm(self._watch_delay))

        await self.zk.exists(self.paths.lost_bookie_recovery_delay, watch=cb)

    async def _watch_disable(self) -> None:
        def cb(_event) -> None:
            if not self._stopped:
                background(self._rearm(self._watch_disable))

        stat = await self.zk.exists(self.paths.ur_disable, watch=cb)
        self._enabled = stat is None
        self._enabled_changed.set()

    async def _watch_unrecoverable(self) -> None:
        """Log every unrecoverable-ledger record (``underreplication/unrecoverable/urL<id>``, written by
        the worker that found it) once, at ERROR, from the auditor only: an operator must bring a bookie
        back or accept the loss. The bookies that would bring the ledger back come first in the line."""
        def cb(event) -> None:
            if not self._stopped:
                background(self._rearm(self._watch_unrecoverable))

        try:
            names = await self.zk.get_children(self.paths.unrecoverable, watch=cb)
        except NoNodeError:
            await self.zk.exists(self.paths.unrecoverable, watch=cb)
            names = []
        current = set(names)
        self._unrecoverable_logged &= current
        for name in sorted(current - self._unrecoverable_logged):
            try:
                data, _ = await self.zk.get(f"{self.paths.unrecoverable}/{name}")
                doc = json.loads(data)
            except NoNodeError:
                continue
            except ValueError:
                doc = {}
            self._unrecoverable_logged.add(name)
            waiting = doc.get("waiting_for") or []
            log.error(f"ledger {doc.get('ledger', name)} is unrecoverable until one of these bookies returns: "
                      f"{', '.join(waiting) if waiting else 'none known (restore from elsewhere or accept the loss)'}",
                      ledger_id=doc.get("ledger"), entry_count=doc.get("entry_count"), reason=doc.get("reason"),
                      side_znode=f"{self.paths.unrecoverable}/{name}")

    async def _rearm(self, fn) -> None:
        try:
            await fn()
        except Exception as exc:  # noqa: BLE001 - retried on the next reconnect by the elector
            log.warning("could not re-arm a watch", error=str(exc))

    async def _wait_enabled(self) -> None:
        while not self._enabled:
            self._enabled_changed.clear()
            await self._enabled_changed.wait()

    # -- lost bookies -----------------------------------------------------------------------
    async def _decide_initial_membership(self) -> None:
        """Handle the membership events queued by the bookie watcher's first read before any periodic
        check starts. While AutoRecovery is disabled the events stay queued for the event loop (which
        waits for enable) and the periodic checks skip as disabled."""
        if not self._enabled:
            return
        queued = []
        while not self._events.empty():
            queued.append(self._events.get_nowait())
        other = [e for e in queued if e[0] != "bookies"]
        for e in other:
            self._events.put_nowait(e)
        if len(other) == len(queued):
            return
        d = await self._decide("bookies", None)
        if d is not None:
            await self._apply(d, "bookies")

    async def _event_loop(self) -> None:
        """Handle bookie changes, delay changes and the delayed audit one at a time.

        A retriable failure (``errors.is_retriable``) before the decision (reading the delay)
        re-queues the event; a failed audit is retried as an audit (the tracker already moved on),
        after a 1 s back-off. A failure retrying cannot fix (e.g. a garbage marker znode) is logged
        once with what to fix and counted in ``autorecovery_auditor_event_errors_total{retriable}``;
        the loop goes on with the next event instead of retrying it forever.
        """
        while True:
            kind, token = await self._events.get()
            try:
                d = await self._decide(kind, token)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a ZooKeeper hiccup must not end loss detection
                if self._event_failed(kind, exc):
                    await asyncio.sleep(1.0)
                    self._events.put_nowait((kind, token))
                continue
            if d is None:
                continue
            try:
                await self._apply(d, kind)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001
                if self._event_failed(kind, exc):
                    await asyncio.sleep(1.0)
                    self._events.put_nowait(("retry_audit", None))

    def _event_failed(self, kind: str, exc: Exception) -> bool:
        """Count and log a failed event; returns whether to retry it."""
        retry = is_retriable(exc)
        self._m["event_errors"]["true" if retry else "false"].inc()
        if retry:
            log.warning("handling an auditor event failed; retrying in 1 s", auditor_event=kind, error=repr(exc))
        else:
            log.error("handling an auditor event failed with an error retrying will not fix; not retried",
                      auditor_event=kind, error=repr(exc), error_type=type(exc).__name__)
        return retry

    async def _decide(self, kind: str, token) -> Decision | None:
        assert self.tracker is not None
        await self._wait_enabled()
        now = self.clock()
        if kind == "bookies":
            # coalesce a burst of membership changes into one decision on the latest view
            while not self._events.empty() and self._events._queue[0][0] == "bookies":  # type: ignore[attr-defined]
                self._events.get_nowait()
            delay = await self.urm.get_lost_bookie_recovery_delay()
            return self.tracker.on_bookies_changed(self._available(), delay, now, self.index.in_some_ensemble)
        if kind == "delay":
            delay = await self.urm.get_lost_bookie_recovery_delay()
            return self.tracker.on_delay_changed(delay, now)
        if kind == "fire":
            return self.tracker.on_pending_fired(now) if token == self._timer_token else None
        if kind == "maintenance":
            return await self._on_maintenance_change(now)
        if kind == "retry_audit":
            return Decision(audit_now=True)
        return None

    async def _apply(self, d: Decision, trigger: str) -> None:
        if d.cancelled:
            self._m["NUM_DELAYED_BOOKIE_AUDITS_CANCELLED"].inc(d.cancelled)
        if d.delayed:
            self._m["NUM_BOOKIE_AUDITS_DELAYED"].inc(d.delayed)
        if d.cancel_pending and self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_token += 1
        if d.schedule_at is not None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_token += 1
            token = self._timer_token
            delay = max(0.0, d.schedule_at - self.clock())
            log.info("delaying audit of lost bookies", lost=sorted(d.lost), delay_s=round(delay, 3))
            self._timer = asyncio.get_running_loop().call_later(delay, self._events.put_nowait, ("fire", token))
        if d.audit_now:
            if self._timer is not None and self.tracker is not None and not self.tracker.pending:
                self._timer.cancel()
                self._timer = None
            await self.audit_lost_bookies(trigger)

    async def _marked_now(self) -> set[int]:
        """Ledger ids marked right now (the watched marker set: no read once built), {} on failure."""
        try:
            return set(await self.urm.watched_marked_ids())
        except Exception as exc:  # noqa: BLE001 - history only: the episode then counts every mark
            log.warning("could not list the marked ledgers for the heal history", error=repr(exc))
            return set()

    async def _record_loss(self, lost: list[str], marks: dict[int, list[str]], before: set[int]) -> None:
        """Open a ``bookie-lost`` episode (``rack-lost`` when two or more lost bookies make up a whole
        failure domain) for the newly marked ledgers."""
        kind, subject = "bookie-lost", ",".join(lost)
        if len(lost) >= 2:
            racks = {self._location_of(b) for b in lost}
            if len(racks) == 1:
                rack = racks.pop()
                members = {b for b in self._available() | self.index.bookies() if self._location_of(b) == rack}
                if members and members <= set(lost) | (self.index.bookies() - self._available()):
                    kind, subject = "rack-lost", f"{rack} ({subject})"
        await self.history.record(kind, subject, marks, before)

    async def audit_lost_bookies(self, trigger: str = "manual") -> AuditReport:
        """Mark the ledgers of every bookie in the index that is neither writable nor read-only.

        Find phase: index lookup only (no ZooKeeper reads). Write phase: batched markers.
        Upstream AuditorBookieCheckTask.auditBookies (which re-reads every ledger's metadata).
        """
        before: set[int] = set()
        with self._m["AUDIT_BOOKIES_TIME"].time():
            ops0 = self.zk.ops
            t0 = self.clock()
            # no await between the caller's checks (a periodic run skips while a delayed audit is
            # pending) and this view of the lost bookies: a loss seen meanwhile is the delay's to handle
            available = self._available()
            lost = sorted(self.index.bookies() - available)
            marks = self._marks_after_holds(lost, available)
            t1 = self.clock()
            writes = 0
            history_ops = 0
            if marks:
                # the heal history's view of what was marked before (the watched marker set: read once,
                # then served from watches), outside the audit's ZooKeeper-op count as its episode write is
                o = self.zk.ops
                before = await self._marked_now()
                history_ops = self.zk.ops - o
                await self._wait_enabled()
                async with self._check_lock:
                    writes = await self.urm.mark_many(marks)
            t2 = self.clock()
            per_bookie: dict[str, list[int]] = {}
            for lid, bs in marks.items():
                for b in bs:
                    per_bookie.setdefault(b, []).append(lid)
            for lids in per_bookie.values():
                self._m["NUM_UNDER_REPLICATED_LEDGERS"].record(len(lids))
                self._m["UNDER_REPLICATED_LEDGERS_TOTAL_SIZE"].record(self.index.total_length(lids))
            if lost:
                self._m["URL_PUBLISH_TIME_FOR_LOST_BOOKIE"].record((t2 - t0) * 1000)
            ops = self.zk.ops - ops0 - history_ops
            self._zk_ops["bookie_check" if trigger == "bookie_check" else "lost_bookie"].inc(ops)
            self.audits += 1
            await self._publish_holds(self._pending_holds)
            rep = AuditReport(trigger, lost, len(marks), (t1 - t0) * 1000, (t2 - t1) * 1000, writes, ops)
            self.last_audit = rep
            if lost:
                log.info("audited lost bookies", trigger=trigger, lost=lost, ledgers=len(marks),
                         find_ms=round(rep.find_ms, 2), write_ms=round(rep.write_ms, 2), zk_ops=ops)
        if marks:
            await self._record_loss(sorted({b for bs in marks.values() for b in bs}), marks, before)
        return rep



__all__ = ["Auditor", "AuditorSettings", "AuditReport", "CheckResult", "LedgerTreeWatcher"]
