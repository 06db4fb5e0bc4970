"""Reading ledgers: digest-checked reads with fallback to the next replica (EDGE).

Source: upstream ``PendingReadOp`` / ``ReadOnlyLedgerHandle``. Each entry is read from the bookies of
its write set in order, live bookies first (the placement policy's read ordering); a missing entry, an
unreachable bookie or a bad digest moves on to the next replica. Digest failures are recorded in
``digest_errors`` (and logged) so callers can report them; a read fails only when no replica serves a
valid copy.

Range reads stream (ours, upstream reads entry by entry): within a segment, the entries ``e ≡ r (mod
E)`` share a write set, so one ``ReadEntries`` stream per residue ``r`` fetches them from the first live
replica of that write set. The stream asks for ``write_quorum=1`` and ``bookie_index=r``, which selects
exactly the entries whose write set starts at ``r``, so nothing is fetched twice. Entries a stream
cannot deliver intact fall back to the per-entry path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, cast

import structlog

from autorecovery.client.handle_context import ClientContext
from autorecovery.errors import BookieError, DigestMismatchError, ReadError
from autorecovery.ledger.credentials import DEFAULT_CREDENTIALS, recovery_digest
from autorecovery.ledger.digest import Entry
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.ledger.striping import write_set


log = structlog.get_logger("autorecovery.client")


@dataclass
class ReadHandle:
    """A read-only view of a ledger.

    Attributes:
        last_add_confirmed: highest readable entry id (closed: lastEntryId; open: LAC from bookies).
        digest_errors: ``(entry_id, bookie_id, message)`` for each corrupt copy seen.
        fallback_reads: entries a range stream could not deliver intact, read one by one instead.
    """

    bk: ClientContext
    ledger_id: int
    metadata: LedgerMetadata
    version: int
    last_add_confirmed: int
    digest_errors: list[tuple[int, str, str]] = field(default_factory=list)
    fallback_reads: int = 0

    def replica_order(self, entry_id: int) -> list[str]:
        """Bookies of the entry's write set, live ones first (stable order otherwise)."""
        md = self.metadata
        ens = md.ensemble_at(entry_id)
        ws = [ens[i] for i in write_set(entry_id, md.ensemble_size, md.write_quorum)]
        live = self.bk.watcher.available if self.bk.watcher else frozenset(ws)
        return [b for b in ws if b in live] + [b for b in ws if b not in live]

    async def read_entry(self, entry_id: int, *, tried: frozenset[str] = frozenset()) -> Entry:
        """Read one entry with fallback; bookies in ``tried`` (already failed for it) are asked last.

        Raises:
            ReadError: naming the ledger, the entry and each replica's failure.
        """
        failures: list[str] = []
        order = self.replica_order(entry_id)
        for bookie in [b for b in order if b not in tried] + [b for b in order if b in tried]:
            try:
                res = await self.bk.bookies.read_entry(bookie, self.ledger_id, entry_id)
                return recovery_digest(self.metadata, getattr(self.bk, "credentials", DEFAULT_CREDENTIALS)).unpack(res.body, self.ledger_id, entry_id, source=bookie)
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
        got: dict[int, Entry] = {}
        tried: dict[int, str] = {}
        sem = asyncio.Semaphore(parallelism)
        md = self.metadata
        digest = recovery_digest(md, getattr(self.bk, "credentials", DEFAULT_CREDENTIALS))
        streams = []
        for i, seg in enumerate(md.segments):
            lo = max(first, seg.first_entry_id)
            hi = min(last, md.segment_end(i, last))
            for e in range(lo, min(hi, lo + md.ensemble_size - 1) + 1):  # each residue present once
                streams.append((lo, hi, seg.ensemble, e % md.ensemble_size))

        async def stream(lo: int, hi: int, ensemble: tuple[str, ...], r: int) -> None:
            ws = [ensemble[i] for i in write_set(r, md.ensemble_size, md.write_quorum)]
            live = self.bk.watcher.available if self.bk.watcher else frozenset(ws)
            start = lo
            # live replicas first; a replica that cannot be reached hands the rest of the range on
            for bookie in [b for b in ws if b in live] + [b for b in ws if b not in live]:
                async with sem:
                    try:
                        # every transport's read_entries is an async generator (closed early here)
                        async with contextlib.aclosing(cast("AsyncGenerator[Any, None]", self.bk.bookies.read_entries(
                                bookie, self.ledger_id, start, hi, ensemble_size=md.ensemble_size,
                                write_quorum=1, bookie_index=r))) as items:
                            async for item in items:
                                if isinstance(item, BookieError):
                                    continue  # missing here: the per-entry path tries the other replicas
                                start = item.entry_id + 1
                                try:
                                    got[item.entry_id] = digest.unpack(item.body, self.ledger_id, item.entry_id,
                                                                       source=bookie)
                                except DigestMismatchError as exc:
                                    tried[item.entry_id] = bookie
                                    self.digest_errors.append((item.entry_id, bookie, str(exc)))
                                    log.error("digest mismatch", ledger_id=self.ledger_id, entry_id=item.entry_id,
                                              bookie_id=bookie, error=str(exc))
                        return
                    except BookieError:
                        continue

        await asyncio.gather(*(stream(*s) for s in streams))

        async def one(e: int) -> Entry:
            async with sem:
                return await self.read_entry(e, tried=frozenset({tried[e]}) if e in tried else frozenset())

        missing = [e for e in range(first, last + 1) if e not in got]
        self.fallback_reads += len(missing)
        got.update(zip(missing, await asyncio.gather(*(one(e) for e in missing)), strict=True))
        return [got[e] for e in range(first, last + 1)]
