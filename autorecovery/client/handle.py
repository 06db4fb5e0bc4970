"""Writing ledgers: striped adds with ack quorum, ensemble changes, close (EDGE).

Source: upstream ``LedgerHandle``, ``PendingAddOp`` and ``LedgerHandle.handleBookieFailure``. Entry ``e``
goes to the write set ``(e + k) mod E, k < WQ`` of the ensemble of the segment that holds ``e``; the add
is acknowledged when AQ bookies answered *and* every earlier entry is acknowledged (adds complete in
order, and the LAC only moves forward over acknowledged entries).

When a bookie fails, the handle makes an ensemble change: the placement policy picks a replacement,
a new segment starting at ``LAC + 1`` is CAS-written to the metadata, and every pending entry that the
failed index had not acknowledged is re-sent to the new bookie. An EFENCED answer, or metadata that is
no longer OPEN, means a recovery took the ledger over: every pending and later add fails with
:class:`LedgerFencedError`.
"""

from __future__ import annotations

import asyncio
import dataclasses

import structlog

from autorecovery.client.handle_context import ClientContext
from autorecovery.errors import (
    BookieError,
    LedgerClosedError,
    LedgerFencedError,
    NotEnoughBookiesError,
    WriteError,
)
from autorecovery.ledger.credentials import DEFAULT_CREDENTIALS, recovery_digest, recovery_master_key
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.ledger.striping import write_set


log = structlog.get_logger("autorecovery.client")


@dataclasses.dataclass
class _PendingAdd:
    entry_id: int
    body: bytes
    length: int
    done: asyncio.Future  # resolved with the entry id once acknowledged (AQ), or failed
    acked: set[int] = dataclasses.field(default_factory=set)
    gave_up: set[int] = dataclasses.field(default_factory=set)
    failed: BaseException | None = None


class LedgerHandle:
    """A writable ledger handle (also used, in recovery mode, to re-write recovered entries).

    Attributes:
        ledger_id: the ledger id. metadata/version: the latest metadata and znode version seen.
        lac: last add confirmed (-1 when nothing is confirmed). length: cumulative payload bytes.
    """

    def __init__(self, bk: ClientContext, ledger_id: int, metadata: LedgerMetadata, version: int,
                 *, recovery: bool = False, last_entry_id: int = -1, length: int = 0) -> None:
        self.bk = bk
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.version = version
        self.recovery = recovery
        self.lac = last_entry_id
        self.last_pushed = last_entry_id
        self.length = length
        self.confirmed_length = length
        self._pending: dict[int, _PendingAdd] = {}
        self._change_lock = asyncio.Lock()
        self._failed_bookies: set[str] = set()
        self._error: BaseException | None = None
        self._closed = False
        self._tasks: set[asyncio.Task] = set()  # writes being retried (_send)
        self._writes: set[asyncio.Future] = set()  # first writes queued on the add batcher
        # the ledger's digest type and password never change: its digest and master key are fixed
        # (a ledger whose metadata stores no password: the client's digestType/passwd, bk.credentials)
        credentials = getattr(bk, "credentials", DEFAULT_CREDENTIALS)
        self.digest = recovery_digest(metadata, credentials)
        self._master_key = recovery_master_key(metadata, credentials)

    @property
    def master_key(self) -> bytes:
        """What adds carry: upstream ``generateMasterKey(password)``, never the password itself."""
        return self._master_key

    def _check_writable(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed")

    async def add_entry(self, payload: bytes) -> int:
        """Append ``payload``; returns its entry id once AQ bookies acknowledged it (in order).

        Raises:
            LedgerFencedError: the ledger was fenced by a recovery.
            LedgerClosedError: the handle is closed.
            NotEnoughBookiesError / WriteError: no replacement bookie could be found.
        """
        self._check_writable()
        entry_id = self.last_pushed + 1
        self.last_pushed = entry_id
        self.length += len(payload)
        await self._add(entry_id, payload, self.length)
        return entry_id

    async def _add(self, entry_id: int, payload: bytes, length: int) -> None:
        body = self.digest.pack(self.ledger_id, entry_id, self.lac, length, payload)
        op = _PendingAdd(entry_id, body, length, done=asyncio.get_running_loop().create_future())
        self._pending[entry_id] = op
        md = self.metadata
        for idx in write_set(entry_id, md.ensemble_size, md.write_quorum):
            self._start_write(op, idx)
        await op.done

    def _start_write(self, op: _PendingAdd, idx: int) -> None:
        """Send ``op`` to ensemble index ``idx``. The common case costs no task: the write is queued on
        the add batcher and finished by a callback; a failed write, or a bookie already known to have
        failed, goes to :meth:`_send`, which retries and changes the ensemble (upstream PendingAddOp)."""
        bookie = self.metadata.segments[self.metadata.segment_index_at(op.entry_id)].ensemble[idx]
        if bookie in self._failed_bookies:
            self._spawn(self._send(op, idx))
            return
        fut = self.bk.adds.submit(bookie, self.ledger_id, op.entry_id, self.master_key, op.body,
                                  recovery=self.recovery)
        self._writes.add(fut)
        fut.add_done_callback(lambda f: self._write_done(f, op, idx, bookie))

    def _write_done(self, fut: asyncio.Future, op: _PendingAdd, idx: int, bookie: str) -> None:
        self._writes.discard(fut)
        if fut.cancelled():
            return  # the handle was closed past its deadline
        exc = fut.exception()
        if isinstance(exc, asyncio.CancelledError):
            return  # the client is closing its add batcher: the write is abandoned, as a cancelled task's was
        if exc is None:
            op.acked.add(idx)
            self._advance()
        elif isinstance(exc, BookieError):
            self._spawn(self._send(op, idx, first_error=(bookie, exc)))
        else:  # not a bookie's answer (a bug): fail loudly rather than leave the add waiting
            log.error("ledger write failed unexpectedly", ledger_id=self.ledger_id, entry_id=op.entry_id,
                      bookie_id=bookie, error=repr(exc))
            self._fail_all(exc)

    def _spawn(self, coro) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _send(self, op: _PendingAdd, idx: int,
                    first_error: tuple[str, BookieError] | None = None) -> None:
        """Write ``op`` to index ``idx`` until it is acknowledged, given up or the handle fails;
        ``first_error`` is the answer of a write already made (by :meth:`_start_write`)."""
        attempts = 0
        while op.failed is None:
            if first_error is not None:
                (bookie, err), first_error = first_error, None
            else:
                seg_index = self.metadata.segment_index_at(op.entry_id)
                bookie = self.metadata.segments[seg_index].ensemble[idx]
                if bookie in self._failed_bookies and seg_index < len(self.metadata.segments) - 1:
                    # The entry belongs to an older segment whose member at idx failed and that segment
                    # can no longer change: this replica is given up (the entry is under-replicated until
                    # autorecovery copies it), and the entry fails only if AQ is now out of reach.
                    self._give_up(op, idx, bookie)
                    return
                try:
                    await self.bk.adds.add(bookie, self.ledger_id, op.entry_id, self.master_key, op.body,
                                           recovery=self.recovery)
                    op.acked.add(idx)
                    self._advance()
                    return
                except BookieError as exc:
                    err = exc
            if isinstance(err, LedgerFencedError):
                self._fail_all(LedgerFencedError(bookie, "EFENCED", f"ledger {self.ledger_id} is fenced"))
                return
            attempts += 1
            self._failed_bookies.add(bookie)
            log.warning("bookie write failed", ledger_id=self.ledger_id, entry_id=op.entry_id,
                        bookie_id=bookie, status=err.status)
            try:
                await self._handle_bookie_failure(idx, bookie)
            except Exception as change_exc:  # noqa: BLE001 - fails the handle
                self._fail_all(change_exc)
                return
            if attempts > 20:
                self._fail_all(WriteError(f"ledger {self.ledger_id} entry {op.entry_id}: gave up after {attempts} bookie failures"))
                return

    def _give_up(self, op: _PendingAdd, idx: int, bookie: str) -> None:
        op.gave_up.add(idx)
        md = self.metadata
        if md.write_quorum - len(op.gave_up) < md.ack_quorum and len(op.acked) < md.ack_quorum:
            self._fail_all(WriteError(
                f"ledger {self.ledger_id} entry {op.entry_id}: ack quorum {md.ack_quorum} out of reach, "
                f"bookies of its segment failed ({bookie} at index {idx})"))
            return
        self._advance()  # an add waiting for its acks to span enough fault domains may now fail

    def _enforces_fault_domains(self) -> bool:
        """``enforceMinNumFaultDomainsForWrite`` of the client's placement policy (upstream ``PendingAddOp``)."""
        cfg = getattr(getattr(self.bk, "policy", None), "config", None)
        return bool(cfg is not None and cfg.enforce_min_num_fault_domains_for_write)

    def _acked_adhering(self, op: _PendingAdd) -> bool:
        """Whether the bookies that acknowledged ``op`` span the policy's fault domains (upstream
        ``areAckedBookiesAdheringToPlacementPolicy``, checked only with ``enforceMinNumFaultDomainsForWrite``)."""
        md = self.metadata
        ensemble = md.segments[md.segment_index_at(op.entry_id)].ensemble
        acked = {ensemble[i] for i in op.acked}
        return bool(self.bk.policy.are_acked_bookies_adhering(acked, md.write_quorum, md.ack_quorum))

    def _advance(self) -> None:
        aq = self.metadata.ack_quorum
        while True:
            op = self._pending.get(self.lac + 1)
            if op is None or len(op.acked) < aq:
                return
            if self._enforces_fault_domains() and not self._acked_adhering(op):
                # upstream PendingAddOp delays the acknowledgement until more bookies answer; when every
                # member of the write set has answered and they still span too few fault domains,
                # upstream waits for its add timeout: we fail the add at once, saying why
                if len(op.acked) + len(op.gave_up) < self.metadata.write_quorum:
                    return
                self._fail_all(WriteError(
                    f"ledger {self.ledger_id} entry {op.entry_id}: the bookies that acknowledged it span too few "
                    f"fault domains for the placement policy (enforceMinNumFaultDomainsForWrite=true)"))
                return
            self.lac = op.entry_id
            self.confirmed_length = op.length
            if not op.done.done():
                op.done.set_result(op.entry_id)
            # keep the op until every write-set member answered or gave up; drop it from the head
            del self._pending[op.entry_id]

    def _fail_all(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        for op in list(self._pending.values()):
            op.failed = exc
            if not op.done.done():
                op.done.set_exception(exc)
        self._pending.clear()

    async def _handle_bookie_failure(self, idx: int, failed: str) -> None:
        """Replace ``failed`` at ensemble index ``idx`` with a new segment starting at LAC+1."""
        async with self._change_lock:
            self._failed_bookies.add(failed)
            if self.metadata.last_ensemble[idx] != failed:
                return  # already replaced (by us or by a concurrent ensemble change seen in the metadata)
            md = self.metadata
            try:
                result = self.bk.policy.replace_bookie(
                    md.ensemble_size, md.write_quorum, md.ack_quorum, list(md.last_ensemble), failed,
                    exclude=frozenset(self._failed_bookies), custom_metadata=md.custom_metadata,
                )
            except NotEnoughBookiesError as exc:
                raise NotEnoughBookiesError(
                    f"ledger {self.ledger_id}: no bookie to replace {failed}: {exc}"
                ) from exc
            new_bookie = result.bookie
            if new_bookie is None:  # replace_bookie always names one; a policy that does not is a bug
                raise NotEnoughBookiesError(f"ledger {self.ledger_id}: the placement policy named no bookie to replace {failed}")
            first = self.lac + 1
            new_ensemble = list(md.last_ensemble)
            new_ensemble[idx] = new_bookie
            allowed = (LedgerState.IN_RECOVERY,) if self.recovery else (LedgerState.OPEN,)

            def transform(cur: LedgerMetadata) -> LedgerMetadata | None:
                if cur.state not in allowed:
                    raise LedgerFencedError(failed, "EFENCED", f"ledger {self.ledger_id} is now {cur.state.name}")
                ens = list(cur.last_ensemble)
                if ens[idx] != failed:
                    return None
                return cur.with_new_segment(max(first, cur.segments[-1].first_entry_id), tuple(new_ensemble))

            self.metadata, self.version = await self.bk.ledgers.update(
                self.ledger_id, transform, current=(self.metadata, self.version))
            log.info("ensemble changed", ledger_id=self.ledger_id, bookie_id=failed, replacement=new_bookie,
                     first_entry_id=first)

    async def close(self) -> LedgerMetadata:
        """Wait for pending adds, then CAS the metadata to CLOSED with lastEntryId = LAC and length.

        Raises:
            LedgerFencedError: the ledger was recovered by someone else to a different last entry.
        """
        if self._closed:
            return self.metadata
        pending = [op.done for op in self._pending.values()]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        self._closed = True
        # Let the writes to the slower replicas of acknowledged entries finish (upstream does not
        # cancel them either): cancelling would leave entries with fewer than WQ copies. Each write
        # is bounded by the bookie client's deadline.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.bk.bookies_timeout_s * 3
        while (self._tasks or self._writes) and (left := deadline - loop.time()) > 0:
            await asyncio.wait([*self._tasks, *self._writes], timeout=left)  # a failed write may retry
        last, length = self.lac, self.confirmed_length
        from_state = (LedgerState.IN_RECOVERY,) if self.recovery else (LedgerState.OPEN,)

        def transform(cur: LedgerMetadata) -> LedgerMetadata | None:
            if cur.state == LedgerState.CLOSED:
                if cur.last_entry_id == last:
                    return None
                raise LedgerFencedError("?", "EFENCED", f"ledger {self.ledger_id} was closed by another client at entry {cur.last_entry_id}")
            if cur.state not in from_state:
                raise LedgerFencedError("?", "EFENCED", f"ledger {self.ledger_id} is {cur.state.name}")
            return dataclasses.replace(cur, state=LedgerState.CLOSED, last_entry_id=last, length=length)

        self.metadata, self.version = await self.bk.ledgers.update(
            self.ledger_id, transform, current=(self.metadata, self.version))
        for t in [*self._tasks, *self._writes]:
            t.cancel()  # only writes stuck past the deadline above
        return self.metadata
