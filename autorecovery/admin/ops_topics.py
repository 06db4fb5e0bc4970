"""Live by-topic rollup for ``shell listunderreplicated --by-topic`` and the ``by_topic`` section of
``GET /api/v1/autorecovery/progress`` (ours): reads the markers, the unrecoverable records and each
marked ledger's metadata, then rolls them up with :func:`autorecovery.audit.topics.rollup` (pure).

Cost: one metadata read per marked or unrecoverable ledger per call (64 in flight), at most
:data:`MAX_LEDGERS` of them (lowest ids first; the answer then says ``"truncated": true``), so a
progress request on a cluster with a huge queue stays bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from autorecovery.admin.op_context import AdminContext
from autorecovery.audit.topics import LedgerState, rollup
from autorecovery.errors import AutoRecoveryError, NoSuchLedgerError
from autorecovery.ledger.ids import ledger_id_from_ur_leaf
from autorecovery.plan.priority import WorkKind, ledger_priority
from autorecovery.zk.bridge import NoNodeError

#: Most ledgers one rollup reads the metadata of.
MAX_LEDGERS = 10_000


async def unrecoverable_ids(ctx: AdminContext) -> set[int]:
    """Ledger ids with an ``underreplication/unrecoverable/urL…`` record (names that do not parse are
    skipped)."""
    try:
        names = await ctx.zk.get_children(ctx.paths.unrecoverable)
    except NoNodeError:
        return set()
    out: set[int] = set()
    for n in names:
        try:
            out.add(ledger_id_from_ur_leaf(n))
        except ValueError:
            continue
    return out


async def by_topic(ctx: AdminContext, blocked: Mapping[int | str, Any] | None = None, *,
                   max_ledgers: int = MAX_LEDGERS) -> dict[str, Any]:
    """The rollup document (see :func:`autorecovery.audit.topics.rollup`) of every marked ledger and
    every unrecoverable one, plus ``"truncated"`` (more than ``max_ledgers`` of them: the lowest ids
    are rolled up); ``blocked``: ledger id → reason from a daemon's progress (None: none known, as in
    the shell). A ledger whose metadata is gone is skipped; one whose metadata cannot be read counts
    as "not Pulsar"."""
    marked = {m.ledger_id: list(m.replicas) async for m in ctx.urm.list_underreplicated(None)}
    gone = await unrecoverable_ids(ctx)
    stuck = {int(k) for k in (blocked or {})}
    watcher = await ctx.get_watcher()
    available = set(watcher.writable) | set(watcher.readonly)
    wanted = sorted(set(marked) | gone)
    truncated = len(wanted) > max_ledgers
    sem = asyncio.Semaphore(64)

    async def one(lid: int) -> LedgerState | None:
        statuses: set[str] = set()
        custom = None
        try:
            async with sem:
                md, _ = await ctx.ledgers.read(lid)
            custom = md.custom_metadata
            if lid in marked:
                p = ledger_priority(lid, md, marked[lid], available)
                if p.kind == WorkKind.NO_COPY_LEFT:
                    statuses.add("unrecoverable")
                elif p.kind == WorkKind.DATA_LOSS and p.margin < 0:
                    statuses.add("at_risk")
        except NoSuchLedgerError:
            return None
        except AutoRecoveryError:
            pass
        if lid in marked:
            statuses.add("under_replicated")
        if lid in gone:
            statuses.add("unrecoverable")
        if lid in stuck:
            statuses.add("blocked")
        return LedgerState(lid, custom, frozenset(statuses))

    states = [s for s in await asyncio.gather(*(one(lid) for lid in wanted[:max_ledgers])) if s is not None]
    return {**rollup(states), "truncated": truncated}
