"""The Auditor's periodic checks (EDGE): bookie check, check-all-ledgers, placement, replicas, and the
index reconcile and consistency checks, on a fixed-rate schedule.

Upstream source: ``AuditorBookieCheckTask``, ``AuditorCheckAllLedgersTask``,
``AuditorPlacementPolicyCheckTask``, ``AuditorReplicasCheckTask`` (skip while a delayed lost-bookie
audit is pending, #3818; pause while AutoRecovery is disabled, #3358). The decisions are
:mod:`autorecovery.audit` (pure). :class:`PeriodicChecks` is a part of
:class:`~autorecovery.roles.auditor.Auditor`: it gets the shared
:class:`~autorecovery.roles.auditor_state.AuditorState`, the index, checker, markers, metrics and clocks
in its constructor, and the lost-bookie audit (the bookie check runs it) as a callable.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.replicas import Bucket, classify, segment_bounds, should_check
from autorecovery.audit.schedule import next_run_s
from autorecovery.config.sections import AuditorSettings
from autorecovery.errors import BookieError, NoSuchLedgerError
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState
from autorecovery.metrics import Counter
from autorecovery.roles.auditor_history import HealRecorder
from autorecovery.roles.auditor_state import AuditorState, AuditReport, CheckResult
from autorecovery.roles.checker import LedgerChecker
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledger_tree.tree_watcher import LedgerTreeWatcher
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

log = structlog.get_logger("autorecovery.auditor")


class ForeignBookie(Exception):
    """The answer of a bookie that cannot tell which entries it holds (it advertises no protocol we speak,
    or it is a stock bookie whose storage does not list entries): unknown, never "missing"."""


#: a check's run: ``() -> summary`` (``ok`` False marks a failed run; ``aborted`` keeps the ctime)
CheckRun = Callable[[], Awaitable[dict[str, Any]]]


async def marked_now(urm: UnderreplicationManager) -> set[int]:
    """Ledger ids marked right now (the watched marker set: no read once built), {} on failure."""
    try:
        return set(await urm.watched_marked_ids())
    except Exception as exc:  # noqa: BLE001 - history only: the episode then counts every mark
        log.warning("could not list the marked ledgers for the heal history", error=repr(exc))
        return set()


class PeriodicChecks:
    """The periodic checks of the :class:`~autorecovery.roles.auditor.Auditor` (see the module docstring).

    Args:
        state: the auditor's shared state (enable flag, pending delayed audit, results, marking lock).
        zk, paths, settings: the auditor's session, the cluster's paths, :class:`AuditorSettings`.
        index, tree: the bookie -> ledgers index and its ledger-tree watcher.
        urm: the markers. checker: the ledger checker. bookies: ``get_list_of_entries`` (replicas check).
        policy: placement policy (``placement_adherence``) or None. history: the heal recorder.
        metrics: handles by name; zk_ops: ``audit_zk_ops_total`` by check.
        audit: the lost-bookie audit (``trigger -> AuditReport``), run by the bookie check.
        clock: monotonic s. wall_ms: ms since the epoch.
    """

    def __init__(self, state: AuditorState, *, zk: ZkClient, paths: Paths, settings: AuditorSettings,
                 index: BookieLedgerIndex, tree: LedgerTreeWatcher, urm: UnderreplicationManager,
                 checker: LedgerChecker, bookies: Any, policy: Any, history: HealRecorder,
                 metrics: dict[str, Any], zk_ops: dict[str, Counter],
                 audit: Callable[[str], Awaitable[AuditReport]], clock: Callable[[], float],
                 wall_ms: Callable[[], int]) -> None:
        self.state = state
        self.zk, self.paths, self.settings = zk, paths, settings
        self.index, self.tree, self.urm, self.checker = index, tree, urm, checker
        self.bookies, self.policy, self.history = bookies, policy, history
        self._m, self._zk_ops = metrics, zk_ops
        self._audit = audit
        self.clock, self.wall_ms = clock, wall_ms

    # -- periodic checks --------------------------------------------------------------------
    async def _sleep_until(self, at: float) -> None:
        delay = at - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)

    async def periodic(self, name: str, interval_s: int, first_at: float | None, run: CheckRun, *, ctime: str | None,
                        skip_rules: bool = True) -> None:
        """Fixed-rate runner: runs never overlap; an over-long run makes the next start right after."""
        if first_at is None:
            return
        at = first_at
        while True:
            await self._sleep_until(at)
            scheduled = at
            started_ms, t0 = self.wall_ms(), self.clock()
            if skip_rules and self.state.pending:
                self._m["NUM_SKIPPING_CHECK_TASK_TIMES"].inc()
                self.state.last_results[name] = CheckResult(name, started_ms, 0, True, skipped="delayed audit pending")
                log.info("skipping periodic check: a delayed lost-bookie audit is pending", check=name)
            elif skip_rules and not self.state.enabled:
                self.state.last_results[name] = CheckResult(name, started_ms, 0, True, skipped="autorecovery disabled")
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
                self.state.last_results[name] = CheckResult(name, started_ms, (self.clock() - t0) * 1000, ok, summary=summary)
                if ok and ctime is not None and not summary.get("aborted"):
                    try:
                        await self.urm.set_check_ctime(ctime, self.wall_ms())
                    except Exception as exc:  # noqa: BLE001 - the next run writes it again
                        (log.warning if getattr(exc, "retriable", False) else log.error)(
                            "could not write the check's ctime", check=name, error=repr(exc))
            if interval_s <= 0:
                return
            at = next_run_s(scheduled, interval_s, self.clock())

    async def bookie_check(self) -> dict[str, Any]:
        rep = await self._audit("bookie_check")
        return {"lost": rep.lost, "ledgers": rep.ledgers}

    async def reconcile(self) -> dict[str, Any]:
        rep = await self.tree.reconcile()
        self._m["index_mismatches"].inc(rep.mismatches)
        return {"added": len(rep.added), "removed": len(rep.removed), "changed": len(rep.changed)}

    async def index_consistency(self) -> dict[str, Any]:
        """Ours (issue 9): count + digest of the ledger ids in the tree against the index, on a short
        schedule; drift is healed, logged and exported (``autorecovery_auditor_index_drift_ledgers``)."""
        rep = await self.tree.check_consistency()
        self._m["index_checks"].inc()
        self._m["index_drift"].set(rep.drift)
        if rep.drift:
            self._m["index_drift_found"].inc(rep.drift)
        return {"tree": rep.tree, "index": rep.index, "drift": rep.drift}

    async def check_all_ledgers(self) -> dict[str, Any]:
        """Upstream AuditorCheckAllLedgersTask: read first/last (or a share) of every fragment."""
        op = self._m["CHECK_ALL_LEDGERS_TIME"]
        t0 = self.clock()
        sem = asyncio.Semaphore(self.settings.auditor_max_number_of_concurrent_open_ledger_operations)
        marked = 0
        failed = 0
        aborted = False

        acquire_timeout_s = self.settings.auditor_acquire_concurrent_open_ledger_operations_time_out_msec / 1000
        timed_out = 0
        before = await marked_now(self.urm)
        marked_ids: list[int] = []

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
                if not self.state.enabled:
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
                if bad and self.state.enabled and lid in self.index:
                    replicas = sorted({b for f in bad for b in f.bad_bookies})
                    await self.urm.mark_underreplicated(lid, replicas)
                    marked += 1
                    marked_ids.append(lid)
                    log.info("periodic check marked ledger", ledger_id=lid, replicas=replicas)
            finally:
                sem.release()

        items = self.index.items()  # decoded a chunk at a time (compact index: issue 13)
        checked = 0
        while True:
            if not self.state.enabled:
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
        if marked_ids:
            await self.history.record("ledger-check", "ledger check", marked_ids, before)
        return {"ok": ok, "checked": checked, "marked": marked, "failed": failed, "timed_out": timed_out,
                "aborted": aborted}

    async def placement_check(self) -> dict[str, Any]:
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
                # where the members are, down or read-only ones included: an outage is the lost-bookie audit's
                res = self.policy.placement_adherence(list(seg.ensemble), md.write_quorum, md.ack_quorum)
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
        if not_adhering and self.settings.repaired_placement_policy_not_adhering_bookie_enabled and self.state.enabled:
            async with self.state.check_lock:
                before = await marked_now(self.urm)
                await self.urm.mark_many({lid: [] for lid in not_adhering})
            marked = len(not_adhering)
            await self.history.record("placement", "placement policy check", not_adhering, before)
        self._m["NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY"].set(len(not_adhering))
        self._m["NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY"].set(soft)
        self._m["NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD"].set(elapsed_grace)
        self._m["PLACEMENT_POLICY_CHECK_TIME"].record((self.clock() - t0) * 1000)
        return {"closed": closed, "not_adhering": len(not_adhering), "softly_adhering": soft,
                "elapsed_grace": elapsed_grace, "marked": marked}

    async def replicas_check(self) -> dict[str, Any]:
        """Upstream AuditorReplicasCheckTask (GET_LIST_OF_ENTRIES_OF_LEDGER per bookie), over all ledgers
        (upstream's gauges cover only the last range), optionally marking (ours).

        Returns ``checked`` (ledgers), the ledger ids per bucket, ``marked``, ``not_asked`` (answers
        that could not be had: a bookie speaking no protocol of ours, or a stock bookie whose storage
        does not list entries; never counted as missing copies) and ``unanswered`` (bookies that failed
        to answer), both counted per ledger and bookie."""
        t0 = self.clock()
        marked_ids = await self.urm.list_marked_ids()
        sem = asyncio.Semaphore(100)
        buckets: dict[Bucket, list[int]] = {b: [] for b in Bucket}
        to_mark: dict[int, list[str]] = {}
        counts = {"not_asked": 0, "unanswered": 0}

        foreign = self.state.foreign()

        async def ask(bookie: str, lid: int) -> Any:
            if bookie in foreign:  # never false-mark: its answer is unknown, not "holds nothing"
                self.checker.skip_foreign(bookie, foreign[bookie], lid)
                return ForeignBookie(bookie)
            try:
                return await self.bookies.get_list_of_entries(bookie, lid)
            except BookieError as exc:
                if exc.status == "EUNSUPPORTED":  # a stock bookie on DbLedgerStorage: unknown, never "missing"
                    return ForeignBookie(bookie)
                return None if exc.status == "ENOLEDGER" else exc
            except Exception as exc:  # noqa: BLE001 - handed to the caller, which reports it per bookie
                return exc

        async def one(lid: int, md: LedgerMetadata) -> None:
            async with sem:
                bookies = sorted({b for _, _, ens in segment_bounds(md) for b in ens})
                answers = dict(zip(bookies, await asyncio.gather(*(ask(b, lid) for b in bookies)), strict=True))
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
        if to_mark and self.settings.auditor_replicas_check_mark_under_replicated and self.state.enabled:
            async with self.state.check_lock:
                before = await marked_now(self.urm)
                await self.urm.mark_many(to_mark)
            marked = len(to_mark)
            await self.history.record("replicas", "replicas check", to_mark, before)
        self._m["REPLICAS_CHECK_TIME"].record((self.clock() - t0) * 1000)
        return {"checked": checked, "no_replica": sorted(buckets[Bucket.NO_REPLICA]),
                "less_than_aq": sorted(buckets[Bucket.LESS_THAN_AQ]),
                "less_than_wq": sorted(buckets[Bucket.LESS_THAN_WQ]), "marked": marked, **counts}

    # -- manual triggers (admin/tests) ------------------------------------------------------
    async def run_check(self, name: str) -> dict[str, Any]:
        """Run one check now, outside its schedule (``bookie_check``, ``check_all_ledgers``,
        ``placement_check``, ``replicas_check``, ``index_reconcile``, ``index_consistency``)."""
        fn = {"bookie_check": self.bookie_check, "check_all_ledgers": self.check_all_ledgers,
              "placement_check": self.placement_check, "replicas_check": self.replicas_check,
              "index_reconcile": self.reconcile, "index_consistency": self.index_consistency}[name]
        return await fn()
