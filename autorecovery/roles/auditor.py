"""The Auditor: lost-bookie detection from an incremental index, and the periodic checks (EDGE).

Upstream ``replication/Auditor`` + ``AuditorBookieCheckTask``, ``AuditorCheckAllLedgersTask``,
``AuditorPlacementPolicyCheckTask``, ``AuditorReplicasCheckTask``, ``BookieLedgerIndexer``. The decisions
live in ``autorecovery.audit`` (pure); this module feeds them from ZooKeeper and the bookies and carries
out what they say. The Auditor holds its parts as attributes, each its own module and class; the
state they share is one declared object, :class:`~autorecovery.roles.auditor_state.AuditorState`:

* this module — lifecycle, watches, the event loop and the lost-bookie audit, in the shape
  read (registrations, the delay znode, the index) -> decide (:func:`autorecovery.audit.lost_bookies.decide`,
  pure) -> act (timer, markers, metrics, logs);
* :mod:`autorecovery.roles.auditor_checks` (``checks``) — the periodic checks and their schedule;
* :mod:`autorecovery.roles.auditor_holds` (``holds``) — maintenance windows and the rack-loss guard;
* :mod:`autorecovery.roles.auditor_history` (``history``) — heal episodes and the published state;
* :mod:`autorecovery.roles.auditor_metrics` (``metrics``) — the metric handles;
* :mod:`autorecovery.roles.auditor_state` — the shared state, the typed events and their queue.

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
import contextlib
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from autorecovery import metrics
from autorecovery.aio import background
from autorecovery.audit.decisions import Decision, LostBookieTracker
from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.lost_bookies import Inputs, LostEvent, LostState, decide, observe
from autorecovery.audit.maintenance import Window
from autorecovery.audit.schedule import first_run_s
from autorecovery.config.sections import AuditorSettings
from autorecovery.errors import is_retriable
from autorecovery.roles.auditor_checks import PeriodicChecks, marked_now
from autorecovery.roles.auditor_history import HealRecorder
from autorecovery.roles.auditor_holds import MaintenanceHolds
from autorecovery.roles.auditor_metrics import AuditorMetrics
from autorecovery.roles.auditor_state import AuditorEvent, AuditorState, AuditReport, CheckResult, rearm
from autorecovery.roles.checker import LedgerChecker
from autorecovery.roles.cluster_gauges import UNRECOVERABLE, UR_BYTES, UR_LEDGERS, ClusterGauges
from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.bridge import BadVersionError, EventType, NoNodeError, ZkClient
from autorecovery.zk.ledger_tree.tree_watcher import LedgerTreeWatcher
from autorecovery.zk.maintenance import MaintenanceStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

log = structlog.get_logger("autorecovery.auditor")

#: the lost-bookie reducer's event for each auditor event it handles (MAINTENANCE is the holds' first)
_LOST_EVENT = {AuditorEvent.BOOKIES: LostEvent.BOOKIES, AuditorEvent.DELAY: LostEvent.DELAY,
               AuditorEvent.FIRE: LostEvent.FIRE, AuditorEvent.RETRY_AUDIT: LostEvent.RETRY_AUDIT}


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

    Parts (attributes): :attr:`state` (shared), :attr:`checks`, :attr:`holds`, :attr:`history`,
    :attr:`metrics`, :attr:`gauges`. Properties for admin/progress: :attr:`index`,
    :attr:`pending_audit_at`, :attr:`last_audit`, :attr:`last_results`, :attr:`running`.
    """

    def __init__(self, zk: ZkClient, paths: Paths, settings: AuditorSettings, policy: Any, bookies: Any, *,
                 bookie_id: str, clock: Callable[[], float] | None = None, wall_ms: Callable[[], int] | None = None,
                 registry: metrics.MetricsRegistry | None = None, update_policy: bool = True) -> None:
        reg = registry or metrics.REGISTRY
        self.zk = zk
        self.paths = paths
        self.settings = settings
        self.policy = policy
        self.update_policy = update_policy
        self.bookies = bookies
        self.bookie_id = bookie_id
        self.clock: Callable[[], float] = clock or time.monotonic
        self.wall_ms: Callable[[], int] = wall_ms or (lambda: int(time.time() * 1000))
        self.state = AuditorState()
        self._events = self.state.events
        self.urm = UnderreplicationManager(zk, paths, store_ctime=settings.store_system_time_as_ledger_underreplicated_mark_time,
                                           now_ms=self.wall_ms)
        self.index = BookieLedgerIndex()
        self.tree = LedgerTreeWatcher(zk, paths, self.index,
                                      concurrency=settings.auditor_max_number_of_concurrent_open_ledger_operations)
        self.checker = LedgerChecker(bookies, self.state.available,
                                     verification_percentage=settings.auditor_ledger_verification_percentage,
                                     in_flight=settings.in_flight_read_entry_num_in_ledger_checker,
                                     foreign=self.state.foreign, credentials=settings.recovery)
        self.last_audit: AuditReport | None = None
        self.audits = 0
        self._tasks: list[asyncio.Task[Any]] = []
        self._timer: asyncio.TimerHandle | None = None  # the delayed lost-bookie audit
        self._timer_token = 0
        self._unrecoverable_logged: set[str] = set()
        self.maintenance = MaintenanceStore(zk, paths)
        self.metrics = AuditorMetrics(reg, lambda: len(self.index), lambda: self.tree.lost_watches)
        self._m = self.metrics.m
        # cluster-wide gauges (under-replicated ledgers/bytes, unrecoverable, oldest marker age): only
        # the elected auditor exports them, refreshed on every marker change (roles/cluster_gauges.py)
        self.gauges = ClusterGauges(self.urm, zk, paths, self.index.total_length, reg,
                                    self.wall_ms, quiet=self.state.check_lock,
                                    top_namespaces=settings.auditor_topic_metrics_max_namespaces)
        # heal episodes and the state every node's `shell overview` reads (roles/auditor_history.py)
        self.history = HealRecorder(zk, paths, self.urm, self.index, bookie_id=bookie_id, wall_ms=self.wall_ms,
                                    checks=lambda: self.state.last_results, figures=self._figures, registry=reg)
        self.holds = MaintenanceHolds(self.state, settings=settings, index=self.index, urm=self.urm,
                                      store=self.maintenance, policy=policy, metrics=self._m, bookie_id=bookie_id,
                                      clock=self.clock, wall_ms=self.wall_ms)
        self.checks = PeriodicChecks(self.state, zk=zk, paths=paths, settings=settings, index=self.index,
                                     tree=self.tree, urm=self.urm, checker=self.checker, bookies=bookies,
                                     policy=policy, history=self.history, metrics=self._m,
                                     zk_ops=self.metrics.zk_ops, audit=self.audit_lost_bookies,
                                     clock=self.clock, wall_ms=self.wall_ms)

    # -- properties -------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.state.started and not self.state.stopped

    @property
    def tracker(self) -> LostBookieTracker | None:
        """The ``lostBookieRecoveryDelay`` state (None before start)."""
        return self.state.tracker

    @property
    def bookie_watcher(self) -> BookieWatcher | None:
        return self.state.bookie_watcher

    @property
    def windows(self) -> list[Window]:
        """The maintenance windows this auditor loaded."""
        return self.state.windows

    @property
    def last_results(self) -> dict[str, CheckResult]:
        """Check name -> its last run."""
        return self.state.last_results

    @property
    def pending_audit_at(self) -> float | None:
        """Clock time (s) of the pending delayed lost-bookie audit, or None."""
        t = self.state.tracker
        return t.pending_at if t is not None else None

    def _figures(self) -> dict[str, int]:
        """The cluster gauges' under-replicated ledgers, bytes and unrecoverable ledgers (for the history state)."""
        return {"ledgers": int(self.gauges.g[UR_LEDGERS].value), "bytes": int(self.gauges.g[UR_BYTES].value),
                "unrecoverable": int(self.gauges.g[UNRECOVERABLE].value)}

    def _available(self) -> frozenset[str]:
        return self.state.available()

    async def run_check(self, name: str) -> dict[str, Any]:
        """Run one check now, outside its schedule (``bookie_check``, ``check_all_ledgers``,
        ``placement_check``, ``replicas_check``, ``index_reconcile``, ``index_consistency``).

        Raises:
            KeyError: an unknown check name.
        """
        return await self.checks.run_check(name)

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Validate/create the UR layout, seed the delay znode, build the index, watch bookies and the
        delay znode, and start the periodic checks.

        Raises:
            CompatibilityError: bad under-replication LAYOUT. ZooKeeperError: ZooKeeper failures.
        """
        st = self.state
        if st.started:
            return
        st.started = True
        s = self.settings
        await self.urm.init()
        await self.urm.init_lost_bookie_recovery_delay(s.lost_bookie_recovery_delay)
        delay = await self.urm.get_lost_bookie_recovery_delay()
        try:
            cookies = await self.zk.get_children(self.paths.cookies)
        except NoNodeError:
            cookies = []
        st.lost = LostState(LostBookieTracker(cookies, delay))
        t0 = self.clock()
        n = await self.tree.build()
        self._m["BOOKIE_TO_LEDGERS_MAP_CREATION_TIME"].record((self.clock() - t0) * 1000)
        log.info("auditor index built", ledgers=n, bookies=len(self.index.bookies()), ms=round((self.clock() - t0) * 1000))
        await self._watch_disable()
        st.bookie_watcher = BookieWatcher(self.zk, self.paths)
        st.bookie_watcher.add_listener(self._on_bookies)
        await st.bookie_watcher.start()
        await self._watch_delay()
        await self._watch_unrecoverable()
        await self.holds.watch()
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
        c = self.checks
        now_s, now_ms = self.clock(), self.wall_ms()
        self._spawn(c.periodic("bookie_check", s.auditor_periodic_bookie_check_interval,
                               first_run_s(s.auditor_periodic_bookie_check_interval, None, now_s, now_ms),
                               c.bookie_check, ctime=None), "bookie_check")
        for name, interval, which, run in (
            ("check_all_ledgers", s.auditor_periodic_check_interval, "checkallledgers", c.check_all_ledgers),
            ("placement_check", s.auditor_periodic_placement_policy_check_interval, "placementpolicycheck",
             c.placement_check),
            ("replicas_check", s.auditor_replicas_check_interval, "replicascheck", c.replicas_check),
        ):
            if interval <= 0 or (name == "placement_check" and self.policy is None):
                continue
            ctime = await self.urm.get_check_ctime(which)
            at = first_run_s(interval, ctime, now_s, now_ms)
            log.info("scheduled periodic check", check=name, interval_s=interval,
                     initial_delay_s=None if at is None else round(at - now_s, 3))
            self._spawn(c.periodic(name, interval, at, run, ctime=which), name)
        if s.auditor_ledger_index_check_interval > 0:
            iv = s.auditor_ledger_index_check_interval
            self._spawn(c.periodic("index_consistency", iv, now_s + iv, c.index_consistency, ctime=None,
                                   skip_rules=False), "index_consistency")
        if s.auditor_ledger_index_reconcile_interval > 0:
            iv = s.auditor_ledger_index_reconcile_interval
            self._spawn(c.periodic("index_reconcile", iv, now_s + iv, c.reconcile, ctime=None, skip_rules=False),
                        "index_reconcile")
        log.info("auditor started", bookie_id=self.bookie_id)

    async def stop(self, drain_timeout_s: float = 10.0) -> None:
        """Cancel every task and watch consumer; idempotent. Markers already written stay (each marker
        write is atomic, so nothing needs draining: ``drain_timeout_s`` is accepted for the
        :class:`~autorecovery.roles.role.Role` protocol)."""
        st = self.state
        if st.stopped:
            return
        st.stopped = True
        if self._timer is not None:
            self._timer.cancel()
        self.holds.cancel_timers()
        for g in ("maint_windows", "maint_held", "guard_domains", "guard_held"):
            self._m[g].set(0)  # this node is not the auditor any more: its figures are not the cluster's
        self.tree.stop()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.gauges.reset()
        self.history.reset()
        await self.tree.settle()
        if st.bookie_watcher is not None:
            await st.bookie_watcher.stop()
        try:
            await self.urm.close()
        except Exception as exc:  # noqa: BLE001 - the session may be gone
            log.debug("under-replication manager not closed cleanly", error=str(exc))
        log.info("auditor stopped", bookie_id=self.bookie_id)

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``coro`` as an auditor task owned by :meth:`stop` (cancelled and awaited there); a task
        that fails is logged once, when it fails."""
        t = asyncio.ensure_future(coro)
        t.add_done_callback(lambda task: self._task_done(task, name))
        self._tasks.append(t)

    def _task_done(self, task: asyncio.Task[Any], name: str) -> None:
        if task.cancelled():
            return
        exc = task.exception()  # retrieved here, so asyncio never reports it as "never retrieved"
        if exc is not None and not self.state.stopped:
            log.error("auditor task failed", task=name, error=repr(exc))

    # -- watches ----------------------------------------------------------------------------
    def _on_bookies(self, writable: frozenset[str], readonly: frozenset[str]) -> None:
        st = self.state
        if self.policy is not None and self.update_policy:
            try:
                self.policy.on_cluster_changed(set(writable), set(readonly))
            except Exception as exc:  # noqa: BLE001
                log.warning("placement policy rejected the cluster change", error=str(exc))
        available = writable | readonly
        self.history.note_bookies(available, self.index.bookies())
        if st.lost is not None:  # when this auditor first saw each one gone (rack-loss guard)
            st.lost = observe(st.lost, available, self.index.bookies(), self.clock())
        st.events.put(AuditorEvent.BOOKIES)
        if any(w.auto_close for w in st.windows):
            st.events.put(AuditorEvent.MAINTENANCE)  # note a planned stop, or auto-close its window

    async def _watch_delay(self) -> None:
        def cb(event: Any) -> None:
            if self.state.stopped:
                return
            if event.type in (EventType.CHANGED, EventType.CREATED):
                self.state.events.put(AuditorEvent.DELAY)
            background(rearm(self._watch_delay))

        await self.zk.exists(self.paths.lost_bookie_recovery_delay, watch=cb)

    async def _watch_disable(self) -> None:
        def cb(_event: Any) -> None:
            if not self.state.stopped:
                background(rearm(self._watch_disable))

        stat = await self.zk.exists(self.paths.ur_disable, watch=cb)
        self.state.enabled = stat is None
        self.state.enabled_changed.set()

    async def _watch_unrecoverable(self) -> None:
        """Log every unrecoverable-ledger record (``underreplication/unrecoverable/urL<id>``, written by
        the worker that found it) once, at ERROR, from the auditor only: an operator must bring a bookie
        back or accept the loss. The bookies that would bring the ledger back come first in the line.

        Once per record, not once per auditor: after its ERROR line the auditor stamps the record with
        ``"reported"`` (wall ms; a versioned write, so a worker's rewrite meanwhile wins and is reported
        in turn). A later auditor lists the records already reported in one INFO line. (The stock
        hour's 66 auditor elections logged its 18 records 984 times.)"""
        def cb(_event: Any) -> None:
            if not self.state.stopped:
                background(rearm(self._watch_unrecoverable))

        try:
            names = await self.zk.get_children(self.paths.unrecoverable, watch=cb)
        except NoNodeError:
            await self.zk.exists(self.paths.unrecoverable, watch=cb)
            names = []
        current = set(names)
        self._unrecoverable_logged &= current
        earlier: list[Any] = []
        for name in sorted(current - self._unrecoverable_logged):
            path = f"{self.paths.unrecoverable}/{name}"
            try:
                data, stat = await self.zk.get(path)
                doc = json.loads(data)
            except NoNodeError:
                continue
            except ValueError:
                doc, stat = {}, None
            self._unrecoverable_logged.add(name)
            if not isinstance(doc, dict):
                doc = {}
            if doc.get("reported"):
                earlier.append(doc.get("ledger", name))
                continue
            waiting = doc.get("waiting_for") or []
            log.error(f"ledger {doc.get('ledger', name)} is unrecoverable until one of these bookies returns: "
                      f"{', '.join(waiting) if waiting else 'none known (restore from elsewhere or accept the loss)'}",
                      ledger_id=doc.get("ledger"), entry_count=doc.get("entry_count"), reason=doc.get("reason"),
                      side_znode=path)
            if stat is not None:
                stamped = json.dumps({**doc, "reported": int(self.wall_ms())}, sort_keys=True).encode()
                with contextlib.suppress(NoNodeError, BadVersionError):
                    await self.zk.set(path, stamped, version=stat.version)
        if earlier:
            log.info("unrecoverable ledgers already reported by an earlier auditor", count=len(earlier),
                     ledger_ids=earlier[:100])

    # -- lost bookies: read -> decide -> act ------------------------------------------------
    async def _decide_initial_membership(self) -> None:
        """Handle the membership events queued by the bookie watcher's first read before any periodic
        check starts. While AutoRecovery is disabled the events stay queued for the event loop (which
        waits for enable) and the periodic checks skip as disabled."""
        st = self.state
        if not st.enabled:
            return
        queued = st.events.drain()
        other = [e for e in queued if e[0] is not AuditorEvent.BOOKIES]
        for kind, token in other:
            st.events.put(kind, token)
        if len(other) == len(queued):
            return
        d = await self._decide(AuditorEvent.BOOKIES, None)
        if d is not None:
            await self._apply(d, AuditorEvent.BOOKIES)

    async def _event_loop(self) -> None:
        """Handle bookie changes, delay changes and the delayed audit one at a time.

        A retriable failure (``errors.is_retriable``) before the decision (reading the delay)
        re-queues the event; a failed audit is retried as an audit (the tracker already moved on),
        after a 1 s back-off. A failure retrying cannot fix (e.g. a garbage marker znode) is logged
        once with what to fix and counted in ``autorecovery_auditor_event_errors_total{retriable}``;
        the loop goes on with the next event instead of retrying it forever.
        """
        events = self.state.events
        while True:
            kind, token = await events.get()
            try:
                d = await self._decide(kind, token)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a ZooKeeper hiccup must not end loss detection
                if self._event_failed(kind, exc):
                    await asyncio.sleep(1.0)
                    events.put(kind, token)
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
                    events.put(AuditorEvent.RETRY_AUDIT)

    def _event_failed(self, kind: AuditorEvent, exc: Exception) -> bool:
        """Count and log a failed event; returns whether to retry it."""
        retry = is_retriable(exc)
        self._m["event_errors"]["true" if retry else "false"].inc()
        if retry:
            log.warning("handling an auditor event failed; retrying in 1 s", auditor_event=kind.value, error=repr(exc))
        else:
            log.error("handling an auditor event failed with an error retrying will not fix; not retried",
                      auditor_event=kind.value, error=repr(exc), error_type=type(exc).__name__)
        return retry

    async def _decide(self, kind: AuditorEvent, token: int | None) -> Decision | None:
        """Read what the event needs, then let :func:`~autorecovery.audit.lost_bookies.decide` decide."""
        st = self.state
        assert st.lost is not None, "auditor event before start"
        await st.wait_enabled()
        now = self.clock()
        if kind is AuditorEvent.MAINTENANCE:
            return await self._on_maintenance_change(now)
        if kind is AuditorEvent.BOOKIES:
            st.events.drop_leading(AuditorEvent.BOOKIES)  # coalesce a burst: one decision on the latest view
        delay = (await self.urm.get_lost_bookie_recovery_delay()
                 if kind in (AuditorEvent.BOOKIES, AuditorEvent.DELAY) else None)
        step = decide(st.lost, Inputs(_LOST_EVENT[kind], now, available=self._available(),
                                      indexed=frozenset(self.index.bookies()), delay_s=delay,
                                      in_ensemble=self.index.in_some_ensemble,
                                      timer_current=token == self._timer_token))
        st.lost = step.state
        return step.decision

    async def _on_maintenance_change(self, now: float) -> Decision | None:
        """Windows changed or expired: a bookie no longer covered is lost anew (the normal
        lostBookieRecoveryDelay applies from now); a lifted guard is audited at once."""
        st = self.state
        assert st.lost is not None
        change = await self.holds.on_change()
        decision = None
        if change.released:
            log.info("maintenance ended for lost bookies; lostBookieRecoveryDelay applies from now",
                     bookies=sorted(change.released))
            delay = await self.urm.get_lost_bookie_recovery_delay()
            step = decide(st.lost, Inputs(LostEvent.RELEASED, now, available=self._available(),
                                          indexed=frozenset(self.index.bookies()), delay_s=delay,
                                          in_ensemble=self.index.in_some_ensemble, released=change.released))
            st.lost = step.state
            decision = step.decision
        if change.unguarded:
            log.warning("rack-loss guard lifted (override or config); auditing the held bookies now",
                        bookies=sorted(change.unguarded))
            decision = Decision(audit_now=True)
        await self.holds.publish(change.holds)
        return decision

    async def _apply(self, d: Decision, trigger: AuditorEvent) -> None:
        """Act on a decision: count, arm or disarm the delayed audit, audit."""
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
            self._timer = asyncio.get_running_loop().call_later(delay, self.state.events.put, AuditorEvent.FIRE, token)
        if d.audit_now:
            if self._timer is not None and not self.state.pending:
                self._timer.cancel()
                self._timer = None
            await self.audit_lost_bookies(trigger.value)

    async def _record_loss(self, lost: list[str], marks: dict[int, list[str]], before: set[int]) -> None:
        """Open a ``bookie-lost`` episode (``rack-lost`` when two or more lost bookies make up a whole
        failure domain) for the newly marked ledgers."""
        kind, subject = "bookie-lost", ",".join(lost)
        where = self.holds.location_of
        if len(lost) >= 2:
            racks = {where(b) for b in lost}
            if len(racks) == 1:
                rack = racks.pop()
                members = {b for b in self._available() | self.index.bookies() if where(b) == rack}
                if members and members <= set(lost) | (self.index.bookies() - self._available()):
                    kind, subject = "rack-lost", f"{rack} ({subject})"
        await self.history.record(kind, subject, marks, before)

    async def audit_lost_bookies(self, trigger: str = "manual") -> AuditReport:
        """Mark the ledgers of every bookie in the index that is neither writable nor read-only.

        Find phase: index lookup only (no ZooKeeper reads). Write phase: batched markers.
        Upstream AuditorBookieCheckTask.auditBookies (which re-reads every ledger's metadata).
        """
        before: set[int] = set()
        st = self.state
        with self._m["AUDIT_BOOKIES_TIME"].time():
            ops0 = self.zk.ops
            t0 = self.clock()
            # no await between the caller's checks (a periodic run skips while a delayed audit is
            # pending) and this view of the lost bookies: a loss seen meanwhile is the delay's to handle
            available = self._available()
            lost = sorted(self.index.bookies() - available)
            marks = self.holds.marks_after_holds(lost, available)
            t1 = self.clock()
            writes = 0
            history_ops = 0
            if marks:
                # the heal history's view of what was marked before (the watched marker set: read once,
                # then served from watches), outside the audit's ZooKeeper-op count as its episode write is
                o = self.zk.ops
                before = await marked_now(self.urm)
                history_ops = self.zk.ops - o
                await st.wait_enabled()
                async with st.check_lock:
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
            self.metrics.zk_ops["bookie_check" if trigger == "bookie_check" else "lost_bookie"].inc(ops)
            self.audits += 1
            await self.holds.publish(st.pending_holds)
            rep = AuditReport(trigger, lost, len(marks), (t1 - t0) * 1000, (t2 - t1) * 1000, writes, ops)
            self.last_audit = rep
            if lost:
                log.info("audited lost bookies", trigger=trigger, lost=lost, ledgers=len(marks),
                         find_ms=round(rep.find_ms, 2), write_ms=round(rep.write_ms, 2), zk_ops=ops)
        if marks:
            await self._record_loss(sorted({b for bs in marks.values() for b in bs}), marks, before)
        return rep


__all__ = ["Auditor"]
