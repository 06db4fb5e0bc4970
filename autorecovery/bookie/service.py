"""The reference bookie's gRPC service (grpc.aio) over :class:`BookieStorage` (EDGE).

Request semantics follow upstream's v3 request processors (``WriteEntryProcessorV3``,
``ReadEntryProcessorV3``, ``ReadLacProcessorV3``, ``GetBookieInfoProcessorV3``,
``GetListOfEntriesOfLedgerProcessorV3``); status codes keep upstream's numbers (see bookie.proto).

Limits (all in bytes unless said otherwise):

* ``max_entry_size`` (default 5 MiB, ``--max-entry-size``, upstream ``nettyMaxFrameSizeBytes`` is the
  closest knob): an add whose body is larger is answered ``EBADREQ`` with a message naming both sizes.
* gRPC's receive limit is ``max_entry_size + 1 MiB`` (:func:`grpc_server_options`), so bodies up to
  1 MiB over the limit still reach the check above and get a readable answer; larger messages are
  refused by gRPC itself with ``RESOURCE_EXHAUSTED`` (the client maps that to ``EBADREQ`` too).
* gRPC's send limit is ``max(max_entry_size + 1 MiB, 64 MiB)`` so GetListOfEntriesOfLedger answers for
  very fragmented ledgers still fit.
* ReadEntries ranges are capped at ``max_range_entries`` ids (default 1,000,000) → ``EBADREQ``.
* Batched framing (feature ``BATCHED_ENTRIES``, reported by GetBookieInfo): ``AddEntryBatches`` and
  ``ReadEntryBatches`` carry many entries per gRPC message (read batches at most 1 MiB of bodies) with
  the same semantics, limits and answers as ``AddEntries`` / ``ReadEntries``. The per-message cost of
  gRPC in Python (a few tens of µs per message on each side) is paid once per batch instead of once per
  entry, which is what made small entries slow (issue 13).
* AddEntries keeps at most ``stream_window_bytes`` of bodies (and 256 entries) in flight per stream;
  ReadEntries reads SQLite in chunks of at most 256 entries / 4 MiB. Memory per stream is bounded.
* Across all requests, adds and reads in progress are bounded by :mod:`autorecovery.bookie.admission`
  (upstream ``maxAddsInProgressLimit`` / ``maxReadsInProgressLimit``, plus a byte budget): over the
  limit a request is answered ``ETOOMANYREQUESTS`` (an AddEntries stream first waits for room).
* An AddEntries stream that sends nothing for ``stream_idle_timeout_s`` is answered (``EBADREQ``,
  naming the idle time) and closed, so idle streams do not pile up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import grpc
import structlog

from autorecovery.bookie.admission import Admission, AdmissionLimits
from autorecovery.bookie.disk import DiskProbe
from autorecovery.bookie.gate import Gate
from autorecovery.bookie.validate import add_problem
from autorecovery.bookie.storage import SKIPPED, BookieStatusError, BookieStorage
from autorecovery.errors import BookieError, DigestMismatchError
from autorecovery.ledger.digest import METADATA_LENGTH, EntryDigest, digest_for, peek_ids
from autorecovery.ledger.metadata import DigestType
from autorecovery.ledger.striping import index_stores
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.proto import bookie_pb2_grpc as pb_grpc
from autorecovery.rpc.convert import ranges_to_proto, status_code
from autorecovery.rpc.tls import ServerTls
from autorecovery.rpc.wire import add_bookie_servicer

if TYPE_CHECKING:
    from autorecovery.rpc.bookie_client import GrpcBookieClient

log = structlog.get_logger("autorecovery.bookie.service")

DEFAULT_MAX_ENTRY_SIZE = 5 * 1024 * 1024
GRPC_HEADROOM = 1024 * 1024
MAX_RANGE_ENTRIES = 1_000_000
#: Default and largest body bytes per ReadBatch message (ReadEntryBatches).
MAX_READ_BATCH_BYTES = 1024 * 1024
#: The BookieFeature bits every bookie serves (reported by GetBookieInfo); ``PULL_ENTRIES`` and
#: ``PULL_DIGEST_TYPES`` are added when the bookie has a client to reach its peers with (see
#: ``BookieService(peers=...)``).
FEATURES = pb.BATCHED_ENTRIES | pb.ADD_STREAM
#: A PullEntries call reports what became durable at least every this many body bytes.
PULL_REPORT_BYTES = 4 * 1024 * 1024
#: most entries an add stream (AddEntries, AddStream, PullEntries) keeps in flight to storage, and most
#: entries in one storage operation of an AddStream run
STREAM_WINDOW_ENTRIES = 256
_OK = pb.StatusCode.EOK


#: HTTP/2 receive window of a stream whose handler has not asked for its next message, bytes (fixed:
#: BDP probing, which grows windows to the connection's bandwidth-delay product, is off).
STREAM_LOOKAHEAD_BYTES = 64 * 1024
#: Default most client connections a bookie accepts at once (``--max-connections``).
DEFAULT_MAX_CONNECTIONS = 1024


def grpc_server_options(max_entry_size: int, max_concurrent_streams: int = 1000,
                        max_connections: int = DEFAULT_MAX_CONNECTIONS) -> list[tuple[str, int]]:
    """gRPC server channel options for a bookie whose entries may be ``max_entry_size`` bytes.

    ``max_concurrent_streams`` bounds the streams one client connection may have open (HTTP/2; more
    wait in the client); ``max_connections`` the connections open at once (more are closed at accept);
    connections idle for 10 minutes are closed (clients reconnect on demand). Windows are fixed at
    :data:`STREAM_LOOKAHEAD_BYTES` per stream (no BDP probing): a stream's data beyond that waits in
    its sender until the handler reads (see ``bookie.gate``).
    """
    return [
        ("grpc.max_receive_message_length", max_entry_size + GRPC_HEADROOM),
        ("grpc.max_send_message_length", max(max_entry_size + GRPC_HEADROOM, 64 * 1024 * 1024)),
        ("grpc.max_concurrent_streams", max_concurrent_streams),
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.max_connection_idle_ms", 600_000),
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.lookahead_bytes", STREAM_LOOKAHEAD_BYTES),
        # Fail loudly when the port is taken instead of sharing it with another process.
        ("grpc.so_reuseport", 0),
    ]


class BookieService(pb_grpc.BookieServicer):
    """gRPC servicer of one bookie.

    Args:
        storage: the opened entry store.
        bookie_id: ``host:port``, used in messages.
        disk: disk probe for GetBookieInfo.
        is_readonly: returns True while the bookie is read-only (adds are refused with ``EREADONLY``).
        max_entry_size: largest accepted entry body in bytes.
        max_range_entries: largest ReadEntries range in entry ids.
        stream_window_bytes: AddEntries bytes in flight per stream before the handler waits for commits.
        limits: adds/reads in progress across all requests (``ETOOMANYREQUESTS`` beyond).
        stream_idle_timeout_s: an AddEntries stream with no message for this long is answered and
            closed, s.
        peers: a :class:`~autorecovery.rpc.bookie_client.GrpcBookieClient` this bookie reads other bookies
            with, to serve PullEntries (feature ``PULL_ENTRIES``); None = the bookie does not pull
            (the worker then copies through itself). The service does not close it.
        peer_check: ``async (bookie id) -> bool``, whether a PullEntries source is a bookie of the cluster
            (the server checks its registration in ZooKeeper), so a caller cannot point this bookie at
            an arbitrary address; None = no check (tests).
    """

    def __init__(
        self,
        storage: BookieStorage,
        bookie_id: str,
        *,
        disk: DiskProbe,
        is_readonly: Callable[[], bool] = lambda: False,
        max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE,
        max_range_entries: int = MAX_RANGE_ENTRIES,
        stream_window_bytes: int = 16 * 1024 * 1024,
        limits: AdmissionLimits | None = None,
        stream_idle_timeout_s: float = 120.0,
        peers: GrpcBookieClient | None = None,
        peer_check: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self.storage = storage
        self.bookie_id = bookie_id
        self.disk = disk
        self.is_readonly = is_readonly
        self.max_entry_size = max_entry_size
        self.max_range_entries = max_range_entries
        self.stream_window_bytes = max(stream_window_bytes, max_entry_size)
        self.admission = Admission(limits)
        self.stream_idle_timeout_s = stream_idle_timeout_s
        self._closing = False
        self._intakes: set[asyncio.Task] = set()
        self.peers = peers
        self.peer_check = peer_check
        self.features = FEATURES | (pb.PULL_ENTRIES | pb.PULL_DIGEST_TYPES if peers is not None else 0)

    def begin_shutdown(self) -> None:
        """Stop reading every open AddStream (call before stopping the gRPC server): each settles and
        acknowledges what it took, then ends, so a long-lived stream left open by a client does not hold
        the server's shutdown grace period. New AddStreams end at once."""
        self._closing = True
        for t in list(self._intakes):
            t.cancel()

    # -- adds ----------------------------------------------------------------------------------
    def _check_add(self, req: pb.AddRequest, body: bytes | None = None) -> None:
        """Validation before the store sees an add (upstream: read-only first, then the frame; then the
        fields, :func:`bookie.validate.add_problem`). ``body``: ``req.body`` if already taken out."""
        if not self.is_readonly():
            bad = add_problem(req)
            if bad is not None:
                raise BookieStatusError("EBADREQ", f"ledger {req.ledger_id} entry {req.entry_id}: {bad}")
        self._check_entry(req.ledger_id, req.entry_id, req.body if body is None else body)

    def _check_entry(self, ledger_id: int, entry_id: int, body: bytes) -> None:
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
        lid, eid, _lac = peek_ids(body)
        if lid != ledger_id or eid != entry_id:
            raise BookieStatusError(
                "EBADREQ",
                f"request for ledger {ledger_id} entry {entry_id} carries a body for ledger {lid} entry {eid}",
            )

    def _idle_error(self, written: int | None = None) -> BookieStatusError:
        """The answer to an add stream idle for ``stream_idle_timeout_s``."""
        done = f" ({written} entries written)" if written is not None else ""
        return BookieStatusError("EBADREQ", f"bookie {self.bookie_id}: no add for {self.stream_idle_timeout_s:g} s on "
                                            f"this stream; closing it{done}")

    def _submit_adds(self, ledger_id: int, master_key: bytes, entries: list[tuple[int, bytes]], *,
                     recovery: bool, stream, nbytes: int) -> asyncio.Future:
        """Queue admitted adds of one ledger (``(entry id, body)``, ``nbytes`` body bytes in all) as one
        storage operation on ``stream`` (:meth:`BookieStorage.submit_adds`); their admission is released
        if queueing fails (the exception is re-raised)."""
        try:
            return self.storage.submit_adds(ledger_id, master_key, entries, recovery=recovery, stream=stream)
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
        except Exception as exc:  # noqa: BLE001 - answered as EIO, logged
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

        async def entries() -> AsyncIterator[pb.AddRequest]:
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

        async def submit_run(key: tuple[int, bytes, bool], run: list[tuple[int, bytes]]) -> bool:
            """Queue ``run`` (checked entries of one ledger, key and flags, in stream order) as one storage
            operation once the window and the bookie's admission have room; False after recording why not."""
            lid, master_key, recovery = key
            n = sum(len(body) for _eid, body in run)
            while inflight and (pending[0] + n > self.stream_window_bytes
                                or pending[1] + len(run) > STREAM_WINDOW_ENTRIES):
                room.clear()
                await room.wait()  # the acker settles the oldest runs
            if not await self.admission.wait_add(n, len(run)):
                failure.append((run[0][0], BookieStatusError(
                    "ETOOMANYREQUESTS", f"bookie {self.bookie_id}: {self.admission.describe_adds()}")))
                return False
            fut = self._submit_adds(lid, master_key, run, recovery=recovery, stream=stream, nbytes=n)
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
                    run: list[tuple[int, bytes]] = []
                    key: tuple[int, bytes, bool] = (-1, b"", False)  # the run's; set with its first entry
                    refused: tuple[int, BookieStatusError] | None = None
                    for req in batch.entries:
                        try:
                            self._check_add(req)
                        except BookieStatusError as exc:
                            refused = (req.entry_id, exc)  # the entries before it are still stored
                            break
                        k = (req.ledger_id, req.master_key, bool(req.flags & pb.RECOVERY_ADD))
                        if run and (k != key or len(run) >= STREAM_WINDOW_ENTRIES):
                            if not await submit_run(key, run):
                                return
                            run = []
                        key = k
                        run.append((req.entry_id, req.body))
                    if run and not await submit_run(key, run):
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
        except Exception as exc:  # noqa: BLE001 - answered as EIO after pending writes settle
            log.exception("AddStream failed")
            if not failure:
                failure.append((-1, BookieStatusError("EIO", f"bookie {self.bookie_id}: {exc}")))
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            while inflight:  # never answer (or leave) before submitted writes settle
                eids, fut, n = inflight.popleft()
                with contextlib.suppress(BaseException):
                    res = await fut
                    if res is None:
                        written += len(eids)
                        written_bytes += n
                self.admission.release_add(n, len(eids))
        if failure:
            eid, err = failure[0]
            yield pb.AddAck(status=status_code(err.status), entries_written=written, bytes_written=written_bytes,
                            failed_entry_id=eid, message=err.detail)

    async def _apply_adds(self, requests: AsyncIterator[pb.AddRequest]) -> pb.AddEntriesResponse:
        stream = self.storage.new_stream()
        inflight: deque[tuple[pb.AddRequest, asyncio.Future, int]] = deque()
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
                try:
                    self._check_add(req)
                except BookieStatusError as exc:
                    failure = (req.entry_id, exc)
                    break
                if not self.admission.add_fits(len(req.body)):
                    # our own unsettled entries may be what fills the budget: settle them first
                    while inflight:
                        old, ofut, on = inflight.popleft()
                        inflight_bytes -= on
                        settle(old.entry_id, on, await ofut)
                    if failure is not None:
                        break
                if not await self.admission.wait_add(len(req.body)):
                    failure = (req.entry_id, BookieStatusError(
                        "ETOOMANYREQUESTS", f"bookie {self.bookie_id}: {self.admission.describe_adds()}"))
                    break
                n = len(req.body)
                fut = self._submit_adds(req.ledger_id, req.master_key, [(req.entry_id, req.body)],
                                        recovery=bool(req.flags & pb.RECOVERY_ADD), stream=stream, nbytes=n)
                inflight.append((req, fut, n))
                inflight_bytes += n
                while inflight and (inflight_bytes > self.stream_window_bytes
                                    or len(inflight) > STREAM_WINDOW_ENTRIES):
                    old, ofut, on = inflight.popleft()
                    inflight_bytes -= on
                    settle(old.entry_id, on, await ofut)
            # drain: everything submitted must be durable (or failed) before answering
            while inflight:
                old, ofut, on = inflight.popleft()
                settle(old.entry_id, on, await ofut)
        except Exception as exc:  # noqa: BLE001
            log.exception("AddEntries failed")
            while inflight:  # never answer before submitted writes settle
                old, ofut, on = inflight.popleft()
                settle(old.entry_id, on, await ofut)
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

    # -- reads ---------------------------------------------------------------------------------
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
        except Exception as exc:  # noqa: BLE001
            log.exception("read failed", ledger_id=lid, entry_id=eid)
            return pb.ReadResponse(status=pb.EIO, ledger_id=lid, entry_id=eid, lac=-1, message=str(exc))
        return pb.ReadResponse(status=_OK, ledger_id=lid, entry_id=entry_id, body=body, lac=lac)

    async def ReadEntries(
        self, request: pb.ReadRangeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReadResponse]:
        """Stream the range in order; missing ids as ``ENOENTRY``. A request-level failure
        (``ENOLEDGER``, ``EBADREQ``, ``ETOOMANYREQUESTS``, ``EIO``) is sent as one response with that
        status, then the stream ends. The whole stream counts as one read in progress."""
        async with contextlib.aclosing(self._read_chunks(request)) as chunks:
            async for chunk in chunks:
                for resp in chunk:
                    yield resp

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

    async def _read_chunks(self, request: pb.ReadRangeRequest) -> AsyncIterator[list[pb.ReadResponse]]:
        """Validate and admit a range read, then yield its answers chunk by chunk (shared by
        ReadEntries and ReadEntryBatches)."""
        lid, first, last = request.ledger_id, request.first_entry_id, request.last_entry_id
        E, WQ, idx = request.ensemble_size, request.write_quorum, request.bookie_index
        bad = self._range_problem(lid, first, last, E, WQ, idx)
        if bad is not None:
            yield [pb.ReadResponse(status=pb.EBADREQ, ledger_id=lid, entry_id=first, lac=-1, message=bad)]
            return
        if not self.admission.try_read():
            yield [pb.ReadResponse(status=pb.ETOOMANYREQUESTS, ledger_id=lid, entry_id=first, lac=-1,
                                   message=f"bookie {self.bookie_id}: {self.admission.describe_reads()}")]
            return
        try:
            async with contextlib.aclosing(self._read_range(lid, first, last, E, WQ, idx)) as chunks:
                async for chunk in chunks:
                    yield chunk
        finally:
            self.admission.release_read()

    async def ReadEntryBatches(
        self, request: pb.ReadRangeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[list[pb.ReadResponse]]:
        """:meth:`ReadEntries` with many answers per message (feature ``BATCHED_ENTRIES``, issue 13):
        the same responses in the same order, grouped into :class:`ReadBatch` messages of at most
        ``max_batch_bytes`` body bytes (default and cap :data:`MAX_READ_BATCH_BYTES`; an entry larger
        than that travels alone). A batch never waits for a later storage chunk. Yields each message as
        the list of its responses: :func:`add_service` registers :func:`~autorecovery.rpc.wire.encode_batch`
        to write it as a ``ReadBatch`` (building the message would deep-copy every body)."""
        limit = request.max_batch_bytes
        limit = MAX_READ_BATCH_BYTES if limit <= 0 else min(limit, MAX_READ_BATCH_BYTES)
        batch: list[pb.ReadResponse] = []
        size = 0
        async with contextlib.aclosing(self._read_chunks(request)) as chunks:
            async for chunk in chunks:
                for resp in chunk:
                    n = len(resp.body)
                    if batch and size + n > limit:
                        yield batch
                        batch, size = [], 0
                    batch.append(resp)
                    size += n
                if batch:
                    yield batch
                    batch, size = [], 0

    async def _read_range(self, lid: int, first: int, last: int, E: int, WQ: int, idx: int
                          ) -> AsyncIterator[list[pb.ReadResponse]]:
        """The answers of a validated, admitted range read, one list per storage chunk (at most 256
        entries / 4 MiB); a storage failure is a last list holding one response with its status.

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
                    yield [pb.ReadResponse(
                        status=status_code(exc.status), ledger_id=lid, entry_id=start, lac=-1, message=exc.detail
                    )]
                    return
                start = nxt
                pending = read(start) if start <= last else None
                yield [
                    pb.ReadResponse(status=_OK, ledger_id=lid, entry_id=it.entry_id, body=it.body, lac=lac)
                    if it.body is not None else
                    pb.ReadResponse(status=pb.ENOENTRY, ledger_id=lid, entry_id=it.entry_id, lac=lac,
                                    message=f"ledger {lid} entry {it.entry_id} not found")
                    for it in items
                ]
        finally:
            if pending is not None:  # the reader went away: drop the read-ahead
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending

    async def PullEntries(self, request: pb.PullRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.PullProgress]:
        """Copy a range of a ledger from another bookie into this one (feature ``PULL_ENTRIES``, ours;
        upstream's replicator always reads to itself and writes out, so every byte crosses the network
        twice). Reads ``source_bookie_id`` with the range's striping filter, verifies each entry's
        digest (``digest_type``: CRC32C when unset, CRC32 or DUMMY; HMAC is refused, the bookie has no
        password; a corrupt copy is reported ``DIGEST`` and never stored), and stores each entry as a
        ``RECOVERY_ADD`` with the same checks, admission and window as an AddEntries stream. Progress
        reports list the entry ids that became durable; the last has ``done``. Statuses: EOK (the
        source's own failures are reported per entry or in ``source_status``), EBADREQ (bad range, a
        source that is this bookie, no peer client, an HMAC or unknown digest type), EREADONLY, EUA,
        EIO, ETOOMANYREQUESTS.
        """
        lid, first, last = request.ledger_id, request.first_entry_id, request.last_entry_id
        source = request.source_bookie_id

        def refuse(status: str, detail: str) -> pb.PullProgress:
            return pb.PullProgress(status=status_code(status), done=True, failed_entry_id=-1,
                                   message=f"bookie {self.bookie_id}: {detail}")

        if self.peers is None:
            yield refuse("EBADREQ", "does not pull entries from other bookies (no peer client)")
            return
        bad = self._range_problem(lid, first, last, request.ensemble_size, request.write_quorum,
                                  request.bookie_index)
        if bad is None and last < first:
            bad = "empty range"
        if bad is None and not source:
            bad = "no source bookie"
        digest, digest_problem = _pull_digest(request.digest_type)
        if bad is None:
            bad = digest_problem
        if bad is not None:
            yield refuse("EBADREQ", f"bad pull of ledger {lid} entries {first}..{last} from {source!r}: {bad}")
            return
        if source == self.bookie_id:
            yield refuse("EBADREQ", f"ledger {lid}: cannot pull from itself")
            return
        if self.peer_check is not None and not await self.peer_check(source):
            yield refuse("EBADREQ", f"ledger {lid}: source {source} is not a registered bookie of this cluster")
            return
        stream = self.storage.new_stream()
        # one storage operation per message received: (entry ids, future, bytes)
        inflight: deque[tuple[list[int], asyncio.Future, int]] = deque()
        inflight_bytes = inflight_entries = 0
        stored: list[int] = []
        stored_bytes = 0
        failed: list[pb.PullFailure] = []
        failure: tuple[int, BookieStatusError] | None = None
        source_status = source_message = ""

        async def settle_head() -> None:
            nonlocal inflight_bytes, inflight_entries, stored_bytes, failure
            eids, fut, n = inflight.popleft()
            inflight_bytes -= n
            inflight_entries -= len(eids)
            try:
                res = await fut
            finally:
                self.admission.release_add(n, len(eids))
            if res is None:
                stored.extend(eids)
                stored_bytes += n
            elif failure is None and isinstance(res, BookieStatusError) and res is not SKIPPED:
                failure = (eids[0], res)

        def report(done: bool = False) -> pb.PullProgress:
            nonlocal stored, stored_bytes, failed
            msg = pb.PullProgress(status=_OK, stored_entry_ids=stored, bytes_stored=stored_bytes, failed=failed,
                                  done=done, failed_entry_id=-1)
            stored, stored_bytes, failed = [], 0, []
            return msg

        def accept(batch: list) -> list[tuple[int, bytes]]:
            """The entries of one message to store, in order. Records the failed ones; an entry this
            bookie refuses sets ``failure`` and ends the list (the entries before it are still stored)."""
            nonlocal failure
            good: list[tuple[int, bytes]] = []
            for item in batch:
                if isinstance(item, BookieError):
                    failed.append(pb.PullFailure(entry_id=getattr(item, "entry_id", -1), reason=item.status))
                    continue
                eid, body = item.entry_id, item.body
                if not first <= eid <= last or (request.ensemble_size and not index_stores(
                        request.bookie_index, eid, request.ensemble_size, request.write_quorum)):
                    continue  # not asked for (a source that ignores the filter): never stored
                try:
                    digest.verify(body, lid, eid, source=source)
                except DigestMismatchError as exc:
                    # WARNING: the worker that asked logs the ERROR (and counts it) once for this entry
                    log.warning("corrupt replica not pulled", ledger_id=lid, entry_id=eid, bookie_id=source,
                                error=str(exc))
                    failed.append(pb.PullFailure(entry_id=eid, reason="DIGEST"))
                    continue
                try:
                    self._check_entry(lid, eid, body)
                except BookieStatusError as exc:
                    failure = (eid, exc)
                    break
                good.append((eid, body))
            return good

        # a message at a time: one admission, one storage operation and one future per message, not
        # per entry (the per-entry cost of the event loop was most of this handler's CPU)
        reader = self.peers.read_entry_batches(source, lid, first, last, ensemble_size=request.ensemble_size,
                                               write_quorum=request.write_quorum, bookie_index=request.bookie_index)
        try:
            async with contextlib.aclosing(reader):
                async for batch in reader:
                    if self._closing:
                        failure = (-1, BookieStatusError("EIO", f"bookie {self.bookie_id} is shutting down"))
                        break
                    good = accept(batch)
                    if good:
                        n = sum(len(body) for _eid, body in good)
                        while inflight and inflight_bytes + n > self.stream_window_bytes:
                            await settle_head()  # our own adds may be what fills the admission budget
                        if not await self.admission.wait_add(n, len(good)):
                            failure = (good[0][0], BookieStatusError(
                                "ETOOMANYREQUESTS", f"bookie {self.bookie_id}: {self.admission.describe_adds()}"))
                            break
                        fut = self._submit_adds(lid, request.master_key, good, recovery=True, stream=stream, nbytes=n)
                        inflight.append(([eid for eid, _body in good], fut, n))
                        inflight_bytes += n
                        inflight_entries += len(good)
                    while inflight and (inflight[0][1].done() or inflight_entries > STREAM_WINDOW_ENTRIES):
                        await settle_head()
                    if failure is not None:
                        break
                    if stored_bytes >= PULL_REPORT_BYTES:
                        yield report()
        except BookieError as exc:  # the source stream failed: report it, keep what was stored
            source_status, source_message = exc.status, str(exc)
        except Exception as exc:  # noqa: BLE001 - answered as EIO after pending writes settle
            log.exception("PullEntries failed", ledger_id=lid, source=source)
            if failure is None:
                failure = (-1, BookieStatusError("EIO", f"bookie {self.bookie_id}: {exc}"))
        finally:
            while inflight:  # never answer (or leave) before submitted writes settle
                with contextlib.suppress(Exception):
                    await settle_head()
        if failure is not None:
            eid, err = failure
            msg = report(done=True)
            msg.status, msg.failed_entry_id, msg.message = status_code(err.status), eid, err.detail
            yield msg
            return
        msg = report(done=True)
        msg.source_status, msg.message = source_status, source_message
        yield msg

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

    async def GetBookieInfo(
        self, request: pb.GetBookieInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetBookieInfoResponse:
        """Total and/or free bytes of the data directory's file system, per the ``requested`` bitmask
        (upstream GetBookieInfoProcessorV3; fakeable, see ``bookie.disk``). Statuses: EOK, EIO."""
        try:
            usage = await asyncio.to_thread(self.disk.probe)
        except OSError as exc:
            log.error("disk probe failed", error=str(exc))
            return pb.GetBookieInfoResponse(status=pb.EIO, message=f"bookie {self.bookie_id}: disk probe failed: {exc}")
        resp = pb.GetBookieInfoResponse(status=_OK, features=self.features)
        if request.requested & pb.TOTAL_DISK_CAPACITY:
            resp.total_disk_capacity = usage.total_bytes
        if request.requested & pb.FREE_DISK_SPACE:
            resp.free_disk_space = usage.free_bytes
        return resp

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


def _pull_digest(number: int) -> tuple[EntryDigest, str | None]:
    """The digest a PullEntries target checks entries with, from ``PullRequest.digest_type`` (0 =
    CRC32C, for callers that predate the field), and why the request is refused (None: it is not)."""
    if number == 0:
        number = DigestType.CRC32C
    if number == DigestType.HMAC:
        return digest_for(DigestType.CRC32C), ("an HMAC ledger cannot be verified by a bookie (it has no password): "
                                               "copy it through the worker")
    try:
        return digest_for(number), None
    except ValueError:
        return digest_for(DigestType.CRC32C), f"unknown digest type {number}"


def build_grpc_server(host: str, port: int, max_entry_size: int, *, max_concurrent_streams: int = 1000,
                      max_connections: int = DEFAULT_MAX_CONNECTIONS,
                      tls: ServerTls | None = None) -> tuple[grpc.aio.Server, int]:
    """A grpc.aio server bound (not yet started, no servicer yet) to ``host:port``; returns it and the
    bound port (``port=0`` picks a free one). Add the servicer with :func:`add_service` before
    ``start()``. Binding first lets the bookie learn its id (``host:port``) before the cookie check.

    ``tls`` (issue 15): serve TLS with the bookie's PEM certificate and key, and with
    ``client_auth`` require a client certificate signed by its trust store (mTLS); None = plaintext.

    Raises:
        RuntimeError: naming the address when it cannot be bound (e.g. the port is in use).
        ConfigError: a TLS file cannot be read or is not PEM (naming the flag).
    """
    server = grpc.aio.server(options=grpc_server_options(max_entry_size, max_concurrent_streams, max_connections))
    addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is not None:
            from autorecovery.rpc.tls import server_credentials

            bound = server.add_secure_port(addr, server_credentials(tls))
        else:
            bound = server.add_insecure_port(addr)
    except RuntimeError as exc:
        raise RuntimeError(f"cannot bind the bookie gRPC server to {addr}: {exc}") from exc
    if bound == 0:
        raise RuntimeError(f"cannot bind the bookie gRPC server to {addr} (port in use?)")
    return server, bound


def add_service(server: grpc.aio.Server, service: BookieService) -> None:
    """Register ``service`` as the ``autorecovery.bookie.Bookie`` servicer of ``server``, its batch
    answers encoded by :func:`autorecovery.rpc.wire.encode_batch`, every method behind the receive
    slots and request checks of :class:`autorecovery.bookie.gate.Gate`."""
    gate = Gate(service.admission, service.bookie_id)
    add_bookie_servicer(service, server, wrap=gate.wrap)
