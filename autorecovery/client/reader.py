"""Reading ledgers: digest-checked reads with fallback to the next replica (EDGE).

Source: upstream ``PendingReadOp`` / ``ReadOnlyLedgerHandle``. Each entry is read from the bookies of
its write set in order, live bookies first (the placement policy's read ordering); a missing entry, an
unreachable bookie or a bad digest moves on to the next replica. Digest failures are recorded in
``digest_errors`` (and logged) so callers can report them; a read fails only when no replica serves a
valid copy.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from autorecovery.errors import BookieError, DigestMismatchError, ReadError
from autorecovery.ledger.digest import Entry, unpack_entry
from autorecovery.ledger.metadata import LedgerMetadata, write_set

if TYPE_CHECKING:
    from autorecovery.client.bookkeeper import BookKeeper

log = structlog.get_logger("autorecovery.client")


@dataclass
class ReadHandle:
    """A read-only view of a ledger.

    Attributes:
        last_add_confirmed: highest readable entry id (closed: lastEntryId; open: LAC from bookies).
        digest_errors: ``(entry_id, bookie_id, message)`` for each corrupt copy seen.
    """

    bk: "BookKeeper"
    ledger_id: int
    metadata: LedgerMetadata
    version: int
    last_add_confirmed: int
    digest_errors: list[tuple[int, str, str]] = field(default_factory=list)

    def replica_order(self, entry_id: int) -> list[str]:
        """Bookies of the entry's write set, live ones first (stable order otherwise)."""
        md = self.metadata
        ens = md.ensemble_at(entry_id)
        ws = [ens[i] for i in write_set(entry_id, md.ensemble_size, md.write_quorum)]
        live = self.bk.watcher.available if self.bk.watcher else frozenset(ws)
        return [b for b in ws if b in live] + [b for b in ws if b not in live]

    async def read_entry(self, entry_id: int) -> Entry:
        """Read one entry with fallback.

        Raises:
            ReadError: naming the ledger, the entry and each replica's failure.
        """
        failures: list[str] = []
        for bookie in self.replica_order(entry_id):
            try:
                res = await self.bk.bookies.read_entry(bookie, self.ledger_id, entry_id)
                return unpack_entry(res.body, self.ledger_id, entry_id, source=bookie)
            except DigestMismatchError as exc:
                self.digest_errors.append((entry_id, bookie, str(exc)))
                log.error("digest mismatch", ledger_id=self.ledger_id, entry_id=entry_id, bookie_id=bookie, error=str(exc))
                failures.append(f"{bookie}: digest mismatch")
            except BookieError as exc:
                failures.append(f"{bookie}: {exc.status}")
        raise ReadError(f"ledger {self.ledger_id} entry {entry_id}: no replica could serve it ({'; '.join(failures)})")

    async def read_entries(self, first: int, last: int, *, parallelism: int = 64) -> list[Entry]:
        """Read entries ``first..last`` inclusive, verified, in order.

        Raises:
            ReadError: when ``last`` is beyond the last add confirmed, or an entry cannot be read.
        """
        if first < 0 or last < first:
            raise ReadError(f"ledger {self.ledger_id}: bad range {first}..{last}")
        if last > self.last_add_confirmed:
            raise ReadError(
                f"ledger {self.ledger_id}: entry {last} is beyond the last add confirmed {self.last_add_confirmed}"
            )
        sem = asyncio.Semaphore(parallelism)

        async def one(e: int) -> Entry:
            async with sem:
                return await self.read_entry(e)

        return list(await asyncio.gather(*(one(e) for e in range(first, last + 1))))
