"""Carry out how a ReplicationWorker pass ended: every side effect of every ending, in one place (EDGE).

Upstream source: ``ReplicationWorker.rereplicate`` (``markLedgerReplicated`` when done, the deferred
lock release of a failed ledger with its backoff, the open-ledger grace then fence-and-close,
``releaseUnderreplicatedLedger`` in ``finally``, the rereplicate op stats) and our additions
(unrecoverable side znode, non-retriable skip, progress).

A pass produces an :class:`~autorecovery.plan.pass_end.Ending` (pure); :class:`PassEffects` is the
only place that turns it into effects on the marker and lock (:class:`~autorecovery.roles.lock_steps.LockSteps`),
the :class:`~autorecovery.roles.backlog.Backlog`, the failure memory, the progress tracker, the
metrics and the logs:

========================  ==========================================================================
ending                    effects
========================  ==========================================================================
DONE                      versioned marker delete + release; forget failures, unrecoverable record,
                          blocked reason; a "no more bookie" warning when BP-54 could not fix a segment
DATA_LOSS_FIXED           release (placement on a later pass)
DEFER_OPEN                keep the lock; after ``openLedgerRereplicationGracePeriod`` fence and close
                          the ledger if its writer has not moved on, then release
UNRECOVERABLE             side znode ``unrecoverable/urL<id>``, counter, blocked reason; release
RELEASE_LATER             count a failure, keep the lock for the backoff delay, try later; WARNING
DELETED                   delete the marker; forget the ledger
NOT_MARKED                release
FAILED                    blocked reason; release (the slot backs off); WARNING
NOT_RETRIABLE             skip until re-marked; blocked reason; release; ERROR
CANCELLED                 release
========================  ==========================================================================

Every pass then ends with :meth:`PassEffects.finish`: the lock released unless kept, progress,
``replication_worker_rereplicate``, the history and one INFO line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from autorecovery.client.recovery import recover_ledger
from autorecovery.errors import NoSuchLedgerError
from autorecovery.ledger.credentials import digest_failure_reason
from autorecovery.plan import entry_runs
from autorecovery.plan import pass_end as pe
from autorecovery.plan import pass_plan as pp
from autorecovery.plan.progress import estimate_copy_bytes, unrecoverable_reason
from autorecovery.roles.lock_steps import LockSteps
from autorecovery.roles.worker_metrics import WorkerMetrics

log = structlog.get_logger("autorecovery.worker")

#: Passes remembered in :attr:`PassEffects.history`.
HISTORY = 2000


class PassEffects:
    """The side effects of a pass's start, ending and finish.

    Args:
        locks: :class:`~autorecovery.roles.lock_steps.LockSteps`. backlog: :class:`~autorecovery.roles.backlog.Backlog`.
        memory: :class:`~autorecovery.plan.backoff.FailureMemory`. tracker: :class:`~autorecovery.plan.progress.ProgressTracker`.
        metrics: the worker's metrics. steps: :class:`~autorecovery.roles.pass_steps.PassSteps` (the
            open-ledger re-check after the grace). bk: the worker's ledger client (fence and close).
        settings: worker settings. clock: monotonic seconds.

    Attributes:
        history: ``(ledger_id, outcome)`` of the last passes, oldest first.
    """

    def __init__(self, *, locks: LockSteps, backlog, memory, tracker, metrics: WorkerMetrics, steps, bk,
                 settings, clock: Callable[[], float]) -> None:
        self.locks, self.backlog, self.memory, self.tracker = locks, backlog, memory, tracker
        self.m, self.steps, self.bk, self.settings, self.clock = metrics, steps, bk, settings, clock
        self.history: list[tuple[int, str]] = []

    # -- start -------------------------------------------------------------------------------------
    def begin(self, lid: int) -> None:
        self.backlog.active.add(lid)
        self.tracker.start(lid)

    def planned(self, lid: int, reading: pe.Reading, plan: pp.PassPlan) -> None:
        """The pass has work: remember the marker as read, expect the plan's bytes (progress)."""
        if reading.marker is not None:
            self.backlog.remember_marker(lid, *reading.marker)
        self.tracker.plan(lid, estimate_copy_bytes(reading.md, set(plan.estimate_bookies)))

    # -- the ending --------------------------------------------------------------------------------
    async def carry_out(self, lid: int, end: pe.Ending, out: pp.PassOutcome) -> None:
        """The effects of ``end`` (see the module's table), after the failure memory learns what the
        pass found (``out``)."""
        self._learn(lid, out)
        kind = end.kind
        if kind == pp.DONE:
            if end.no_more_bookie:
                log.warning("placement cannot be repaired: no more bookie; marker removed until the auditor "
                            "marks the ledger again", ledger_id=lid, segments=list(end.no_more_bookie))
            await self._done(lid)
        elif kind == pp.DEFER_OPEN:
            self._defer_open_ledger(lid)
            self.tracker.block(lid, end.reason)
        elif kind == pp.UNRECOVERABLE:
            await self._surface_unrecoverable(lid, out)
        elif kind == pp.RELEASE_LATER:
            delay_ms = self.memory.next_release_delay_ms(lid)  # counts a failure
            self.m.defer.inc()
            self.locks.release_after(lid, delay_ms)
            self.tracker.block(lid, end.reason)
            self.backlog.try_later(lid, delay_ms / 1000.0)
            log.warning("ledger still under-replicated; deferring lock release", ledger_id=lid, delay_ms=delay_ms,
                        failures=self.memory.failures(lid), reason=end.reason)
        elif kind == pe.DELETED:
            self.m.exception(end.error)
            log.info("ledger deleted; removing its marker", ledger_id=lid)
            try:
                await self.locks.delete_marker(lid)
                await self.backlog.clear_unrecoverable(lid)
            except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                log.debug("best-effort step failed", step="carry_out", error=repr(cleanup_exc))
            self.memory.replicated(lid)
        elif kind == pe.FAILED:
            self.m.exception(end.error)
            log.warning("replication pass failed; the ledger is retried", ledger_id=lid, error=str(end.error),
                        error_type=type(end.error).__name__)
            self.tracker.block(lid, end.reason)
        elif kind == pe.NOT_RETRIABLE:
            self.m.exception(end.error)
            marker = None
            try:
                marker = await self.locks.marker(lid)
            except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                log.debug("best-effort step failed", step="carry_out", error=repr(cleanup_exc))
            self.backlog.record_not_retriable(
                lid, (marker.version, marker.ctime) if marker else (self.locks.held_version(lid), -1), end.reason)
            log.error("replication pass failed with an error retrying will not fix; the ledger is skipped until "
                      "it is marked again", ledger_id=lid, error=str(end.error), error_type=type(end.error).__name__)
            self.tracker.block(lid, end.reason)
        # DATA_LOSS_FIXED, NOT_MARKED, CANCELLED: nothing but finish()

    def _learn(self, lid: int, out: pp.PassOutcome) -> None:
        """The failure memory learns the pass's unreadable runs (once: the lists are emptied)."""
        self.memory.readable_again(lid, out.readable_again)
        if out.unreadable_found:
            self.m.unable_to_read.inc(self.memory.add_unreadable(lid, out.unreadable_found))
        if out.unreadable_counted:
            self.memory.add_unreadable(lid, out.unreadable_counted)
        out.readable_again, out.unreadable_found, out.unreadable_counted = [], [], []

    async def _done(self, lid: int) -> None:
        """Versioned delete of the marker (+ lock release); forget failures."""
        deleted = await self.locks.delete_marker(lid)
        self.memory.replicated(lid)
        self.backlog.forget_failures(lid)
        await self.backlog.clear_unrecoverable(lid)
        self.tracker.unblock(lid)
        if not deleted:
            log.info("marker changed while replicating (re-marked); it stays for another pass", ledger_id=lid)

    async def _surface_unrecoverable(self, lid: int, p: pp.PassOutcome) -> None:
        doc = await self.backlog.surface_unrecoverable(lid, p.unrecoverable, self.locks.owner,
                                                       reason=await self._digest_reason(lid, p))
        waiting = doc["waiting_for"]
        self.m.unrecoverable_total.inc()
        self.tracker.block(lid, unrecoverable_reason(doc))
        # WARNING here, once per pass of this worker: the elected auditor logs the record once at ERROR
        # for the whole cluster (issue 9: every daemon used to log it at ERROR, 860 characters a line)
        log.warning("ledger surfaced as unrecoverable; not retrying until a bookie returns", ledger_id=lid,
                    waiting_for=waiting or "an operator", entry_count=doc["entry_count"], reason=doc["reason"],
                    side_znode=self.backlog.record_path(lid))

    async def _digest_reason(self, lid: int, p: pp.PassOutcome) -> str:
        """Why every replica failed the digest check when the ledger's metadata stores no password (the
        configured digestType/passwd are then the suspects), else "" (the generic reason)."""
        answers = {r for g in p.unrecoverable for r in g.why.values()}
        if "DIGEST" not in answers:
            return ""
        try:
            md, _version = await self.bk.ledgers.read(lid)
        except Exception:  # noqa: BLE001 - the record is written with the generic reason instead
            return ""
        return digest_failure_reason(md, self.settings.recovery, entry_runs.count(p.unrecoverable), answers)

    def _defer_open_ledger(self, lid: int) -> None:
        """Keep the lock for the grace period, then fence and close the ledger if its writer has not
        moved on (upstream: open-ledger rereplication grace period), then release."""
        async def after_grace() -> None:
            try:
                await self.locks.sleep(self.settings.open_ledger_grace_ms / 1000.0)
                md, _ = await self.steps.store.read(lid)
                need = await self.steps.last_segment_open_and_missing(lid, md)
                if not need and not md.is_closed:
                    need = any(not f.closed for f in await self.steps.checker.check(lid, md))
                if need:
                    log.info("opening ledger for recovery (fence and close) after the grace period", ledger_id=lid)
                    await recover_ledger(self.bk, lid)
                else:
                    log.info("writer moved on within the grace period; ledger left open", ledger_id=lid)
            except asyncio.CancelledError:
                raise
            except NoSuchLedgerError:
                try:
                    await self.locks.delete_marker(lid)
                except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.debug("best-effort step failed", step="after_grace", error=repr(cleanup_exc))
            except Exception as exc:  # noqa: BLE001 - logged and counted; the lock is released below
                self.m.exception(exc)
                log.warning("open-ledger recovery failed", ledger_id=lid, error=str(exc))

        self.locks.hold_while(lid, after_grace, name=f"open-ledger-{lid}", then=lambda: self.tracker.unblock(lid))

    # -- every pass --------------------------------------------------------------------------------
    async def finish(self, lid: int, end: pe.Ending, out: pp.PassOutcome, t0: float) -> None:
        """End any pass: count what it copied, progress, history, release the lock unless the ending
        keeps it, op stats and one INFO line."""
        if out.copied:
            self.m.replicated.inc()
            if out.copied_placement:
                self.m.replicated_placement.inc()
        self.backlog.active.discard(lid)
        self.tracker.finish(lid, end.finished)
        # the history is written before the first await here: whoever sees the ending's effects (a
        # counter, a side znode) sees its history entry too
        self.history.append((lid, end.outcome))
        del self.history[:-HISTORY]
        if not end.keeps_lock:
            await self.locks.release(lid)
        ms = (self.clock() - t0) * 1000.0
        self.m.rereplicate.record(ms, success=end.success)
        swapped = self.steps.forget(lid)
        # the pass's one INFO line (issue 29: each rendered line costs the daemon CPU per ledger)
        if swapped:
            log.info("replication pass", ledger_id=lid, outcome=end.outcome, ms=round(ms, 1), replaced=swapped)
        else:
            log.info("replication pass", ledger_id=lid, outcome=end.outcome, ms=round(ms, 1))
