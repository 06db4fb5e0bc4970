"""The cluster at a glance and the heal history as admin operations (shell and HTTP share them).

Ours. :func:`overview` reads what ZooKeeper holds — the election, the bookie registrations and
cookies, the markers and locks (upstream's ``underreplication/`` tree), the unrecoverable records, the
maintenance windows, the check ctimes and the auditor's published state and episodes
(``underreplication/history``, :mod:`autorecovery.zk.history`) — so any node, daemon or shell, answers
the same, whichever node is the auditor; on a daemon its progress view adds the smoothed rate, ETA
and blocked reasons. The reduction is :func:`autorecovery.audit.overview.build` (pure).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import structlog

from autorecovery.admin.op_context import AdminContext, all_bookies
from autorecovery.admin.ops_autorecovery import who_is_auditor, worker_progress
from autorecovery.audit import overview as O
from autorecovery.ledger.ids import ledger_id_from_ur_leaf
from autorecovery.zk.bridge import NoNodeError
from autorecovery.zk.history import HistoryStore, Listing
from autorecovery.zk.maintenance import MaintenanceStore

log = structlog.get_logger("autorecovery.admin")

#: lock holders read at most (a cluster copying more ledgers at once shows the rest as "?")
MAX_HOLDER_READS = 1000


async def _children_ids(ctx: AdminContext, path: str) -> list[int]:
    try:
        names = await ctx.zk.get_children(path)
    except NoNodeError:
        return []
    out = []
    for n in names:
        with contextlib.suppress(ValueError):
            out.append(ledger_id_from_ur_leaf(n))
    return out


async def history(ctx: AdminContext, limit: int | None = None) -> Listing:
    """The heal episodes, oldest first (the newest ``limit``), and one line per unreadable record."""
    return await HistoryStore(ctx.zk, ctx.paths).listing(limit)


async def record_recover(ctx: AdminContext, report: Any, started_ms: int, by: str | None = None,
                         kind: str = "recover") -> str | None:
    """Record a finished admin run (a :class:`~autorecovery.admin.recover.RecoverReport`, not a dry run:
    ``sources``, ``ledgers`` outcomes with ``status``, ``bytes_copied``) as one closed episode of ``kind``
    (``recover``; an admin drain may pass ``drain``): ledgers in scope (not skipped) marked, recovered
    ones healed, failed ones left (``unrecoverable`` when some failed); bytes are the bytes the run
    wrote. ``by`` is who ran it (default: this host's name). Returns the episode's name, None when
    nothing was in scope or the write failed (logged as a WARNING: the run itself is done)."""
    import socket
    from dataclasses import replace

    from autorecovery.audit import episodes as E

    if getattr(report, "dry_run", True):
        return None
    done = [o for o in report.ledgers if o.status != "skipped"]
    if not done:
        return None
    healed = sum(1 for o in done if o.status == "recovered")
    failed = len(done) - healed
    now = int(time.time() * 1000)
    who = by or socket.gethostname()
    ep = E.Episode(kind=kind, subject=",".join(report.sources), detected_ms=started_ms,
                   ledgers_marked=len(done), bytes_marked=report.bytes_copied, state="healed" if not failed
                   else "unrecoverable", updated_ms=now, closed_ms=now, last_heal_ms=now if healed else None,
                   ledgers_healed=healed, bytes_healed=report.bytes_copied, ledgers_left=failed,
                   ledgers_unrecoverable=failed, workers={who: healed} if healed else {})
    store = HistoryStore(ctx.zk, ctx.paths)
    try:
        name = await store.create(ep)
        await store.trim([])
    except Exception as exc:  # noqa: BLE001 - history only
        log.warning("could not record the recover run in the heal history", path=ctx.paths.history, error=repr(exc))
        return None
    log.info(f"heal episode recorded: {E.log_line(replace(ep, name=name))}", episode=name)
    return name


async def overview(ctx: AdminContext, now_ms: int | None = None) -> dict[str, Any]:
    """The overview document (:func:`autorecovery.audit.overview.build`).

    Raises:
        ZooKeeperError: ZooKeeper unreachable (a bad history record is reported in ``errors``, never raised).
    """
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    errors: list[str] = []
    auditor = await who_is_auditor(ctx)
    enabled = await ctx.urm.is_enabled()
    w = await ctx.get_watcher()
    known = await all_bookies(ctx)
    store = HistoryStore(ctx.zk, ctx.paths)
    state, bad = await store.read_state()
    if bad:
        errors.append(bad)
    maint = MaintenanceStore(ctx.zk, ctx.paths)
    windows: dict[str, dict[str, Any]] = {}
    try:
        for win in await maint.list():
            if win.kind in ("bookie", "rack") and not win.expired(now):
                windows[win.target] = {"kind": win.kind, "reason": win.reason, "expires_ms": win.expires_ms}
    except Exception as exc:  # noqa: BLE001 - a bad window record: shown, the rest still answers
        errors.append(f"maintenance windows {ctx.paths.maintenance}: {exc}")
    guard_state = await maint.read_state()
    raw_guard = guard_state.get("guard")
    guard: dict[object, object] = raw_guard if isinstance(raw_guard, dict) else {}
    marked = await ctx.urm.list_marked_ids()
    locked = [lid for lid in await _children_ids(ctx, ctx.paths.ur_locks) if lid in marked]
    holders: dict[int, str] = {}
    for lid in locked[:MAX_HOLDER_READS]:
        holders[lid] = await ctx.urm.lock_holder(lid) or "?"
    for lid in locked[MAX_HOLDER_READS:]:
        holders[lid] = "?"
    unrec = sum(1 for lid in await _children_ids(ctx, ctx.paths.unrecoverable) if lid in marked)
    ctimes: dict[str, int | None] = {}
    for _name, key, _label in O.CHECKS:
        if key is not None:
            v = await ctx.urm.get_check_ctime(key)
            ctimes[key] = v if v >= 0 else None
    listing = await store.listing()
    errors += listing.errors
    prog = worker_progress(ctx)
    return O.build(O.Inputs(
        auditor=auditor, enabled=enabled, writable=frozenset(w.writable), readonly=frozenset(w.readonly),
        known=frozenset(known), state=state, maintenance=windows,
        guard={str(k): list(v) for k, v in guard.items() if isinstance(v, list)}, marked=len(marked),
        in_progress=holders, unrecoverable=unrec, ctimes=ctimes,
        progress=prog.get("cluster") if prog else None, episodes=listing.episodes, now_ms=now, errors=errors))


__all__ = ["overview", "history", "record_recover", "MAX_HOLDER_READS"]
