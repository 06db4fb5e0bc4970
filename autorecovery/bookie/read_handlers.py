"""The reference bookie's read handlers: ReadEntry (with fencing), ReadEntries, ReadEntryBatches,
ReadLac and GetListOfEntriesOfLedger (upstream ``ReadEntryProcessorV3``, ``ReadLacProcessorV3``,
``GetListOfEntriesOfLedgerProcessorV3``), chunked range reads with one chunk of read-ahead (EDGE).
:class:`ReadHandlers` is a mixin of :class:`~autorecovery.bookie.service.BookieService`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator

import grpc
import structlog

from autorecovery.bookie.admission import Admission
from autorecovery.bookie.limits import MAX_READ_BATCH_BYTES
from autorecovery.bookie.status import BookieStatusError
from autorecovery.bookie.storage import BookieStorage
from autorecovery.bookie.store_reads import StoredEntry
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.rpc.convert import ranges_to_proto, status_code
from autorecovery.rpc.wire import encode_read_batch

log = structlog.get_logger("autorecovery.bookie.service")
_OK = pb.StatusCode.EOK


class ReadHandlers:
    """The read methods of the bookie's servicer (a mixin: the attributes below are set by
    ``BookieService.__init__``)."""

    storage: BookieStorage
    bookie_id: str
    max_range_entries: int
    admission: Admission

    async def ReadEntry(self, request: pb.ReadRequest, context: grpc.aio.ServicerContext) -> pb.ReadResponse:
        """Read one entry, -1 = the highest stored (upstream ReadEntryProcessorV3). With FENCE_LEDGER
        the ledger is durably fenced first (EUA on a wrong master key; an unknown ledger is created
        fenced). Statuses: EOK, ENOLEDGER, ENOENTRY, EUA, EBADREQ, ETOOMANYREQUESTS, EIO; ``lac`` = the
        bookie's LAC."""
        lid, eid = request.ledger_id, request.entry_id
        if not self.admission.try_read():
            return pb.ReadResponse(status=pb.ETOOMANYREQUESTS, ledger_id=lid, entry_id=eid, lac=-1,
                                   message=f"bookie {self.bookie_id}: {self.admission.describe_reads()}")
        try:
            return await self._read_entry(request)
        finally:
            self.admission.release_read()

    async def _read_entry(self, request: pb.ReadRequest) -> pb.ReadResponse:
        lid, eid = request.ledger_id, request.entry_id
        try:
            if eid < -1:
                raise BookieStatusError("EBADREQ", f"invalid entry id {eid}")
            if lid < 0:  # never create (fence) a ledger with a negative id
                raise BookieStatusError("EBADREQ", f"invalid ledger id {lid}")
            if request.flags & pb.FENCE_LEDGER:
                # durable before we answer (upstream: the fence is journaled before the read proceeds)
                await self.storage.fence(lid, request.master_key)
                log.info("ledger fenced", ledger_id=lid)
            entry_id, body, lac = await self.storage.read_entry(lid, eid)
        except BookieStatusError as exc:
            return pb.ReadResponse(
                status=status_code(exc.status), ledger_id=lid, entry_id=eid, lac=exc.lac, message=exc.detail
            )
        except Exception as exc:
            log.exception("read failed", ledger_id=lid, entry_id=eid)
            return pb.ReadResponse(status=pb.EIO, ledger_id=lid, entry_id=eid, lac=-1, message=str(exc))
        return pb.ReadResponse(status=_OK, ledger_id=lid, entry_id=entry_id, body=body, lac=lac)

    async def ReadEntries(
        self, request: pb.ReadRangeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReadResponse]:
        """Stream the range in order; missing ids as ``ENOENTRY``. A request-level failure
        (``ENOLEDGER``, ``EBADREQ``, ``ETOOMANYREQUESTS``, ``EIO``) is sent as one response with that
        status, then the stream ends. The whole stream counts as one read in progress."""
        lid = request.ledger_id
        async with contextlib.aclosing(self._read_chunks(request)) as chunks:
            async for chunk in chunks:
                if isinstance(chunk, pb.ReadResponse):
                    yield chunk
                    continue
                items, lac = chunk
                for it in items:
                    yield _answer(lid, it, lac)

    def _range_problem(self, lid: int, first: int, last: int, E: int, WQ: int, idx: int) -> str | None:
        """What is wrong with a range read's ids or striping (None: nothing), shared by the range reads
        and PullEntries: ``EBADREQ`` with this text."""
        if lid < 0:
            return f"invalid ledger id {lid}"
        if first < 0:
            return f"invalid first entry id {first}"
        if last - first + 1 > self.max_range_entries:
            return f"range [{first}, {last}] has {last - first + 1} ids, more than the limit of {self.max_range_entries}"
        if E < 0 or (E > 0 and not (0 < WQ <= E and 0 <= idx < E)):
            return f"invalid striping ensemble_size={E} write_quorum={WQ} bookie_index={idx}"
        return None

    async def _read_chunks(self, request: pb.ReadRangeRequest
                           ) -> AsyncGenerator[tuple[list[StoredEntry], int] | pb.ReadResponse, None]:
        """Validate and admit a range read, then yield its storage chunks, ``(items, lac)`` (shared by
        ReadEntries and ReadEntryBatches); a refusal or failure is a last ``ReadResponse`` with its
        status."""
        lid, first, last = request.ledger_id, request.first_entry_id, request.last_entry_id
        E, WQ, idx = request.ensemble_size, request.write_quorum, request.bookie_index
        bad = self._range_problem(lid, first, last, E, WQ, idx)
        if bad is not None:
            yield pb.ReadResponse(status=pb.EBADREQ, ledger_id=lid, entry_id=first, lac=-1, message=bad)
            return
        if not self.admission.try_read():
            yield pb.ReadResponse(status=pb.ETOOMANYREQUESTS, ledger_id=lid, entry_id=first, lac=-1,
                                  message=f"bookie {self.bookie_id}: {self.admission.describe_reads()}")
            return
        try:
            async with contextlib.aclosing(self._read_range(lid, first, last, E, WQ, idx)) as chunks:
                async for chunk in chunks:
                    yield chunk
        finally:
            self.admission.release_read()

    async def ReadEntryBatches(
        self, request: pb.ReadRangeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes | list[pb.ReadResponse]]:
        """:meth:`ReadEntries` with many answers per message (feature ``BATCHED_ENTRIES``, issue 13):
        the same responses in the same order, grouped into :class:`ReadBatch` messages of at most
        ``max_batch_bytes`` body bytes (default and cap :data:`MAX_READ_BATCH_BYTES`; an entry larger
        than that travels alone). A batch never waits for a later storage chunk. Yields each message
        already encoded (:func:`~autorecovery.rpc.wire.encode_read_batch`, runs of stored entries: each
        body copied once, no ``ReadResponse`` built) or as the list of its responses (missing entries,
        refusals); :func:`add_service` registers :func:`~autorecovery.rpc.wire.encode_batch`, which
        writes either as a ``ReadBatch``."""
        limit = request.max_batch_bytes
        limit = MAX_READ_BATCH_BYTES if limit <= 0 else min(limit, MAX_READ_BATCH_BYTES)
        lid = request.ledger_id
        async with contextlib.aclosing(self._read_chunks(request)) as chunks:
            async for chunk in chunks:
                if isinstance(chunk, pb.ReadResponse):
                    yield [chunk]
                    continue
                items, lac = chunk
                for batch in _batches(items, limit):
                    if all(it.body is not None for it in batch):
                        yield encode_read_batch(lid, [(it.entry_id, it.body) for it in batch], lac)
                    else:
                        yield [_answer(lid, it, lac) for it in batch]

    async def _read_range(self, lid: int, first: int, last: int, E: int, WQ: int, idx: int
                          ) -> AsyncGenerator[tuple[list[StoredEntry], int] | pb.ReadResponse, None]:
        """The chunks of a validated, admitted range read, ``(items, lac)`` per storage chunk (at most
        256 entries / 4 MiB); a storage failure is a last ``ReadResponse`` with its status.

        The next chunk is read while the current one is being sent (one chunk of read-ahead per
        stream, so disk and network overlap; memory per stream stays at two chunks)."""

        def read(start: int) -> asyncio.Future:
            return asyncio.ensure_future(self.storage.read_range_chunk(
                lid, start, last, ensemble_size=E, write_quorum=WQ, bookie_index=idx))

        start = first
        pending: asyncio.Future | None = read(start) if start <= last else None
        try:
            while pending is not None:
                try:
                    items, nxt, lac = await pending
                except BookieStatusError as exc:
                    pending = None
                    yield pb.ReadResponse(
                        status=status_code(exc.status), ledger_id=lid, entry_id=start, lac=-1, message=exc.detail
                    )
                    return
                start = nxt
                pending = read(start) if start <= last else None
                yield items, lac
        finally:
            if pending is not None:  # the reader went away: drop the read-ahead
                pending.cancel()
                try:
                    await pending
                except BaseException as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.debug("best-effort step failed", step="read", error=repr(cleanup_exc))

    async def ReadLac(self, request: pb.ReadLacRequest, context: grpc.aio.ServicerContext) -> pb.ReadLacResponse:
        """The ledger's LAC on this bookie: the largest piggy-backed LAC of its stored entries
        (upstream ReadLacProcessorV3). Statuses: EOK, ENOLEDGER, EIO."""
        try:
            lac = await self.storage.read_lac(request.ledger_id)
        except BookieStatusError as exc:
            return pb.ReadLacResponse(
                status=status_code(exc.status), ledger_id=request.ledger_id, lac=-1, message=exc.detail
            )
        return pb.ReadLacResponse(status=_OK, ledger_id=request.ledger_id, lac=lac)

    async def GetListOfEntriesOfLedger(
        self, request: pb.GetListOfEntriesOfLedgerRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetListOfEntriesOfLedgerResponse:
        """Stored entry ids as sorted, disjoint, inclusive ranges (upstream
        GetListOfEntriesOfLedgerProcessorV3 sends a bitmap-like "availability" instead).
        Statuses: EOK, ENOLEDGER, EIO."""
        try:
            ranges = await self.storage.list_entries(request.ledger_id)
        except BookieStatusError as exc:
            return pb.GetListOfEntriesOfLedgerResponse(status=status_code(exc.status), ledger_id=request.ledger_id,
                                                       message=exc.detail)
        return pb.GetListOfEntriesOfLedgerResponse(
            status=_OK, ledger_id=request.ledger_id, ranges=ranges_to_proto(ranges)
        )


def _answer(lid: int, it: StoredEntry, lac: int) -> pb.ReadResponse:
    """The ``ReadResponse`` of one item of a range read (``ENOENTRY`` when the bookie lacks it)."""
    if it.body is not None:  # protobuf takes bytes only (a stored body is a view of the run read)
        body = it.body if isinstance(it.body, bytes) else bytes(it.body)
        return pb.ReadResponse(status=_OK, ledger_id=lid, entry_id=it.entry_id, body=body, lac=lac)
    return pb.ReadResponse(status=pb.ENOENTRY, ledger_id=lid, entry_id=it.entry_id, lac=lac,
                           message=f"ledger {lid} entry {it.entry_id} not found")


def _batches(items: list[StoredEntry], limit: int) -> list[list[StoredEntry]]:
    """``items`` cut in order into batches of at most ``limit`` body bytes (an entry larger than that
    alone; a missing entry counts 0 bytes)."""
    out: list[list[StoredEntry]] = []
    batch: list[StoredEntry] = []
    size = 0
    for it in items:
        n = len(it.body) if it.body is not None else 0
        if batch and size + n > limit:
            out.append(batch)
            batch, size = [], 0
        batch.append(it)
        size += n
    if batch:
        out.append(batch)
    return out
