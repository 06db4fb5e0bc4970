"""``placementcheck`` (ours): every closed ledger evaluated against a placement policy, counted by
adherence, with the non-adhering ones and their racks. Every name resolves from
:mod:`autorecovery.admin.ops`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from autorecovery.admin.op_context import (
    AdminContext,
)
from autorecovery.errors import (
    AutoRecoveryError,
    NoSuchLedgerError,
)
from autorecovery.ledger.metadata import LedgerState

log = structlog.get_logger("autorecovery.admin")


# -- placementcheck ---------------------------------------------------------------------------------------
def bookie_location(policy: Any, bookie_id: str) -> str | None:
    """The network location (rack) ``policy`` resolves for ``bookie_id``, or None when it cannot."""
    fn = getattr(policy, "location_of", None)
    if fn is None:
        return None
    try:
        return fn(bookie_id)
    except Exception as exc:  # noqa: BLE001 - an unresolvable bookie has no rack to show
        log.debug("bookie location not resolved", bookie_id=bookie_id, error=str(exc))
        return None


@dataclass(frozen=True)
class NonAdheringLedger:
    """A closed ledger with a segment that fails (or only softly meets) the policy."""

    ledger_id: int
    adherence: str
    segments: tuple[tuple[int, int, tuple[tuple[str, str | None], ...]], ...]  # (first, last, ((bookie, rack),...))


@dataclass(frozen=True)
class PlacementReport:
    """Counts of closed ledgers by adherence for one policy, plus the ones that are not strict."""

    policy: str
    counts: dict[str, int]
    open_skipped: int
    unreadable: int
    not_adhering: tuple[NonAdheringLedger, ...]


async def placement_check(ctx: AdminContext, policy: Any = None, policy_name: str | None = None,
                          ledger_ids: Iterable[int] | None = None) -> PlacementReport:
    """Evaluate every closed ledger against a placement policy (the configured one by default).

    Open ledgers are counted as skipped, as upstream's placement check does (their last segment may
    still change). Each segment is judged with ``policy.is_ensemble_adhering``; a ledger takes its
    worst segment's verdict.
    """
    policy = policy or await ctx.get_policy()
    name = policy_name or getattr(policy, "upstream_class", "") or type(policy).__name__
    counts = {"MEETS_STRICT": 0, "MEETS_SOFT": 0, "FAIL": 0}
    open_skipped = unreadable = 0
    bad: list[NonAdheringLedger] = []
    ids = list(ledger_ids) if ledger_ids is not None else await ctx.ledgers.list_ledger_ids()
    for lid in ids:
        try:
            md, _v = await ctx.ledgers.read(lid)
        except NoSuchLedgerError:
            continue
        except AutoRecoveryError:
            unreadable += 1
            continue
        if md.state != LedgerState.CLOSED:
            open_skipped += 1
            continue
        worst = 2
        segs = []
        for i, seg in enumerate(md.segments):
            last = md.segment_end(i)
            verdict = int(policy.is_ensemble_adhering(list(seg.ensemble), md.write_quorum, md.ack_quorum))
            worst = min(worst, verdict)
            if verdict < 2:
                segs.append((seg.first_entry_id, last, tuple((b, bookie_location(policy, b)) for b in seg.ensemble)))
        label = {0: "FAIL", 1: "MEETS_SOFT", 2: "MEETS_STRICT"}[worst]
        counts[label] += 1
        if worst < 2:
            bad.append(NonAdheringLedger(lid, label, tuple(segs)))
    return PlacementReport(name, counts, open_skipped, unreadable, tuple(bad))
