"""The ReplicationWorker: takes under-replicated ledgers and makes them whole again (EDGE).

Upstream source: ``replication/ReplicationWorker`` (loop, open-ledger grace and fencing, failed-ledger
lock-release backoff, unreadable-entry memory, metrics), ``client/BookKeeperAdmin.replicateLedgerFragment``
and ``LedgerFragmentReplicator`` (targets, copy, ensemble CAS), BP-54 (placement repair).

The worker keeps the lifecycle and the slots; the parts live apart:

* :mod:`autorecovery.roles.backlog` — markers, metadata, priorities, candidate order, unrecoverable
  records, non-retriable failures;
* :mod:`autorecovery.roles.lock_steps` — every ZooKeeper step on a ledger's lock and marker;
* :mod:`autorecovery.roles.pass_steps` — a pass's reads, actions and re-check;
* :mod:`autorecovery.plan.pass_end` and :mod:`autorecovery.plan.pass_plan` (PURE) — what a pass does
  and how it ends;
* :mod:`autorecovery.roles.pass_effects` — every side effect of every ending, in one place;
* :mod:`autorecovery.roles.replicator` — copy plan → copier → guarded ensemble CAS (shared with the
  admin ``recover``);
* :mod:`autorecovery.roles.copier` — the streams.

One pass over a ledger (:meth:`ReplicationWorker._rereplicate`) is read → decide (pure) → act →
conclude (pure) → carry out; a ledger id travels slot → lock steps → pass steps → replicator →
copier → metadata CAS, and the ending goes to the effects alone. What the steps do:

1. Lock it with the upstream protocol (ephemeral ``locks/urL…``, marker version remembered) through
   :class:`~autorecovery.zk.underreplication.UnderreplicationManager`, candidates ordered by
   :func:`~autorecovery.plan.priority.order_candidates` (not a random walk); when other slots wait for
   work too, one ledger per waiting slot is locked in one batch (:meth:`LockSteps.lock_next`).
2. Re-check it with the :class:`~autorecovery.roles.checker.LedgerChecker`; the marker's replica list is
   never trusted. Nothing wrong → versioned delete of the marker (a re-mark meanwhile survives).
3. Each bad **closed** fragment, most endangered first: if a lost bookie is registered again, re-check
   first and skip the copy when it is fine (#2766); retry remembered unreadable entries first and copy
   nothing if they still fail (#2166); pick targets with the policy's ``replace_bookie`` (never a
   read-only bookie); stream the entries (:mod:`autorecovery.roles.copier`); CAS the segment's
   ensemble.
4. BP-54 (``repairedPlacementPolicyNotAdheringBookieEnabled``): only when the ledger has no data loss
   (data loss first, placement on a later pass, as the BP says), each non-adhering segment of a closed
   ledger gets a minimum-swap ``replace_to_adhere``; no fix possible → "no more bookie" (log + metric)
   and the marker is deleted so the worker does not loop (the auditor re-marks on its next run).
5. An open last fragment (or a last segment with a missing bookie) → keep the lock for
   ``openLedgerRereplicationGracePeriod``, then fence/recover/close the ledger if the writer has not
   moved on, release the lock; a later pass copies it.
6. Re-check. Still bad → keep the lock and release it after ``grace/32 · 2^n`` ms (n < 5), then
   ``grace`` (:mod:`autorecovery.plan.backoff`), and the slot sleeps ``rwRereplicateBackoffMs``.

Where we beat upstream (each is described where it is implemented):

* priority by copies left against AQ (data loss before placement), several ledgers at once
  (``replicationWorkerConcurrentLedgers``), per-bookie stream caps, exact-size byte throttle;
* streamed range copies that read only what each target lacks and verify every digest;
* unrecoverable entries (every replica gone, e.g. WQ=1 on a dead bookie, #3316/#4872) are surfaced —
  counter, error log, and a side znode ``<root>/underreplication/unrecoverable/urL<id>`` with JSON
  ``{"ledger", "entries", "entry_count", "reason", "bookies", "waiting_for", "time", ...}`` (entry ids as
  ranges: bounded whatever the ledger claims, issue 25) — and not retried until an operator
  deletes the side znode or re-marks the ledger, or one of the bookies in ``waiting_for`` registers;
* a returning bookie cancels needless copies, also mid-copy;
* ``progress()``: bytes and ledgers left, rate, ETA and why ledgers are blocked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping

import structlog

from autorecovery import metrics as metrics_mod
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.config.keys.table import KEY_BY_NAME
from autorecovery.errors import NoSuchLedgerError, is_retriable
from autorecovery.plan import pass_end as pe
from autorecovery.plan import pass_plan as pp
from autorecovery.plan.adaptive_rate import AdaptiveRates, AdaptiveSettings
from autorecovery.plan.backoff import FailureMemory
from autorecovery.plan.progress import Progress, ProgressTracker
from autorecovery.plan.throttle import StreamCaps, TokenBucket
from autorecovery.roles import replicator as rp
from autorecovery.roles.backlog import Backlog
from autorecovery.roles.checker import LedgerChecker
from autorecovery.roles.copier import FragmentCopier
from autorecovery.roles.lock_steps import LockSteps
from autorecovery.roles.pass_effects import PassEffects
from autorecovery.roles.pass_steps import PassSteps
from autorecovery.roles.worker_metrics import WorkerMetrics
from autorecovery.config.sections import WorkerSettings
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.stream_slots import ClusterStreamSlots
from autorecovery.zk.underreplication import UnderreplicationManager

log = structlog.get_logger("autorecovery.worker")

__all__ = ["ReplicationWorker"]


class ReplicationWorker:
    """Re-replicates under-replicated ledgers; see the module docstring for the algorithm.

    Args:
        zk: a started ZkClient. paths: the cluster's znode paths.
        settings: :class:`WorkerSettings`.
        policy: a placement policy (``autorecovery.placement``); the worker keeps it told about
            membership (``on_cluster_changed``); disk weights come from whoever calls
            ``update_bookie_info`` (the daemon's BookieInfoReader).
        bookies: a :class:`~autorecovery.rpc.transport.BookieClient`.
        watcher: a started :class:`~autorecovery.zk.bookies.BookieWatcher`.
        clock: monotonic seconds (backoff, throttles, progress); default ``time.monotonic``.
        registry: metrics registry (default: the process registry).
        lock_owner: data written into lock znodes (default: host name, as upstream).
        update_policy: keep ``policy`` told about membership itself (standalone use). The daemon passes
            False: it owns the one membership → policy subscription (``roles/role.py``).

    Attributes (read by tests and the admin API):
        memory: :class:`~autorecovery.plan.backoff.FailureMemory` (failure counts, delays handed out,
            unreadable entries per ledger).
        history: ``(ledger_id, outcome)`` of the last passes, oldest first.
        unrecoverable: ledger id → the side-znode document of ledgers surfaced as unrecoverable.
    """

    def __init__(self, zk: ZkClient, paths: Paths, settings: WorkerSettings, policy, bookies, watcher, *,
                 clock: Callable[[], float] | None = None, registry: metrics_mod.MetricsRegistry | None = None,
                 lock_owner: str | None = None, checker: LedgerChecker | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, rng: random.Random | None = None,
                 update_policy: bool = True) -> None:
        self.zk, self.paths, self.settings = zk, paths, settings
        self.update_policy = update_policy
        self.policy, self.bookies, self.watcher = policy, bookies, watcher
        self.clock = clock or time.monotonic
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.m = WorkerMetrics(registry or metrics_mod.REGISTRY)
        self.um = UnderreplicationManager(zk, paths, lock_owner=lock_owner)
        self.store = LedgerStore(zk, paths)
        self.checker = checker or LedgerChecker(
            bookies, lambda: self.watcher.available, verification_percentage=settings.verification_percentage,
            in_flight=settings.checker_in_flight, foreign=lambda: getattr(self.watcher, "foreign", {}),
            credentials=settings.recovery)
        self.bk = BookKeeper(zk, paths, policy=policy, bookies=bookies, credentials=settings.recovery)
        self.bk.watcher = watcher
        self.memory = FailureMemory(settings.lock_release_grace_ms)
        self.byte_bucket = TokenBucket(settings.rate_bytes_per_s, self.clock)
        self.task_bucket = TokenBucket(settings.task_rate_per_s, self.clock)
        self.caps = StreamCaps(settings.max_streams_per_source, settings.max_streams_per_target)
        #: the adaptive copy throttle (adaptiveThrottleEnabled, replicationLatencyBudgetFactor, ...Floor...)
        self.adaptive = AdaptiveRates(AdaptiveSettings(enabled=settings.adaptive_throttle,
                                                       budget_factor=settings.latency_budget_factor,
                                                       floor_bytes_per_s=settings.adaptive_floor_bytes_per_s))
        self._caps_changed = asyncio.Condition()
        self.copier = FragmentCopier(bookies, byte_bucket=self.byte_bucket, caps=self.caps,
                                     caps_changed=self._caps_changed,
                                     window_entries=max(settings.batch_size, 256),
                                     window_bytes=settings.stream_window_bytes,
                                     metrics=self.m, sleep=sleep,
                                     cluster_slots=ClusterStreamSlots(zk, paths, settings.max_streams_per_source,
                                                                      settings.max_streams_per_target,
                                                                      self.um.lock_owner),
                                     adaptive=self.adaptive)
        self.replicator = rp.SegmentReplicator(self.store, self.copier, credentials=settings.recovery)
        self.tracker = ProgressTracker(self.clock)
        # salt: daemons on one queue go for different ledgers of equal stake first (issue 29)
        self.backlog = Backlog(zk, paths, self.um, self.store, clock=self.clock, on_change=self._poke,
                               salt=self.rng.getrandbits(64))
        # the pass: lock/marker steps, read/act steps, and the carrying out of its ending
        self.locks = LockSteps(self.um, sleep=sleep, stopping=lambda: self._stopping, released=self._wake_slots)
        self.steps = PassSteps(store=self.store, markers=self.locks, checker=self.checker, policy=policy,
                               watcher=watcher, bookies=bookies, replicator=self.replicator, copier=self.copier,
                               memory=self.memory, tracker=self.tracker, metrics=self.m, settings=settings,
                               clock=self.clock, abort=lambda: self._abort_copies)
        self.effects = PassEffects(locks=self.locks, backlog=self.backlog, memory=self.memory, tracker=self.tracker,
                                   metrics=self.m, steps=self.steps, bk=self.bk, settings=settings, clock=self.clock)
        self._slots: list[asyncio.Task] = []
        self._busy: set[asyncio.Task] = set()
        self._refresh_task: asyncio.Task | None = None
        self._refresh_wanted = asyncio.Event()
        self._wake = asyncio.Event()
        self._acquire_lock = asyncio.Lock()
        self._waiting = 0  # slots waiting for _acquire_lock
        self._warned_config = False
        self._started = False
        self._stopping = False
        self._abort_copies: str | None = None
        self._stopped: asyncio.Future | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> ReplicationWorker:
        """Create the under-replication layout if needed, take a first look at the backlog, start the
        slots. Idempotent."""
        if self._started:
            return self
        self._started = True
        await self.um.init()
        await self.zk.ensure_path(self.paths.unrecoverable)
        if self.update_policy:
            self.policy.on_cluster_changed(set(self.watcher.writable), set(self.watcher.readonly))
        self.watcher.add_listener(self._on_membership)
        self.m.bytes_remaining.set_function(lambda: self.tracker.snapshot().worker_bytes_remaining)
        self.m.ledgers_remaining.set_function(lambda: len(self.um.held))
        self.m.ledgers_blocked.set_function(self._own_blocked_count)
        try:
            await self._refresh()
        except Exception as exc:  # noqa: BLE001 - the refresh loop retries
            log.warning("first backlog refresh failed", error=str(exc))
        self._refresh_task = asyncio.create_task(self._refresh_loop(), name="worker-refresh")
        for i in range(max(1, self.settings.concurrent_ledgers)):
            self._slots.append(asyncio.create_task(self._slot_loop(i), name=f"worker-slot-{i}"))
        log.info("replication worker started", slots=len(self._slots), settings=self.settings.loggable())
        return self

    @property
    def running(self) -> bool:
        return self._started and not self._stopping and all(not t.done() for t in self._slots)

    async def stop(self, drain_timeout_s: float = 10.0) -> None:
        """Stop taking work; let in-flight copies finish for up to ``drain_timeout_s`` s, then abort
        them (a copy that did not CAS the metadata changes nothing; a CAS is all-or-nothing); cancel
        deferred releases and release every lock. Idempotent; concurrent calls wait for the first."""
        if self._stopped is not None:
            await asyncio.shield(self._stopped)
            return
        self._stopped = asyncio.get_running_loop().create_future()
        try:
            self._stopping = True
            try:
                self.watcher.remove_listener(self._on_membership)
            except Exception as cleanup_exc:  # noqa: BLE001 - the shared watcher outlives this worker; logged
                log.debug("best-effort step failed", step="stop", error=repr(cleanup_exc))
            self._wake.set()
            self._refresh_wanted.set()
            if self._refresh_task is not None:
                self._refresh_task.cancel()
            idle = [t for t in self._slots if t not in self._busy]
            for t in idle:
                t.cancel()
            busy = [t for t in self._slots if t in self._busy]
            if busy:
                _, pending = await asyncio.wait(busy, timeout=drain_timeout_s)
                if pending:
                    self._abort_copies = "worker stopping"
                    _, pending = await asyncio.wait(pending, timeout=5.0)
                for t in pending:
                    t.cancel()
            deferred = self.locks.deferred
            slot_retries = list(self.copier.cluster_slots.retries) if self.copier.cluster_slots else []
            for t in [*self._slots, *deferred.values(), *slot_retries]:
                t.cancel()
            await asyncio.gather(*self._slots, *deferred.values(), *slot_retries,
                                 *( [self._refresh_task] if self._refresh_task else []), return_exceptions=True)
            deferred.clear()
            try:
                await self.um.close()
            except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                log.debug("best-effort step failed", step="stop", error=repr(cleanup_exc))
            log.info("replication worker stopped")
        finally:
            self._stopped.set_result(None)

    def progress(self) -> Progress:
        """A pure snapshot (:class:`~autorecovery.plan.progress.Progress`): the cluster's ledgers and
        bytes left with the smoothed cluster rate and ETA, blocked ledgers apart with their reasons
        (this worker's passes, every worker's unrecoverable side znodes), and this worker's share."""
        return dataclasses.replace(self.tracker.snapshot(self.backlog.blocked_reasons()),
                                   rate_limits=self.adaptive.snapshot())

    # backlog views kept for the admin API and tests
    @property
    def unrecoverable(self) -> dict[int, dict]:
        """Ledger id → the unrecoverable side znode's document (every worker's, watched)."""
        return self.backlog.unrecoverable

    @property
    def _active(self) -> set[int]:
        return self.backlog.active

    def _order(self, ids: Collection[int]) -> Iterator[int]:
        return self.backlog.order(ids, self.rng, self.watcher.available)

    @property
    def history(self) -> list[tuple[int, str]]:
        """``(ledger_id, outcome)`` of the last passes, oldest first."""
        return self.effects.history

    def _wake_slots(self) -> None:
        self._wake.set()

    def _poke(self) -> None:
        self._refresh_wanted.set()
        self._wake.set()

    def _own_blocked_count(self) -> int:
        """Still-marked ledgers this worker's own passes left blocked (autorecovery_worker_ledgers_blocked)."""
        b = self.backlog
        return len({lid for lid in self.tracker.blocked() if lid in b.markers} | set(b.not_retriable))

    # -- membership / policy ---------------------------------------------------------------------
    def _on_membership(self, writable: frozenset[str], readonly: frozenset[str]) -> None:
        if self._stopping:
            return
        if self.update_policy:
            self.policy.on_cluster_changed(set(writable), set(readonly))
        self._refresh_wanted.set()
        self._wake.set()


    def check_auditor_config(self, auditor_properties: Mapping[str, str]) -> list[str]:
        """Compare the BP-54 switch with the auditor's configuration (hook for the daemon); returns and
        logs a warning per mismatch (the BP asks both sides to agree)."""
        out = []
        key = "repairedPlacementPolicyNotAdheringBookieEnabled"
        raw = auditor_properties.get(key)
        if raw is not None:
            theirs = KEY_BY_NAME[key].parse(str(raw))
            if theirs != self.settings.repair_placement:
                out.append(f"{key} is {theirs} on the auditor but {self.settings.repair_placement} on this worker")
        for msg in out:
            log.warning("config mismatch between auditor and worker", detail=msg)
        return out

    # -- backlog refresh (priority data) ---------------------------------------------------------
    async def _refresh_loop(self) -> None:
        """Refresh on demand (after a pass, a membership change, a side-znode change) or every 10 s, but
        at most once per ``max(0.5 s, markers / 2000 s)``: walking the marker hierarchy costs ZooKeeper
        reads in proportion to the backlog."""
        markers_changed = self.um.subscribe()
        try:
            await self._refresh_rounds(markers_changed)
        finally:
            self.um.unsubscribe(markers_changed)

    async def _refresh_rounds(self, markers_changed: asyncio.Event) -> None:
        while not self._stopping:
            self._refresh_wanted.clear()
            markers_changed.clear()
            t0 = self.clock()
            try:
                await self._refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried on the next round
                if is_retriable(exc):
                    log.debug("backlog refresh failed", error=str(exc))
                else:
                    log.error("backlog refresh failed with an error retrying will not fix", error=repr(exc),
                              error_type=type(exc).__name__)
            # a marker created or deleted anywhere in the cluster (the watches of the walk in _refresh)
            # or our own events: finished work leaves the backlog at once, not after 10 s
            waiters = [asyncio.ensure_future(self._refresh_wanted.wait()),
                       asyncio.ensure_future(markers_changed.wait())]
            try:
                await asyncio.wait(waiters, timeout=10.0, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
            pause = max(0.5, len(self.backlog.markers) / 2000.0) - (self.clock() - t0)
            if pause > 0 and not self._stopping:
                await self.sleep(pause)

    async def _refresh(self) -> None:
        """Refresh the backlog (:meth:`Backlog.refresh`) and the progress estimate from it."""
        backlog, placement_marks = await self.backlog.refresh(self.watcher.available)
        self.tracker.set_backlog(backlog)
        if placement_marks and not self.settings.repair_placement and not self._warned_config:
            self._warned_config = True
            log.warning("the auditor marks ledgers for placement repair (markers without missing replicas) but "
                        "repairedPlacementPolicyNotAdheringBookieEnabled=false on this worker: such markers are "
                        "only re-checked and cleared; set the key on both sides (BP-54)", markers=placement_marks)

    # -- slots -----------------------------------------------------------------------------------
    async def _slot_loop(self, slot: int) -> None:
        me = asyncio.current_task()
        assert me is not None  # a slot loop runs as a task (:meth:`start`)
        while not self._stopping:
            try:
                wait = self.task_bucket.reserve(1)
                if wait > 0:
                    await self.sleep(wait)
                entered = False
                self._waiting += 1  # slots queued for the acquisition: the next lock batch's size
                try:
                    async with self._acquire_lock:
                        self._waiting -= 1
                        entered = True
                        lid = await self._next_ledger()
                finally:
                    if not entered:
                        self._waiting -= 1
                if lid is None:
                    continue
                self._busy.add(me)
                try:
                    ok = await self._rereplicate(lid)
                finally:
                    self._busy.discard(me)
                    self._refresh_wanted.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # broad: ZooKeeper trouble: back off and go on
                self.m.exception(exc)
                if not is_retriable(exc):
                    # a bug or a state retrying cannot change: end the slot (the worker stops being
                    # `running`, so the daemon's watchdog exits 1 and a supervisor restarts it)
                    log.error("replication slot failed with an error retrying will not fix; stopping the slot",
                              slot=slot, error=repr(exc), error_type=type(exc).__name__)
                    raise
                log.warning("replication slot error", slot=slot, error=str(exc), error_type=type(exc).__name__)
                ok = False
            if not ok and not self._stopping:
                await self.sleep(self.settings.backoff_ms / 1000.0)

    async def _next_ledger(self) -> int | None:
        """Lock the best candidate, waiting (watch-driven) while there is none or replication is disabled.

        Wakes on marker/lock changes (the manager's watches) and on our own events (membership change,
        side znode removed, a deferred lock released)."""
        while not self._stopping:
            await self.um.wait_while_disabled()
            changed = self.um.changes
            changed.clear()
            self._wake.clear()
            # one lock per slot waiting for work, taken together (issue 29: two round trips a batch)
            lid = await self.locks.lock_next(self._order, 1 + self._waiting)
            if lid is not None:
                if lid in self._active:  # cannot happen: acquisitions are serialised; be safe
                    continue
                return lid
            waiters = [asyncio.ensure_future(changed.wait()), asyncio.ensure_future(self._wake.wait())]
            try:
                await asyncio.wait(waiters, timeout=30.0, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
        return None

    # -- one ledger ------------------------------------------------------------------------------
    async def _rereplicate(self, lid: int) -> bool:
        """One pass over a locked ledger: read → decide (pure) → act → conclude (pure) → carry out.

        Returns True when the ledger is done (or made progress that a later pass continues without
        backoff), False for an unsuccessful pass (the slot backs off)."""
        t0 = self.clock()
        out = pp.PassOutcome()
        end = pe.UNSTARTED
        self.effects.begin(lid)
        try:
            try:
                reading = await self.steps.read(lid)                                     # read
                decision = pe.decide(reading, self.watcher.available)                    # decide
                if isinstance(decision, pp.PassPlan):
                    self.effects.planned(lid, reading, decision)
                    check = await self.steps.act(lid, reading, decision, out)            # act
                    end = pe.conclude(decision, out, check,                              # conclude
                                      open_grace_ms=self.settings.open_ledger_grace_ms)
                else:
                    end = decision
                await self.effects.carry_out(lid, end, out)                              # carry out
            except asyncio.CancelledError:
                end = pe.CANCELLED_ENDING
                raise
            except Exception as exc:  # noqa: BLE001 - upstream: release the lock, count, back off
                end = pe.failed(exc, deleted=isinstance(exc, NoSuchLedgerError), retriable=is_retriable(exc))
                await self.effects.carry_out(lid, end, out)
        finally:
            await self.effects.finish(lid, end, out, t0)
        return end.ok

