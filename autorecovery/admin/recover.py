"""Manual recovery of bookies: ``autorecovery shell recover <bookie[,bookie]>`` and
``PUT /api/v1/autorecovery/bookie`` (upstream ``BookKeeperAdmin.recoverBookieData``, reference §4.11).

For every ledger whose ensembles contain a source bookie:

1. an open ledger whose *last* ensemble holds a source is fenced and closed first (recovery open), or
   skipped with ``--skip-open-ledgers``;
2. each segment holding a source becomes a fragment ``[first, last]``; replacements come from the
   placement policy (``replace_bookie``, excluding every source and the targets already chosen for the
   ledger, never a read-only bookie) or from ``--target``;
3. the entries the source indexes store are streamed from surviving replicas to the targets by the
   worker's :class:`~autorecovery.roles.copier.FragmentCopier` (CRC-checked, throttled by ``--rate``
   / ``replicationRateByBytes``), then the segment's ensemble is CAS-updated (old → new at the same
   indexes) — metadata is never written before the copy completed;
4. with ``--delete-cookie`` the sources' cookies are deleted when every ledger succeeded.

Better than upstream: ``--dry-run`` prints the exact plan (per ledger the fragments, bytes, source
and target bookies) and writes nothing to ZooKeeper; while it rewrites a ledger the command holds the
ledger's ``underreplication/locks/urL…`` lock (as bookie GC does upstream), so a ReplicationWorker never
works on the same ledger at the same time (upstream recover does not coordinate with workers at all);
progress with bytes left, rate and ETA.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from autorecovery.admin.op_context import (
    AdminContext,
    BadRequestError,
    OpProgress,
    all_bookies,
    check_bookie_id,
    check_ledger_id,
)
from autorecovery.errors import AutoRecoveryError, IllegalOpError, NoSuchLedgerError, NotEnoughBookiesError
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.plan import entry_runs
from autorecovery.plan.progress import RateMeter, estimate_copy_bytes
from autorecovery.roles import replicator as rp
from autorecovery.zk.bridge import NoNodeError

log = structlog.get_logger("autorecovery.recover")

#: How long a ledger locked by a ReplicationWorker is waited for before it is reported as failed.
DEFAULT_LOCK_WAIT_S = 60.0


def admin_replicator(ctx: AdminContext, rate_bytes_per_s: float, purpose: str) -> rp.SegmentReplicator:
    """The worker's copy path for an admin job (``recover``, ``drain``): a
    :class:`~autorecovery.roles.copier.FragmentCopier` throttled to ``rate_bytes_per_s`` (bytes/s; <= 0
    unlimited), within the worker's per-bookie stream caps and the cluster-wide stream slots (held as
    ``<hostname> (<purpose>)``), its window and batch settings, and the recovery credentials
    (``digestType``/``passwd``) for ledgers whose metadata stores no password."""
    from autorecovery.plan.throttle import StreamCaps, TokenBucket
    from autorecovery.roles.copier import FragmentCopier
    from autorecovery.config.sections import WorkerSettings
    from autorecovery.zk.stream_slots import ClusterStreamSlots

    ws = ctx.settings.worker if ctx.settings is not None else WorkerSettings()
    copier = FragmentCopier(ctx.get_bookies(), byte_bucket=TokenBucket(float(rate_bytes_per_s), time.monotonic),
                            caps=StreamCaps(ws.max_streams_per_source, ws.max_streams_per_target),
                            caps_changed=asyncio.Condition(), window_entries=max(ws.batch_size, 256),
                            window_bytes=ws.stream_window_bytes,
                            cluster_slots=ClusterStreamSlots(ctx.zk, ctx.paths, ws.max_streams_per_source,
                                                             ws.max_streams_per_target,
                                                             f"{socket.gethostname()} ({purpose})"))
    return rp.SegmentReplicator(ctx.ledgers, copier, credentials=ws.recovery)


@dataclass(frozen=True)
class FragmentView:
    """One fragment of the plan: entry range, estimated bytes, ``old → new`` replacements, the bookies
    read from, and entries no replica can serve (``unsourced``)."""

    first: int
    last: int
    bytes: int
    replacements: tuple[tuple[str, str], ...]
    sources: tuple[str, ...]
    unsourced: int = 0
    ensemble: tuple[str, ...] = ()

    def new_ensemble(self) -> tuple[str, ...]:
        m = dict(self.replacements)
        return tuple(m.get(b, b) for b in self.ensemble)

    def as_dict(self) -> dict[str, Any]:
        return {"first_entry": self.first, "last_entry": self.last, "bytes": self.bytes,
                "ensemble": list(self.ensemble), "new_ensemble": list(self.new_ensemble()),
                "replacements": {o: n for o, n in self.replacements}, "read_from": list(self.sources),
                "unsourced_entries": self.unsourced}


@dataclass
class LedgerOutcome:
    """What happened to one ledger: ``planned`` (dry run), ``recovered``, ``skipped`` or ``failed``."""

    ledger_id: int
    status: str
    detail: str = ""
    fragments: list[FragmentView] = field(default_factory=list)
    fenced: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"ledger_id": self.ledger_id, "status": self.status, "detail": self.detail, "fenced": self.fenced,
                "fragments": [f.as_dict() for f in self.fragments]}


@dataclass
class RecoverReport:
    """Result of a recover run."""

    sources: tuple[str, ...]
    dry_run: bool
    ledgers: list[LedgerOutcome] = field(default_factory=list)
    bytes_copied: int = 0
    cookies_deleted: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[LedgerOutcome]:
        return [o for o in self.ledgers if o.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed

    def as_dict(self) -> dict[str, Any]:
        return {"sources": list(self.sources), "dry_run": self.dry_run, "ok": self.ok,
                "bytes_copied": self.bytes_copied, "cookies_deleted": self.cookies_deleted,
                "warnings": self.warnings, "ledgers": [o.as_dict() for o in self.ledgers]}


def _avg_entry(md: LedgerMetadata) -> float:
    if md.state == LedgerState.CLOSED and md.last_entry_id >= 0 and md.length > 0:
        return md.length / (md.last_entry_id + 1)
    return 0.0


class _TargetPicker:
    """``replace_bookie`` stand-in for ``--target``: the first listed target not excluded and not in the
    ensemble (returns an object with ``.bookie`` like the policies)."""

    def __init__(self, targets: list[str]) -> None:
        self.targets = targets

    def __call__(self, _e, _wq, _aq, current, bookie_to_replace, exclude=frozenset(), *_a, **_k):
        for t in self.targets:
            if t not in exclude and t not in current:
                return type("R", (), {"bookie": t})()
        raise NotEnoughBookiesError(f"no --target bookie left to replace {bookie_to_replace} "
                                    f"(targets {', '.join(self.targets)} are in the ensemble or already used)")


async def _lock(ctx: AdminContext, ledger_id: int) -> str | None:
    """Take the ledger's replication lock through the under-replication manager (upstream's lock
    znode, ephemeral, whether or not the ledger is marked); returns None when taken, else the holder."""
    if await ctx.urm.acquire(ledger_id, require_marker=False, owner=f"{socket.gethostname()} (recover)"):
        return None
    return await ctx.urm.lock_holder(ledger_id) or "?"


async def _unlock(ctx: AdminContext, ledger_id: int) -> None:
    await ctx.urm.release(ledger_id)


async def _read_lac(ctx: AdminContext, ledger_id: int, md: LedgerMetadata) -> int:
    """The last ensemble's LAC (:func:`autorecovery.client.lac.read_last_add_confirmed`; raises
    ``LacUnknownError`` rather than planning too short a copy when too few bookies answer)."""
    from autorecovery.client.lac import read_last_add_confirmed

    return await read_last_add_confirmed(ctx.get_bookies(), ledger_id, md, 5.0)


async def _fence_and_close(ctx: AdminContext, ledger_id: int) -> tuple[LedgerMetadata, int]:
    """Recovery-open the ledger (fence its last ensemble, recover the tail, close it)."""
    from autorecovery.client.bookkeeper import BookKeeper

    from autorecovery.config.sections import WorkerSettings

    ws = ctx.settings.worker if ctx.settings is not None else WorkerSettings()
    bk = BookKeeper(ctx.zk, ctx.paths, policy=await ctx.get_policy(), bookies=ctx.get_bookies(),
                    credentials=ws.recovery)
    bk.watcher = await ctx.get_watcher()
    await bk.open_ledger(ledger_id, recovery=True)
    return await ctx.ledgers.read(ledger_id)


async def recover_bookies(
    ctx: AdminContext,
    sources: Iterable[str],
    *,
    dry_run: bool = False,
    targets: Iterable[str] | None = None,
    ledger: Any = None,
    skip_open_ledgers: bool = False,
    rate_bytes_per_s: int | None = None,
    delete_cookie: bool = False,
    skip_unrecoverable: bool = False,
    force: bool = False,
    lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
    on_progress: Callable[[OpProgress], Any] | None = None,
    on_ledger: Callable[[LedgerOutcome], Any] | None = None,
) -> RecoverReport:
    """Re-replicate everything ``sources`` store (see the module docstring).

    Args:
        sources: bookie ids (``host:port``) to recover.
        dry_run: plan only; nothing is fenced, copied or written.
        targets: bookies to copy to instead of the placement policy's choice.
        ledger: recover only this ledger id.
        skip_open_ledgers: leave open ledgers alone (upstream ``-sk``).
        rate_bytes_per_s: copy throttle in bytes/s (default ``replicationRateByBytes``; <= 0 unlimited).
        delete_cookie: delete the sources' cookies after a fully successful run (not in dry run).
        skip_unrecoverable: report unrecoverable ledgers as skipped instead of failing (upstream ``-sku``).
        force: recover a source that is still registered (a migration off a running bookie). Without
            it a registered source is refused (issue 15: data was moved off a live bookie by an HTTP
            request that did not mean to). The shell's ``-f`` (or answering the prompt) is this force;
            HTTP requests pass ``"force": true``.
        lock_wait_s: how long to wait for a ledger a ReplicationWorker holds.
        on_progress / on_ledger: callbacks after every fragment / ledger.

    Raises:
        BadRequestError: a malformed or unknown bookie id, a target that is also a source.
        IllegalOpError: a source is still registered (writable or read-only) and ``force`` is false,
            or ``delete_cookie`` is asked for a registered source (a running bookie's cookie is never
            deleted: it could not restart).
        NoSuchLedgerError: ``ledger`` does not exist.
    """
    srcs = [check_bookie_id(s, "bookie id") for s in sources]
    if not srcs:
        raise BadRequestError("no bookie to recover: give at least one host:port")
    tgts = [check_bookie_id(t, "target bookie id") for t in (targets or [])]
    both = set(srcs) & set(tgts)
    if both:
        raise BadRequestError(f"bookie {sorted(both)[0]} is both a source and a target")
    source_set = frozenset(srcs)
    report = RecoverReport(tuple(srcs), dry_run)
    watcher = await ctx.get_watcher()
    known = await all_bookies(ctx)
    for t in tgts:
        if t not in watcher.writable:
            raise BadRequestError(f"target bookie {t} is not a writable bookie")
    live = [s for s in srcs if s in watcher.writable or s in watcher.readonly]
    if live and delete_cookie and not dry_run:
        raise IllegalOpError(f"bookie {live[0]} is still running (registered): its cookie is never deleted; "
                             "stop it first, or recover without deleting the cookie")
    if live and not force and not dry_run:
        raise IllegalOpError(f"bookie {live[0]} is still running (registered): recovering it copies its data away "
                             "while it serves; stop it first, or force the migration (shell -f, HTTP \"force\": true)")
    for s in live:
        report.warnings.append(f"bookie {s} is still running; its data is copied away (migration)")

    # -- which ledgers -------------------------------------------------------------------------------
    if ledger is not None:
        ids = [check_ledger_id(ledger)]
        await ctx.ledgers.read(ids[0])  # NoSuchLedgerError names the ledger
    else:
        ids = await ctx.ledgers.list_ledger_ids()
    scope: dict[int, LedgerMetadata] = {}
    for lid in ids:
        try:
            md, _v = await ctx.ledgers.read(lid)
        except NoSuchLedgerError:
            continue
        except AutoRecoveryError as exc:
            report.ledgers.append(LedgerOutcome(lid, "failed", f"unreadable metadata: {exc}"))
            continue
        if md.all_bookies() & source_set:
            scope[lid] = md
    for s in srcs:
        if s not in known and not any(s in md.all_bookies() for md in scope.values()):
            raise BadRequestError(f"bad bookie id {s}: no such bookie (no cookie, not registered, in no ledger)")
    if ledger is not None and not scope:
        report.ledgers.append(LedgerOutcome(ids[0], "skipped", "no source bookie in its ensembles"))

    # -- progress -------------------------------------------------------------------------------------
    estimates = {lid: estimate_copy_bytes(md, source_set) for lid, md in scope.items()}
    bytes_total = sum(estimates.values())
    meter = RateMeter(time.monotonic, window_s=20.0)
    copied = [0]
    left_ids = set(scope)
    blocked: dict[int, str] = {}

    def publish(phase: str) -> None:
        if on_progress is None:
            return
        left = max(0, bytes_total - copied[0]) if left_ids else 0
        rate = meter.rate()
        eta = (left / rate) if rate > 0 and left > 0 else (0.0 if not left_ids else None)
        on_progress(OpProgress(len(scope), len(left_ids), bytes_total, left, rate, eta, dict(blocked), phase))

    def on_bytes(n: int) -> None:
        copied[0] += n
        meter.add(n)

    rate = rate_bytes_per_s
    if rate is None and ctx.settings is not None:
        rate = ctx.settings.worker.rate_bytes_per_s
    if not dry_run and scope:
        replicator = admin_replicator(ctx, rate or -1, "recover")
    policy = await ctx.get_policy() if scope else None
    replace = _TargetPicker(tgts) if tgts else (policy.replace_bookie if policy is not None else None)
    publish("planning" if dry_run else "recovering")

    async def one_ledger(lid: int) -> LedgerOutcome | None:
        """None = locked by a worker (retry later)."""
        md, _version = await ctx.ledgers.read(lid)
        out = LedgerOutcome(lid, "planned" if dry_run else "recovered")
        if md.state != LedgerState.CLOSED and skip_open_ledgers:
            return LedgerOutcome(lid, "skipped", "open ledger (--skip-open-ledgers)")
        locked = False
        if not dry_run:
            holder = await _lock(ctx, lid)
            if holder is not None:
                blocked[lid] = f"being replicated by {holder}"
                return None
            locked = True
        try:
            last_override = None
            if md.state != LedgerState.CLOSED and set(md.last_ensemble) & source_set:
                if dry_run:
                    out.detail = "open ledger: would be fenced and closed first"
                    last_override = await _read_lac(ctx, lid, md)
                else:
                    md, _version = await _fence_and_close(ctx, lid)
                    out.fenced = True
                    log.info("fenced and closed open ledger before recovery", ledger_id=lid)
            elif md.state != LedgerState.CLOSED:
                last_override = await _read_lac(ctx, lid, md)
            avg = _avg_entry(md)
            used: set[str] = set()
            for i, seg in enumerate(md.segments):
                bad = [j for j, b in enumerate(seg.ensemble) if b in source_set]
                if not bad:
                    continue
                first = seg.first_entry_id
                last = md.segment_end(i) if (last_override is None or i + 1 < len(md.segments)) else last_override
                if replace is None:
                    out.status = "failed"
                    out.detail = f"entries {first}..{last}: no placement policy to choose replacement bookies"
                    return out
                try:
                    from autorecovery.plan.targets import choose_replacements, plan_fragment_copy

                    repl = choose_replacements(
                        ensemble=seg.ensemble, bad_indexes=bad, replace_bookie=replace,
                        ensemble_size=md.ensemble_size, write_quorum=md.write_quorum, ack_quorum=md.ack_quorum,
                        exclude=source_set | used, readonly=watcher.readonly,
                        writable=set(watcher.writable) - source_set)
                except NotEnoughBookiesError as exc:
                    out.status = "failed"
                    out.detail = f"entries {first}..{last}: {exc}"
                    return out
                used |= set(repl.values())
                available = set(watcher.writable) | set(watcher.readonly)
                plan = plan_fragment_copy(ensemble=seg.ensemble, write_quorum=md.write_quorum, first=first,
                                          last=last, replacements=repl, readable=available - source_set,
                                          last_resort=available & source_set)
                view = FragmentView(
                    first, last, int(round(plan.entries_to_write * avg)),
                    tuple((seg.ensemble[j], new) for j, new in sorted(repl.items())),
                    tuple(sorted({s.source for s in plan.streams})), entry_runs.count(plan.unsourced), tuple(seg.ensemble))
                out.fragments.append(view)
                if dry_run:
                    if plan.unsourced:
                        out.detail = (out.detail + "; " if out.detail else "") + \
                            f"{entry_runs.count(plan.unsourced)} entries in {first}..{last} have no readable replica"
                    continue
                r = await replicator.replicate(lid, md, first, plan,
                                               registered=lambda: set(watcher.writable) | set(watcher.readonly),
                                               on_bytes=on_bytes)
                publish("recovering")
                if r.status in (rp.INCOMPLETE, rp.ABORTED) and r.copy is not None:  # both carry the copy's result
                    copy = r.copy
                    lost = copy.unrecoverable()
                    why = copy.aborted or (
                        f"{entry_runs.count(lost)} entries have no valid replica (first {entry_runs.spans(lost)[:5]})"
                        if lost else f"{copy.unreadable_count()} entries could not be read now")
                    out.status = "skipped" if (skip_unrecoverable and lost) else "failed"
                    out.detail = f"entries {first}..{last}: {why}"
                    return out
                if r.status in (rp.TARGET_FAILED, rp.SEGMENT_CHANGED):
                    out.status = "failed"
                    out.detail = f"entries {first}..{last}: {r.detail}"
                    return out
                md = r.metadata
                log.info("fragment recovered", ledger_id=lid, first_entry=first, last_entry=last,
                         replacements=r.replaced)
            return out
        except AutoRecoveryError as exc:
            out.status = "failed"
            out.detail = str(exc)
            return out
        finally:
            if locked:
                await _unlock(ctx, lid)

    pending = sorted(scope)
    loop = asyncio.get_running_loop()
    deadline = None
    while pending:
        retry: list[int] = []
        for lid in pending:
            try:
                outcome = await one_ledger(lid)
            except NoSuchLedgerError:
                outcome = LedgerOutcome(lid, "skipped", "ledger deleted meanwhile")
            except Exception as exc:  # noqa: BLE001 - one ledger's failure must not stop the others
                log.error("recovering ledger failed", ledger_id=lid, error=str(exc))
                outcome = LedgerOutcome(lid, "failed", f"{type(exc).__name__}: {exc}")
            if outcome is None:
                retry.append(lid)
                continue
            blocked.pop(lid, None)
            left_ids.discard(lid)
            if outcome.status == "failed":
                blocked[lid] = outcome.detail
            report.ledgers.append(outcome)
            if on_ledger is not None:
                on_ledger(outcome)
            publish("planning" if dry_run else "recovering")
        if not retry:
            break
        if deadline is None:
            deadline = loop.time() + lock_wait_s
        if loop.time() >= deadline:
            for lid in retry:
                o = LedgerOutcome(lid, "failed", blocked.get(lid, "locked by a replication worker"))
                report.ledgers.append(o)
                if on_ledger is not None:
                    on_ledger(o)
            break
        await asyncio.sleep(min(1.0, max(0.0, deadline - loop.time())))  # admin poll of a lock, bounded
        pending = retry

    report.ledgers.sort(key=lambda o: o.ledger_id)
    report.bytes_copied = copied[0]
    if delete_cookie and not dry_run:
        if report.ok:
            for s in srcs:
                if s in watcher.writable or s in watcher.readonly:  # came back while we copied
                    report.warnings.append(f"cookie of {s} kept: the bookie registered again during the recovery")
                    continue
                try:
                    await ctx.zk.delete(ctx.paths.cookie(s))
                    report.cookies_deleted.append(s)
                except NoNodeError:
                    report.warnings.append(f"no cookie to delete for {s}")
        else:
            report.warnings.append("cookies kept: some ledgers failed")
    publish("done")
    return report
