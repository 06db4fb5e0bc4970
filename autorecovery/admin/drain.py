"""Live drain of a running bookie (BP-56): ``autorecovery shell drain -bookieid ID`` and
``PUT/GET/DELETE /api/v1/autorecovery/drain``.

Upstream has no live drain (BP-56, bookkeeper#3456/#3457 were never merged): ``decommissionbookie``
needs the bookie stopped, so every fragment it held is one copy short until the auditor and workers
have copied it. A drain copies first and changes metadata second, while the bookie keeps serving:

1. checks: the bookie id is well formed and the bookie is registered (writable or read-only; a stopped
   bookie is ``decommissionbookie``'s); no other drain is running; the plan
   (:func:`autorecovery.plan.drain.plan_drain`, pure) has no blocker: a ledger for which the drained
   bookie is the last one keeping its ensemble adhering to the placement policy refuses the whole
   drain, naming those ledgers;
2. the drain record ``<root>/underreplication/drain`` (JSON) is written and this process holds the
   ephemeral ``<root>/underreplication/drainowner``; one drain at a time;
3. each closed segment naming the bookie, one ledger at a time under the ledger's replication lock
   (``underreplication/locks/urL…``, as ``recover``: no ReplicationWorker touches the ledger meanwhile):
   the entries the bookie's index stores are streamed to the replacement (read from any member,
   the drained bookie included, digests verified), then the segment's ensemble is CAS-updated
   (:class:`~autorecovery.roles.replicator.SegmentReplicator`). Until that CAS the metadata names the
   drained bookie, which still has every entry, so no fragment is ever below its write quorum;
4. open ledgers naming the bookie wait for their writer to close them (Pulsar rolls ledgers); the job
   re-plans every ``poll_s`` seconds, which also picks up ledgers created on the bookie meanwhile;
5. when nothing names the bookie the record says ``done``: stop the bookie and decommission it, with
   nothing to copy.

Who runs the copies: one job in the process that started it (the shell, or the daemon that served the
HTTP request), not the ReplicationWorkers. A drained bookie's ledgers are not under-replicated, and
marking them would raise the under-replicated gauges and alerts and let the auditor's checks remove
the markers as healthy. The job is resumable instead: the record survives the process; if its owner
node is gone (process or daemon ended), starting the same drain again resumes it, re-planning from
the metadata, so nothing done is redone. ``cancel`` stops it between two segments (a copy in flight
is dropped before its CAS; the metadata stays consistent).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from autorecovery.admin.op_context import AdminContext, BadRequestError, OpProgress, all_bookies, check_bookie_id
from autorecovery.admin.recover import admin_replicator
from autorecovery.errors import AutoRecoveryError, IllegalOpError, NoSuchLedgerError
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.plan.drain import ASSUMED_RATE_BYTES_PER_S, DrainPlan, plan_drain, plan_ledger
from autorecovery.plan.progress import RateMeter
from autorecovery.plan.targets import plan_fragment_copy
from autorecovery.roles import replicator as rp
from autorecovery.zk.bridge import NodeExistsError, NoNodeError

log = structlog.get_logger("autorecovery.drain")


class DrainCancelled(AutoRecoveryError):
    """The drain was cancelled (``drain --cancel`` or ``DELETE /api/v1/autorecovery/drain``)."""


def record_path(ctx: AdminContext) -> str:
    """The drain record znode (ours): ``<root>/underreplication/drain``."""
    return f"{ctx.paths.underreplication}/drain"


def owner_path(ctx: AdminContext) -> str:
    """The running job's ephemeral owner znode (ours): ``<root>/underreplication/drainowner``."""
    return f"{ctx.paths.underreplication}/drainowner"


@dataclass
class DrainReport:
    """Outcome of :func:`drain_bookie`: segments moved, bytes copied, what is left."""

    bookie_id: str
    done: bool = False
    segments_moved: int = 0
    bytes_copied: int = 0
    elapsed_s: float = 0.0
    waiting_open: list[int] = field(default_factory=list)
    blocked: dict[int, str] = field(default_factory=dict)
    ledgers_moved: set[int] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {"bookie_id": self.bookie_id, "done": self.done, "segments_moved": self.segments_moved,
                "ledgers_moved": len(self.ledgers_moved),
                "bytes_copied": self.bytes_copied, "elapsed_s": round(self.elapsed_s, 1),
                "waiting_open": self.waiting_open, "blocked": {str(k): v for k, v in sorted(self.blocked.items())}}


async def _ledgers_naming(ctx: AdminContext, bookie_id: str) -> dict[int, LedgerMetadata]:
    out: dict[int, LedgerMetadata] = {}
    for lid in await ctx.ledgers.list_ledger_ids():
        try:
            md, _ = await ctx.ledgers.read(lid)
        except NoSuchLedgerError:
            continue
        if bookie_id in md.all_bookies():
            out[lid] = md
    return out


async def _check_running(ctx: AdminContext, bookie_id: str) -> str:
    b = check_bookie_id(bookie_id)
    w = await ctx.get_watcher()
    if b not in w.writable and b not in w.readonly:
        if b in await all_bookies(ctx):
            raise IllegalOpError(f"bookie {b} is not running (not registered): a drain copies from a running "
                                 "bookie; use decommissionbookie for a stopped one")
        raise BadRequestError(f"bad bookie id {b}: no such bookie (not registered, no cookie, in no ledger)")
    return b


async def make_plan(ctx: AdminContext, bookie_id: str) -> DrainPlan:
    """The drain plan of a registered bookie (``--dry-run``); writes nothing.

    Raises:
        BadRequestError: malformed or unknown bookie id. IllegalOpError: the bookie is not registered.
    """
    b = await _check_running(ctx, bookie_id)
    return await _plan(ctx, b)


async def _plan(ctx: AdminContext, b: str) -> DrainPlan:
    w = await ctx.get_watcher()
    policy = await ctx.get_policy()
    return plan_drain(b, await _ledgers_naming(ctx, b), replace_bookie=policy.replace_bookie,
                      is_adhering=policy.is_ensemble_adhering, writable=set(w.writable), readonly=set(w.readonly))


def rate_for(ctx: AdminContext, rate_bytes_per_s: int | None) -> int:
    """The copy throttle in bytes/s (``--rate`` or ``replicationRateByBytes``; <= 0 unlimited)."""
    if rate_bytes_per_s is not None:
        return rate_bytes_per_s
    return ctx.settings.worker.rate_bytes_per_s if ctx.settings is not None else -1


async def status(ctx: AdminContext) -> dict[str, Any] | None:
    """The drain record (``bookie_id``, ``state`` running|cancelling|cancelled|done|failed, progress
    fields) with ``owner_alive`` (whether a process runs it now); None when no drain was started."""
    try:
        data, _ = await ctx.zk.get(record_path(ctx))
    except NoNodeError:
        return None
    try:
        doc = json.loads(data.decode() or "{}")
    except (ValueError, UnicodeDecodeError):
        doc = {"state": "unreadable record"}
    doc["owner_alive"] = await ctx.zk.exists(owner_path(ctx)) is not None
    return doc


async def cancel(ctx: AdminContext) -> dict[str, Any]:
    """Cancel the running drain (stops between two segments). Returns the record.

    Raises:
        IllegalOpError: no drain is running.
    """
    doc = await status(ctx)
    if doc is None or doc.get("state") not in ("running", "cancelling"):
        raise IllegalOpError("no drain is running")
    doc["state"] = "cancelling" if doc.pop("owner_alive") else "cancelled"
    await ctx.zk.set(record_path(ctx), json.dumps(doc).encode())
    log.info("drain cancel requested", bookie_id=doc.get("bookie_id"), state=doc["state"])
    return doc


async def _claim(ctx: AdminContext, b: str) -> dict[str, Any]:
    """Write the record (or resume one for ``b`` whose owner is gone) and take the owner node."""
    me = socket.gethostname()
    doc = await status(ctx)
    if doc is not None and doc.get("state") in ("running", "cancelling"):
        if doc.get("bookie_id") != b:
            raise IllegalOpError(f"a drain of {doc.get('bookie_id')} is running (started by {doc.get('by')}); "
                                 "one drain at a time: wait for it or cancel it (drain --cancel)")
        if doc.get("owner_alive"):
            raise IllegalOpError(f"the drain of {b} is already running (started by {doc.get('by')})")
    try:
        await ctx.zk.create(owner_path(ctx), me.encode(), ephemeral=True, makepath=True)
    except NodeExistsError:
        raise IllegalOpError("another drain job holds " + owner_path(ctx)) from None
    resumed = doc is not None and doc.get("bookie_id") == b and doc.get("state") in ("running", "cancelling")
    rec = {"bookie_id": b, "state": "running", "by": me, "started_ms": int(time.time() * 1000),
           "resumed": resumed}
    data = json.dumps(rec).encode()
    try:
        await ctx.zk.set(record_path(ctx), data)
    except NoNodeError:
        await ctx.zk.create(record_path(ctx), data, makepath=True)
    return rec


async def _cancelled(ctx: AdminContext) -> bool:
    doc = await status(ctx)
    return doc is None or doc.get("state") not in ("running",)


async def drain_bookie(
    ctx: AdminContext,
    bookie_id: str,
    *,
    rate_bytes_per_s: int | None = None,
    poll_s: float = 1.0,
    timeout_s: float | None = None,
    on_progress: Callable[[OpProgress], Any] | None = None,
    on_move: Callable[[int, LedgerMetadata, LedgerMetadata], Any] | None = None,
) -> DrainReport:
    """Drain a running bookie (see the module docstring).

    Args:
        rate_bytes_per_s: copy throttle (default ``replicationRateByBytes``; <= 0 unlimited).
        poll_s: seconds between re-plans while open ledgers wait for their writer.
        timeout_s: stop waiting after this many seconds (None: until done or cancelled); the record
            stays ``running`` without an owner, so the same drain can be resumed.
        on_progress: called with an :class:`OpProgress` after every segment and re-plan.
        on_move: called with (ledger id, metadata before, after) of every ensemble change this drain made, right
            after the CAS (awaited when it returns a coroutine; tests check the metadata at each change).

    Returns the report (``done`` when nothing names the bookie any more).

    Raises:
        BadRequestError: malformed or unknown bookie id.
        IllegalOpError: the bookie is not registered; another drain is running; the plan has blockers
            (the message names every blocking ledger and why).
        DrainCancelled: cancelled while running.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    started_ms = int(time.time() * 1000)
    b = await _check_running(ctx, bookie_id)
    plan = await _plan(ctx, b)
    if plan.blocked:
        lines = "; ".join(f"ledger {lid}: {why}" for lid, why in sorted(plan.blocked.items()))
        raise IllegalOpError(f"drain of {b} refused: {len(plan.blocked)} ledger(s) have no placement-adhering "
                             f"replacement: {lines}")
    await _claim(ctx, b)
    log.info("drain started", bookie_id=b, segments=len(plan.moves), bytes=plan.bytes_total,
             waiting_open=len(plan.waiting_open))
    report = DrainReport(b)
    rate = rate_for(ctx, rate_bytes_per_s)
    replicator = admin_replicator(ctx, rate if rate > 0 else -1, "drain")
    meter = RateMeter(time.monotonic, window_s=20.0)
    total_ledgers = len(set(plan.ledgers) | set(plan.waiting_open))
    bytes_total = plan.bytes_total

    def publish(phase: str, left: DrainPlan) -> None:
        if on_progress is None:
            return
        r = meter.rate()
        left_bytes = left.bytes_total
        eta = (left_bytes / r) if r > 0 and left_bytes else (0.0 if left.done else None)
        on_progress(OpProgress(total_ledgers, len(set(left.ledgers) | set(left.waiting_open)), bytes_total,
                               left_bytes, r, eta, {**{lid: "open ledger: waiting for its writer to close it"
                                                        for lid in left.waiting_open}, **left.blocked}, phase))

    async def record(state: str, left: DrainPlan) -> None:
        doc = await status(ctx) or {}
        doc.pop("owner_alive", None)
        doc.update({"state": state, "segments_left": len(left.moves), "bytes_left": left.bytes_total,
                    "bytes_copied": report.bytes_copied, "segments_moved": report.segments_moved,
                    "waiting_open": left.waiting_open[:100],
                    "blocked": {str(k): v for k, v in sorted(left.blocked.items())[:100]},
                    "updated_ms": int(time.time() * 1000)})
        await ctx.zk.set(record_path(ctx), json.dumps(doc).encode())

    def on_bytes(n: int) -> None:
        report.bytes_copied += n
        meter.add(n)

    try:
        while True:
            publish("draining", plan)
            await record("running", plan)
            for lid in plan.ledgers:
                if await _cancelled(ctx):
                    raise DrainCancelled(f"drain of {b} cancelled")
                await _move_ledger(ctx, b, lid, replicator, report, on_bytes, on_move)
                publish("draining", plan)
            plan = await _plan(ctx, b)
            report.waiting_open, report.blocked = list(plan.waiting_open), dict(plan.blocked)
            if plan.done:
                break
            if timeout_s is not None and loop.time() - started >= timeout_s:
                await record("running", plan)
                break
            if not plan.moves:
                publish("waiting for open ledgers", plan)
                await record("running", plan)
                if await _cancelled(ctx):
                    raise DrainCancelled(f"drain of {b} cancelled")
                await asyncio.sleep(poll_s)  # admin poll of ZooKeeper state, bounded by the timeout
        report.done = plan.done
        if report.done:
            await record("done", plan)
            await _record_episode(ctx, report, started_ms)
            log.info("drain done: no ledger names the bookie; it can be stopped and decommissioned with "
                     "nothing to copy", bookie_id=b, segments=report.segments_moved, bytes=report.bytes_copied)
        publish("done" if report.done else "stopped", plan)
    except DrainCancelled:
        await record("cancelled", plan)
        log.info("drain cancelled", bookie_id=b, segments=report.segments_moved)
        raise
    finally:
        report.elapsed_s = loop.time() - started
        with contextlib.suppress(NoNodeError):
            await ctx.zk.delete(owner_path(ctx))
    return report


async def _record_episode(ctx: AdminContext, report: DrainReport, started_ms: int) -> None:
    """A finished drain as one closed heal episode of kind ``drain`` (``shell history``; the recorder
    of ``recover``, :func:`autorecovery.admin.ops_overview.record_recover`); never raises."""
    from types import SimpleNamespace

    from autorecovery.admin import ops_overview

    if not report.ledgers_moved:
        return
    outcomes = [SimpleNamespace(ledger_id=lid, status="recovered") for lid in sorted(report.ledgers_moved)]
    run = SimpleNamespace(dry_run=False, ledgers=outcomes, sources=(report.bookie_id,),
                          bytes_copied=report.bytes_copied)
    try:
        await ops_overview.record_recover(ctx, run, started_ms, kind="drain")
    except Exception as exc:  # noqa: BLE001 - the drain itself is done; the history is best effort
        log.warning("drain: could not record the heal episode", error=str(exc))


async def _move_ledger(ctx: AdminContext, b: str, lid: int, replicator: rp.SegmentReplicator, report: DrainReport,
                       on_bytes: Callable[[int], None],
                       on_move: Callable[[int, LedgerMetadata, LedgerMetadata], Any] | None) -> None:
    """Move every closed segment of ``lid`` off ``b`` under the ledger's lock (a ledger a worker holds
    is left for the next round)."""
    if not await ctx.urm.acquire(lid, require_marker=False, owner=f"{socket.gethostname()} (drain)"):
        return
    try:
        try:
            md, version = await ctx.ledgers.read(lid)
        except NoSuchLedgerError:
            return
        w = await ctx.get_watcher()
        policy = await ctx.get_policy()
        moves, why = plan_ledger(lid, md, b, replace_bookie=policy.replace_bookie,
                                 is_adhering=policy.is_ensemble_adhering, writable=set(w.writable),
                                 readonly=set(w.readonly))
        if why is not None or not md.is_closed:
            return
        ver: int | None = version
        for m in moves:
            readable = set(w.writable) | set(w.readonly)
            plan = plan_fragment_copy(ensemble=m.ensemble, write_quorum=md.write_quorum, first=m.first_entry_id,
                                      last=m.last_entry_id, replacements={m.index: m.target}, readable=readable)
            r = await replicator.replicate(lid, md, m.first_entry_id, plan,
                                           registered=lambda: set(w.writable) | set(w.readonly),
                                           on_bytes=on_bytes, version=ver)
            if r.status != rp.SWAPPED:
                log.warning("drain: segment not moved; retried next round", ledger_id=lid,
                            segment_first_entry_id=m.first_entry_id, status=r.status, detail=r.detail)
                return
            if on_move is not None:
                res = on_move(lid, md, r.metadata)
                if asyncio.iscoroutine(res):
                    await res
            md, ver = r.metadata, r.version
            report.segments_moved += 1
            report.ledgers_moved.add(lid)
            log.info("drain: segment moved", ledger_id=lid, segment_first_entry_id=m.first_entry_id,
                     replaced={b: m.target})
    finally:
        await ctx.urm.release(lid)


def plan_text(plan: DrainPlan, rate_bytes_per_s: int) -> list[str]:
    """The dry run's lines: one per segment (replacement, bytes), then totals and the ETA."""
    rate = rate_bytes_per_s if rate_bytes_per_s > 0 else ASSUMED_RATE_BYTES_PER_S
    how = "replicationRateByBytes" if rate_bytes_per_s > 0 else "assumed; unthrottled"
    out = [f"Drain plan of {plan.bookie_id}:"]
    for m in plan.moves:
        out.append(f"  ledger {m.ledger_id} entries {m.first_entry_id}..{m.last_entry_id}: {plan.bookie_id} -> "
                   f"{m.target}; {m.bytes} bytes; ensemble [{', '.join(m.ensemble)}] -> [{', '.join(m.new_ensemble)}]")
    for lid in plan.waiting_open:
        out.append(f"  ledger {lid}: open; moved once its writer closes it")
    for lid, why in sorted(plan.blocked.items()):
        out.append(f"  ledger {lid}: BLOCKED: {why}")
    eta = plan.eta_s(rate) or 0.0
    out.append(f"Total: {len(plan.ledgers)} ledger(s), {len(plan.moves)} segment(s), {plan.bytes_total} bytes, "
               f"ETA {eta:.0f} s at {rate} bytes/s ({how}); {len(plan.waiting_open)} open ledger(s) waiting")
    if plan.done:
        out.append(f"Nothing names {plan.bookie_id}: it can be stopped and decommissioned with nothing to copy")
    return out
