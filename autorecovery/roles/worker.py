"""The ReplicationWorker: takes under-replicated ledgers and makes them whole again (EDGE).

Upstream source: ``replication/ReplicationWorker`` (loop, open-ledger grace and fencing, failed-ledger
lock-release backoff, unreadable-entry memory, metrics), ``client/BookKeeperAdmin.replicateLedgerFragment``
and ``LedgerFragmentReplicator`` (targets, copy, ensemble CAS), BP-54 (placement repair).

The worker keeps the lifecycle and the slots; the parts live apart:

* :mod:`autorecovery.roles.backlog` — markers, metadata, priorities, candidate order, unrecoverable
  records, non-retriable failures;
* :mod:`autorecovery.plan.pass_plan` (PURE) — what a pass does and how it ends;
* :mod:`autorecovery.roles.replicator` — copy plan → copier → guarded ensemble CAS (shared with the
  admin ``recover``);
* :mod:`autorecovery.roles.copier` — the streams.

One pass over a ledger (:meth:`ReplicationWorker._rereplicate`):

1. Lock it with the upstream protocol (ephemeral ``locks/urL…``, marker version remembered) through
   :class:`~autorecovery.zk.underreplication.UnderreplicationManager`, candidates ordered by
   :func:`~autorecovery.plan.priority.order_candidates` (not a random walk).
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
import contextlib
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable, Mapping

import structlog

from autorecovery import metrics as metrics_mod
from autorecovery.audit.checker import BadFragment
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.client.recovery import recover_ledger
from autorecovery.config.keys import KEY_BY_NAME
from autorecovery.errors import (
    BookieError,
    DigestMismatchError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    is_retriable,
)
from autorecovery.ledger.digest import EntryDigest, ledger_digest
from autorecovery.ledger.metadata import LedgerMetadata, write_set
from autorecovery.placement.policy import Adherence
from autorecovery.placement.spread import SpreadReplacer
from autorecovery.plan import pass_plan as pp
from autorecovery.plan import entry_runs
from autorecovery.plan.backoff import FailureMemory
from autorecovery.plan.entry_runs import Gap
from autorecovery.plan.progress import Progress, ProgressTracker, estimate_copy_bytes, unrecoverable_reason
from autorecovery.plan.targets import FragmentPlan, choose_replacements, plan_fragment_copy
from autorecovery.plan.throttle import StreamCaps, TokenBucket
from autorecovery.roles import replicator as rp
from autorecovery.roles.backlog import Backlog
from autorecovery.roles.checker import LedgerChecker
from autorecovery.roles.copier import CopyResult, FragmentCopier
from autorecovery.roles.worker_settings import CONFIG_KEYS, WorkerSettings  # noqa: F401 (re-exported)
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.stream_slots import ClusterStreamSlots
from autorecovery.zk.underreplication import UnderreplicationManager

log = structlog.get_logger("autorecovery.worker")

SCOPE = "replication_worker"
OUR_SCOPE = "autorecovery"


class _Metrics:
    """The worker's metric handles (upstream names under ``replication_worker_``; ours Prometheus style)."""

    def __init__(self, registry: metrics_mod.MetricsRegistry, scope: str = SCOPE) -> None:
        self.registry, self.scope = registry, scope
        c, o = registry.counter, registry.op_stats
        self.rereplicate = o(scope, "rereplicate")
        self.replicated = c(scope, "NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED")
        self.replicated_placement = c(scope, "NUM_NOT_ADHERING_PLACEMENT_LEDGERS_REPLICATED")
        self.defer = c(scope, "NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER")
        self.unable_to_read = c(scope, "NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION")
        self.entries_read = c(scope, "NUM_ENTRIES_READ")
        self.entries_written = c(scope, "NUM_ENTRIES_WRITTEN")
        self.bytes_read = o(scope, "NUM_BYTES_READ")
        self.bytes_written = o(scope, "NUM_BYTES_WRITTEN")
        self.read_latency = o(scope, "READ_DATA_LATENCY")
        self.write_latency = o(scope, "WRITE_DATA_LATENCY")
        # per-worker figures (sum() over nodes is the cluster's work in hand); the cluster-wide counts
        # are the auditor's autorecovery_underreplicated_* / autorecovery_unrecoverable_ledgers
        self.bytes_remaining = registry.gauge(OUR_SCOPE, "worker_bytes_remaining",
                                              doc="estimated bytes this worker still has to copy for the ledgers it holds")
        self.ledgers_remaining = registry.gauge(OUR_SCOPE, "worker_ledgers_remaining",
                                                doc="ledgers this worker holds (locked: in progress or backing off)")
        self.ledgers_blocked = registry.gauge(OUR_SCOPE, "worker_ledgers_blocked",
                                              doc="still-marked ledgers this worker's last pass left blocked")
        self.unrecoverable_total = c(OUR_SCOPE, "unrecoverable_ledgers_total",
                                     doc="times a ledger was surfaced as unrecoverable")
        self.no_more_bookie = c(OUR_SCOPE, "placement_no_more_bookie_total",
                                doc="BP-54 repairs impossible: no bookie can make the segment adhere")
        self.corrupt_source_entries = c(OUR_SCOPE, "replication_corrupt_source_entries_total",
                                        doc="source copies that failed the digest check and were not copied")
        self.copies_cancelled = c(OUR_SCOPE, "replication_copies_cancelled_total",
                                  doc="fragment copies skipped or aborted because the lost bookie came back")

    def exception(self, exc: BaseException) -> None:
        name = getattr(exc, "upstream_name", None) or type(exc).__name__
        self.registry.counter(self.scope, f"exceptions_{name}").inc()


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
        self.m = _Metrics(registry or metrics_mod.REGISTRY)
        self.um = UnderreplicationManager(zk, paths, lock_owner=lock_owner)
        self.store = LedgerStore(zk, paths)
        self.checker = checker or LedgerChecker(
            bookies, lambda: self.watcher.available, verification_percentage=settings.verification_percentage,
            in_flight=settings.checker_in_flight, foreign=lambda: getattr(self.watcher, "foreign", {}))
        self.bk = BookKeeper(zk, paths, policy=policy, bookies=bookies)
        self.bk.watcher = watcher
        self.memory = FailureMemory(settings.lock_release_grace_ms)
        self.byte_bucket = TokenBucket(settings.rate_bytes_per_s, self.clock)
        self.task_bucket = TokenBucket(settings.task_rate_per_s, self.clock)
        self.caps = StreamCaps(settings.max_streams_per_source, settings.max_streams_per_target)
        self._caps_changed = asyncio.Condition()
        self.copier = FragmentCopier(bookies, byte_bucket=self.byte_bucket, caps=self.caps,
                                     caps_changed=self._caps_changed,
                                     window_entries=max(settings.batch_size, 256),
                                     window_bytes=settings.stream_window_bytes,
                                     metrics=self.m, sleep=sleep,
                                     cluster_slots=ClusterStreamSlots(zk, paths, settings.max_streams_per_source,
                                                                      settings.max_streams_per_target,
                                                                      self.um.lock_owner))
        self.replicator = rp.SegmentReplicator(self.store, self.copier)
        self.tracker = ProgressTracker(self.clock)
        self.history: list[tuple[int, str]] = []
        self.backlog = Backlog(zk, paths, self.um, self.store, clock=self.clock, on_change=self._poke)
        self._bad_targets: dict[str, float] = {}
        self._deferred: dict[int, asyncio.Task] = {}
        self._slots: list[asyncio.Task] = []
        self._busy: set[asyncio.Task] = set()
        self._refresh_task: asyncio.Task | None = None
        self._refresh_wanted = asyncio.Event()
        self._wake = asyncio.Event()
        self._acquire_lock = asyncio.Lock()
        self._warned_config = False
        self._started = False
        self._stopping = False
        self._abort_copies: str | None = None
        self._stopped: asyncio.Future | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> "ReplicationWorker":
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
        log.info("replication worker started", slots=len(self._slots), settings=dataclasses.asdict(self.settings))
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
            with contextlib.suppress(Exception):  # the shared watcher outlives this worker
                self.watcher.remove_listener(self._on_membership)
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
            for t in [*self._slots, *self._deferred.values()]:
                t.cancel()
            await asyncio.gather(*self._slots, *self._deferred.values(),
                                 *( [self._refresh_task] if self._refresh_task else []), return_exceptions=True)
            self._deferred.clear()
            with contextlib.suppress(Exception):
                await self.um.close()
            log.info("replication worker stopped")
        finally:
            self._stopped.set_result(None)

    def progress(self) -> Progress:
        """A pure snapshot (:class:`~autorecovery.plan.progress.Progress`): the cluster's ledgers and
        bytes left with the smoothed cluster rate and ETA, blocked ledgers apart with their reasons
        (this worker's passes, every worker's unrecoverable side znodes), and this worker's share."""
        return self.tracker.snapshot(self.backlog.blocked_reasons())

    # backlog views kept for the admin API and tests
    @property
    def unrecoverable(self) -> dict[int, dict]:
        """Ledger id → the unrecoverable side znode's document (every worker's, watched)."""
        return self.backlog.unrecoverable

    @property
    def _active(self) -> set[int]:
        return self.backlog.active

    def _order(self, ids: list[int]) -> list[int]:
        return self.backlog.order(ids, self.rng, self.watcher.available)

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
        while not self._stopping:
            try:
                wait = self.task_bucket.reserve(1)
                if wait > 0:
                    await self.sleep(wait)
                async with self._acquire_lock:
                    lid = await self._next_ledger()
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
            except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: back off and go on
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
            lid = await self.um.poll_ledger_to_rereplicate(self._order)
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
    def _record(self, lid: int, outcome: str) -> None:
        self.history.append((lid, outcome))
        del self.history[:-2000]

    async def _rereplicate(self, lid: int) -> bool:
        """One pass over a locked ledger: decide with :func:`~autorecovery.plan.pass_plan.plan_pass`,
        act, re-check, end with :func:`~autorecovery.plan.pass_plan.conclude_pass`. Returns True when
        the ledger is done (or made progress that a later pass continues without backoff), False for an
        unsuccessful pass (the slot backs off)."""
        t0 = self.clock()
        outcome = "failed"
        keep_lock = False
        self._active.add(lid)
        self.tracker.start(lid)
        try:
            try:
                md, _version = await self.store.read(lid)
            except NoSuchLedgerError as exc:
                self.m.exception(exc)
                log.info("ledger deleted; removing its marker", ledger_id=lid)
                await self.um.mark_replicated(lid)
                await self.backlog.clear_unrecoverable(lid)
                self.memory.replicated(lid)
                outcome = "deleted"
                return False
            marker = await self.um.get_marker(lid)
            if marker is None:
                outcome = "not-marked"
                return True
            self.backlog.remember_marker(lid, marker.version, marker.ctime, marker.replicas)
            data_loss = await self.checker.check(lid, md)
            plan = pp.plan_pass(md, data_loss, self._placement_segments(md) if not data_loss else [],
                                self.watcher.available)
            if plan.nothing_to_do:
                outcome = await self._done(lid, "nothing-to-do")
                return True
            self.tracker.plan(lid, estimate_copy_bytes(md, set(plan.estimate_bookies)))
            out = pp.PassOutcome()
            for action in plan.actions:
                if isinstance(action, pp.CopyFragment):
                    md = await self._fix_data_loss(lid, md, action.fragment, out)
                else:
                    md = await self._fix_placement(lid, md, action.segment_first_entry_id, out)
            if out.copied:
                self.m.replicated.inc()
                if out.copied_placement:
                    self.m.replicated_placement.inc()
            open_pending = plan.open_fragment or await self._last_segment_open_and_missing(lid, md)
            remaining: list[BadFragment] = []
            rem_placement: list[int] = []
            if not open_pending:  # re-check from fresh metadata
                md, _version = await self.store.read(lid)
                remaining = await self.checker.check(lid, md)
                rem_placement = self._placement_segments(md) if not remaining else []
            end = pp.conclude_pass(
                plan, out, open_pending=open_pending, remaining_data_loss=bool(remaining),
                remaining_placement=rem_placement,
                release_delay_ms=0, open_grace_ms=self.settings.open_ledger_grace_ms)
            if end.kind == pp.RELEASE_LATER:  # only now: asking the memory counts a failure
                end = dataclasses.replace(end, delay_ms=self.memory.next_release_delay_ms(lid))
            outcome = end.outcome
            if end.kind == pp.DEFER_OPEN:
                self._defer_open_ledger(lid)
                keep_lock = True
                self.tracker.block(lid, end.reason)
                return False
            if end.kind == pp.DONE:
                if end.no_more_bookie:
                    log.warning("placement cannot be repaired: no more bookie; marker removed until the auditor "
                                "marks the ledger again", ledger_id=lid, segments=list(end.no_more_bookie))
                await self._done(lid, end.outcome)
                return True
            if end.kind == pp.DATA_LOSS_FIXED:  # placement is left for a later pass (BP-54)
                return True
            if end.kind == pp.UNRECOVERABLE:
                await self._surface_unrecoverable(lid, out)
                return False
            self.m.defer.inc()
            self._schedule_release(lid, end.delay_ms)
            keep_lock = True
            self.tracker.block(lid, end.reason)
            self.backlog.try_later(lid, end.delay_ms / 1000.0)
            log.warning("ledger still under-replicated; deferring lock release", ledger_id=lid, delay_ms=end.delay_ms,
                        failures=self.memory.failures(lid), reason=end.reason)
            return False
        except NoSuchLedgerError as exc:
            self.m.exception(exc)
            with contextlib.suppress(Exception):
                await self.um.mark_replicated(lid)
            outcome = "deleted"
            return False
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as exc:  # noqa: BLE001 - upstream: release the lock, count, back off
            self.m.exception(exc)
            if is_retriable(exc):
                log.warning("replication pass failed; the ledger is retried", ledger_id=lid, error=str(exc),
                            error_type=type(exc).__name__)
                self.tracker.block(lid, f"{type(exc).__name__}: {exc}")
                return False
            reason = f"not retriable: {type(exc).__name__}: {exc} (skipped until the ledger is marked again)"
            marker = None
            with contextlib.suppress(Exception):
                marker = await self.um.get_marker(lid)
            self.backlog.record_not_retriable(
                lid, (marker.version, marker.ctime) if marker else (self.um.held.get(lid, -1), -1), reason)
            log.error("replication pass failed with an error retrying will not fix; the ledger is skipped until "
                      "it is marked again", ledger_id=lid, error=str(exc), error_type=type(exc).__name__)
            self.tracker.block(lid, reason)
            return False
        finally:
            self._active.discard(lid)
            done = outcome in ("replicated", "nothing-to-do", "no-more-bookie")
            self.tracker.finish(lid, done)
            if not keep_lock and lid in self.um.held:
                with contextlib.suppress(Exception):
                    await self.um.release(lid)
            self.m.rereplicate.record((self.clock() - t0) * 1000.0, success=done or outcome.startswith("data-loss-fixed"))
            self._record(lid, outcome)
            log.info("replication pass", ledger_id=lid, outcome=outcome, ms=round((self.clock() - t0) * 1000.0, 1))

    async def _done(self, lid: int, outcome: str) -> str:
        """Versioned delete of the marker (+ lock release); forget failures; returns ``outcome``."""
        deleted = await self.um.mark_replicated(lid)
        self.memory.replicated(lid)
        self.backlog.forget_failures(lid)
        await self.backlog.clear_unrecoverable(lid)
        self.tracker.unblock(lid)
        if not deleted:
            log.info("marker changed while replicating (re-marked); it stays for another pass", ledger_id=lid)
        return outcome

    # -- data loss -------------------------------------------------------------------------------
    async def _fix_data_loss(self, lid: int, md: LedgerMetadata, frag: BadFragment, p: pp.PassOutcome) -> LedgerMetadata:
        seg_i = _segment_index(md, frag.segment_first_entry_id)
        if seg_i is None:
            p.retriable.append("segment changed during the pass")
            return md
        seg = md.segments[seg_i]
        ensemble = seg.ensemble
        first, last = seg.first_entry_id, md.segment_end(seg_i)
        bad = set(frag.bad_indexes)
        avail = self.watcher.available
        # a bookie that was lost is registered again: check before copying anything (#2766)
        if any(ensemble[i] in avail for i in bad):
            fresh = await self.checker.check(lid, md)
            again = [f for f in fresh if f.segment_first_entry_id == seg.first_entry_id]
            if not again:
                self.m.copies_cancelled.inc()
                p.cancelled += 1
                log.info("lost bookie is back and holds its entries; copy skipped", ledger_id=lid,
                         bookies=sorted(ensemble[i] for i in bad))
                return md
            bad = set(again[0].bad_indexes)
        bad_bookies = {ensemble[i] for i in bad}
        # entries that could not be read last time are tried first; nothing is written if they still fail
        remembered = self.memory.unreadable(lid, first, last)
        if remembered:
            failed = await self._probe_entries(lid, ensemble, md.write_quorum, remembered, ledger_digest(md))
            self.memory.readable_again(lid, [g for g in remembered if g.run not in {f.run for f in failed}])
            if failed:
                self._classify_unreadable(failed, p)
                return md
        # entries no registered replica holds: copy nothing of the fragment (no partial copies), and
        # find that out before asking for targets (a missing target must not hide data loss)
        probe = plan_fragment_copy(
            ensemble=ensemble, write_quorum=md.write_quorum, first=first, last=last,
            replacements={i: f"?target-{i}" for i in bad}, readable=avail - bad_bookies,
            last_resort=avail & bad_bookies)
        if probe.unsourced:
            res = CopyResult(unreadable=[Gap(run) for run in probe.unsourced])
            await self.copier.explain(lid, ensemble, md.write_quorum, res, lambda: self.watcher.available,
                                      ledger_digest(md))
            self.m.unable_to_read.inc(self.memory.add_unreadable(lid, res.unreadable))
            self._classify_unreadable(res.unreadable, p)
            return md
        # entries that no bookie of their write set stores at all (a ledger whose metadata claims more
        # than was ever written, issue 25): data loss found from the bookies' listings, before targets
        gone = await self.copier.absent(lid, ensemble, md.write_quorum, first, last, lambda: self.watcher.available)
        if gone:
            self.m.unable_to_read.inc(self.memory.add_unreadable(lid, gone))
            self._classify_unreadable(gone, p)
            return md
        try:
            repl = choose_replacements(
                ensemble=ensemble, bad_indexes=bad,
                replace_bookie=SpreadReplacer(self.policy, self.copier.cluster_slots.targets_in_flight(self.caps.targets)),
                ensemble_size=md.ensemble_size, write_quorum=md.write_quorum, ack_quorum=md.ack_quorum,
                exclude=self._excluded_targets(), readonly=self.watcher.readonly, writable=self.watcher.writable)
        except NotEnoughBookiesError as exc:
            self.m.exception(exc)
            p.retriable.append(f"no eligible target bookie: {exc}")
            log.warning("no target bookie for fragment", ledger_id=lid, first_entry_id=first, error=str(exc))
            return md
        plan = plan_fragment_copy(
            ensemble=ensemble, write_quorum=md.write_quorum, first=first, last=last, replacements=repl,
            readable=avail - bad_bookies, last_resort=avail & bad_bookies, source_load=dict(self.caps.sources))
        if plan.unsourced:  # an in-place target was the only holder: nothing to copy from
            p.retriable.append(f"entries {entry_runs.spans(plan.unsourced)} have no source besides their in-place target")
            return md
        watch_back = {b for b in bad_bookies if b not in avail}
        return await self._copy_and_swap(lid, md, seg.first_entry_id, plan, p, watch_back,
                                         skip_sources=bad_bookies, placement=False)

    def _excluded_targets(self) -> set[str]:
        """Bookies not to copy to: targets that failed recently, and bookies that do not advertise our
        gRPC endpoint (a stock BookKeeper bookie cannot take a RECOVERY_ADD over our protocol)."""
        now = self.clock()
        for b, until in list(self._bad_targets.items()):
            if until <= now:
                del self._bad_targets[b]
        return set(self._bad_targets) | set(getattr(self.watcher, "foreign", {}) or {})

    async def _probe_entries(self, lid: int, ensemble, wq: int, remembered: list[Gap],
                             digest: EntryDigest) -> list[Gap]:
        """Read the first entry of each remembered unreadable run (one residue each) from any replica
        (checked with the ledger's ``digest``); returns the runs whose probe no replica served, with
        the reason per replica (the probe's answer stands for its run: O(runs) reads, whatever their
        length)."""
        reg = self.watcher.available
        failed: list[Gap] = []
        for g in remembered:
            e = g.run.bounds()[0]
            if e < 0:
                continue
            why: dict[str, str] = {}
            ok = False
            for j in write_set(e, len(ensemble), wq):
                b = ensemble[j]
                if b not in reg:
                    why[b] = "NOT_REGISTERED"
                    continue
                try:
                    r = await self.bookies.read_entry(b, lid, e)
                    digest.verify(r.body, lid, e, source=b)
                    ok = True
                    break
                except DigestMismatchError:
                    why[b] = "DIGEST"
                except BookieError as exc:
                    why[b] = exc.status
            if not ok:
                failed.append(Gap(g.run, why))
        return failed

    def _classify_unreadable(self, unreadable: list[Gap], p: pp.PassOutcome) -> None:
        """Record unreadable runs in the pass outcome: data loss, or a reason to retry
        (:func:`~autorecovery.plan.pass_plan.classify_unreadable`)."""
        gone, rest = pp.classify_unreadable(unreadable)
        p.unrecoverable.extend(gone)
        if rest:
            p.retriable.append(f"entries {entry_runs.spans(rest)} could not be read now (replicas unreachable or failing)")

    async def _copy_and_swap(self, lid: int, md: LedgerMetadata, seg_first: int, plan: FragmentPlan,
                             p: pp.PassOutcome, watch_back: set[str], *, skip_sources, placement: bool) -> LedgerMetadata:
        """Run ``plan`` through the :class:`~autorecovery.roles.replicator.SegmentReplicator` and record
        the result in ``p``."""
        def should_abort() -> str | None:
            if self._abort_copies:
                return self._abort_copies
            if watch_back and watch_back <= self.watcher.available:
                return "lost bookies are back: " + ",".join(sorted(watch_back))
            return None

        r = await self.replicator.replicate(
            lid, md, seg_first, plan, registered=lambda: self.watcher.available, skip_sources=skip_sources,
            should_abort=should_abort, on_bytes=lambda n: self.tracker.copied(lid, n))
        if r.status == rp.TARGET_FAILED:
            self.m.exception(r.cause)
            self._bad_targets[r.bad_target] = self.clock() + 60.0
            p.retriable.append(f"target {r.bad_target} failed: {r.cause}")
            log.warning("target write failed; excluding it for 60 s", ledger_id=lid, bookie_id=r.bad_target,
                        error=str(r.cause))
        elif r.status == rp.ABORTED:
            self.m.copies_cancelled.inc()
            p.retriable.append(r.detail)
        elif r.status == rp.INCOMPLETE:
            self.memory.add_unreadable(lid, r.copy.unreadable)  # the copier counted them per entry
            self._classify_unreadable(r.copy.unreadable, p)
        elif r.status == rp.SEGMENT_CHANGED:
            p.retriable.append(r.detail)
        else:  # swapped, or every member already replaced by someone else: the fragment is fine
            p.copied += 1
            if placement:
                p.copied_placement += 1
        return r.metadata

    # -- BP-54 -----------------------------------------------------------------------------------
    def _placement_segments(self, md: LedgerMetadata) -> list[int]:
        """First entry ids of the closed ledger's segments that FAIL the placement policy (BP-54 on)."""
        if not self.settings.repair_placement or not md.is_closed:
            return []
        out = []
        for seg in md.segments:
            if self.policy.is_ensemble_adhering(list(seg.ensemble), md.write_quorum, md.ack_quorum) == Adherence.FAIL:
                out.append(seg.first_entry_id)
        return out

    async def _fix_placement(self, lid: int, md: LedgerMetadata, seg_first: int, p: pp.PassOutcome) -> LedgerMetadata:
        seg_i = _segment_index(md, seg_first)
        if seg_i is None:
            return md
        seg = md.segments[seg_i]
        # the exact minimum-swap search runs in a worker thread on a snapshot of the policy's state
        # (RepairJob): the event loop keeps serving while it searches
        job = self.policy.plan_replace_to_adhere(md.ensemble_size, md.write_quorum, md.ack_quorum,
                                                 frozenset(self._excluded_targets()), list(seg.ensemble))
        res = await asyncio.to_thread(job.run) if job.needs_search else job.run()
        new_ens = list(res.ensemble)
        changed = [i for i in range(len(seg.ensemble)) if i < len(new_ens) and new_ens[i] != seg.ensemble[i]]
        if res.adherence == Adherence.FAIL or not changed or any(new_ens[i] in self.watcher.readonly for i in changed):
            self.m.no_more_bookie.inc()
            p.placement_impossible.append(seg_first)
            log.warning("no more bookie: placement of segment cannot be repaired", ledger_id=lid,
                        segment_first_entry_id=seg_first, ensemble=list(seg.ensemble))
            return md
        repl = {i: new_ens[i] for i in changed}
        plan = plan_fragment_copy(ensemble=seg.ensemble, write_quorum=md.write_quorum, first=seg.first_entry_id,
                                  last=md.segment_end(seg_i), replacements=repl, readable=self.watcher.available,
                                  source_load=dict(self.caps.sources))
        if plan.unsourced:
            p.retriable.append(f"placement move of segment {seg_first}: entries {entry_runs.spans(plan.unsourced)} unreadable")
            return md
        return await self._copy_and_swap(lid, md, seg_first, plan, p, set(), skip_sources=(), placement=True)

    # -- open ledgers ----------------------------------------------------------------------------
    async def _last_segment_open_and_missing(self, lid: int, md: LedgerMetadata) -> bool:
        """Upstream isLastSegmentOpenAndMissingBookies: open ledger whose last ensemble has a bookie
        that is not writable; also the previous segment when the LAC lags its end (#3917)."""
        if md.is_closed:
            return False
        writable = self.watcher.writable
        if any(b not in writable for b in md.last_ensemble):
            return True
        if len(md.segments) > 1:
            lac = await self.checker.read_lac(lid, md)
            if lac < md.segments[-1].first_entry_id - 1:
                return any(b not in writable for b in md.segments[-2].ensemble)
        return False

    def _defer_open_ledger(self, lid: int) -> None:
        async def later() -> None:
            try:
                await self.sleep(self.settings.open_ledger_grace_ms / 1000.0)
                md, _ = await self.store.read(lid)
                need = await self._last_segment_open_and_missing(lid, md)
                if not need and not md.is_closed:
                    need = any(not f.closed for f in await self.checker.check(lid, md))
                if need:
                    log.info("opening ledger for recovery (fence and close) after the grace period", ledger_id=lid)
                    await recover_ledger(self.bk, lid)
                else:
                    log.info("writer moved on within the grace period; ledger left open", ledger_id=lid)
            except asyncio.CancelledError:
                raise
            except NoSuchLedgerError:
                with contextlib.suppress(Exception):
                    await self.um.mark_replicated(lid)
            except Exception as exc:  # noqa: BLE001 - logged and counted; the lock is released below
                self.m.exception(exc)
                log.warning("open-ledger recovery failed", ledger_id=lid, error=str(exc))
            finally:
                self._deferred.pop(lid, None)
                if lid in self.um.held and not self._stopping:
                    with contextlib.suppress(Exception):
                        await self.um.release(lid)
                self.tracker.unblock(lid)
                self._wake.set()

        self._deferred[lid] = asyncio.create_task(later(), name=f"open-ledger-{lid}")

    # -- failures --------------------------------------------------------------------------------
    def _schedule_release(self, lid: int, delay_ms: int) -> None:
        async def later() -> None:
            try:
                await self.sleep(delay_ms / 1000.0)
            finally:
                self._deferred.pop(lid, None)
            if lid in self.um.held and not self._stopping:
                await self.um.release(lid)
            self._wake.set()

        old = self._deferred.pop(lid, None)
        if old is not None:
            old.cancel()
        self._deferred[lid] = asyncio.create_task(later(), name=f"release-{lid}")

    async def _surface_unrecoverable(self, lid: int, p: pp.PassOutcome) -> None:
        doc = await self.backlog.surface_unrecoverable(lid, p.unrecoverable, self.um.lock_owner)
        waiting = doc["waiting_for"]
        self.m.unrecoverable_total.inc()
        self.tracker.block(lid, unrecoverable_reason(doc))
        # WARNING here, once per pass of this worker: the elected auditor logs the record once at ERROR
        # for the whole cluster (issue 9: every daemon used to log it at ERROR, 860 characters a line)
        log.warning("ledger surfaced as unrecoverable; not retrying until a bookie returns", ledger_id=lid,
                    waiting_for=waiting or "an operator", entry_count=doc["entry_count"], reason=doc["reason"],
                    side_znode=self.backlog.record_path(lid))


def _segment_index(md: LedgerMetadata, first_entry_id: int) -> int | None:
    for i, seg in enumerate(md.segments):
        if seg.first_entry_id == first_entry_id:
            return i
    return None


__all__ = ["ReplicationWorker", "WorkerSettings", "CONFIG_KEYS"]
