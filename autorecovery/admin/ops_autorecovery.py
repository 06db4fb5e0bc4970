"""Admin commands on AutoRecovery's state (upstream ``BookieShell`` / ``tools/cli/commands/autorecovery``
and ``server/http/service``): the under-replicated ledgers, the auditor, the enable switch,
``lostBookieRecoveryDelay``, the ledgers being re-replicated, forced audit checks and the local worker's
progress. Each takes an :class:`~autorecovery.admin.op_context.AdminContext` and returns plain data; every
name resolves from :mod:`autorecovery.admin.ops`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from autorecovery.admin import params
from autorecovery.admin.op_context import (
    AdminContext,
    BadRequestError,
    check_bookie_id,
)
from autorecovery.errors import (
    NoSuchLedgerError,
    UnavailableError,
)
from autorecovery.zk.election import current_auditor

log = structlog.get_logger("autorecovery.admin")


# -- listunderreplicated ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class URLedgerInfo:
    """One marked ledger: id, ctime (ms, -1 when the marker has none), missing replicas, lock holder."""

    ledger_id: int
    ctime: int
    replicas: tuple[str, ...]
    worker: str | None = None


def _replica_predicate(missing: str | None, excluding: str | None) -> Callable[[list[str]], bool] | None:
    inc = (missing or "").strip()
    exc = (excluding or "").strip()
    if inc and exc:
        return lambda reps: inc in reps and exc not in reps
    if inc:
        return lambda reps: inc in reps
    if exc:
        return lambda reps: exc not in reps
    return None


async def list_underreplicated(ctx: AdminContext, missing_replica: str | None = None,
                               excluding_missing_replica: str | None = None,
                               with_workers: bool = False) -> list[URLedgerInfo]:
    """Markers, filtered like upstream ``listunderreplicated -mr/-emr``, ordered by ledger id.

    Raises:
        BadRequestError: a filter that is not ``host:port``.
    """
    for v, what in ((missing_replica, "missing replica"), (excluding_missing_replica, "excluded missing replica")):
        if v:
            check_bookie_id(v, what)
    pred = _replica_predicate(missing_replica, excluding_missing_replica)
    out = []
    async for m in ctx.urm.list_underreplicated(pred):
        worker = await ctx.urm.lock_holder(m.ledger_id) if with_workers else None
        out.append(URLedgerInfo(m.ledger_id, m.ctime, tuple(m.replicas), worker))
    out.sort(key=lambda x: x.ledger_id)
    return out


# -- auditor, switches, delay -----------------------------------------------------------------------------
async def who_is_auditor(ctx: AdminContext) -> str | None:
    """Bookie id of the current auditor (first vote), None when nobody is elected."""
    return await current_auditor(ctx.zk, ctx.paths)


async def trigger_audit(ctx: AdminContext) -> int:
    """Force an audit now by re-writing ``lostBookieRecoveryDelay`` (upstream ``triggeraudit``).

    Returns the delay value written back.

    Raises:
        UnavailableError: AutoRecovery is disabled, no auditor is elected, or the delay znode is missing.
    """
    if await who_is_auditor(ctx) is None:
        raise UnavailableError("cannot trigger an audit: no auditor elected (is any autorecovery daemon running?)")
    delay = await ctx.urm.get_lost_bookie_recovery_delay()
    await ctx.urm.trigger_audit()
    return delay


async def autorecovery_enabled(ctx: AdminContext) -> bool:
    """Whether AutoRecovery is enabled (``underreplication/disable`` absent)."""
    return await ctx.urm.is_enabled()


@dataclass(frozen=True)
class ToggleResult:
    """``changed`` False when AutoRecovery already was in the requested state."""

    enabled: bool
    changed: bool


async def set_autorecovery(ctx: AdminContext, enable: bool) -> ToggleResult:
    """Enable or disable AutoRecovery; idempotent (upstream says "already enabled. Doing nothing")."""
    current = await ctx.urm.is_enabled()
    if current == enable:
        return ToggleResult(enabled=current, changed=False)
    try:
        if enable:
            await ctx.urm.enable()
        else:
            await ctx.urm.disable()
    except UnavailableError:
        pass  # a concurrent toggle got there first: same end state
    return ToggleResult(enabled=await ctx.urm.is_enabled(), changed=True)


async def get_lost_bookie_recovery_delay(ctx: AdminContext) -> int:
    """Seconds from ``underreplication/lostBookieRecoveryDelay``.

    Raises:
        UnavailableError: the znode does not exist (no auditor ever started) or is not a number.
    """
    return await ctx.urm.get_lost_bookie_recovery_delay()


async def set_lost_bookie_recovery_delay(ctx: AdminContext, seconds: Any) -> int:
    """Write a new delay (seconds, 0 .. a year: the config key's range); the auditor reacts at once
    (upstream semantics).

    Raises:
        BadRequestError: not an integer in that range (:func:`autorecovery.admin.params.recovery_delay`).
    """
    try:
        value = params.recovery_delay(seconds)
    except ValueError as exc:
        raise BadRequestError(str(exc)) from None
    await ctx.urm.set_lost_bookie_recovery_delay(value)
    return value


@dataclass(frozen=True)
class RecoveringLedger:
    """A marked ledger whose lock is held: id, lock holder (host name), metadata length (verbose)."""

    ledger_id: int
    worker: str
    length: int | None = None


async def query_autorecovery_status(ctx: AdminContext, verbose: bool = False) -> list[RecoveringLedger]:
    """Ledgers being recovered right now (marker + lock), upstream ``queryautorecoverystatus``."""
    out = []
    async for m in ctx.urm.list_underreplicated(None):
        holder = await ctx.urm.lock_holder(m.ledger_id)
        if holder is None:
            continue
        length = None
        if verbose:
            try:
                md, _ = await ctx.ledgers.read(m.ledger_id)
                length = md.length
            except NoSuchLedgerError:
                length = None
        out.append(RecoveringLedger(m.ledger_id, holder, length))
    return sorted(out, key=lambda r: r.ledger_id)


#: ``forceauditchecks`` resets the chosen last-run times to now − 21 days (upstream).
FORCE_AUDIT_AGE_MS = 21 * 24 * 3600 * 1000


async def force_audit_checks(ctx: AdminContext, check_all_ledgers: bool, placement_policy: bool, replicas: bool,
                             now_ms: int | None = None) -> dict[str, int]:
    """Reset the chosen check ctimes so those checks run right after the next auditor start.

    Returns which ctime znode got which value (ms since the epoch).

    Raises:
        BadRequestError: no check chosen ("must contain at least one type of check").
    """
    chosen = [w for w, on in (("checkallledgers", check_all_ledgers), ("placementpolicycheck", placement_policy),
                              ("replicascheck", replicas)) if on]
    if not chosen:
        raise BadRequestError("Command line args must contain atleast one type of check (-calc, -ppc, -rc). "
                              "This was a no-op.")
    value = (now_ms if now_ms is not None else int(time.time() * 1000)) - FORCE_AUDIT_AGE_MS
    for which in chosen:
        await ctx.urm.set_check_ctime(which, value)
    return {w: value for w in chosen}


# -- progress (daemon) ------------------------------------------------------------------------------------
def worker_progress(ctx: AdminContext) -> dict[str, Any] | None:
    """The local node's progress as JSON ``{"cluster": {...}, "worker": {...}}`` (``plan.progress.Progress``), or
    None outside a daemon."""
    if ctx.progress_source is None:
        return None
    p = ctx.progress_source()
    if p is None:
        return None
    return p.as_dict() if hasattr(p, "as_dict") else dict(p)
