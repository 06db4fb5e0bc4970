"""The gRPC bookie client: our own bookie protocol, one of the two transports behind
:class:`autorecovery.rpc.transport.BookieClient` (EDGE).

One ``grpc.aio`` channel per bookie id (``host:port``, dialled directly), created on first use and
reused; explicit max send/receive message sizes; a deadline on every unary call; streaming calls are
guarded by an idle timeout instead (a long copy is fine as long as it keeps moving).

Error mapping (every error names the bookie):

* a non-``EOK`` status → :class:`BookieError` with ``status`` = the status name (``"ENOENTRY"``,
  ``"ENOLEDGER"``, ``"EUA"``, ``"EBADREQ"``, ``"EREADONLY"``, ``"EIO"``...), ``EFENCED`` →
  :class:`LedgerFencedError`;
* gRPC ``UNAVAILABLE`` (cannot connect, connection lost), ``DEADLINE_EXCEEDED`` or our idle timeout →
  :class:`BookieUnavailableError` with status ``"UNAVAILABLE"``; with TLS, a failed handshake (the
  bookie's certificate is not trusted or does not name it, or the bookie closed the connection during
  the handshake because it did not accept ours) says ``TLS handshake failed: ...`` and is logged with
  the bookie id. With ``tlsCertFilesRefreshDurationSeconds`` > 0 a failed handshake first makes the
  client look at its TLS files: when they changed since the channel was opened (a rotation), the channel
  is replaced by one with the new credentials and a unary call is retried once on it (a stream fails and
  its caller's retry takes the new channel);
* gRPC ``RESOURCE_EXHAUSTED`` (a message over a size limit on either side) → :class:`BookieError`
  ``"EBADREQ"``;
* any other gRPC failure (``UNKNOWN``, ``INTERNAL``, ``UNIMPLEMENTED``...) → :class:`BookieError` ``"EIO"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Sequence
from typing import NoReturn

import grpc
import structlog

from autorecovery.errors import BookieError, BookieUnavailableError, LedgerFencedError
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.proto import bookie_pb2_grpc as pb_grpc
from autorecovery.rpc.wire import bookie_stub
from autorecovery.rpc.convert import ranges_from_proto, status_name
from autorecovery.rpc.results import BookieInfo, PullReport, ReadResult, flatten
from autorecovery.rpc.tls import BookieTls, ChannelCredentialSource, tls_failure

log = structlog.get_logger(__name__)

#: Default most body bytes / entries per batch message (BATCHED_ENTRIES framing, issue 13).
DEFAULT_BATCH_BYTES = 1024 * 1024
DEFAULT_BATCH_ENTRIES = 512
#: Room kept in a message for the protobuf framing of a batch around its bodies (ids, keys, tags).
GRPC_FRAMING_BYTES = 64 * 1024

TOTAL_DISK_CAPACITY = pb.TOTAL_DISK_CAPACITY
FREE_DISK_SPACE = pb.FREE_DISK_SPACE


#: Extra time the worker waits for a pull report beyond its own timeout: the target itself waits up
#: to its peer client's timeout (10 s) for the source before it reports the source as failed, s.
PULL_SOURCE_GRACE_S = 15.0


def _status_error(bookie_id: str, code: int, message: str) -> BookieError:
    name = status_name(code)
    if name == "EFENCED":
        return LedgerFencedError(bookie_id, name, message)
    return BookieError(bookie_id, name, message)


def _rpc_error(bookie_id: str, exc: grpc.aio.AioRpcError, what: str, tls: bool = False) -> BookieError:
    code = exc.code()
    detail = f"{what}: gRPC {code.name}: {exc.details()}"
    why = tls_failure(exc.details() or "") if tls and code == grpc.StatusCode.UNAVAILABLE else None
    if why is not None:
        detail = f"{what}: TLS handshake failed: {why}"
        log.warning("TLS handshake failed", bookie_id=bookie_id, error=why)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return BookieUnavailableError(bookie_id, "UNAVAILABLE", detail)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return BookieError(bookie_id, "EBADREQ", detail)
    return BookieError(bookie_id, "EIO", detail)


class GrpcBookieClient:
    """Talks to bookies over gRPC. Use from one event loop; ``await close()`` when done.

    Args:
        timeout_s: deadline of each unary call, and the idle timeout of streaming calls, in seconds.
        max_message_bytes: max gRPC message size sent and received, in bytes (an entry plus ~100 bytes
            must fit; the bookie's default max entry size is 5 MiB).
        tls: TLS to the bookies (``tlsProviderFactoryClass``, see :mod:`autorecovery.rpc.tls`); None or
            disabled = plaintext. The credentials are built here, so a missing or malformed file
            raises at construction; with ``tls.refresh_s`` > 0 channels opened later use the files'
            new version once they changed (see :class:`~autorecovery.rpc.tls.ChannelCredentialSource`).
        batching: use the batched framing (``AddEntryBatches`` / ``ReadEntryBatches``) with bookies that
            report ``BATCHED_ENTRIES``; False = one entry per message always (benchmarks' baseline).
        batch_bytes / batch_entries: most body bytes / entries per batch message (adds; reads ask the
            bookie for ``batch_bytes``). An entry larger than ``batch_bytes`` travels alone.

    Raises:
        ConfigError: a TLS file cannot be read or is not PEM (naming the key).
    """

    def __init__(self, *, timeout_s: float = 10.0, max_message_bytes: int = 8 * 1024 * 1024,
                 tls: BookieTls | None = None, batching: bool = True,
                 batch_bytes: int = DEFAULT_BATCH_BYTES, batch_entries: int = DEFAULT_BATCH_ENTRIES) -> None:
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes
        self.batching = batching
        # a batch (plus its framing) must fit in one message whatever the caller asks for
        self.batch_bytes = max(1, min(batch_bytes, max_message_bytes - GRPC_FRAMING_BYTES))
        self.batch_entries = max(1, batch_entries)
        self._features: dict[str, int] = {}
        self.tls = tls if tls is not None and tls.enabled else None
        self._credentials = ChannelCredentialSource(self.tls) if self.tls is not None else None
        self._channels: dict[str, tuple[grpc.aio.Channel, pb_grpc.BookieStub]] = {}
        self._generations: dict[str, int] = {}  # bookie id → generation of its channel's TLS credentials
        self._closing: set[asyncio.Task] = set()
        self._closed = False

    def _options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            # a restarted bookie must be found again quickly (gRPC's default backoff grows to 120 s)
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            ("grpc.enable_retries", 0),
        ]

    def _stub(self, bookie_id: str) -> pb_grpc.BookieStub:
        if self._closed:
            raise RuntimeError("BookieClient is closed")
        ch = self._channels.get(bookie_id)
        if ch is None:
            if self._credentials is not None:
                creds, self._generations[bookie_id] = self._credentials.current()
                channel = grpc.aio.secure_channel(bookie_id, creds, options=self._options())
            else:
                channel = grpc.aio.insecure_channel(bookie_id, options=self._options())
            ch = (channel, bookie_stub(channel))
            self._channels[bookie_id] = ch
        return ch[1]

    async def close(self) -> None:
        """Close every channel. Idempotent."""
        self._closed = True
        channels, self._channels = self._channels, {}
        for channel, _stub in channels.values():
            with contextlib.suppress(Exception):
                await channel.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def forget(self, bookie_id: str) -> None:
        """Close the channel to one bookie (e.g. after it was decommissioned)."""
        self._features.pop(bookie_id, None)
        self._generations.pop(bookie_id, None)
        ch = self._channels.pop(bookie_id, None)
        if ch is not None:
            with contextlib.suppress(Exception):
                await ch[0].close()

    async def _unary(self, bookie_id: str, method: str, request, what: str):
        for attempt in range(2):
            stub = self._stub(bookie_id)
            try:
                return await getattr(stub, method)(request, timeout=self.timeout_s)
            except grpc.aio.AioRpcError as exc:
                if attempt == 0 and self._renew_after_rotation(bookie_id, exc):
                    continue  # once, on a channel with the rotated credentials
                raise self._failed(bookie_id, exc, what) from None
        raise AssertionError("unreachable")

    def _renew_after_rotation(self, bookie_id: str, exc: grpc.aio.AioRpcError) -> bool:
        """After a failed TLS handshake, look at the TLS files now; when the channel to ``bookie_id`` was
        opened with credentials older than theirs, drop it (closed in the background) so the next call
        opens one with the new ones. Returns whether it was dropped."""
        source = self._credentials
        if (source is None or not source.files.reloads or exc.code() != grpc.StatusCode.UNAVAILABLE
                or tls_failure(exc.details() or "") is None or bookie_id not in self._channels):
            return False
        _creds, generation = source.current(force=True)
        if self._generations.get(bookie_id) == generation:
            return False
        self._generations.pop(bookie_id, None)
        channel, _stub = self._channels.pop(bookie_id)
        task = asyncio.get_running_loop().create_task(channel.close(grace=self.timeout_s))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        log.info("TLS files changed since the channel was opened: new channel", bookie_id=bookie_id,
                 generation=generation)
        return True

    def _failed(self, bookie_id: str, exc: grpc.aio.AioRpcError, what: str) -> BookieError:
        """Map a gRPC failure; a bookie that went away may come back as another version, so what it
        reported about its features is forgotten; a failed handshake after a rotation of our TLS files
        replaces the channel (see :meth:`_renew_after_rotation`)."""
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED):
            self._features.pop(bookie_id, None)
        self._renew_after_rotation(bookie_id, exc)
        return _rpc_error(bookie_id, exc, what, self.tls is not None)

    # -- capabilities ---------------------------------------------------------------------------
    async def features(self, bookie_id: str) -> int:
        """The ``BookieFeature`` bits the bookie reports (GetBookieInfo ``features``; 0 for a bookie
        that predates the field), asked once and remembered until the bookie fails a call as
        unavailable or unimplemented, or :meth:`forget`. A non-EOK answer (a busy bookie's
        ``ETOOMANYREQUESTS``) counts as 0 for this call only and is not remembered.

        Raises:
            BookieUnavailableError: the bookie cannot be reached (nothing is remembered).
        """
        f = self._features.get(bookie_id)
        if f is None:
            resp = await self._unary(bookie_id, "GetBookieInfo", pb.GetBookieInfoRequest(requested=0),
                                     "get bookie features")
            if resp.status != pb.EOK:
                return 0  # this call only (a busy bookie answers ETOOMANYREQUESTS): asked again next time
            f = int(resp.features)
            self._features[bookie_id] = f
        return f

    async def _batched(self, bookie_id: str) -> bool:
        return self.batching and bool(await self.features(bookie_id) & pb.BATCHED_ENTRIES)

    # -- writes --------------------------------------------------------------------------------
    async def add_entry(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        *,
        recovery: bool = False,
    ) -> None:
        """Store one packed entry durably on ``bookie_id`` (returns after the bookie committed it).

        ``recovery=True`` sets ``RECOVERY_ADD``: accepted even if the ledger is fenced there.

        Raises:
            BookieError: ``EUA`` (other master key), ``EBADREQ`` (malformed/oversized), ``EREADONLY``,
                ``EIO``; LedgerFencedError (``EFENCED``); BookieUnavailableError.
        """
        req = pb.AddRequest(
            ledger_id=ledger_id,
            entry_id=entry_id,
            master_key=master_key,
            body=body,
            flags=pb.RECOVERY_ADD if recovery else pb.ADD_NONE,
        )
        resp = await self._unary(bookie_id, "AddEntry", req, f"add ledger {ledger_id} entry {entry_id}")
        if resp.status != pb.EOK:
            raise _status_error(bookie_id, resp.status, resp.message)

    async def add_entries(
        self,
        bookie_id: str,
        ledger_id: int,
        master_key: bytes,
        entries: AsyncIterable[tuple[int, bytes]] | Iterable[tuple[int, bytes]],
        *,
        recovery: bool = True,
    ) -> tuple[int, int]:
        """Stream ``(entry_id, body)`` pairs to one bookie in a single call (see
        :meth:`add_entry_batches`, which this is with batches the client forms itself).

        A plain iterable is cut into batches of ``batch_bytes`` / ``batch_entries``; each item of an
        async iterable is sent as soon as it arrives (a batch of one: nothing waits for company; use
        :meth:`add_entry_batches` to send what has queued up together).
        """
        if isinstance(entries, AsyncIterable):
            async def singles() -> AsyncIterator[list[tuple[int, bytes]]]:
                async for item in entries:
                    yield [item]

            gen = singles()
            try:
                return await self.add_entry_batches(bookie_id, ledger_id, master_key, gen, recovery=recovery)
            finally:
                with contextlib.suppress(Exception):
                    await gen.aclose()
                aclose = getattr(entries, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(Exception):
                        await aclose()
        return await self.add_entry_batches(bookie_id, ledger_id, master_key, self._cut(entries),
                                            recovery=recovery)

    def _cut(self, entries: Iterable[tuple[int, bytes]]) -> Iterator[list[tuple[int, bytes]]]:
        """Consecutive runs of ``entries`` within ``batch_bytes`` / ``batch_entries`` (one entry at least)."""
        batch: list[tuple[int, bytes]] = []
        size = 0
        for item in entries:
            n = len(item[1])
            if batch and (size + n > self.batch_bytes or len(batch) >= self.batch_entries):
                yield batch
                batch, size = [], 0
            batch.append(item)
            size += n
        if batch:
            yield batch

    async def add_entry_batches(
        self,
        bookie_id: str,
        ledger_id: int,
        master_key: bytes,
        batches: AsyncIterable[Sequence[tuple[int, bytes]]] | Iterable[Sequence[tuple[int, bytes]]],
        *,
        recovery: bool = True,
    ) -> tuple[int, int]:
        """Stream batches of ``(entry_id, body)`` pairs to one bookie in a single call.

        With a bookie that reports ``BATCHED_ENTRIES`` each batch travels as one ``AddBatch`` message
        (``AddEntryBatches``; a batch over ``batch_bytes`` / ``batch_entries`` is split); otherwise every
        entry is its own message on ``AddEntries``. Either way the bookie applies the entries in order
        and stops at the first failure; everything it reports as written is durable. ``batches`` is
        consumed lazily (gRPC flow control), so memory stays bounded. The call is cancelled if the
        bookie does not take the next message, or does not answer after the last one, within
        ``timeout_s`` (time spent producing ``batches`` does not count).

        Returns:
            ``(entries_written, bytes_written)``.

        Raises:
            BookieError / LedgerFencedError: the bookie refused an entry; the exception carries
                ``failed_entry_id``, ``entries_written`` and ``bytes_written`` attributes.
            BookieUnavailableError: transport failure or timeout (``failed_entry_id`` is -1: which
                entries were stored is unknown).
            Exception: whatever iterating ``batches`` raised, unchanged (the call is cancelled; entries
                sent before may or may not be stored).
        """
        batched = await self._batched(bookie_id)
        stub = self._stub(bookie_id)
        flags = pb.RECOVERY_ADD if recovery else pb.ADD_NONE
        loop = asyncio.get_running_loop()
        # monotonic time since which we have been waiting on gRPC, or None while producing entries
        waiting_since: list[float | None] = [loop.time()]
        producer_error: list[BaseException] = []
        # The write API (not a request iterator): the task that feeds the stream is ours, cancelled and
        # awaited below whatever happens. With a request iterator gRPC's own consumer task stayed
        # blocked in ``entries`` after the bookie died, and was later destroyed pending, closing the
        # generator under it (issue 9: "Task was destroyed but it is pending!", "aclose(): asynchronous
        # generator is already running").
        call = stub.AddEntryBatches() if batched else stub.AddEntries()

        async def write(msg) -> bool:
            waiting_since[0] = loop.time()
            try:
                await call.write(msg)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                return False  # the call ended: its outcome comes with the response
            waiting_since[0] = None
            return True

        def request(eid: int, body: bytes) -> pb.AddRequest:
            return _add_request(ledger_id, eid, master_key, body, flags)

        async def send(batch: Sequence[tuple[int, bytes]]) -> bool:
            if not batched:
                for eid, body in batch:
                    if not await write(request(eid, body)):
                        return False
                return True
            for part in (self._cut(batch) if len(batch) > 1 else (batch,)):
                # a list: encoded as an AddBatch by rpc.wire (building the message would deep-copy it)
                if not await write([request(eid, body) for eid, body in part]):
                    return False
            return True

        async def pump() -> None:
            waiting_since[0] = None
            try:
                if isinstance(batches, AsyncIterable):
                    async for batch in batches:
                        if batch and not await send(batch):
                            return
                else:
                    for batch in batches:
                        if batch and not await send(batch):
                            return
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except Exception as exc:  # the producer failed: keep it for the caller
                producer_error.append(exc)
                call.cancel()
                return
            finally:
                aclose = getattr(batches, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(Exception):
                        await aclose()
            waiting_since[0] = loop.time()
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await call.done_writing()

        timed_out = False

        async def watchdog() -> None:
            nonlocal timed_out
            while True:
                await asyncio.sleep(max(self.timeout_s / 4, 0.01))  # the idle check's period
                since = waiting_since[0]
                if since is not None and loop.time() - since > self.timeout_s:
                    timed_out = True
                    call.cancel()
                    return

        feeder = asyncio.ensure_future(pump())
        dog = asyncio.ensure_future(watchdog())
        what = f"add entries to ledger {ledger_id}"
        try:
            resp = await call
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                call.cancel()
                raise  # we are being cancelled
            await asyncio.gather(feeder, return_exceptions=True)
            if producer_error:
                raise producer_error[0] from None
            if timed_out:
                raise self._stream_timeout(bookie_id, what) from None
            raise BookieUnavailableError(bookie_id, "UNAVAILABLE", f"{what}: call cancelled") from None
        except grpc.aio.AioRpcError as exc:
            await asyncio.gather(feeder, return_exceptions=True)
            if producer_error:
                raise producer_error[0] from None
            if timed_out:
                raise self._stream_timeout(bookie_id, what) from None
            err = self._failed(bookie_id, exc, what)
            err.failed_entry_id = -1  # type: ignore[attr-defined]
            err.entries_written = -1  # type: ignore[attr-defined]
            err.bytes_written = -1  # type: ignore[attr-defined]
            raise err from None
        finally:
            for t in (feeder, dog):
                t.cancel()
            await asyncio.gather(feeder, dog, return_exceptions=True)
        if resp.status != pb.EOK:
            err = _status_error(
                bookie_id,
                resp.status,
                f"ledger {ledger_id} entry {resp.failed_entry_id} after {resp.entries_written} entries written: "
                f"{resp.message}",
            )
            err.failed_entry_id = resp.failed_entry_id  # type: ignore[attr-defined]
            err.entries_written = resp.entries_written  # type: ignore[attr-defined]
            err.bytes_written = resp.bytes_written  # type: ignore[attr-defined]
            raise err
        return resp.entries_written, resp.bytes_written

    async def open_add_stream(self, bookie_id: str, ledger_id: int, master_key: bytes, *,
                              recovery: bool = False) -> "AddStream | None":
        """A long-lived :class:`AddStream` to one bookie for one ledger, or None when the bookie does
        not report ``ADD_STREAM`` (use :meth:`add_entries` then).

        Raises:
            BookieUnavailableError: the bookie cannot be reached.
        """
        if not (self.batching and await self.features(bookie_id) & pb.ADD_STREAM):
            return None
        return AddStream(self, bookie_id, ledger_id, master_key, recovery)

    def _stream_timeout(self, bookie_id: str, what: str) -> BookieUnavailableError:
        err = BookieUnavailableError(bookie_id, "UNAVAILABLE", f"{what}: no progress for {self.timeout_s}s")
        err.failed_entry_id = -1  # type: ignore[attr-defined]
        return err

    # -- reads ---------------------------------------------------------------------------------
    async def read_entry(
        self, bookie_id: str, ledger_id: int, entry_id: int, *, fence: bool = False, master_key: bytes = b""
    ) -> ReadResult:
        """Read one entry; ``entry_id=-1`` reads the highest entry the bookie has.

        ``fence=True`` (needs ``master_key``) durably fences the ledger on the bookie first (creating
        it fenced if the bookie did not know it), as upstream recovery's fencing read does.

        Raises:
            BookieError: ``ENOLEDGER`` (bookie does not know the ledger), ``ENOENTRY`` (entry absent;
                with entry -1: the bookie has no entry of the ledger), ``EUA`` (fence with another
                master key), ``EIO``; BookieUnavailableError.
        """
        req = pb.ReadRequest(
            ledger_id=ledger_id,
            entry_id=entry_id,
            flags=pb.FENCE_LEDGER if fence else pb.READ_NONE,
            master_key=master_key,
        )
        resp = await self._unary(bookie_id, "ReadEntry", req, f"read ledger {ledger_id} entry {entry_id}")
        if resp.status != pb.EOK:
            raise _status_error(bookie_id, resp.status, resp.message)
        return ReadResult(resp.entry_id, resp.body, resp.lac)

    def read_entries(
        self,
        bookie_id: str,
        ledger_id: int,
        first: int,
        last: int,
        *,
        ensemble_size: int = 0,
        write_quorum: int = 0,
        bookie_index: int = 0,
    ) -> AsyncIterator[ReadResult | BookieError]:
        """Stream entries ``first..last`` (inclusive) in order from one bookie.

        With ``ensemble_size > 0`` only the ids that ensemble index ``bookie_index`` stores under
        round-robin striping (``(bookie_index - e) mod E < WQ``) are returned. Ids the bookie should
        have but lacks come as ``BookieError(status="ENOENTRY")`` items whose ``entry_id`` names the entry. Break out of the loop (or
        ``aclose()``) to cancel the stream.

        Raises:
            BookieError: ``ENOLEDGER`` when the bookie does not know the ledger, ``EBADREQ`` for a bad
                range (more than 1,000,000 ids, negative first id, bad striping), ``EIO``.
            BookieUnavailableError: transport failure, or no message for ``timeout_s`` seconds.
        """
        return flatten(self.read_entry_batches(bookie_id, ledger_id, first, last, ensemble_size=ensemble_size,
                                               write_quorum=write_quorum, bookie_index=bookie_index))

    async def read_entry_batches(
        self,
        bookie_id: str,
        ledger_id: int,
        first: int,
        last: int,
        *,
        ensemble_size: int = 0,
        write_quorum: int = 0,
        bookie_index: int = 0,
    ) -> AsyncIterator[list[ReadResult | BookieError]]:
        """:meth:`read_entries`, a list per message received (up to ``batch_bytes`` of bodies with the
        batched framing, one entry with the old one): for callers that handle entries a group at a time
        (a bookie's PullEntries). Same items, order, errors and cancellation.
        """
        req = pb.ReadRangeRequest(
            ledger_id=ledger_id,
            first_entry_id=first,
            last_entry_id=last,
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            bookie_index=bookie_index,
            max_batch_bytes=self.batch_bytes,
        )
        what = f"read ledger {ledger_id} entries {first}..{last}"
        batched = await self._batched(bookie_id)
        stub = self._stub(bookie_id)
        call = stub.ReadEntryBatches(req) if batched else stub.ReadEntries(req)
        started = False  # something came back: a fallback would repeat it
        try:
            while True:
                try:
                    msg = await asyncio.wait_for(call.read(), self.timeout_s)
                except TimeoutError:
                    raise BookieUnavailableError(
                        bookie_id, "UNAVAILABLE", f"{what}: no response for {self.timeout_s}s"
                    ) from None
                except grpc.aio.AioRpcError as exc:
                    if batched and not started and exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                        # the bookie was replaced by one without the feature since we asked: start over
                        self._features[bookie_id] = 0
                        call.cancel()
                        batched, started = False, False
                        call = stub.ReadEntries(req)
                        continue
                    raise self._failed(bookie_id, exc, what) from None
                if msg is grpc.aio.EOF:
                    return
                started = True
                out: list[ReadResult | BookieError] = []
                for resp in (msg.entries if batched else (msg,)):
                    if resp.status == pb.EOK:
                        out.append(ReadResult(resp.entry_id, resp.body, resp.lac))
                    elif resp.status == pb.ENOENTRY:
                        missing = BookieError(bookie_id, "ENOENTRY", resp.message)
                        missing.entry_id = resp.entry_id
                        out.append(missing)
                    else:
                        if out:  # what came before the failure, then the failure
                            yield out
                        _raise(_status_error(bookie_id, resp.status, resp.message))
                yield out
        finally:
            call.cancel()

    async def pulls(self, bookie_id: str) -> bool:
        """Whether ``bookie_id`` serves :meth:`pull_entries` (feature ``PULL_ENTRIES``; False with
        ``batching=False``, the benchmarks' old framing).

        Raises:
            BookieUnavailableError: the bookie cannot be reached.
        """
        return self.batching and bool(await self.features(bookie_id) & pb.PULL_ENTRIES)

    async def pull_entries(
        self,
        target: str,
        source: str,
        ledger_id: int,
        master_key: bytes,
        first: int,
        last: int,
        *,
        ensemble_size: int = 0,
        write_quorum: int = 0,
        bookie_index: int = 0,
        digest_type: int = 0,
    ) -> AsyncIterator[PullReport]:
        """Have ``target`` copy entries ``first..last`` of the ledger from ``source`` itself (feature
        ``PULL_ENTRIES``): the target reads them with the striping filter of :meth:`read_entries`,
        verifies each entry's digest and stores it as a ``RECOVERY_ADD`` under ``master_key``. Yields a
        :class:`PullReport` as entries become durable on the target; the last one has ``done``. Break
        out of the loop (or ``aclose()``) to cancel: what was reported stored stays stored.

        ``digest_type`` is the ledger's (upstream's ``DigestType`` number; 0 = CRC32C): the target
        verifies each entry with it. Only a target that reports ``PULL_DIGEST_TYPES`` honours it, and
        none verifies HMAC (``EBADREQ``: it would need the password); copy such ledgers yourself.

        Each report is waited for at most ``timeout_s`` + :data:`PULL_SOURCE_GRACE_S` seconds.

        Raises:
            BookieError: the *target* refused (``EUA`` other master key, ``EREADONLY``, ``EIO``,
                ``EBADREQ`` bad range or a target that does not pull, ``ETOOMANYREQUESTS``); its
                ``entry_id`` (or None) names the entry refused, every entry reported before is durable.
            BookieUnavailableError: the target cannot be reached or stopped answering.
        """
        req = pb.PullRequest(ledger_id=ledger_id, master_key=master_key, source_bookie_id=source,
                             first_entry_id=first, last_entry_id=last, ensemble_size=ensemble_size,
                             write_quorum=write_quorum, bookie_index=bookie_index, digest_type=digest_type)
        what = f"pull ledger {ledger_id} entries {first}..{last} from {source}"
        call = self._stub(target).PullEntries(req)
        wait_s = self.timeout_s + PULL_SOURCE_GRACE_S
        try:
            while True:
                try:
                    msg = await asyncio.wait_for(call.read(), wait_s)
                except TimeoutError:
                    raise BookieUnavailableError(target, "UNAVAILABLE", f"{what}: no progress for {wait_s:g}s") from None
                except grpc.aio.AioRpcError as exc:
                    raise self._failed(target, exc, what) from None
                if msg is grpc.aio.EOF:
                    raise BookieUnavailableError(target, "UNAVAILABLE", f"{what}: the stream ended without a last report")
                report = PullReport(tuple(msg.stored_entry_ids), msg.bytes_stored,
                                    {f.entry_id: f.reason for f in msg.failed}, msg.source_status,
                                    msg.message if msg.source_status else "", msg.done)
                if msg.status != pb.EOK:
                    if report.stored or report.failed:
                        yield dataclasses.replace(report, done=False)
                    err = _status_error(target, msg.status, msg.message)
                    err.entry_id = msg.failed_entry_id if msg.failed_entry_id >= 0 else None
                    raise err
                yield report
                if msg.done:
                    return
        finally:
            call.cancel()

    async def read_lac(self, bookie_id: str, ledger_id: int) -> int:
        """The bookie's last-add-confirmed of the ledger (-1 when no stored entry carried one).

        Raises:
            BookieError: ``ENOLEDGER``, ``EIO``; BookieUnavailableError.
        """
        resp = await self._unary(
            bookie_id, "ReadLac", pb.ReadLacRequest(ledger_id=ledger_id), f"read LAC of ledger {ledger_id}"
        )
        if resp.status != pb.EOK:
            raise _status_error(bookie_id, resp.status, resp.message)
        return resp.lac

    async def get_bookie_info(self, bookie_id: str, requested: int = 3) -> BookieInfo:
        """Disk figures in bytes (upstream GET_BOOKIE_INFO). ``requested`` is a bitmask of
        ``TOTAL_DISK_CAPACITY`` (1) and ``FREE_DISK_SPACE`` (2); unrequested figures are 0.

        Raises:
            BookieError: ``EIO``; BookieUnavailableError.
        """
        resp = await self._unary(
            bookie_id, "GetBookieInfo", pb.GetBookieInfoRequest(requested=requested), "get bookie info"
        )
        if resp.status != pb.EOK:
            raise _status_error(bookie_id, resp.status, "")
        return BookieInfo(resp.total_disk_capacity, resp.free_disk_space)

    async def get_list_of_entries(self, bookie_id: str, ledger_id: int) -> list[tuple[int, int]]:
        """Entry ids of the ledger stored on the bookie as sorted, disjoint, inclusive
        ``(first, last)`` ranges (upstream GET_LIST_OF_ENTRIES_OF_LEDGER).

        Raises:
            BookieError: ``ENOLEDGER``, ``EIO``; BookieUnavailableError.
        """
        resp = await self._unary(
            bookie_id,
            "GetListOfEntriesOfLedger",
            pb.GetListOfEntriesOfLedgerRequest(ledger_id=ledger_id),
            f"list entries of ledger {ledger_id}",
        )
        if resp.status != pb.EOK:
            raise _status_error(bookie_id, resp.status, f"ledger {ledger_id}")
        return ranges_from_proto(resp.ranges)


def _add_request(ledger_id: int, entry_id: int, master_key: bytes, body: bytes, flags: int) -> pb.AddRequest:
    return pb.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=master_key, body=body, flags=flags)


def _raise(err: BookieError) -> NoReturn:
    raise err


class AddStream:
    """One long-lived ``AddStream`` call: batches of adds to one bookie for one ledger, each entry's
    future resolved as soon as the bookie reports it durable (feature ``ADD_STREAM``, issue 13).

    Unlike one AddEntries call per batch, the stream is set up once and several batches are in flight
    on it at once; the bookie acknowledges in stream order. The first failure fails every entry not
    yet acknowledged (with the bookie's status: ``EFENCED`` → :class:`LedgerFencedError`) and ends the
    stream; a transport failure, or no acknowledgement for ``timeout_s`` while entries are pending,
    fails them with :class:`BookieUnavailableError`. A closed or failed stream takes no more adds
    (:attr:`usable` is False): open another.

    Use :meth:`GrpcBookieClient.open_add_stream`; :meth:`send` and :meth:`close` from one event loop.
    """

    def __init__(self, client: GrpcBookieClient, bookie_id: str, ledger_id: int, master_key: bytes,
                 recovery: bool) -> None:
        self.client = client
        self.bookie_id = bookie_id
        self.ledger_id = ledger_id
        self.master_key = master_key
        self.flags = pb.RECOVERY_ADD if recovery else pb.ADD_NONE
        self._call = client._stub(bookie_id).AddStream()
        self._pending: deque[tuple[int, asyncio.Future]] = deque()
        self._acked = 0
        self._error: BookieError | None = None
        self._closing = False
        self._has_pending = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read_acks())
        self.last_used = asyncio.get_running_loop().time()

    @property
    def usable(self) -> bool:
        """True while the stream takes adds (not closing, not failed)."""
        return not self._closing and self._error is None and not self._reader.done()

    @property
    def pending(self) -> int:
        """Entries sent and not yet acknowledged."""
        return len(self._pending)

    async def send(self, entries: Sequence[tuple[int, bytes]],
                   futures: Sequence[asyncio.Future] | None = None) -> list[asyncio.Future]:
        """Send ``(entry_id, body)`` pairs as one message; returns one future per entry, resolved to
        None when the entry is durable or failed with the stream's error (``futures``, one per entry,
        when the caller has its own; one it cancelled is left alone). Returns once the message is
        handed to gRPC (flow control may make that wait), not once it is durable.

        Raises:
            BookieError: the stream is not usable (its error, or ``UNAVAILABLE`` when closed).
            ValueError: ``futures`` is not one per entry (nothing is sent).
        """
        if futures is not None and len(futures) != len(entries):
            raise ValueError(f"add stream to ledger {self.ledger_id} on {self.bookie_id}: {len(futures)} futures "
                             f"for {len(entries)} entries")
        if not self.usable:
            raise self._error or BookieUnavailableError(self.bookie_id, "UNAVAILABLE", "add stream is closed")
        loop = asyncio.get_running_loop()
        futs = list(futures) if futures is not None else [loop.create_future() for _ in entries]
        for (eid, _body), fut in zip(entries, futs):
            self._pending.append((eid, fut))
        self._has_pending.set()
        self.last_used = loop.time()
        # a list of AddRequest: the stub encodes it as an AddBatch (rpc.wire)
        msg = [_add_request(self.ledger_id, eid, self.master_key, body, self.flags) for eid, body in entries]
        try:
            await self._call.write(msg)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass  # the call ended: the reader fails what is pending with the call's outcome
        if self._reader.done():  # it ended before these were queued: nobody else will resolve them
            self._fail(self._error or BookieUnavailableError(self.bookie_id, "UNAVAILABLE", "add stream ended"))
        return futs

    def _fail(self, err: BookieError) -> None:
        if self._error is None:
            self._error = err
        while self._pending:
            _eid, fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # retrieved here: a caller that gave up must not log "never retrieved"

    async def _read_acks(self) -> None:
        """Resolve futures from the acks. The call is always being read (so a stream the bookie ended
        while idle is noticed at once); the deadline applies only while entries are pending."""
        what = f"add stream to ledger {self.ledger_id}"
        read: asyncio.Future | None = None
        try:
            while True:
                if read is None:
                    read = asyncio.ensure_future(self._call.read())
                if self._pending:
                    try:
                        ack = await asyncio.wait_for(asyncio.shield(read), self.client.timeout_s)
                    except TimeoutError:
                        self._fail(BookieUnavailableError(
                            self.bookie_id, "UNAVAILABLE", f"{what}: no acknowledgement for {self.client.timeout_s}s"))
                        self._call.cancel()
                        return
                else:
                    self._has_pending.clear()
                    waiter = asyncio.ensure_future(self._has_pending.wait())
                    try:
                        await asyncio.wait({read, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        waiter.cancel()
                    if not read.done():
                        continue  # entries were sent: wait for their acks with the deadline
                    ack = read.result()
                read = None
                if ack is grpc.aio.EOF:
                    self._fail(BookieUnavailableError(self.bookie_id, "UNAVAILABLE", f"{what}: the bookie ended it"))
                    return
                n = ack.entries_written - self._acked
                for _ in range(max(0, min(n, len(self._pending)))):
                    _eid, fut = self._pending.popleft()
                    if not fut.done():
                        fut.set_result(None)
                self._acked = max(self._acked, ack.entries_written)
                if ack.status != pb.EOK:
                    err = _status_error(self.bookie_id, ack.status,
                                        f"ledger {self.ledger_id} entry {ack.failed_entry_id} after "
                                        f"{ack.entries_written} entries on the stream: {ack.message}")
                    self._fail(err)
                    return
        except grpc.aio.AioRpcError as exc:
            self._fail(self.client._failed(self.bookie_id, exc, what))
        except asyncio.CancelledError:
            self._fail(BookieUnavailableError(self.bookie_id, "UNAVAILABLE", f"{what}: closed"))
            raise
        finally:
            if read is not None and not read.done():
                read.cancel()

    async def close(self, timeout_s: float | None = None) -> None:
        """Stop taking adds, let the bookie acknowledge what is pending (up to ``timeout_s``, default
        the client's timeout), then end the call. Entries still unacknowledged then fail. Idempotent."""
        if self._closing:
            return
        self._closing = True
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            await self._call.done_writing()
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), timeout_s or self.client.timeout_s)
        except (TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001 - closing either way
            pass
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader
        self._call.cancel()
