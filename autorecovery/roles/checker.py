"""LedgerChecker, the edge half: reads entries from bookies and lets ``audit.checker`` judge (EDGE).

Upstream ``client/LedgerChecker``: for every fragment and ensemble index, read the first and last
entry that index stores (or ``auditorLedgerVerificationPercentage`` of them); an unavailable bookie, a
failed read or a corrupt entry (a digest mismatch: the ledger's own digest type, verified here with
``ledger.digest``) makes the index bad. ``inFlightReadEntryNumInLedgerChecker`` bounds the reads in flight (#2973); reads
are plain reads (never fencing).

Better than upstream: reads of one index stop at its first failure, a probe answer of "unavailable"
is cheap, and the bound is an asyncio semaphore, so no thread can deadlock on permits (#3070, #3655).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Collection, Mapping

import structlog

from autorecovery.audit.checker import (
    BadFragment,
    Fragment,
    bad_fragment,
    entries_to_read,
    fragments_of,
    index_is_bad,
    probe_entry,
    probe_known_without_reads,
    probe_says_exists,
)
from autorecovery.errors import AutoRecoveryError, BookieError
from autorecovery.ledger.credentials import DEFAULT_CREDENTIALS, RecoveryCredentials, recovery_digest
from autorecovery.ledger.digest import EntryDigest
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.ledger.striping import count_on_index
from autorecovery.roles import holdings

log = structlog.get_logger("autorecovery.checker")

#: At most one warning per foreign bookie (no gRPC endpoint) per this many seconds.
FOREIGN_WARN_EVERY_S = 600.0


class LedgerChecker:
    """Find the bad fragments of a ledger by reading from its bookies.

    Args:
        bookies: a ``BookieClient`` (``read_entry``, ``read_lac``).
        available: returns the bookies currently writable ∪ read-only.
        verification_percentage: ``auditorLedgerVerificationPercentage`` (0 = first and last entry).
        in_flight: ``inFlightReadEntryNumInLedgerChecker`` (-1 or 0 = unbounded).
        rng: random source for sampling.
        foreign: returns the available bookies that do not advertise our gRPC endpoint (bookie id →
            what they advertise; ``BookieWatcher.foreign``). Their copies are skipped, never judged
            bad: reading them over a protocol they do not speak would mark every healthy ledger
            (issue 9, "never false-mark").
        credentials: ``digestType``/``passwd``: what verifies the entries of a ledger whose metadata
            stores no password (format v1; upstream's Auditor opens ledgers administratively).

    Attributes:
        reads: entry reads sent so far (for tests and metrics).
        skipped_foreign: copies not checked because their bookie is foreign.
    """

    def __init__(self, bookies, available: Callable[[], frozenset[str]], *, verification_percentage: int = 0,
                 in_flight: int = -1, rng: random.Random | None = None,
                 foreign: Callable[[], Mapping[str, tuple[str, ...]]] | None = None,
                 credentials: RecoveryCredentials = DEFAULT_CREDENTIALS) -> None:
        self.bookies = bookies
        self.credentials = credentials
        self.available = available
        self.foreign = foreign or (lambda: {})
        self.verification_percentage = verification_percentage
        self._sem = asyncio.Semaphore(in_flight) if in_flight and in_flight > 0 else None
        self._rng = rng or random.Random()
        self.reads = 0
        self.skipped_foreign = 0
        self._warned: dict[str, float] = {}

    def skip_foreign(self, bookie: str, advertised: tuple[str, ...], ledger_id: int) -> None:
        """Count a skipped copy; warn at most once per bookie every :data:`FOREIGN_WARN_EVERY_S`."""
        self.skipped_foreign += 1
        now = time.monotonic()
        if now - self._warned.get(bookie, -FOREIGN_WARN_EVERY_S) >= FOREIGN_WARN_EVERY_S:
            self._warned[bookie] = now
            log.warning("not checking copies on a bookie without a gRPC endpoint", bookie_id=bookie,
                        advertised=list(advertised) or "nothing", ledger_id=ledger_id,
                        skipped_so_far=self.skipped_foreign)

    async def _read_status(self, bookie: str, ledger_id: int, entry_id: int, digest: EntryDigest) -> str:
        """``"EOK"`` for a verified entry, else the failure's status name (``ENOENTRY``, ``DIGEST``...)."""
        async def go() -> str:
            self.reads += 1
            try:
                res = await self.bookies.read_entry(bookie, ledger_id, entry_id)
                digest.verify(res.body, ledger_id, entry_id, source=bookie)
                return "EOK"
            except BookieError as exc:
                return exc.status
            except AutoRecoveryError:
                return "DIGEST_MISMATCH"
            except Exception as exc:  # noqa: BLE001 - any failure of a read makes the copy suspect
                return type(exc).__name__

        if self._sem is None:
            return await go()
        async with self._sem:
            return await go()

    async def read_lac(self, ledger_id: int, md: LedgerMetadata) -> int:
        """Highest LAC of the last ensemble (:func:`autorecovery.client.lac.read_last_add_confirmed`).

        Raises:
            LacUnknownError: too few of its bookies answered to cover every write quorum.
        """
        from autorecovery.client.lac import read_last_add_confirmed

        return await read_last_add_confirmed(self.bookies, ledger_id, md)

    async def check(self, ledger_id: int, md: LedgerMetadata, lac: int | None = None,
                    verify_all: Collection[str] = (),
                    proven: Collection[tuple[int, str]] = (),
                    verified: dict[tuple[int, str], tuple[int, int] | None] | None = None) -> list[BadFragment]:
        """Bad fragments of the ledger (empty list: every copy checked is fine).

        Args:
            md: the ledger's metadata; its ``digest_type`` and ``password`` (or, when it stores none,
                the checker's ``credentials``) verify the entries read (an
                HMAC ledger needs its real password: metadata read from ZooKeeper, not the auditor
                index's view).
            lac: last add confirmed of an open ledger; read from the bookies when None.
            verify_all: bookie ids whose every stored entry is read (100 %, whatever
                ``verification_percentage`` says): the live bookies a marker names, e.g. one the
                replicas check marked for entries missing inside a fragment, which the first-and-last
                sample cannot see (issue 26: found by the chaos campaign's one-way loss).
            proven: ``(segment first entry id, bookie id)`` pairs whose share of that segment is known
                good without a read: the worker's re-check passes the members its own check read
                without a failure moments before (issue 29). Never the members a copy just wrote to:
                an acknowledgement is not a read (upstream re-reads them too).
            verified: when given, filled with ``(segment first entry id, bookie id)`` → its share's
                ``(first, last)`` entry ids when every entry of the share was read, else None, for
                every closed fragment's member whose reads all passed (what a re-check moments later
                may take as ``proven``, and what the copy need not ask the bookie's listing for).
        """
        if md.state != LedgerState.CLOSED and lac is None:
            lac = await self.read_lac(ledger_id, md)
        digest = recovery_digest(md, self.credentials)
        frags, probe = fragments_of(md, lac)
        full = frozenset(verify_all)
        known = frozenset(proven)
        read_ok: frozenset[str] = frozenset()
        if probe is not None:
            exists, read_ok = await self._probe(ledger_id, probe, digest, known)
            if exists:
                frags.append(probe)
        results = await asyncio.gather(*(self._check_fragment(ledger_id, f, digest, full, known, verified,
                                                              read_ok if f is probe else frozenset())
                                         for f in frags))
        return [r for r in results if r is not None]

    async def _probe(self, ledger_id: int, frag: Fragment, digest: EntryDigest,
                     proven: frozenset[tuple[int, str]]) -> tuple[bool, frozenset[str]]:
        """Whether the one-entry last fragment's entry may exist (upstream ``EntryExistsCallback``: any
        answer but NoSuchEntry/NoSuchLedger, errors included), and the bookies whose probe read of it
        passed (the fragment's check, of that same entry, does not read them again; issue 29). No read
        at all when the answer is known (:func:`~autorecovery.audit.checker.probe_known_without_reads`)."""
        if probe_known_without_reads(frag, self.available(), proven):
            return True, frozenset()
        entry, indexes = probe_entry(frag)
        bookies = [frag.ensemble[i] for i in indexes]
        statuses = await asyncio.gather(*(self._read_status(b, ledger_id, entry, digest) for b in bookies))
        return probe_says_exists(statuses), frozenset(b for b, st in zip(bookies, statuses, strict=True) if st == "EOK")

    async def _check_fragment(self, ledger_id: int, frag: Fragment, digest: EntryDigest,
                              verify_all: frozenset[str] = frozenset(),
                              proven: frozenset[tuple[int, str]] = frozenset(),
                              verified: dict[tuple[int, str], tuple[int, int] | None] | None = None,
                              read_ok: frozenset[str] = frozenset()) -> BadFragment | None:
        avail = self.available()
        foreign = self.foreign()
        bad: dict[int, str] = {}
        listings: holdings.Cache = {}

        async def one(idx: int) -> None:
            bookie = frag.ensemble[idx]
            first_b, last_b = frag.stored_range(idx)
            if bookie in foreign and bookie in avail:
                self.skip_foreign(bookie, foreign[bookie], ledger_id)
                return
            up = bookie in avail
            if up and (frag.segment_first_entry_id, bookie) in proven:
                return
            failures = 0
            if up and first_b >= 0:
                if bookie in verify_all and not await self._holds_all(ledger_id, frag, idx, listings):
                    failures += 1
                read = 0
                for e in entries_to_read(first_b, last_b, idx, frag.ensemble_size, frag.write_quorum,
                                         self.verification_percentage, self._rng):
                    if failures:
                        break
                    read += 1
                    # a one-entry fragment's probe already read this entry from ``read_ok``
                    status = "EOK" if bookie in read_ok else await self._read_status(bookie, ledger_id, e, digest)
                    if status != "EOK":
                        log.info("ledger checker read failed", ledger_id=ledger_id, entry_id=e, bookie_id=bookie,
                                 status=status)
                        failures += 1
                        break
                if not failures and verified is not None and frag.closed:
                    whole = read >= count_on_index(first_b, last_b, idx, frag.ensemble_size, frag.write_quorum)
                    verified[(frag.segment_first_entry_id, bookie)] = (first_b, last_b) if whole else None
            if index_is_bad(first_b, up, failures):
                bad[idx] = bookie

        await asyncio.gather(*(one(i) for i in range(len(frag.ensemble))))
        return bad_fragment(frag, bad)

    async def _holds_all(self, ledger_id: int, frag: Fragment, idx: int, listings: holdings.Cache) -> bool:
        """Whether ensemble index ``idx`` stores every entry of its share of ``frag``, from one
        ``GetListOfEntriesOfLedger`` answer (ranges joined over the ids of other indexes, so a full
        share is one covering range). True when the bookie cannot say (a stock bookie, an error): the
        sampled reads then decide, as before."""
        first_b, last_b = frag.stored_range(idx)
        ranges, _reason = await holdings.held(self.bookies, frag.ensemble[idx], ledger_id, listings,
                                              (idx, frag.ensemble_size, frag.write_quorum))
        if ranges is None:
            return True
        if any(a <= first_b and last_b <= b for a, b in ranges):
            return True
        log.info("bookie misses entries of its share", ledger_id=ledger_id, bookie_id=frag.ensemble[idx],
                 first_entry_id=first_b, last_entry_id=last_b)
        return False


__all__ = ["LedgerChecker", "BadFragment"]
