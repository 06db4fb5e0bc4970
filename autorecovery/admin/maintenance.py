"""Maintenance windows and rack-loss guard overrides as admin operations (shell and HTTP share them).

Ours (see ``audit.maintenance`` for the rules and ``zk.maintenance`` for the znodes). ``start`` with
``kind`` bookie or rack opens a window; ``override`` lifts the rack-loss guard for one failure domain;
``stop`` closes either. ``state`` lists the records and what the auditor holds back right now.
"""

from __future__ import annotations

import socket
from typing import Any

from autorecovery.admin import ops
from autorecovery.audit.maintenance import parse_ttl
from autorecovery.errors import ConfigError
from autorecovery.zk.maintenance import MaintenanceStore, now_ms


def _target(bookie: str | None, rack: str | None) -> tuple[str, str]:
    if bool(bookie) == bool(rack):
        raise ops.BadRequestError("give exactly one of a bookie id or a rack")
    if bookie:
        return "bookie", ops.check_bookie_id(bookie, "bookie")
    assert rack is not None
    if not rack.startswith("/"):
        raise ops.BadRequestError(f"rack {rack!r} must be a network location such as /rack1")
    return "rack", rack


async def start(ctx: ops.AdminContext, *, bookie: str | None = None, rack: str | None = None, ttl: str,
                reason: str, override: bool = False, auto_close: bool = False) -> dict[str, Any]:
    """Open a window on a bookie or rack (``override``: lift the rack-loss guard for ``rack``);
    ``auto_close`` (bookie windows): the auditor closes it once the bookie is back with its ledgers whole.

    Raises:
        BadRequestError: bad target, ttl or empty reason (the message names it).
    """
    kind, target = _target(bookie, rack)
    if override:
        if kind != "rack":
            raise ops.BadRequestError("a guard override names a rack (--rack), not a bookie")
        kind = "override"
    if auto_close and kind != "bookie":
        raise ops.BadRequestError("only a bookie window closes by itself (--auto-close needs --bookie)")
    try:
        ttl_ms = parse_ttl(ttl)
        w = await MaintenanceStore(ctx.zk, ctx.paths).start(kind, target, ttl_ms, reason, by=socket.gethostname(),
                                                           auto_close=auto_close)
    except ConfigError as exc:
        raise ops.BadRequestError(str(exc)) from None
    return _window(w)


async def stop(ctx: ops.AdminContext, *, bookie: str | None = None, rack: str | None = None,
               override: bool = False) -> bool:
    """Close a window or override; False when there was none."""
    kind, target = _target(bookie, rack)
    return await MaintenanceStore(ctx.zk, ctx.paths).stop("override" if override else kind, target,
                                                          ended_by=socket.gethostname())


async def state(ctx: ops.AdminContext) -> dict[str, Any]:
    """``{"windows": [...], "held": <the auditor's maintenance-state>, "ended": [the last windows that
    ended, each with end_reason and ended_ms]}``."""
    store = MaintenanceStore(ctx.zk, ctx.paths)
    now = now_ms()
    return {"windows": [_window(w, now) for w in await store.list()], "held": await store.read_state(),
            "ended": await store.ended()}


def _window(w, now: int | None = None) -> dict[str, Any]:
    now = now if now is not None else now_ms()
    return {"kind": w.kind, "target": w.target, "reason": w.reason, "started_ms": w.started_ms,
            "expires_ms": w.expires_ms, "expires_in_s": max(0, (w.expires_ms - now) // 1000), "by": w.by,
            "expired": w.expired(now), "auto_close": w.auto_close, "down_since_ms": w.lost_seen_ms or None,
            "auditor_loaded": bool(w.acked_ms)}
