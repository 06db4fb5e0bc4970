"""Ledger recovery: fence, find the last entry, re-write the tail, close (EDGE).

Source: upstream ``LedgerRecoveryOp``, ``ReadLastConfirmedOp`` and ``ReadOnlyLedgerHandle.recover``:

1. CAS the metadata OPEN → IN_RECOVERY (a CLOSED ledger needs nothing).
2. Send a fencing read of entry -1 (FENCE_LEDGER + master key) to every bookie of the last ensemble.
   Wait until the answers *cover* the ensemble: every write set has at least ``WQ - AQ + 1`` answers
   (ENOENTRY/ENOLEDGER count as answers). From then on no writer can reach its ack quorum.
3. From the highest LAC seen + 1, read forward: an entry with a valid copy on any bookie of its write
   set is recovered and re-written with RECOVERY_ADD (through a recovery-mode :class:`LedgerHandle`, so
   an unreachable bookie causes an ensemble change, as upstream); an entry that at least
   ``WQ - AQ + 1`` bookies of its write set say they do not have is proven absent and ends the ledger.
4. CAS IN_RECOVERY → CLOSED with lastEntryId and length.
"""

from __future__ import annotations

import asyncio
import dataclasses

import structlog

from autorecovery.client.handle_context import ClientContext
from autorecovery.client.handle import LedgerHandle
from autorecovery.errors import BookieError, DigestMismatchError, LedgerRecoveryError
from autorecovery.ledger.credentials import DEFAULT_CREDENTIALS, recovery_digest, recovery_master_key
from autorecovery.ledger.digest import Entry, peek_ids
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.ledger.striping import write_set


log = structlog.get_logger("autorecovery.client")

_ABSENT = ("ENOENTRY", "ENOLEDGER")


def covers(answered: set[int], ensemble_size: int, write_quorum: int, ack_quorum: int) -> bool:
    """True when every write set has at least ``WQ - AQ + 1`` answering indexes (PURE; upstream
    RoundRobinDistributionSchedule.QuorumCoverageSet)."""
    need = write_quorum - ack_quorum + 1
    for start in range(ensemble_size):
        ws = write_set(start, ensemble_size, write_quorum)
        if sum(1 for i in ws if i in answered) < need:
            return False
    return True


async def _fence(bk: ClientContext, ledger_id: int, md: LedgerMetadata) -> int:
    ens = md.last_ensemble
    answered: set[int] = set()
    max_lac = -1

    async def one(idx: int, bookie: str) -> None:
        nonlocal max_lac
        try:
            res = await bk.bookies.read_entry(bookie, ledger_id, -1, fence=True, master_key=recovery_master_key(md, getattr(bk, "credentials", DEFAULT_CREDENTIALS)))
            lac = res.lac
            try:
                _l, _e, piggy = peek_ids(res.body)
                lac = max(lac, piggy)
            except ValueError:
                pass
            max_lac = max(max_lac, lac)
            answered.add(idx)
        except BookieError as exc:
            if exc.status in _ABSENT:
                answered.add(idx)
            else:
                log.warning("fence failed on bookie", ledger_id=ledger_id, bookie_id=bookie, status=exc.status)

    await asyncio.gather(*(one(i, b) for i, b in enumerate(ens)))
    if not covers(answered, md.ensemble_size, md.write_quorum, md.ack_quorum):
        raise LedgerRecoveryError(
            f"ledger {ledger_id}: fencing reached only indexes {sorted(answered)} of ensemble {list(ens)}; "
            f"not enough to cover every write set with WQ-AQ+1={md.write_quorum - md.ack_quorum + 1}"
        )
    return max_lac


async def _probe(bk: ClientContext, ledger_id: int, md: LedgerMetadata, entry_id: int) -> Entry | None:
    """Return the entry if any replica has a valid copy, None if proven absent."""
    ens = md.ensemble_at(entry_id)
    absent = 0
    for idx in write_set(entry_id, md.ensemble_size, md.write_quorum):
        bookie = ens[idx]
        try:
            res = await bk.bookies.read_entry(bookie, ledger_id, entry_id)
            return recovery_digest(md, getattr(bk, "credentials", DEFAULT_CREDENTIALS)).unpack(res.body, ledger_id, entry_id, source=bookie)
        except DigestMismatchError:
            continue
        except BookieError as exc:
            if exc.status in _ABSENT:
                absent += 1
    if absent >= md.write_quorum - md.ack_quorum + 1:
        return None
    raise LedgerRecoveryError(
        f"ledger {ledger_id}: cannot tell whether entry {entry_id} exists ({absent} bookies said no, "
        f"need {md.write_quorum - md.ack_quorum + 1})"
    )


async def recover_ledger(bk: ClientContext, ledger_id: int) -> tuple[LedgerMetadata, int]:
    """Fence and close ``ledger_id``; returns the closed ``(metadata, version)``.

    Raises:
        NoSuchLedgerError, LedgerRecoveryError (fencing or probing could not reach enough bookies).
    """
    md, version = await bk.ledgers.read(ledger_id)
    if md.state == LedgerState.CLOSED:
        return md, version

    def to_recovery(cur: LedgerMetadata) -> LedgerMetadata | None:
        if cur.state != LedgerState.OPEN:
            return None
        return dataclasses.replace(cur, state=LedgerState.IN_RECOVERY)

    md, version = await bk.ledgers.update(ledger_id, to_recovery, current=(md, version))
    if md.state == LedgerState.CLOSED:
        return md, version
    lac = await _fence(bk, ledger_id, md)
    length = 0
    if lac >= 0:
        entry = await _probe(bk, ledger_id, md, lac)
        length = entry.length if entry is not None else 0
    handle = LedgerHandle(bk, ledger_id, md, version, recovery=True, last_entry_id=lac, length=length)
    entry_id = lac + 1
    while True:
        entry = await _probe(bk, ledger_id, handle.metadata, entry_id)
        if entry is None:
            break
        handle.last_pushed = entry_id
        await handle._add(entry_id, entry.payload, entry.length)
        handle.length = entry.length
        entry_id += 1
    closed = await handle.close()
    log.info("ledger recovered", ledger_id=ledger_id, last_entry_id=closed.last_entry_id, length=closed.length)
    return closed, handle.version
