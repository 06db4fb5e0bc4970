"""The write side of the gRPC bookie client (EDGE): single adds, AddEntries streams in batched framing,
and add streams.

Upstream source: the v3 protocol's ADD_ENTRY (with ``RECOVERY_ADD``); the client-streamed
``AddEntries`` call, the BATCHED_ENTRIES framing and ``AddStream`` are ours (issue 13). A part of
:class:`~autorecovery.rpc.bookie_client.GrpcBookieClient`, held by it: it is given the client's settings
and its connection state (:class:`~autorecovery.rpc.grpc_common.GrpcChannels`: stubs, unary calls,
features, error mapping).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, Iterable, Iterator, Sequence

import grpc
import structlog

from autorecovery.errors import BookieUnavailableError
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.rpc.grpc_add_stream import AddStream, _add_request
from autorecovery.rpc.grpc_common import (
    GrpcChannels,
    GrpcSettings,
    _status_error,
)

log = structlog.get_logger("autorecovery.rpc.bookie_client")

class GrpcWrites:
    """Writes of :class:`~autorecovery.rpc.bookie_client.GrpcBookieClient` (see the module docstring).

    Args:
        settings: the client's settings (timeouts, batching, ``batch_bytes`` / ``batch_entries``).
        channels: the client's connection state, shared with its other parts.
    """

    def __init__(self, settings: GrpcSettings, channels: GrpcChannels) -> None:
        self._settings = settings
        self._channels = channels

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
        resp = await self._channels.unary(bookie_id, "AddEntry", req, f"add ledger {ledger_id} entry {entry_id}")
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
            async def singles() -> AsyncGenerator[list[tuple[int, bytes]], None]:
                async for item in entries:
                    yield [item]

            gen = singles()
            try:
                return await self.add_entry_batches(bookie_id, ledger_id, master_key, gen, recovery=recovery)
            finally:
                try:
                    await gen.aclose()
                except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.debug("best-effort step failed", step="singles", error=repr(cleanup_exc))
                aclose = getattr(entries, "aclose", None)
                if aclose is not None:
                    try:
                        await aclose()
                    except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                        log.debug("best-effort step failed", step="singles", error=repr(cleanup_exc))
        return await self.add_entry_batches(bookie_id, ledger_id, master_key, self.cut(entries),
                                            recovery=recovery)

    def cut(self, entries: Iterable[tuple[int, bytes]]) -> Iterator[list[tuple[int, bytes]]]:
        """Consecutive runs of ``entries`` within ``batch_bytes`` / ``batch_entries`` (one entry at least)."""
        max_bytes, max_entries = self._settings.batch_bytes, self._settings.batch_entries
        batch: list[tuple[int, bytes]] = []
        size = 0
        for item in entries:
            n = len(item[1])
            if batch and (size + n > max_bytes or len(batch) >= max_entries):
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
        batched = await self._channels.offers(bookie_id, pb.BATCHED_ENTRIES)
        stub = self._channels.stub(bookie_id)
        timeout_s = self._settings.timeout_s
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
            for part in (self.cut(batch) if len(batch) > 1 else (batch,)):
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
            except Exception as exc:  # noqa: BLE001 - the producer failed: kept and raised to the caller
                producer_error.append(exc)
                call.cancel()
                return
            finally:
                aclose = getattr(batches, "aclose", None)
                if aclose is not None:
                    try:
                        await aclose()
                    except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                        log.debug("best-effort step failed", step="pump", error=repr(cleanup_exc))
            waiting_since[0] = loop.time()
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await call.done_writing()

        timed_out = False

        async def watchdog() -> None:
            nonlocal timed_out
            while True:
                await asyncio.sleep(max(timeout_s / 4, 0.01))  # the idle check's period
                since = waiting_since[0]
                if since is not None and loop.time() - since > timeout_s:
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
            err = self._channels.failed(bookie_id, exc, what)
            err.failed_entry_id = -1
            err.entries_written = -1
            err.bytes_written = -1
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
            err.failed_entry_id = resp.failed_entry_id
            err.entries_written = resp.entries_written
            err.bytes_written = resp.bytes_written
            raise err
        return resp.entries_written, resp.bytes_written

    async def open_add_stream(self, bookie_id: str, ledger_id: int, master_key: bytes, *,
                              recovery: bool = False) -> AddStream | None:
        """A long-lived :class:`AddStream` to one bookie for one ledger, or None when the bookie does
        not report ``ADD_STREAM`` (use :meth:`add_entries` then).

        Raises:
            BookieUnavailableError: the bookie cannot be reached.
        """
        if not await self._channels.offers(bookie_id, pb.ADD_STREAM):
            return None
        return AddStream(self._channels, bookie_id, ledger_id, master_key, recovery)

    def _stream_timeout(self, bookie_id: str, what: str) -> BookieUnavailableError:
        err = BookieUnavailableError(bookie_id, "UNAVAILABLE", f"{what}: no progress for {self._settings.timeout_s}s")
        err.failed_entry_id = -1
        return err
