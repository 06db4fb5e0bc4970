"""The reference bookie's add handlers: AddEntry, AddEntries, AddEntryBatches and AddStream, their
checks (upstream ``WriteEntryProcessorV3``), per-stream windows, admission and idle timeout (EDGE;
see ``bookie.service`` for the limits and statuses). :class:`AddHandlers` is a mixin of
:class:`~autorecovery.bookie.service.BookieService`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import grpc
import structlog

from autorecovery.bookie.admission import Admission
from autorecovery.bookie.limits import STREAM_WINDOW_ENTRIES
from autorecovery.bookie.status import SKIPPED, BookieStatusError
from autorecovery.bookie.storage import BookieStorage
from autorecovery.bookie.request_fields import add_fields_problem
from autorecovery.ledger.digest import METADATA_LENGTH, peek_ids
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.rpc.convert import status_code

log = structlog.get_logger("autorecovery.bookie.service")
_OK = pb.StatusCode.EOK


class AddHandlers:
    """The add methods of the bookie's servicer (a mixin: the attributes below are set by
    ``BookieService.__init__``)."""

    storage: BookieStorage
    bookie_id: str
    is_readonly: Callable[[], bool]
    max_entry_size: int
    stream_window_bytes: int
    admission: Admission
    stream_idle_timeout_s: float
    _closing: bool
    _intakes: set[asyncio.Task]

    def _check_add(self, req: pb.AddRequest, body: bytes | None = None) -> int:
        """Validation before the store sees an add (upstream: read-only first, then the frame; then the
        fields, :func:`bookie.request_fields.add_fields_problem`). ``body``: ``req.body`` if already taken
        out (every access to a message's ``body`` copies it). Returns the entry's piggy-backed LAC.

        Raises:
            BookieStatusError: ``EREADONLY``, or ``EBADREQ`` naming the ledger, entry and field.
        """
        return self._check_fields(req.ledger_id, req.entry_id, req.flags, req.master_key,
                                  req.body if body is None else body)

    def _check_fields(self, ledger_id: int, entry_id: int, flags: int, master_key: bytes, body: bytes) -> int:
        """:meth:`_check_add` on an add's fields, already taken out of its message (each once)."""
        if not self.is_readonly():
            bad = add_fields_problem(ledger_id, entry_id, flags, master_key)
            if bad is not None:
                raise BookieStatusError("EBADREQ", f"ledger {ledger_id} entry {entry_id}: {bad}")
        return self._check_entry(ledger_id, entry_id, body)

    def _check_entry(self, ledger_id: int, entry_id: int, body: bytes) -> int:
        """The checks of any entry this bookie is asked to store (read-only, size, ids, header; the add
        paths and PullEntries). Returns the entry's piggy-backed LAC, read from its header.

        Raises:
            BookieStatusError: ``EREADONLY``, or ``EBADREQ`` naming the ledger, entry and sizes or ids.
        """
        if self.is_readonly():
            raise BookieStatusError("EREADONLY", f"bookie {self.bookie_id} is read-only")
        n = len(body)
        if n > self.max_entry_size:
            raise BookieStatusError(
                "EBADREQ",
                f"ledger {ledger_id} entry {entry_id}: entry of {n} bytes exceeds the bookie's "
                f"max entry size of {self.max_entry_size} bytes",
            )
        if ledger_id < 0 or entry_id < 0:
            raise BookieStatusError("EBADREQ", f"invalid ledger id {ledger_id} / entry id {entry_id}")
        if n < METADATA_LENGTH:  # the ids, LAC and length every digest type starts with (DUMMY: nothing else)
            raise BookieStatusError(
                "EBADREQ",
                f"ledger {ledger_id} entry {entry_id}: body of {n} bytes is shorter than the "
                f"{METADATA_LENGTH}-byte entry header",
            )
        lid, eid, lac = peek_ids(body)
        if lid != ledger_id or eid != entry_id:
            raise BookieStatusError(
                "EBADREQ",
                f"request for ledger {ledger_id} entry {entry_id} carries a body for ledger {lid} entry {eid}",
            )
        return lac

    def _idle_error(self, written: int | None = None) -> BookieStatusError:
        """The answer to an add stream idle for ``stream_idle_timeout_s``."""
        done = f" ({written} entries written)" if written is not None else ""
        return BookieStatusError("EBADREQ", f"bookie {self.bookie_id}: no add for {self.stream_idle_timeout_s:g} s on "
                                            f"this stream; closing it{done}")

    def _submit_adds(self, ledger_id: int, master_key: bytes, entries: list[tuple[int, bytes]], *,
                     recovery: bool, stream, nbytes: int, lacs: list[int] | None = None) -> asyncio.Future:
        """Queue admitted adds of one ledger (``(entry id, body)``, ``nbytes`` body bytes in all; ``lacs``:
        their piggy-backed LACs when already read by the checks) as one storage operation on
        ``stream`` (:meth:`BookieStorage.submit_adds`); their admission is released if queueing fails
        (the exception is re-raised)."""
        try:
            return self.storage.submit_adds(ledger_id, master_key, entries, recovery=recovery, stream=stream,
                                            lacs=lacs, nbytes=nbytes)
        except BaseException:
            self.admission.release_add(nbytes, len(entries))
            raise

    async def AddEntry(self, request: pb.AddRequest, context: grpc.aio.ServicerContext) -> pb.AddResponse:
        """Store one entry; answered after its transaction is durable (upstream WriteEntryProcessorV3).
        Statuses: EOK, EREADONLY, EBADREQ (size, short body, ids differ), EUA, EFENCED (unless
        RECOVERY_ADD), ETOOMANYREQUESTS (too many adds in progress), EIO."""
        body = request.body  # every access copies the bytes out of the message: one copy
        lid, eid, n = request.ledger_id, request.entry_id, len(body)
        if not self.admission.try_add(n):
            return pb.AddResponse(status=pb.ETOOMANYREQUESTS, ledger_id=lid, entry_id=eid,
                                  message=f"bookie {self.bookie_id}: {self.admission.describe_adds()}")
        try:
            self._check_add(request, body)
            await self.storage.add_entry(lid, eid, request.master_key, body,
                                         recovery=bool(request.flags & pb.RECOVERY_ADD))
        except BookieStatusError as exc:
            return pb.AddResponse(status=status_code(exc.status), ledger_id=lid, entry_id=eid, message=exc.detail)
        except Exception as exc:  # broad: answered as EIO, logged
            log.exception("add failed", ledger_id=lid, entry_id=eid)
            return pb.AddResponse(status=pb.EIO, ledger_id=lid, entry_id=eid, message=str(exc))
        finally:
            self.admission.release_add(n)
        return pb.AddResponse(status=_OK, ledger_id=lid, entry_id=eid)

    async def AddEntries(
        self, request_iterator: AsyncIterator[pb.AddRequest], context: grpc.aio.ServicerContext
    ) -> pb.AddEntriesResponse:
        """Apply a stream of adds in order; stop at the first failure (see bookie.proto).

        Adds are pipelined into the group-commit writer with a bounded window; the answer is sent
        only after every written entry is durable. Each entry is admitted by :attr:`admission` before
        it is taken (waiting for room, then ``ETOOMANYREQUESTS``); a stream idle for
        ``stream_idle_timeout_s`` ends with ``EBADREQ``.
        """
        return await self._apply_adds(request_iterator.__aiter__())

    async def AddEntryBatches(
        self, request_iterator: AsyncIterator[pb.AddBatch], context: grpc.aio.ServicerContext
    ) -> pb.AddEntriesResponse:
        """:meth:`AddEntries` with many adds per message (feature ``BATCHED_ENTRIES``, issue 13): the
        entries of every batch are applied in order with exactly the same checks, window, admission,
        idle timeout and answer as on an AddEntries stream; only the framing differs."""

        async def entries() -> AsyncGenerator[pb.AddRequest, None]:
            async for batch in request_iterator:
                for req in batch.entries:
                    yield req

        gen = entries()
        try:
            return await self._apply_adds(gen)
        finally:
            await gen.aclose()

    async def AddStream(
        self, request_iterator: AsyncIterator[pb.AddBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.AddAck]:
        """A long-lived add stream (feature ``ADD_STREAM``, issue 13): batches of adds applied in order
        with the same checks, admission and window as :meth:`AddEntries`, acknowledged *as they become
        durable* by :class:`AddAck` messages carrying the count of the stream's first entries that are
        durable (one ack may cover many entries). A message's entries go to storage in runs: each run of
        up to :data:`STREAM_WINDOW_ENTRIES` consecutive entries of one ledger, master key and flags is one
        storage operation, stored and acknowledged as a whole. The first failure is answered by a last ack with its
        status, after every entry submitted before it has settled; the stream then ends. A stream
        with no add for ``stream_idle_timeout_s`` ends the same way (``EBADREQ``, nothing pending)."""
        stream = self.storage.new_stream()
        # one storage operation per run of a message's entries: (entry ids, future, body bytes)
        inflight: deque[tuple[list[int], asyncio.Future, int]] = deque()
        arrived = asyncio.Event()
        failure: list[tuple[int, BookieStatusError]] = []
        ended = [False]
        pending = [0, 0]  # body bytes, entries in ``inflight``
        room = asyncio.Event()  # set whenever entries settle (the intake waits on it when the window is full)

        async def submit_run(key: tuple[int, bytes, bool], run: list[tuple[int, bytes]], lacs: list[int],
                             n: int) -> bool:
            """Queue ``run`` (checked entries of one ledger, key and flags, in stream order; their LACs,
            ``n`` body bytes) as one storage operation once the window and the bookie's admission have
            room; False after recording why not."""
            lid, master_key, recovery = key
            while inflight and (pending[0] + n > self.stream_window_bytes
                                or pending[1] + len(run) > STREAM_WINDOW_ENTRIES):
                room.clear()
                await room.wait()  # the acker settles the oldest runs
            if not await self.admission.wait_add(n, len(run)):
                failure.append((run[0][0], BookieStatusError(
                    "ETOOMANYREQUESTS", f"bookie {self.bookie_id}: {self.admission.describe_adds()}")))
                return False
            fut = self._submit_adds(lid, master_key, run, recovery=recovery, stream=stream, nbytes=n, lacs=lacs)
            inflight.append(([eid for eid, _body in run], fut, n))
            pending[0] += n
            pending[1] += len(run)
            arrived.set()
            return True

        async def intake() -> None:
            requests = request_iterator.__aiter__()
            try:
                while not self._closing:
                    try:
                        async with asyncio.timeout(self.stream_idle_timeout_s):
                            batch = await requests.__anext__()
                    except StopAsyncIteration:
                        return
                    except TimeoutError:
                        failure.append((-1, self._idle_error()))
                        return
                    except BookieStatusError as exc:  # refused by the gate: no receive slot, unparsable
                        failure.append((-1, exc))
                        return
                    if failure or stream.failed:
                        return
                    # consecutive entries of one ledger, master key and flags go to storage as one
                    # operation (one admission, hand-off and future per run, not per entry)
                    # each field is taken out of its message once (``body`` copies on every access)
                    run: list[tuple[int, bytes]] = []
                    lacs: list[int] = []
                    nbytes = 0
                    key: tuple[int, bytes, bool] = (-1, b"", False)  # the run's; set with its first entry
                    refused: tuple[int, BookieStatusError] | None = None
                    for req in batch.entries:
                        lid, eid, flags, master_key, body = (req.ledger_id, req.entry_id, req.flags,
                                                             req.master_key, req.body)
                        try:
                            lac = self._check_fields(lid, eid, flags, master_key, body)
                        except BookieStatusError as exc:
                            refused = (eid, exc)  # the entries before it are still stored
                            break
                        k = (lid, master_key, bool(flags & pb.RECOVERY_ADD))
                        if run and (k != key or len(run) >= STREAM_WINDOW_ENTRIES):
                            if not await submit_run(key, run, lacs, nbytes):
                                return
                            run, lacs, nbytes = [], [], 0
                        key = k
                        run.append((eid, body))
                        lacs.append(lac)
                        nbytes += len(body)
                    if run and not await submit_run(key, run, lacs, nbytes):
                        return
                    if refused is not None:
                        failure.append(refused)
                        return
            except asyncio.CancelledError:
                if not self._closing:
                    raise  # the call itself is being cancelled
                # the bookie is shutting down: take nothing more; what was taken is settled and acked
            finally:
                ended[0] = True
                arrived.set()

        written = 0
        written_bytes = 0
        task = asyncio.ensure_future(intake())
        self._intakes.add(task)
        task.add_done_callback(self._intakes.discard)
        try:
            while True:
                if not inflight:
                    if ended[0] or failure:  # after a failure, do not wait for the client's next batch
                        break
                    arrived.clear()
                    await arrived.wait()
                    continue
                progressed = False
                while inflight and (not progressed or inflight[0][1].done()):
                    eids, fut, n = inflight[0]
                    res = await fut
                    inflight.popleft()
                    pending[0] -= n
                    pending[1] -= len(eids)
                    self.admission.release_add(n, len(eids))
                    progressed = True
                    if res is None:
                        written += len(eids)
                        written_bytes += n
                    elif isinstance(res, BookieStatusError) and res is not SKIPPED and not failure:
                        failure.append((eids[0], res))
                room.set()
                if not failure:
                    yield pb.AddAck(status=_OK, entries_written=written, bytes_written=written_bytes,
                                    failed_entry_id=-1)
            if not failure or task.done():
                await task  # re-raises what broke the intake (after a failure it is cancelled below)
        except Exception as exc:  # broad: answered as EIO after pending writes settle
            log.exception("AddStream failed")
            if not failure:
                failure.append((-1, BookieStatusError("EIO", f"bookie {self.bookie_id}: {exc}")))
        finally:
            if not task.done():
                task.cancel()
                try:
                    await task
                except BaseException as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.debug("best-effort step failed", step="intake", error=repr(cleanup_exc))
            while inflight:  # never answer (or leave) before submitted writes settle
                eids, fut, n = inflight.popleft()
                try:
                    res = await fut
                    if res is None:
                        written += len(eids)
                        written_bytes += n
                except BaseException as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.debug("best-effort step failed", step="intake", error=repr(cleanup_exc))
                self.admission.release_add(n, len(eids))
        if failure:
            eid, err = failure[0]
            yield pb.AddAck(status=status_code(err.status), entries_written=written, bytes_written=written_bytes,
                            failed_entry_id=eid, message=err.detail)

    async def _apply_adds(self, requests: AsyncIterator[pb.AddRequest]) -> pb.AddEntriesResponse:
        stream = self.storage.new_stream()
        # (entry id, future, body bytes): not the request, whose message would hold a copy of the body
        inflight: deque[tuple[int, asyncio.Future, int]] = deque()
        inflight_bytes = 0
        written = 0
        written_bytes = 0
        failure: tuple[int, BookieStatusError] | None = None

        def settle(entry_id: int, n: int, res: object) -> None:
            nonlocal written, written_bytes, failure
            self.admission.release_add(n)
            if res is None:
                written += 1
                written_bytes += n
            elif failure is None and isinstance(res, BookieStatusError) and res is not SKIPPED:
                failure = (entry_id, res)

        try:
            while True:
                try:
                    # asyncio.timeout, not wait_for: no task per message on the hot path
                    async with asyncio.timeout(self.stream_idle_timeout_s):
                        req = await requests.__anext__()
                except StopAsyncIteration:
                    break
                except BookieStatusError as exc:  # refused by the gate: no receive slot, unparsable
                    if failure is None:
                        failure = (-1, exc)
                    break
                except TimeoutError:
                    if failure is None:
                        failure = (-1, self._idle_error(written))
                    break
                if failure is not None or stream.failed:
                    break
                eid, body = req.entry_id, req.body  # each access to ``body`` copies it: once
                n = len(body)
                try:
                    lac = self._check_add(req, body)
                except BookieStatusError as exc:
                    failure = (eid, exc)
                    break
                if not self.admission.add_fits(n):
                    # our own unsettled entries may be what fills the budget: settle them first
                    while inflight:
                        old, ofut, on = inflight.popleft()
                        inflight_bytes -= on
                        settle(old, on, await ofut)
                    if failure is not None:
                        break
                if not await self.admission.wait_add(n):
                    failure = (eid, BookieStatusError(
                        "ETOOMANYREQUESTS", f"bookie {self.bookie_id}: {self.admission.describe_adds()}"))
                    break
                fut = self._submit_adds(req.ledger_id, req.master_key, [(eid, body)], lacs=[lac],
                                        recovery=bool(req.flags & pb.RECOVERY_ADD), stream=stream, nbytes=n)
                inflight.append((eid, fut, n))
                inflight_bytes += n
                while inflight and (inflight_bytes > self.stream_window_bytes
                                    or len(inflight) > STREAM_WINDOW_ENTRIES):
                    old, ofut, on = inflight.popleft()
                    inflight_bytes -= on
                    settle(old, on, await ofut)
            # drain: everything submitted must be durable (or failed) before answering
            while inflight:
                old, ofut, on = inflight.popleft()
                settle(old, on, await ofut)
        except Exception as exc:
            log.exception("AddEntries failed")
            while inflight:  # never answer before submitted writes settle
                old, ofut, on = inflight.popleft()
                settle(old, on, await ofut)
            return pb.AddEntriesResponse(
                status=pb.EIO,
                entries_written=written,
                bytes_written=written_bytes,
                failed_entry_id=failure[0] if failure else -1,
                message=f"bookie {self.bookie_id}: {exc}",
            )
        if failure is None:
            return pb.AddEntriesResponse(
                status=_OK, entries_written=written, bytes_written=written_bytes, failed_entry_id=-1
            )
        eid, err = failure
        return pb.AddEntriesResponse(
            status=status_code(err.status),
            entries_written=written,
            bytes_written=written_bytes,
            failed_entry_id=eid,
            message=err.detail,
        )
