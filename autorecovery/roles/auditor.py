"""The Auditor: lost-bookie detection from an incremental index, and the periodic checks (EDGE).

Upstream ``replication/Auditor`` + ``AuditorBookieCheckTask``, ``AuditorCheckAllLedgersTask``,
``AuditorPlacementPolicyCheckTask``, ``AuditorReplicasCheckTask``, ``BookieLedgerIndexer``. The decisions
live in ``autorecovery.audit`` (pure); this module feeds them from ZooKeeper and the bookies and carries
out what they say.

Better than upstream:

* **Incremental index.** :class:`~autorecovery.zk.ledger_tree.LedgerTreeWatcher` builds the bookie → ledgers index once (on
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
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from autorecovery import metrics
from autorecovery.audit.decisions import Decision, LostBookieTracker
from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.maintenance import Holds, Window, data_first, holds
from autorecovery.audit.replicas import Bucket, classify, segment_bounds, should_check
from autorecovery.audit.schedule import first_run_s, next_run_s
from autorecovery.config.sections import AuditorSettings  # noqa: F401 (re-exported)
from autorecovery.errors import BookieError, NoSuchLedgerError, is_retriable
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState
from autorecovery.roles.checker import LedgerChecker
from autorecovery.roles.cluster_gauges import ClusterGauges
from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.bridge import EventType, NoNodeError, ZkClient
from autorecovery.zk.ledger_tree import LedgerTreeWatcher
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.maintenance import MaintenanceStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

log = structlog.get_logger("autorecovery.auditor")

SCOPE = "auditor"


# ------------------------------------------------------------------------------------------------
# settings
# ------------------------------------------------------------------------------------------------
# ------------------------------------------------------------------------------------------------
# the auditor
# ------------------------------------------------------------------------------------------------
class ForeignBookie(Exception):
    """The answer of a bookie that cannot tell which entries it holds (it advertises no protocol we speak,
    or it is a stock bookie whose storage does not list entries): unknown, never "missing"."""

@dataclass
class CheckResult:
    """Outcome of the last run of one check (for progress/admin output)."""

    name: str
    started_ms: int
    duration_ms: float
    ok: bool
    skipped: str = ""
    summary: dict[str, Any] = field(default_factory=dict)


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


class Auditor:
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
                                     foreign=self._foreign)
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
        self._pending_holds = Holds({}, {})
        self._lost_since: dict[str, float] = {}
        self._settle_timer: asyncio.TimerHandle | None = None
        self._check_lock = asyncio.Lock()  # marking by different tasks does not interleave per ledger set
        self._m = self._metrics(registry or metrics.REGISTRY)
        # cluster-wide gauges (under-replicated ledgers/bytes, unrecoverable, oldest marker age): only
        # the elected auditor exports them, refreshed on every marker change (roles/cluster_gauges.py)
        self.gauges = ClusterGauges(self.urm, zk, paths, self.index.total_length, registry or metrics.REGISTRY,
                                    self.wall_ms, quiet=self._check_lock)

    def _metrics(self, reg: metrics.MetricsRegistry) -> dict[str, Any]:
        op = ("NUM_UNDER_REPLICATED_LEDGERS", "UNDER_REPLICATED_LEDGERS_TOTAL_SIZE", "URL_PUBLISH_TIME_FOR_LOST_BOOKIE",
              "BOOKIE_TO_LEDGERS_MAP_CREATION_TIME", "AUDIT_BOOKIES_TIME", "CHECK_ALL_LEDGERS_TIME",
              "PLACEMENT_POLICY_CHECK_TIME", "REPLICAS_CHECK_TIME", "NUM_FRAGMENTS_PER_LEDGER", "NUM_BOOKIES_PER_LEDGER")
        cnt = ("NUM_LEDGERS_CHECKED", "NUM_BOOKIE_AUDITS_DELAYED", "NUM_DELAYED_BOOKIE_AUDITS_CANCELLED",
               "NUM_SKIPPING_CHECK_TASK_TIMES")
        gauges = ("NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY", "NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY",
                  "NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD", "NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY",
                  "NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY",
                  "NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY")
        m: dict[str, Any] = {}
        for n in op:
            m[n] = reg.op_stats(SCOPE, n)
        for n in cnt:
            m[n] = reg.counter(SCOPE, n)
        for n in gauges:
            m[n] = reg.gauge(SCOPE, n)
        m["election_attempts"] = reg.counter(SCOPE, "election_attempts")
        m["index_ledgers"] = reg.gauge("autorecovery", "auditor_index_ledgers")
        m["index_ledgers"].set_function(lambda: len(self.index))
        m["index_mismatches"] = reg.counter("autorecovery", "auditor_index_reconcile_mismatches_total")
        m["index_drift"] = reg.gauge("autorecovery", "auditor_index_drift_ledgers")
        m["index_checks"] = reg.counter("autorecovery", "auditor_index_checks_total")
        m["index_drift_found"] = reg.counter("autorecovery", "auditor_index_drift_found_total")
        m["index_lost_watches"] = reg.gauge("autorecovery", "auditor_index_lost_watches")
        m["index_lost_watches"].set_function(lambda: self.tree.lost_watches)
        m["maint_windows"] = reg.gauge("autorecovery", "maintenance_windows")
        m["maint_held"] = reg.gauge("autorecovery", "maintenance_held_bookies")
        m["guard_domains"] = reg.gauge("autorecovery", "rack_loss_guard_domains")
        m["guard_held"] = reg.gauge("autorecovery", "rack_loss_guard_held_bookies")
        m["data_first"] = reg.counter("autorecovery", "maintenance_overridden_ledgers_total")
        m["event_errors"] = {r: reg.counter("autorecovery", "auditor_event_errors_total", labels={"retriable": r},
                                            doc="failed bookie-change/delay/audit events, by retriable")
                             for r in ("true", "false")}
        self._zk_ops = {k: reg.counter("autorecovery", "audit_zk_ops_total", labels={"audit": k})
                        for k in ("lost_bookie", "bookie_check", "check_all_ledgers", "placement_check",
                                  "replicas_check", "index_reconcile", "index_consistency")}
        return m

    # -- properties -------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._started and not self._stopped

    @property
    def pending_audit_at(self) -> float | None:
        """Clock time (s) of the pending delayed lost-bookie audit, or None."""
        return self.tracker.pending_at if self.tracker else None

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
        # Upstream runs the first membership event (the watch fires right after registration) on the
        # auditor thread *before* the start-up bookie check, so a bookie that died with the previous
        # auditor is put under lostBookieRecoveryDelay first and the bookie check then skips (#3818).
        # Decide on the initial view here, synchronously, for the same order (issue 9: the new auditor
        # used to audit in the same millisecond it said it was delaying).
        await self._decide_initial_membership()
        self._spawn(self._event_loop(), "events")
        self._spawn(self.gauges.run(), "cluster_gauges")
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
        if self._settle_timer is not None:
            self._settle_timer.cancel()
        for g in ("maint_windows", "maint_held", "guard_domains", "guard_held"):
            self._m[g].set(0)  # this node is not the auditor any more: its figures are not the cluster's
        self.tree.stop()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.gauges.reset()
        await self.tree.settle()
        if self.bookie_watcher is not None:
            await self.bookie_watcher.stop()
        try:
            await self.urm.close()
        except Exception:  # noqa: BLE001 - the session may be gone
            pass
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
        now = self.clock()
        for b in list(self._lost_since):
            if b in available:
                del self._lost_since[b]
        for b in self.index.bookies() - available:
            self._lost_since.setdefault(b, now)  # when this auditor first saw it gone (rack-loss guard)
        self._events.put_nowait(("bookies", None))

    async def _watch_delay(self) -> None:
        def cb(event) -> None:
            if self._stopped:
                return
            if event.type in (EventType.CHANGED, EventType.CREATED):
                self._events.put_nowait(("delay", None))
            asyncio.ensure_future(self._rearm(self._watch_delay))

        await self.zk.exists(self.paths.lost_bookie_recovery_delay, watch=cb)

    async def _watch_disable(self) -> None:
        def cb(_event) -> None:
            if not self._stopped:
                asyncio.ensure_future(self._rearm(self._watch_disable))

        stat = await self.zk.exists(self.paths.ur_disable, watch=cb)
        self._enabled = stat is None
        self._enabled_changed.set()

    async def _watch_unrecoverable(self) -> None:
        """Log every unrecoverable-ledger record (``underreplication/unrecoverable/urL<id>``, written by
        the worker that found it) once, at ERROR, from the auditor only: an operator must bring a bookie
        back or accept the loss. The bookies that would bring the ledger back come first in the line."""
        def cb(event) -> None:
            if not self._stopped:
                asyncio.ensure_future(self._rearm(self._watch_unrecoverable))

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

    async def _watch_maintenance(self) -> None:
        """Load the maintenance records (child watch re-armed on every change) and re-evaluate."""
        def cb(event) -> None:
            if not self._stopped:
                asyncio.ensure_future(self._rearm(self._watch_maintenance))

        self.windows = await self.maintenance.list(watch=cb)
        now = self.wall_ms()
        live = [w for w in self.windows if not w.expired(now)]
        self._m["maint_windows"].set(len([w for w in live if w.kind != "override"]))
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        if self.windows:
            nxt = min(w.expires_ms for w in self.windows)
            delay_s = max(0.0, (nxt - now) / 1000.0)
            self._expiry_timer = asyncio.get_running_loop().call_later(
                delay_s, self._events.put_nowait, ("maintenance", None))
        if self._started and not self._stopped:
            self._events.put_nowait(("maintenance", None))

    async def _on_maintenance_change(self, now: float) -> Decision | None:
        """Windows changed or expired: enforce expiry; a bookie no longer covered is lost anew (the
        normal lostBookieRecoveryDelay applies from now); a lifted guard is audited at once."""
        assert self.tracker is not None
        expired = await self.maintenance.remove_expired(self.windows, self.wall_ms())
        if expired:
            self.windows = [w for w in self.windows if w not in expired]
        available = self._available()
        lost = self.index.bookies() - available
        h = holds(lost, available, self._location_of, self.windows, self.wall_ms(),
                  self.settings.autorecovery_down_out_subtree_limit)
        released = (set(self.last_holds.windows) - set(h.windows)) & lost
        unguarded = (self.last_holds.held - set(self.last_holds.windows)) - h.held
        decision = None
        if released:
            log.info("maintenance ended for lost bookies; lostBookieRecoveryDelay applies from now",
                     bookies=sorted(released))
            self.tracker.known |= released
            delay = await self.urm.get_lost_bookie_recovery_delay()
            decision = self.tracker.on_bookies_changed(available, delay, now, self.index.in_some_ensemble)
        if unguarded & lost:
            log.warning("rack-loss guard lifted (override or config); auditing the held bookies now",
                        bookies=sorted(unguarded & lost))
            decision = Decision(audit_now=True)
        await self._publish_holds(h)
        return decision

    def _location_of(self, bookie: str) -> str:
        if self.policy is None:
            return "/default-rack"
        try:
            return self.policy.location_of(bookie)
        except Exception:  # noqa: BLE001 - an unresolvable bookie sits in the default rack
            return "/default-rack"

    async def _publish_holds(self, h: Holds) -> None:
        """Log, export and publish (``maintenance-state``) what is held back, when it changed."""
        self._m["maint_held"].set(len(h.windows))
        self._m["guard_domains"].set(len(h.guarded))
        self._m["guard_held"].set(sum(len(b) for b in h.guarded.values()))
        if (dict(h.windows), dict(h.guarded)) == (dict(self.last_holds.windows), dict(self.last_holds.guarded)):
            return
        for d, bs in sorted(h.guarded.items()):
            if d not in self.last_holds.guarded:
                log.warning(f"rack {d} lost as a whole: waiting (autorecoveryDownOutSubtreeLimit="
                            f"{self.settings.autorecovery_down_out_subtree_limit}); copies start only for ledgers "
                            "that would fall below AQ, or after `shell maintenance override --rack`",
                            rack=d, bookies=sorted(bs))
        for b, w in sorted(h.windows.items()):
            if b not in self.last_holds.windows:
                log.info("lost bookie in a maintenance window: not audited", bookie_id=b, window=w.target,
                         reason=w.reason, expires_ms=w.expires_ms)
        self.last_holds = h
        state = {"windows": {b: {"kind": w.kind, "target": w.target, "reason": w.reason, "expires_ms": w.expires_ms}
                             for b, w in h.windows.items()},
                 "guard": {d: sorted(bs) for d, bs in h.guarded.items()},
                 "level": self.settings.autorecovery_down_out_subtree_limit or "none",
                 "auditor": self.bookie_id, "time_ms": self.wall_ms()}
        try:
            await self.maintenance.write_state(state)
        except Exception as exc:  # noqa: BLE001 - the next change writes it again
            log.warning("could not publish the maintenance state", error=str(exc))

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

    async def audit_lost_bookies(self, trigger: str = "manual") -> AuditReport:
        """Mark the ledgers of every bookie in the index that is neither writable nor read-only.

        Find phase: index lookup only (no ZooKeeper reads). Write phase: batched markers.
        Upstream AuditorBookieCheckTask.auditBookies (which re-reads every ledger's metadata).
        """
        with self._m["AUDIT_BOOKIES_TIME"].time():
            ops0 = self.zk.ops
            t0 = self.clock()
            available = self._available()
            lost = sorted(self.index.bookies() - available)
            marks = self._marks_after_holds(lost, available)
            t1 = self.clock()
            writes = 0
            if marks:
                await self._wait_enabled()
                async with self._check_lock:
                    writes = await self.urm.mark_many(marks)
            t2 = self.clock()
            per_bookie: dict[str, list[int]] = {}
            for lid, bs in marks.items():
                for b in bs:
                    per_bookie.setdefault(b, []).append(lid)
            for b, lids in per_bookie.items():
                self._m["NUM_UNDER_REPLICATED_LEDGERS"].record(len(lids))
                self._m["UNDER_REPLICATED_LEDGERS_TOTAL_SIZE"].record(self.index.total_length(lids))
            if lost:
                self._m["URL_PUBLISH_TIME_FOR_LOST_BOOKIE"].record((t2 - t0) * 1000)
            ops = self.zk.ops - ops0
            self._zk_ops["bookie_check" if trigger == "bookie_check" else "lost_bookie"].inc(ops)
            self.audits += 1
            await self._publish_holds(self._pending_holds)
            rep = AuditReport(trigger, lost, len(marks), (t1 - t0) * 1000, (t2 - t1) * 1000, writes, ops)
            self.last_audit = rep
            if lost:
                log.info("audited lost bookies", trigger=trigger, lost=lost, ledgers=len(marks),
                         find_ms=round(rep.find_ms, 2), write_ms=round(rep.write_ms, 2), zk_ops=ops)
            return rep

    def _marks_after_holds(self, lost: list[str], available: frozenset[str]) -> dict[int, list[str]]:
        """Ledgers to mark for ``lost``, minus what maintenance windows and the rack-loss guard hold
        back, plus (data first) every ledger the losses leave with a fragment below AQ."""
        now_s = self.clock()
        for b in list(self._lost_since):
            if b in available:
                del self._lost_since[b]
        for b in lost:
            self._lost_since.setdefault(b, now_s)
        settle = float(self.tracker.previous_delay) if self.tracker is not None else 0.0
        h = holds(lost, available, self._location_of, self.windows, self.wall_ms(),
                  self.settings.autorecovery_down_out_subtree_limit, lost_since_s=self._lost_since, now_s=now_s,
                  settle_s=settle)
        self._pending_holds = h
        if h.settle_at_s is not None:
            if self._settle_timer is not None:
                self._settle_timer.cancel()
            self._settle_timer = asyncio.get_running_loop().call_later(
                max(0.0, h.settle_at_s - now_s) + 0.01, self._events.put_nowait, ("retry_audit", None))
            log.info("rack-loss guard: letting lost bookies settle before auditing them",
                     bookies=sorted(h.settling), settle_s=settle)
        all_marks = self.index.ledgers_to_mark(lost)
        held = h.held
        if not held:
            return all_marks
        lost_set = set(lost)
        planned = set(h.windows)
        marks: dict[int, list[str]] = {}
        overridden = []
        for lid, bs in all_marks.items():
            free = [b for b in bs if b not in held]
            md = self.index.get(lid)
            if md is not None and data_first(md, lost_set, planned):
                marks[lid] = bs
                if len(free) < len(bs):
                    overridden.append(lid)
            elif free:
                marks[lid] = free
        if overridden:
            self._m["data_first"].inc(len(overridden))
            log.warning("data first: ledgers would have fewer than AQ readable copies; marking them despite "
                        "maintenance windows / the rack-loss guard", ledgers=len(overridden),
                        ledger_ids=overridden[:20], held=sorted(held))
        return marks

    # -- periodic checks --------------------------------------------------------------------
    async def _sleep_until(self, at: float) -> None:
        delay = at - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _periodic(self, name: str, interval_s: int, first_at: float | None, run, *, ctime: str | None,
                        skip_rules: bool = True) -> None:
        """Fixed-rate runner: runs never overlap; an over-long run makes the next start right after."""
        if first_at is None:
            return
        at = first_at
        while True:
            await self._sleep_until(at)
            scheduled = at
            started_ms, t0 = self.wall_ms(), self.clock()
            if skip_rules and self.tracker is not None and self.tracker.pending:
                self._m["NUM_SKIPPING_CHECK_TASK_TIMES"].inc()
                self.last_results[name] = CheckResult(name, started_ms, 0, True, skipped="delayed audit pending")
                log.info("skipping periodic check: a delayed lost-bookie audit is pending", check=name)
            elif skip_rules and not self._enabled:
                self.last_results[name] = CheckResult(name, started_ms, 0, True, skipped="autorecovery disabled")
                log.info("skipping periodic check: AutoRecovery is disabled", check=name)
            else:
                ops0 = self.zk.ops
                ok, summary = True, {}
                try:
                    summary = await run() or {}
                    ok = summary.get("ok", True)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - one failed run does not stop the schedule
                    ok = False
                    summary = {"error": repr(exc)}
                    # a retriable failure (ZooKeeper's ConnectionLoss during a quorum change) is retried
                    # by the next run: nobody must act (issue 26, the chaos campaign's ZooKeeper faults)
                    (log.warning if getattr(exc, "retriable", False) else log.error)(
                        "periodic check failed", check=name, error=repr(exc))
                self._zk_ops[name].inc(self.zk.ops - ops0)
                self.last_results[name] = CheckResult(name, started_ms, (self.clock() - t0) * 1000, ok, summary=summary)
                if ok and ctime is not None and not summary.get("aborted"):
                    try:
                        await self.urm.set_check_ctime(ctime, self.wall_ms())
                    except Exception as exc:  # noqa: BLE001 - the next run writes it again
                        (log.warning if getattr(exc, "retriable", False) else log.error)(
                            "could not write the check's ctime", check=name, error=repr(exc))
            if interval_s <= 0:
                return
            at = next_run_s(scheduled, interval_s, self.clock())

    async def _bookie_check(self) -> dict:
        rep = await self.audit_lost_bookies("bookie_check")
        return {"lost": rep.lost, "ledgers": rep.ledgers}

    async def _reconcile(self) -> dict:
        rep = await self.tree.reconcile()
        self._m["index_mismatches"].inc(rep.mismatches)
        return {"added": len(rep.added), "removed": len(rep.removed), "changed": len(rep.changed)}

    async def _index_consistency(self) -> dict:
        """Ours (issue 9): count + digest of the ledger ids in the tree against the index, on a short
        schedule; drift is healed, logged and exported (``autorecovery_auditor_index_drift_ledgers``)."""
        rep = await self.tree.check_consistency()
        self._m["index_checks"].inc()
        self._m["index_drift"].set(rep.drift)
        if rep.drift:
            self._m["index_drift_found"].inc(rep.drift)
        return {"tree": rep.tree, "index": rep.index, "drift": rep.drift}

    async def _check_all_ledgers(self) -> dict:
        """Upstream AuditorCheckAllLedgersTask: read first/last (or a share) of every fragment."""
        op = self._m["CHECK_ALL_LEDGERS_TIME"]
        t0 = self.clock()
        sem = asyncio.Semaphore(self.settings.auditor_max_number_of_concurrent_open_ledger_operations)
        marked = 0
        failed = 0
        aborted = False

        acquire_timeout_s = self.settings.auditor_acquire_concurrent_open_ledger_operations_time_out_msec / 1000
        timed_out = 0

        async def one(lid: int, md: LedgerMetadata) -> None:
            nonlocal marked, failed, timed_out
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that arrives as the
                # semaphore is granted, and a stop would then hang on this task
                async with asyncio.timeout(acquire_timeout_s):
                    await sem.acquire()
            except TimeoutError:
                # upstream ends the run early "as if successful" (and writes the ctime); we count it
                # as a failed run so the ctime is not written for ledgers that were never checked
                timed_out += 1
                return
            try:
                if not self._enabled:
                    return
                try:
                    if md.digest_type == DigestType.HMAC:
                        # the index keeps no passwords: an HMAC ledger's entries are verified with the
                        # password of its metadata (read like upstream's checker opens each ledger)
                        md, _version = await LedgerStore(self.zk, self.paths).read(lid)
                    bad = await self.checker.check(lid, md)
                except NoSuchLedgerError:
                    return  # deleted since it was indexed
                except Exception as exc:  # noqa: BLE001
                    failed += 1
                    log.warning("ledger check failed", ledger_id=lid, error=repr(exc))
                    return
                self._m["NUM_LEDGERS_CHECKED"].inc()
                self._m["NUM_FRAGMENTS_PER_LEDGER"].record(len(md.segments))
                self._m["NUM_BOOKIES_PER_LEDGER"].record(len(md.all_bookies()))
                if bad and self._enabled and lid in self.index:
                    replicas = sorted({b for f in bad for b in f.bad_bookies})
                    await self.urm.mark_underreplicated(lid, replicas)
                    marked += 1
                    log.info("periodic check marked ledger", ledger_id=lid, replicas=replicas)
            finally:
                sem.release()

        items = self.index.items()  # decoded a chunk at a time (compact index: issue 13)
        checked = 0
        while True:
            if not self._enabled:
                aborted = True
                log.info("aborting periodic check: AutoRecovery was disabled")
                break
            chunk = list(itertools.islice(items, 1000))
            if not chunk:
                break
            checked += len(chunk)
            await asyncio.gather(*(one(lid, md) for lid, md in chunk))
        ok = failed == 0 and timed_out == 0
        op.record((self.clock() - t0) * 1000, success=ok)
        return {"ok": ok, "checked": checked, "marked": marked, "failed": failed, "timed_out": timed_out,
                "aborted": aborted}

    async def _placement_check(self) -> dict:
        """Upstream AuditorPlacementPolicyCheckTask over CLOSED ledgers (BP-34), marking with BP-54."""
        t0 = self.clock()
        grace = self.settings.underreplicated_ledger_recovery_grace_period
        elapsed_grace = 0
        if grace > 0:
            now = self.wall_ms()
            old = [m.ledger_id async for m in self.urm.list_underreplicated()
                   if m.ctime >= 0 and (now - m.ctime) / 1000 > grace]
            elapsed_grace = len(old)
            if old:
                log.error("under-replicated ledgers not recovered within the grace period", ledgers=old[:100],
                          count=len(old), grace_s=grace)
        not_adhering: list[int] = []
        soft = 0
        closed = 0
        for lid, md in self.index.items():
            if md.state != LedgerState.CLOSED:
                continue
            closed += 1
            worst = "MEETS_STRICT"
            for seg in md.segments:
                res = self.policy.is_ensemble_adhering(list(seg.ensemble), md.write_quorum, md.ack_quorum)
                name = getattr(res, "name", str(res))
                if name == "FAIL":
                    worst = "FAIL"
                    break
                if name == "MEETS_SOFT":
                    worst = "MEETS_SOFT"
            if worst == "FAIL":
                not_adhering.append(lid)
            elif worst == "MEETS_SOFT":
                soft += 1
        marked = 0
        if not_adhering and self.settings.repaired_placement_policy_not_adhering_bookie_enabled and self._enabled:
            async with self._check_lock:
                await self.urm.mark_many({lid: [] for lid in not_adhering})
            marked = len(not_adhering)
        self._m["NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY"].set(len(not_adhering))
        self._m["NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY"].set(soft)
        self._m["NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD"].set(elapsed_grace)
        self._m["PLACEMENT_POLICY_CHECK_TIME"].record((self.clock() - t0) * 1000)
        return {"closed": closed, "not_adhering": len(not_adhering), "softly_adhering": soft,
                "elapsed_grace": elapsed_grace, "marked": marked}

    async def _replicas_check(self) -> dict:
        """Upstream AuditorReplicasCheckTask (GET_LIST_OF_ENTRIES_OF_LEDGER per bookie), over all ledgers
        (upstream's gauges cover only the last range), optionally marking (ours).

        Returns ``checked`` (ledgers), the ledger ids per bucket, ``marked``, ``not_asked`` (answers
        that could not be had: a bookie speaking no protocol of ours, or a stock bookie whose storage
        does not list entries; never counted as missing copies) and ``unanswered`` (bookies that failed
        to answer), both counted per ledger and bookie."""
        t0 = self.clock()
        marked_ids = await self.urm.list_marked_ids()
        sem = asyncio.Semaphore(100)
        buckets = {b: [] for b in Bucket}
        to_mark: dict[int, list[str]] = {}
        counts = {"not_asked": 0, "unanswered": 0}

        foreign = self._foreign()

        async def ask(bookie: str, lid: int):
            if bookie in foreign:  # never false-mark: its answer is unknown, not "holds nothing"
                self.checker.skip_foreign(bookie, foreign[bookie], lid)
                return ForeignBookie(bookie)
            try:
                return await self.bookies.get_list_of_entries(bookie, lid)
            except BookieError as exc:
                if exc.status == "EUNSUPPORTED":  # a stock bookie on DbLedgerStorage: unknown, never "missing"
                    return ForeignBookie(bookie)
                return None if exc.status == "ENOLEDGER" else exc
            except Exception as exc:  # noqa: BLE001
                return exc

        async def one(lid: int, md: LedgerMetadata) -> None:
            async with sem:
                bookies = sorted({b for _, _, ens in segment_bounds(md) for b in ens})
                answers = dict(zip(bookies, await asyncio.gather(*(ask(b, lid) for b in bookies))))
                v = classify(md, answers)
                buckets[v.bucket].append(lid)
                if v.bucket != Bucket.OK:
                    # ERROR only when a person must act: an entry with no copy, or copies nobody will
                    # repair (marking off). A ledger at >= AQ copies that is marked here heals by itself
                    # (issue 26: the chaos campaign's disk-full fault leaves such ledgers).
                    heals = (v.bucket == Bucket.LESS_THAN_WQ and bool(v.bookies_missing)
                             and self.settings.auditor_replicas_check_mark_under_replicated)
                    (log.warning if heals else log.error)(
                        "ledger has entries with fewer replicas than WQ", ledger_id=lid, bucket=v.bucket.value,
                        least_replicas=v.least_replicas, missing_entries=v.missing_total,
                        sample_entries=sorted(v.missing_counts), marked_for_repair=heals)
                    if v.bookies_missing:
                        to_mark[lid] = v.bookies_missing
                unanswered = [b for b in v.unavailable if not isinstance(answers.get(b), ForeignBookie)]
                counts["not_asked"] += sum(1 for a in answers.values() if isinstance(a, ForeignBookie))
                counts["unanswered"] += len(unanswered)
                if unanswered:
                    log.warning("bookies did not answer the replicas check", ledger_id=lid, bookies=unanswered)

        items = ((lid, md) for lid, md in self.index.items() if should_check(md) and lid not in marked_ids)
        checked = 0
        while chunk := list(itertools.islice(items, 1000)):
            checked += len(chunk)
            await asyncio.gather(*(one(lid, md) for lid, md in chunk))
        self._m["NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY"].set(len(buckets[Bucket.NO_REPLICA]))
        self._m["NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY"].set(len(buckets[Bucket.LESS_THAN_AQ]))
        self._m["NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY"].set(len(buckets[Bucket.LESS_THAN_WQ]))
        marked = 0
        if to_mark and self.settings.auditor_replicas_check_mark_under_replicated and self._enabled:
            async with self._check_lock:
                await self.urm.mark_many(to_mark)
            marked = len(to_mark)
        self._m["REPLICAS_CHECK_TIME"].record((self.clock() - t0) * 1000)
        return {"checked": checked, "no_replica": sorted(buckets[Bucket.NO_REPLICA]),
                "less_than_aq": sorted(buckets[Bucket.LESS_THAN_AQ]),
                "less_than_wq": sorted(buckets[Bucket.LESS_THAN_WQ]), "marked": marked, **counts}

    # -- manual triggers (admin/tests) ------------------------------------------------------
    async def run_check(self, name: str) -> dict:
        """Run one check now, outside its schedule (``bookie_check``, ``check_all_ledgers``,
        ``placement_check``, ``replicas_check``, ``index_reconcile``, ``index_consistency``)."""
        fn = {"bookie_check": self._bookie_check, "check_all_ledgers": self._check_all_ledgers,
              "placement_check": self._placement_check, "replicas_check": self._replicas_check,
              "index_reconcile": self._reconcile, "index_consistency": self._index_consistency}[name]
        return await fn()


__all__ = ["Auditor", "AuditorSettings", "AuditReport", "CheckResult", "LedgerTreeWatcher"]
