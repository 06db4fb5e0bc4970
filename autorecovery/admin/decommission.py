"""``autorecovery shell decommissionbookie -bookieid ID`` and ``PUT /api/v1/autorecovery/decommission``
(upstream ``BookKeeperAdmin.decommissionBookie`` + ``DecommissionBookieCmd``, reference §4.12).

Flow:

1. checks: the bookie id is well formed and known (cookie, or referenced by a ledger); the bookie is
   shut down (still registered → upstream's BKIllegalOpException "is not shutdown yet"); AutoRecovery
   is enabled and an auditor is elected (upstream ``triggerAudit`` preconditions);
2. ``triggerAudit`` (re-write ``lostBookieRecoveryDelay``: the auditor audits at once);
3. the ledgers that store entries on the bookie are found from the metadata (a segment counts only if
   the bookie stores at least one of its entries; the last segment of an open ledger always counts —
   upstream's ``areEntriesOfLedgerStoredInTheBookie``) and every one of them is marked
   under-replicated now (idempotent; upstream instead sleeps 30 s and hopes the auditor was quick);
4. wait until no ledger stores entries on the bookie and no marker lists it, re-reading only the
   remaining ledgers;
5. delete the bookie's cookie: "Cookie of the decommissioned bookie: X is deleted successfully".

Better than upstream (#3887, #3338, #2162, #3974): a progress line with ledgers and bytes left, copy
rate and ETA; every remaining ledger is listed by id with why it is not done (unrecoverable entries,
open ledger waiting for its grace period, not enough bookies, AutoRecovery disabled, no daemon, being
copied by a worker...); ``timeout_s`` ends the wait with :class:`DecommissionTimeoutError` naming those
ledgers instead of waiting forever; completion is noticed within one poll (upstream waits up to
5 minutes between checks).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from autorecovery.admin.op_context import AdminContext, AdminError, BadRequestError, OpProgress, check_bookie_id
from autorecovery.admin.ops_autorecovery import trigger_audit, who_is_auditor
from autorecovery.config.sections import WorkerSettings
from autorecovery.errors import AutoRecoveryError, IllegalOpError, NoSuchLedgerError, UnavailableError
from autorecovery.ledger.ids import ur_leaf_name
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.ledger.striping import bookie_holds_entries
from autorecovery.plan.progress import ClusterRate, estimate_copy_bytes, unrecoverable_reason
from autorecovery.zk.bridge import NoNodeError

log = structlog.get_logger("autorecovery.decommission")


class DecommissionTimeoutError(AdminError):
    """The bookie's data was not fully re-replicated within the timeout.

    Attributes:
        bookie_id: the bookie. blocked: ledger id → why it is not done. report: the partial report.
    """

    http_status = 504

    def __init__(self, bookie_id: str, timeout_s: float, blocked: dict[int, str], report: DecommissionReport) -> None:
        self.bookie_id = bookie_id
        self.blocked = dict(blocked)
        self.report = report
        lines = "\n".join(f"  ledger {lid}: {why}" for lid, why in sorted(blocked.items()))
        super().__init__(f"decommission of {bookie_id} timed out after {timeout_s:g}s; "
                         f"{len(blocked)} ledger(s) still store data on it:\n{lines}")


@dataclass
class DecommissionReport:
    """Outcome: ledgers that had data on the bookie, time taken, cookie deletion, warnings."""

    bookie_id: str
    ledgers_total: int = 0
    ledgers_marked: int = 0
    elapsed_s: float = 0.0
    cookie_deleted: bool = False
    done: bool = False
    warnings: list[str] = field(default_factory=list)
    blocked: dict[int, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"bookie_id": self.bookie_id, "done": self.done, "ledgers_total": self.ledgers_total,
                "ledgers_marked": self.ledgers_marked, "elapsed_s": round(self.elapsed_s, 1),
                "cookie_deleted": self.cookie_deleted, "warnings": self.warnings,
                "blocked": {str(k): v for k, v in sorted(self.blocked.items())}}


def stores_entries(md: LedgerMetadata, bookie_id: str) -> bool:
    """Whether ``bookie_id`` stores (or, for an open ledger's last segment, may store) entries of the
    ledger (upstream ``BookKeeperAdmin.areEntriesOfLedgerStoredInTheBookie``); the rule is
    :func:`autorecovery.ledger.striping.bookie_holds_entries`."""
    return bookie_holds_entries(md, bookie_id)


async def precheck(ctx: AdminContext, bookie_id: str) -> str:
    """Validate before anything is changed; returns the bookie id.

    Raises:
        BadRequestError: malformed or unknown bookie id.
        IllegalOpError: the bookie is still registered ("is not shutdown yet").
        UnavailableError: AutoRecovery disabled, or no auditor elected.
    """
    b = check_bookie_id(bookie_id)
    watcher = await ctx.get_watcher()
    if b in watcher.writable or b in watcher.readonly:
        state = "writable" if b in watcher.writable else "read-only"
        raise IllegalOpError(f"bookie {b} is not shutdown yet: it is registered as {state}; stop it, then decommission")
    if await ctx.zk.exists(ctx.paths.cookie(b)) is None:
        referenced = False
        for lid in await ctx.ledgers.list_ledger_ids():
            try:
                md, _ = await ctx.ledgers.read(lid)
            except AutoRecoveryError:
                continue
            if b in md.all_bookies():
                referenced = True
                break
        if not referenced:
            raise BadRequestError(f"bad bookie id {b}: no such bookie (no cookie, and no ledger references it)")
    if not await ctx.urm.is_enabled():
        raise UnavailableError("AutoRecovery is disabled; enable it first (autorecovery shell autorecovery -enable)")
    if await who_is_auditor(ctx) is None:
        raise UnavailableError("no auditor elected: start at least one autorecovery daemon (autorecovery run)")
    return b


async def _unrecoverable_info(ctx: AdminContext, ledger_id: int) -> dict[str, Any] | None:
    try:
        data, _ = await ctx.zk.get(f"{ctx.paths.unrecoverable}/{ur_leaf_name(ledger_id)}")
    except NoNodeError:
        return None
    try:
        doc = json.loads(data.decode() or "{}")
        return doc if isinstance(doc, dict) else {}
    except (ValueError, UnicodeDecodeError):
        return {}


async def explain(ctx: AdminContext, bookie_id: str, ledger_id: int, md: LedgerMetadata | None,
                  enabled: bool, auditor: str | None, grace_ms: int) -> str:
    """Why ``ledger_id`` still stores data on ``bookie_id`` (best single reason, most specific first)."""
    info = await _unrecoverable_info(ctx, ledger_id)
    if info is not None:
        return unrecoverable_reason(info)  # the daemon's /progress says the same
    if not enabled:
        return "AutoRecovery is disabled (autorecovery shell autorecovery -enable)"
    if md is not None and md.state != LedgerState.CLOSED and bookie_id in md.last_ensemble:
        return (f"open ledger: its last ensemble holds the bookie; a worker fences and closes it after "
                f"openLedgerRereplicationGracePeriod ({grace_ms} ms)")
    watcher = await ctx.get_watcher()
    if md is not None:
        for seg in md.segments:
            if bookie_id in seg.ensemble:
                spare = set(watcher.writable) - set(seg.ensemble)
                if not spare:
                    return (f"not enough bookies: every writable bookie is already in the ensemble "
                            f"{list(seg.ensemble)}; add a bookie")
    holder = await ctx.urm.lock_holder(ledger_id)
    marker = await ctx.urm.get_marker(ledger_id)
    if holder is not None:
        return f"being re-replicated by {holder}"
    if marker is None:
        return "not marked under-replicated yet (waiting for the auditor)"
    if auditor is None:
        return "marked, but no autorecovery daemon is running (no auditor elected)"
    age = ""
    if marker.ctime and marker.ctime > 0:
        age = f", marked {max(0, int(time.time() - marker.ctime / 1000))}s ago"
    return f"waiting for a replication worker (not locked{age})"


async def decommission_bookie(
    ctx: AdminContext,
    bookie_id: str,
    *,
    timeout_s: float | None = None,
    poll_s: float = 1.0,
    delete_cookie: bool = True,
    on_progress: Callable[[OpProgress], Any] | None = None,
) -> DecommissionReport:
    """Decommission a shut-down bookie (see the module docstring).

    Args:
        timeout_s: give up after this many seconds (None = wait forever, like upstream).
        poll_s: seconds between checks of the remaining ledgers (grows with their number).
        delete_cookie: delete the cookie at the end (upstream always does).
        on_progress: called with an :class:`OpProgress` after every check.

    Raises:
        BadRequestError, IllegalOpError, UnavailableError: see :func:`precheck`.
        DecommissionTimeoutError: not done within ``timeout_s``; names every remaining ledger and why.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    b = await precheck(ctx, bookie_id)
    report = DecommissionReport(b)
    await trigger_audit(ctx)
    log.info("Resetting LostBookieRecoveryDelay to kickstart the audit; waiting for the ledgers of the "
             "decommissioned bookie to be re-replicated", bookie_id=b)

    remaining: dict[int, LedgerMetadata | None] = {}
    for lid in await ctx.ledgers.list_ledger_ids():
        try:
            md, _ = await ctx.ledgers.read(lid)
        except NoSuchLedgerError:
            continue
        except AutoRecoveryError as exc:
            report.warnings.append(f"ledger {lid}: unreadable metadata ({exc}); not waited for")
            continue
        if stores_entries(md, b):
            remaining[lid] = md
    async for m in ctx.urm.list_underreplicated(lambda reps: b in reps):
        remaining.setdefault(m.ledger_id, None)
    report.ledgers_total = len(remaining)
    marked = {m.ledger_id async for m in ctx.urm.list_underreplicated(lambda reps: b in reps)}
    to_mark = [lid for lid in remaining if lid not in marked]
    if to_mark:
        mark_many = getattr(ctx.urm, "mark_many", None)
        if mark_many is not None:
            await mark_many({lid: [b] for lid in to_mark})
        else:
            for lid in to_mark:
                await ctx.urm.mark_underreplicated(lid, [b])
        report.ledgers_marked = len(to_mark)
        log.info("marked the bookie's ledgers under-replicated", bookie_id=b, ledgers=len(to_mark))

    grace_ms = (ctx.settings.worker if ctx.settings is not None else WorkerSettings()).open_ledger_grace_ms
    estimates = {lid: (estimate_copy_bytes(md, {b}) if md is not None else 0) for lid, md in remaining.items()}
    bytes_total = sum(estimates.values())
    # the smoothed completion rate of plan.progress (the same ETA as the daemon's progress endpoint)
    meter = ClusterRate(time.monotonic)
    blocked: dict[int, str] = {}

    def publish(phase: str) -> None:
        left = sum(estimates.get(lid, 0) for lid in remaining)
        rate = meter.rate or 0.0
        eta = meter.eta_s(left, len(remaining), 0)
        if on_progress is not None:
            on_progress(OpProgress(report.ledgers_total, len(remaining), bytes_total, left, rate, eta,
                                   dict(blocked), phase))

    while True:
        # re-check only what is left
        for lid in list(remaining):
            try:
                md, _ = await ctx.ledgers.read(lid)
            except NoSuchLedgerError:
                remaining.pop(lid, None)
                continue
            marker = await ctx.urm.get_marker(lid)
            if not stores_entries(md, b) and (marker is None or b not in marker.replicas):
                remaining.pop(lid, None)
                blocked.pop(lid, None)
                continue
            remaining[lid] = md
            estimates[lid] = estimate_copy_bytes(md, {b})
        meter.observe({lid: estimates.get(lid, 0) for lid in remaining})
        if not remaining:
            break
        enabled = await ctx.urm.is_enabled()
        auditor = await who_is_auditor(ctx)
        blocked = {lid: await explain(ctx, b, lid, md, enabled, auditor, grace_ms) for lid, md in remaining.items()}
        publish("waiting for re-replication")
        elapsed = loop.time() - started
        if timeout_s is not None and elapsed >= timeout_s:
            report.elapsed_s = elapsed
            report.blocked = dict(blocked)
            raise DecommissionTimeoutError(b, timeout_s, blocked, report)
        wait = max(poll_s, min(30.0, len(remaining) * 0.01))
        if timeout_s is not None:
            wait = min(wait, max(0.05, timeout_s - elapsed))
        await asyncio.sleep(wait)  # admin poll of ZooKeeper state, bounded by the timeout

    blocked = {}
    publish("done")
    report.done = True
    log.info("The ledgers stored in the given decommissioning bookie are properly replicated", bookie_id=b)
    if delete_cookie:
        try:
            await ctx.zk.delete(ctx.paths.cookie(b))
            report.cookie_deleted = True
            log.info("Cookie of the decommissioned bookie is deleted successfully", bookie_id=b)
        except NoNodeError:
            report.warnings.append(f"No cookie to remove for the decommissioning bookie: {b}, "
                                   "it could be deleted already")
    report.elapsed_s = loop.time() - started
    return report
