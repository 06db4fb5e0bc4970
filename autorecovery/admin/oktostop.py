"""Ok-to-stop and the planned-stop hook as admin operations (shell and HTTP share them; EDGE).

Ours; upstream has no such command. The decision is :func:`autorecovery.audit.oktostop.ok_to_stop`
(pure); this module gathers its inputs from ZooKeeper: the registered bookies (writable and read-only),
the cookies, the maintenance windows (bookies in a window, or in a rack with a window, count as down), the
live drain's record (its bookie counts as down) and every ledger's metadata, read from the ledger tree. Every daemon and the shell answer the same way, from
ZooKeeper reads, so no request is forwarded to the elected auditor (whose index lives in its process
only); the cost is one metadata read per ledger per answer (``OKTOSTOP_READ_CONCURRENCY`` at a time).

:func:`prestop` is the planned-stop hook: wait (bounded) until stopping the bookie is ok, open an
auto-closing maintenance window for the planned duration and wait until the elected auditor has loaded
it, so the bookie's loss is deferred and never audited first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from typing import Any

import structlog

from autorecovery.admin import ops
from autorecovery.audit.maintenance import Window
from autorecovery.audit.oktostop import Verdict, ok_to_stop, summary
from autorecovery.errors import MalformedMetadataError, NoSuchLedgerError
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.zk.bridge import NoNodeError
from autorecovery.zk.maintenance import MaintenanceStore, now_ms

log = structlog.get_logger("autorecovery.oktostop")

OKTOSTOP_READ_CONCURRENCY = 64
#: how long ``--open-window`` waits for the elected auditor to load the new window (s)
ACK_WAIT_S = 10.0
#: at most this long between two looks while ``--wait`` waits for a yes (s); a bookie change looks at once
RECHECK_S = 2.0


def check_for(value: Any, name: str = "for") -> int:
    """The planned duration in seconds: ``600``, ``90s``, ``10m``, ``2h`` (1 s .. 365 days).

    Raises:
        BadRequestError: naming ``name`` and the value.
    """
    from autorecovery.audit.maintenance import parse_ttl
    from autorecovery.errors import ConfigError

    why = f"bad {name} {str(value)[:50]!r}: expected a duration such as 600, 90s, 10m, 2h (1 s .. 365 days)"
    try:
        ms = parse_ttl(str(value))
    except ConfigError:
        raise ops.BadRequestError(why) from None
    if ms < 1000:
        raise ops.BadRequestError(why)
    return ms // 1000


async def _ledgers(ctx: ops.AdminContext) -> list[tuple[int, LedgerMetadata]]:
    ids = await ctx.ledgers.list_ledger_ids()
    sem = asyncio.Semaphore(OKTOSTOP_READ_CONCURRENCY)
    out: list[tuple[int, LedgerMetadata]] = []

    async def one(lid: int) -> None:
        async with sem:
            try:
                md, _ = await ctx.ledgers.read(lid)
            except (NoSuchLedgerError, MalformedMetadataError):
                return  # deleted meanwhile; a malformed one is reported by the auditor's checks
            out.append((lid, md))

    await asyncio.gather(*(one(i) for i in ids))
    out.sort(key=lambda t: t[0])
    return out


async def _going(ctx: ops.AdminContext, windows: list[Window], known: set[str], now: int,
                 exclude_newer_than: Window | None = None) -> set[str]:
    """Bookies counted as down because a live window covers them (their own, or their rack's)."""
    live = [w for w in windows if not w.expired(now) and w.kind in ("bookie", "rack")]
    if exclude_newer_than is not None:
        mine = exclude_newer_than
        live = [w for w in live if (w.started_ms, w.target) < (mine.started_ms, mine.target)]
    going = {w.target for w in live if w.kind == "bookie"}
    racks = {w.target for w in live if w.kind == "rack"}
    if racks:
        policy = await ctx.get_policy()
        for b in known:
            try:
                if policy.location_of(b) in racks:
                    going.add(b)
            except Exception as exc:  # noqa: BLE001 - an unresolvable bookie sits in no window's rack
                log.debug("bookie location not resolved", bookie_id=b, error=str(exc))
                continue
    return going


async def evaluate(ctx: ops.AdminContext, bookie: str, *, mine: Window | None = None) -> Verdict:
    """The verdict for ``bookie`` now (see the module docstring for the inputs).

    Raises:
        BadRequestError: a malformed bookie id, or a bookie the cluster does not know (not registered,
            no cookie, in no ensemble). ZooKeeperError: ZooKeeper failures.
    """
    bookie = ops.check_bookie_id(bookie, "bookie id")
    w = await ctx.get_watcher()
    readable = set(w.writable) | set(w.readonly)
    try:
        cookies = set(await ctx.zk.get_children(ctx.paths.cookies))
    except NoNodeError:
        cookies = set()
    ledgers = await _ledgers(ctx)
    in_ensembles = {b for _, md in ledgers for b in md.all_bookies()}
    if bookie not in readable and bookie not in cookies and bookie not in in_ensembles:
        raise ops.BadRequestError(f"unknown bookie id {bookie!r}: not registered, no cookie, in no ensemble")
    windows = await MaintenanceStore(ctx.zk, ctx.paths).list()
    going = await _going(ctx, windows, readable | in_ensembles, now_ms(), exclude_newer_than=mine)
    going |= await _draining(ctx)
    return ok_to_stop(bookie, ledgers, readable=readable, going=going)


async def _draining(ctx: ops.AdminContext) -> set[str]:
    """The bookie of a running live drain (``underreplication/drain``, ``state`` running or
    cancelling): it leaves once drained, so it is counted as down (conservative: until the drain's CAS
    it still serves its copies)."""
    try:
        data, _ = await ctx.zk.get(f"{ctx.paths.underreplication}/drain")
        doc = json.loads(data)
    except (NoNodeError, ValueError):
        return set()
    if isinstance(doc, dict) and doc.get("state") in ("running", "cancelling") and isinstance(doc.get("bookie_id"), str):
        return {doc["bookie_id"]}
    return set()


async def answer(ctx: ops.AdminContext, bookie: str, for_s: int | None = None) -> dict[str, Any]:
    """``evaluate`` as JSON, with ``summary`` (one line) and, given ``for_s``, ``window_would_open``
    (the hook opens a ``for_s`` window only when the answer is yes and the bookie is registered)."""
    v = await evaluate(ctx, bookie)
    d = v.to_dict()
    would = (v.ok and v.registered) if for_s is not None else None
    if for_s is not None:
        d["for_s"] = for_s
        d["window_would_open"] = would
    d["summary"] = summary(v, for_s, would)
    return d


async def prestop(ctx: ops.AdminContext, bookie: str, *, for_s: int, wait_s: float, reason: str,
                  by: str) -> tuple[dict[str, Any], Window | None]:
    """Wait up to ``wait_s`` for ok-to-stop, then open an auto-closing window of ``for_s`` seconds on
    ``bookie`` and wait (at most :data:`ACK_WAIT_S`) until the elected auditor has loaded it.

    Two hooks racing: after opening its window a hook looks again counting only the windows opened
    before its own; if that says no it withdraws its window and waits on (the older window wins).

    Returns:
        ``(answer, window)``: the last answer (as :func:`answer`, plus ``window`` and ``acked``) and the
        window opened, or None when the answer stayed no (or the bookie is already down).
    """
    store = MaintenanceStore(ctx.zk, ctx.paths)
    deadline = time.monotonic() + max(0.0, wait_s)
    watcher = await ctx.get_watcher()
    changed = asyncio.Event()

    def on_change(_w, _r) -> None:
        changed.set()

    watcher.add_listener(on_change)
    try:
        while True:
            changed.clear()
            v = await evaluate(ctx, bookie)
            if v.ok and v.registered:
                w = await store.start("bookie", v.bookie, for_s * 1000, reason, by=by, auto_close=True)
                again = await evaluate(ctx, bookie, mine=w)
                if again.ok:
                    acked = await _wait_ack(store, w)
                    d = {**v.to_dict(), "for_s": for_s, "window_would_open": True,
                         "summary": summary(v, for_s, True), "window": {"expires_ms": w.expires_ms,
                                                                        "reason": w.reason}, "acked": acked}
                    log.info("planned stop: maintenance window opened", bookie_id=v.bookie, for_s=for_s,
                             by=by, reason=reason, auditor_loaded=acked)
                    return d, w
                await store.stop("bookie", v.bookie, ended_by=f"{by} (withdrawn: an older window won)")
                v = again
            if not v.registered or time.monotonic() >= deadline:
                return {**v.to_dict(), "for_s": for_s, "window_would_open": False,
                        "summary": summary(v, for_s, False)}, None
            left = deadline - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=min(left, RECHECK_S * (0.75 + random.random() / 2)))
    finally:
        watcher.remove_listener(on_change)


async def _wait_ack(store: MaintenanceStore, w: Window) -> bool:
    """Wait until the elected auditor stamped ``acked_ms`` on ``w`` (bounded by :data:`ACK_WAIT_S`).
    False when none did: no auditor is elected (a new one loads every window before it audits)."""
    deadline = time.monotonic() + ACK_WAIT_S
    while time.monotonic() < deadline:
        cur = await store.get(w.kind, w.target)
        if cur is None or cur.acked_ms:
            return cur is not None
        await asyncio.sleep(0.1)  # a poll of a record the auditor stamps, bounded above
    return False
