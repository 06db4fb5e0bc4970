"""The ReplicationWorker: takes under-replicated ledgers and makes them whole again (EDGE).

Upstream source: ``replication/ReplicationWorker`` (loop, open-ledger grace and fencing, failed-ledger
lock-release backoff, unreadable-entry memory, metrics), ``client/BookKeeperAdmin.replicateLedgerFragment``
and ``LedgerFragmentReplicator`` (targets, copy, ensemble CAS), BP-54 (placement repair).

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
  ``{"ledger", "entries", "bookies", "waiting_for", "time", ...}`` — and not retried until an operator
  deletes the side znode or re-marks the ledger, or one of the bookies in ``waiting_for`` registers;
* a returning bookie cancels needless copies, also mid-copy;
* ``progress()``: bytes and ledgers left, rate, ETA and why ledgers are blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import structlog

from autorecovery import metrics as metrics_mod
from autorecovery.audit.checker import BadFragment
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.client.recovery import recover_ledger
from autorecovery.config.keys import KEY_BY_NAME
from autorecovery.errors import (
    AutoRecoveryError,
    BookieError,
    DigestMismatchError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    is_retriable,
)
from autorecovery.ledger.digest import unpack_entry
from autorecovery.ledger.ids import ledger_id_from_ur_leaf, ur_leaf_name
from autorecovery.ledger.metadata import LedgerMetadata, write_set
from autorecovery.placement.policy import Adherence
from autorecovery.plan.backoff import FailureMemory
from autorecovery.plan.priority import LedgerPriority, fragment_copies_left, ledger_priority, order_candidates
from autorecovery.plan.progress import Progress, ProgressTracker, estimate_copy_bytes
from autorecovery.plan.targets import FragmentPlan, choose_replacements, plan_fragment_copy
from autorecovery.plan.throttle import StreamCaps, TokenBucket
from autorecovery.roles.checker import LedgerChecker
from autorecovery.roles.worker_settings import CONFIG_KEYS, WorkerSettings  # noqa: F401 (re-exported)
from autorecovery.roles.copier import DEFINITIVE, CopyResult, FragmentCopier, TargetWriteError, ranges
from autorecovery.zk.bridge import NodeExistsError, NoNodeError, ZkClient
from autorecovery.zk.ledgers import LedgerStore, now_ms
from autorecovery.zk.paths import Paths
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


@dataclass
class _Pass:
    """What one pass over a ledger did."""

    copied: int = 0
    copied_placement: int = 0
    retriable: list[str] = field(default_factory=list)
    unrecoverable: dict[int, dict[str, str]] = field(default_factory=dict)
    placement_impossible: list[int] = field(default_factory=list)
    cancelled: int = 0


class _SegmentChanged(Exception):
    pass


class ReplicationWorker:
    """Re-replicates under-replicated ledgers; see the module docstring for the algorithm.

    Args:
        zk: a started ZkClient. paths: the cluster's znode paths.
        settings: :class:`WorkerSettings`.
        policy: a placement policy (``autorecovery.placement``); the worker keeps it told about
            membership (``on_cluster_changed``); disk weights come from whoever calls
            ``update_bookie_info`` (the daemon's BookieInfoReader).
        bookies: a :class:`~autorecovery.rpc.bookie_client.BookieClient`.
        watcher: a started :class:`~autorecovery.zk.bookies.BookieWatcher`.
        clock: monotonic seconds (backoff, throttles, progress); default ``time.monotonic``.
        registry: metrics registry (default: the process registry).
        lock_owner: data written into lock znodes (default: host name, as upstream).

    Attributes (read by tests and the admin API):
        memory: :class:`~autorecovery.plan.backoff.FailureMemory` (failure counts, delays handed out,
            unreadable entries per ledger).
        history: ``(ledger_id, outcome)`` of the last passes, oldest first.
        unrecoverable: ledger id → the side-znode document of ledgers surfaced as unrecoverable.
    """

    def __init__(self, zk: ZkClient, paths: Paths, settings: WorkerSettings, policy, bookies, watcher, *,
                 clock: Callable[[], float] | None = None, registry: metrics_mod.MetricsRegistry | None = None,
                 lock_owner: str | None = None, checker: LedgerChecker | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, rng: random.Random | None = None) -> None:
        self.zk, self.paths, self.settings = zk, paths, settings
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
                                     metrics=self.m, sleep=sleep)
        self.tracker = ProgressTracker(self.clock)
        self.history: list[tuple[int, str]] = []
        self.unrecoverable: dict[int, dict] = {}
        self._markers: dict[int, tuple[int, int, list[str]]] = {}  # lid -> (version, ctime, replicas)
        self._mds: dict[int, LedgerMetadata] = {}
        self._known: dict[int, LedgerPriority] = {}
        self._later: dict[int, float] = {}  # lid -> until (clock) : blocked, try others first
        # lid -> (marker version, reason): a pass failed with an error retrying cannot fix
        # (errors.is_retriable); skipped until the ledger is marked again (a new marker version)
        self._not_retriable: dict[int, tuple[tuple[int, int], str]] = {}
        self._bad_targets: dict[str, float] = {}
        self._active: set[int] = set()
        self._deferred: dict[int, asyncio.Task] = {}
        self._slots: list[asyncio.Task] = []
        self._busy: set[asyncio.Task] = set()
        self._refresh_task: asyncio.Task | None = None
        self._refresh_wanted = asyncio.Event()
        self._wake = asyncio.Event()
        self._acquire_lock = asyncio.Lock()
        self._last_full_refresh = -1e18
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
        self.policy.on_cluster_changed(set(self.watcher.writable), set(self.watcher.readonly))
        self.watcher.add_listener(self._on_membership)
        self.m.bytes_remaining.set_function(lambda: self.tracker.snapshot().worker_bytes_remaining)
        self.m.ledgers_remaining.set_function(lambda: len(self.um.held))
        self.m.ledgers_blocked.set_function(self._own_blocked_count)
        self._check_policy_config()
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
        extra: dict[int, str] = {}
        for lid, info in self.unrecoverable.items():
            extra[lid] = (f"unrecoverable: entries {info.get('entries')} have no readable replica"
                          f" (waiting for {info.get('waiting_for') or 'an operator'})")
        for lid, (_v, reason) in self._not_retriable.items():
            extra[lid] = reason
        return self.tracker.snapshot(extra)

    def _own_blocked_count(self) -> int:
        """Still-marked ledgers this worker's own passes left blocked (autorecovery_worker_ledgers_blocked)."""
        return len({lid for lid in self.tracker.blocked() if lid in self._markers} | set(self._not_retriable))

    # -- membership / policy ---------------------------------------------------------------------
    def _on_membership(self, writable: frozenset[str], readonly: frozenset[str]) -> None:
        if self._stopping:
            return
        self.policy.on_cluster_changed(set(writable), set(readonly))
        self._refresh_wanted.set()
        self._wake.set()

    def _check_policy_config(self) -> None:
        if self.settings.repair_placement and not hasattr(self.policy, "replace_to_adhere"):
            log.warning("repairedPlacementPolicyNotAdheringBookieEnabled=true but the placement policy has no "
                        "replace_to_adhere; placement marks will not be repaired", policy=type(self.policy).__name__)

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
            pause = max(0.5, len(self._markers) / 2000.0) - (self.clock() - t0)
            if pause > 0 and not self._stopping:
                await self.sleep(pause)

    async def _refresh(self) -> None:
        """Read markers (new ones, or all every 60 s) and their metadata; recompute priorities and the
        backlog estimate; sync the unrecoverable side znodes."""
        ids = set(await self.um.watched_marked_ids())
        now = self.clock()
        full = now - self._last_full_refresh > 60.0
        if full:
            self._last_full_refresh = now
        for lid in list(self._not_retriable):
            if lid not in ids:
                self._not_retriable.pop(lid, None)
        for lid in list(self._markers):
            if lid not in ids:
                self._markers.pop(lid, None)
                self._mds.pop(lid, None)
                self._known.pop(lid, None)
        todo = [lid for lid in sorted(ids) if full or lid not in self._markers or lid in self._not_retriable][:5000]
        sem = asyncio.Semaphore(32)

        async def load(lid: int) -> None:
            async with sem:
                try:
                    marker = await self.um.get_marker(lid)
                except AutoRecoveryError as exc:
                    if exc.retriable:
                        raise
                    # one garbage marker must not freeze the whole backlog (and progress) forever
                    log.warning("unreadable under-replication marker; left out of the backlog", ledger_id=lid,
                                error=str(exc))
                    return
                if marker is None:
                    return
                self._markers[lid] = (marker.version, marker.ctime, list(marker.replicas))
                if full or lid not in self._mds:
                    try:
                        self._mds[lid], _ = await self.store.read(lid)
                    except (NoSuchLedgerError, AutoRecoveryError):
                        self._mds.pop(lid, None)

        await asyncio.gather(*(load(lid) for lid in todo))
        if any(not self._skip_not_retriable(lid) for lid in list(self._not_retriable)):
            self._wake.set()  # a ledger was marked again: let the slots look at it
        avail = self.watcher.available
        backlog: dict[int, int] = {}
        placement_marks = 0
        for lid, (_v, ctime, replicas) in self._markers.items():
            md = self._mds.get(lid)
            if md is None:
                backlog[lid] = 0  # still marked (metadata unreadable or gone): counted, size unknown
                continue
            p = ledger_priority(lid, md, replicas, avail, ctime)
            self._known[lid] = p
            backlog[lid] = estimate_copy_bytes(md, p.lost)
            if not replicas:
                placement_marks += 1
        self.tracker.set_backlog(backlog)
        if placement_marks and not self.settings.repair_placement and not self._warned_config:
            self._warned_config = True
            log.warning("the auditor marks ledgers for placement repair (markers without missing replicas) but "
                        "repairedPlacementPolicyNotAdheringBookieEnabled=false on this worker: such markers are "
                        "only re-checked and cleared; set the key on both sides (BP-54)", markers=placement_marks)
        await self._sync_unrecoverable()

    async def _sync_unrecoverable(self) -> None:
        def on_change(_e) -> None:
            self._refresh_wanted.set()
            self._wake.set()

        try:
            names = await self.zk.get_children(self.paths.unrecoverable, watch=on_change)
        except NoNodeError:
            names = []
        present = set()
        for n in names:
            try:
                lid = ledger_id_from_ur_leaf(n)
            except ValueError:
                continue
            present.add(lid)
            if lid not in self.unrecoverable:
                try:
                    data, _ = await self.zk.get(f"{self.paths.unrecoverable}/{n}")
                    self.unrecoverable[lid] = json.loads(data.decode() or "{}")
                except (NoNodeError, ValueError):
                    continue
        for lid in list(self.unrecoverable):
            if lid not in present:
                log.info("unrecoverable side znode removed; the ledger will be retried", ledger_id=lid)
                self.unrecoverable.pop(lid, None)
                self._wake.set()

    def _still_unrecoverable(self, lid: int) -> bool:
        info = self.unrecoverable.get(lid)
        if info is None:
            return False
        marker = self._markers.get(lid)
        if marker is not None and (marker[0], marker[1]) != (info.get("marker_version"), info.get("marker_ctime")):
            return False  # re-marked since it was surfaced
        avail = self.watcher.available
        return not any(b in avail for b in info.get("waiting_for", []))

    def _order(self, ids: list[int]) -> list[int]:
        now = self.clock()
        for lid, until in list(self._later.items()):
            if until <= now:
                del self._later[lid]
        skip = {lid for lid in ids if self._still_unrecoverable(lid) or self._skip_not_retriable(lid)} | self._active
        return order_candidates(ids, self._known, skip=skip, later=set(self._later), rng=self.rng)

    def _skip_not_retriable(self, lid: int) -> bool:
        """True while the ledger's last pass failed with a non-retriable error and it was not re-marked."""
        entry = self._not_retriable.get(lid)
        if entry is None:
            return False
        marker = self._markers.get(lid)
        if marker is not None and (marker[0], marker[1]) != entry[0]:
            self._not_retriable.pop(lid, None)  # marked again (new version or ctime): try once more
            return False
        return True

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
        """One pass over a locked ledger. Returns True when the ledger is done (or made progress that a
        later pass continues without backoff), False for an unsuccessful pass (the slot backs off)."""
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
                await self._clear_unrecoverable(lid)
                self.memory.replicated(lid)
                outcome = "deleted"
                return False
            marker = await self.um.get_marker(lid)
            if marker is None:
                outcome = "not-marked"
                return True
            self._markers[lid] = (marker.version, marker.ctime, list(marker.replicas))
            data_loss = await self.checker.check(lid, md)
            placement = self._placement_segments(md) if not data_loss else []
            if not data_loss and not placement:
                outcome = await self._done(lid, "nothing-to-do")
                return True
            avail = self.watcher.available
            lost = {b for f in data_loss for b in f.bad_bookies}
            # a placement move re-copies about one member per segment: estimate it as one lost member
            moved = {md.segments[i].ensemble[0] for i in (_segment_index(md, f) for f in placement) if i is not None}
            self.tracker.plan(lid, estimate_copy_bytes(md, lost or moved))
            p = _Pass()
            open_found = any(not f.closed for f in data_loss)
            closed = [f for f in data_loss if f.closed]
            closed.sort(key=lambda f: fragment_copies_left(
                md.segments[md.segment_index_at(f.segment_first_entry_id)].ensemble, md.write_quorum,
                f.first_entry_id, f.last_entry_id, f.bad_indexes, avail - f.bad_bookies))
            for frag in closed:
                md = await self._fix_data_loss(lid, md, frag, p)
            if not data_loss:
                for seg_first in placement:
                    md = await self._fix_placement(lid, md, seg_first, p)
            if p.copied:
                self.m.replicated.inc()
                if p.copied_placement:
                    self.m.replicated_placement.inc()
            if open_found or await self._last_segment_open_and_missing(lid, md):
                self._defer_open_ledger(lid)
                keep_lock = True
                outcome = "deferred-open"
                self.tracker.block(lid, f"open ledger: waiting {self.settings.open_ledger_grace_ms} ms before fencing")
                return False
            # re-check from fresh metadata
            md, _version = await self.store.read(lid)
            remaining = await self.checker.check(lid, md)
            rem_placement = self._placement_segments(md) if not remaining else []
            if not remaining and set(rem_placement) <= set(p.placement_impossible):
                if rem_placement:
                    log.warning("placement cannot be repaired: no more bookie; marker removed until the auditor "
                                "marks the ledger again", ledger_id=lid, segments=rem_placement)
                outcome = await self._done(lid, "replicated" if p.copied else "no-more-bookie" if rem_placement
                                           else "nothing-to-do")
                return True
            if not remaining and data_loss:
                # data loss fixed; the placement problem is left for a later pass (BP-54)
                outcome = "data-loss-fixed-placement-pending"
                return True
            if p.unrecoverable and not p.retriable:
                await self._surface_unrecoverable(lid, md, p)
                outcome = "unrecoverable"
                return False
            delay_ms = self.memory.next_release_delay_ms(lid)
            self.m.defer.inc()
            self._schedule_release(lid, delay_ms)
            keep_lock = True
            reason = "; ".join(dict.fromkeys(p.retriable)) or "fragments still under-replicated after the pass"
            self.tracker.block(lid, reason)
            self._later[lid] = self.clock() + delay_ms / 1000.0
            log.warning("ledger still under-replicated; deferring lock release", ledger_id=lid, delay_ms=delay_ms,
                        failures=self.memory.failures(lid), reason=reason)
            outcome = "deferred-failed"
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
            self._not_retriable[lid] = ((marker.version, marker.ctime) if marker else (self.um.held.get(lid, -1), -1),
                                        reason)
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
        self._later.pop(lid, None)
        self._not_retriable.pop(lid, None)
        await self._clear_unrecoverable(lid)
        self.tracker.unblock(lid)
        if not deleted:
            log.info("marker changed while replicating (re-marked); it stays for another pass", ledger_id=lid)
        return outcome

    # -- data loss -------------------------------------------------------------------------------
    async def _fix_data_loss(self, lid: int, md: LedgerMetadata, frag: BadFragment, p: _Pass) -> LedgerMetadata:
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
            failed = await self._probe_entries(lid, ensemble, md.write_quorum, remembered)
            self.memory.readable_again(lid, [e for e in remembered if e not in failed])
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
            res = CopyResult(unreadable={e: {} for e in probe.unsourced})
            await self.copier.explain(lid, ensemble, md.write_quorum, res, lambda: self.watcher.available)
            self.m.unable_to_read.inc(self.memory.add_unreadable(lid, res.unreadable))
            self._classify_unreadable(res.unreadable, p)
            return md
        try:
            repl = choose_replacements(
                ensemble=ensemble, bad_indexes=bad, replace_bookie=self.policy.replace_bookie,
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
            p.retriable.append(f"entries {ranges(plan.unsourced)} have no source besides their in-place target")
            return md
        watch_back = {b for b in bad_bookies if b not in avail}
        return await self._copy_and_swap(lid, md, seg.first_entry_id, ensemble, plan, p, watch_back,
                                         skip_sources=bad_bookies, placement=False)

    def _excluded_targets(self) -> set[str]:
        """Bookies not to copy to: targets that failed recently, and bookies that do not advertise our
        gRPC endpoint (a stock BookKeeper bookie cannot take a RECOVERY_ADD over our protocol)."""
        now = self.clock()
        for b, until in list(self._bad_targets.items()):
            if until <= now:
                del self._bad_targets[b]
        return set(self._bad_targets) | set(getattr(self.watcher, "foreign", {}) or {})

    async def _probe_entries(self, lid: int, ensemble, wq: int, entry_ids: list[int]) -> dict[int, dict[str, str]]:
        """Read each entry from any replica (digest-checked); returns the ones no replica served with
        the reason per replica."""
        reg = self.watcher.available
        failed: dict[int, dict[str, str]] = {}
        for e in entry_ids:
            why: dict[str, str] = {}
            ok = False
            for j in write_set(e, len(ensemble), wq):
                b = ensemble[j]
                if b not in reg:
                    why[b] = "NOT_REGISTERED"
                    continue
                try:
                    r = await self.bookies.read_entry(b, lid, e)
                    unpack_entry(r.body, lid, e, source=b)
                    ok = True
                    break
                except DigestMismatchError:
                    why[b] = "DIGEST"
                except BookieError as exc:
                    why[b] = exc.status
            if not ok:
                failed[e] = why
        return failed

    def _classify_unreadable(self, unreadable: Mapping[int, Mapping[str, str]], p: _Pass) -> None:
        """Split unreadable entries into unrecoverable (every replica definitively without a valid copy)
        and retriable ones."""
        gone = {e: dict(w) for e, w in unreadable.items() if w and all(r in DEFINITIVE for r in w.values())}
        p.unrecoverable.update(gone)
        rest = [e for e in unreadable if e not in gone]
        if rest:
            p.retriable.append(f"entries {ranges(rest)} could not be read now (replicas unreachable or failing)")

    async def _copy_and_swap(self, lid: int, md: LedgerMetadata, seg_first: int, ensemble: tuple[str, ...],
                             plan: FragmentPlan, p: _Pass, watch_back: set[str], *, skip_sources,
                             placement: bool) -> LedgerMetadata:
        def should_abort() -> str | None:
            if self._abort_copies:
                return self._abort_copies
            if watch_back and watch_back <= self.watcher.available:
                return "lost bookies are back: " + ",".join(sorted(watch_back))
            return None

        try:
            res = await self.copier.copy(
                ledger_id=lid, master_key=md.password, ensemble=ensemble, write_quorum=md.write_quorum, plan=plan,
                registered=lambda: self.watcher.available, skip_sources=skip_sources, should_abort=should_abort,
                on_bytes=lambda n: self.tracker.copied(lid, n))
        except TargetWriteError as exc:
            self.m.exception(exc.cause)
            self._bad_targets[exc.bookie_id] = self.clock() + 60.0
            p.retriable.append(f"target {exc.bookie_id} failed: {exc.cause}")
            log.warning("target write failed; excluding it for 60 s", ledger_id=lid, bookie_id=exc.bookie_id,
                        error=str(exc.cause))
            return md
        if res.aborted:
            self.m.copies_cancelled.inc()
            p.retriable.append(f"copy aborted: {res.aborted}")
            return md
        if not res.complete:
            self.memory.add_unreadable(lid, res.unreadable)  # the copier counted them per entry
            self._classify_unreadable(res.unreadable, p)
            return md
        repl = dict(plan.replacements)

        def transform(cur: LedgerMetadata) -> LedgerMetadata | None:
            i = _segment_index(cur, seg_first)
            if i is None:
                raise _SegmentChanged(f"segment at {seg_first} is gone")
            if not cur.is_closed and i == len(cur.segments) - 1:
                raise _SegmentChanged(f"segment at {seg_first} is the open last segment")
            cur_ens = cur.segments[i].ensemble
            swap = {ensemble[j]: new for j, new in repl.items() if cur_ens[j] == ensemble[j] and new != ensemble[j]}
            if not swap:
                return None
            out = cur.with_segment_replaced(seg_first, swap)
            if len(set(out.segments[i].ensemble)) != len(out.segments[i].ensemble):
                raise _SegmentChanged(f"replacement would duplicate a bookie in segment {seg_first}")
            return out

        try:
            new_md, _ = await self.store.update(lid, transform)
        except _SegmentChanged as exc:
            p.retriable.append(str(exc))
            return md
        p.copied += 1
        if placement:
            p.copied_placement += 1
        log.info("fragment replicated", ledger_id=lid, segment_first_entry_id=seg_first,
                 replaced={ensemble[j]: new for j, new in repl.items()}, entries=res.entries_read,
                 bytes=res.bytes_written, placement=placement)
        return new_md

    # -- BP-54 -----------------------------------------------------------------------------------
    def _placement_segments(self, md: LedgerMetadata) -> list[int]:
        """First entry ids of the closed ledger's segments that FAIL the placement policy (BP-54 on)."""
        if not self.settings.repair_placement or not md.is_closed or not hasattr(self.policy, "replace_to_adhere"):
            return []
        out = []
        for seg in md.segments:
            if self.policy.is_ensemble_adhering(list(seg.ensemble), md.write_quorum, md.ack_quorum) == Adherence.FAIL:
                out.append(seg.first_entry_id)
        return out

    async def _fix_placement(self, lid: int, md: LedgerMetadata, seg_first: int, p: _Pass) -> LedgerMetadata:
        seg_i = _segment_index(md, seg_first)
        if seg_i is None:
            return md
        seg = md.segments[seg_i]
        res = self.policy.replace_to_adhere(md.ensemble_size, md.write_quorum, md.ack_quorum,
                                            frozenset(self._excluded_targets()), list(seg.ensemble))
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
            p.retriable.append(f"placement move of segment {seg_first}: entries {ranges(plan.unsourced)} unreadable")
            return md
        return await self._copy_and_swap(lid, md, seg_first, seg.ensemble, plan, p, set(), skip_sources=(),
                                         placement=True)

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

    async def _surface_unrecoverable(self, lid: int, md: LedgerMetadata, p: _Pass) -> None:
        entries = sorted(p.unrecoverable)
        bookies = sorted({b for why in p.unrecoverable.values() for b in why})
        waiting = sorted({b for why in p.unrecoverable.values() for b, r in why.items() if r == "NOT_REGISTERED"})
        marker = self._markers.get(lid, (-1, -1, []))
        doc = {
            "ledger": lid,
            "entries": ranges(entries),
            "entry_count": len(entries),
            "bookies": bookies,
            "waiting_for": waiting,
            "reasons": {str(e): why for e, why in list(p.unrecoverable.items())[:100]},
            "time": now_ms(),
            "marker_version": marker[0],
            "marker_ctime": marker[1],
            "worker": self.um.lock_owner,
        }
        path = f"{self.paths.unrecoverable}/{ur_leaf_name(lid)}"
        data = json.dumps(doc, sort_keys=True).encode()
        try:
            await self.zk.create(path, data, makepath=True)
        except NodeExistsError:
            await self.zk.set(path, data)
        self.unrecoverable[lid] = json.loads(data)
        self.m.unrecoverable_total.inc()
        self.tracker.block(lid, f"unrecoverable: entries {doc['entries']} (waiting for {waiting or 'an operator'})")
        # WARNING here, once per pass of this worker: the elected auditor logs the record once at ERROR
        # for the whole cluster (issue 9: every daemon used to log it at ERROR, 860 characters a line)
        log.warning("ledger surfaced as unrecoverable; not retrying until a bookie returns", ledger_id=lid,
                    waiting_for=waiting or "an operator", entry_count=len(entries), side_znode=path)

    async def _clear_unrecoverable(self, lid: int) -> None:
        if self.unrecoverable.pop(lid, None) is not None:
            with contextlib.suppress(NoNodeError):
                await self.zk.delete(f"{self.paths.unrecoverable}/{ur_leaf_name(lid)}")


def _segment_index(md: LedgerMetadata, first_entry_id: int) -> int | None:
    for i, seg in enumerate(md.segments):
        if seg.first_entry_id == first_entry_id:
            return i
    return None


__all__ = ["ReplicationWorker", "WorkerSettings", "CONFIG_KEYS"]
