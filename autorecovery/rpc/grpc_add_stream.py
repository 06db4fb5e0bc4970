"""A long-lived gRPC ``AddStream`` call to one bookie for one ledger (EDGE; feature ``ADD_STREAM``, issue 13).

Ours (upstream's v3 protocol has no add stream). Opened with
:meth:`~autorecovery.rpc.bookie_client.GrpcBookieClient.open_add_stream`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from typing import NoReturn

import grpc
import structlog

from autorecovery.errors import BookieError, BookieUnavailableError
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.rpc.grpc_common import (
    GrpcChannels,
    _status_error,
)

log = structlog.get_logger("autorecovery.rpc.bookie_client")

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

    def __init__(self, channels: GrpcChannels, bookie_id: str, ledger_id: int, master_key: bytes,
                 recovery: bool) -> None:
        self._channels = channels
        self._timeout_s = channels.settings.timeout_s
        self.bookie_id = bookie_id
        self.ledger_id = ledger_id
        self.master_key = master_key
        self.flags = pb.RECOVERY_ADD if recovery else pb.ADD_NONE
        self._call = channels.stub(bookie_id).AddStream()
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
        for (eid, _body), fut in zip(entries, futs, strict=True):
            self._pending.append((eid, fut))
        self._has_pending.set()
        self.last_used = loop.time()
        # a list of AddRequest: the stub encodes it as an AddBatch (rpc.wire)
        msg = [_add_request(self.ledger_id, eid, self.master_key, body, self.flags) for eid, body in entries]
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):  # the call ended: the reader fails what is pending with the call's outcome
            await self._call.write(msg)
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
                        ack = await asyncio.wait_for(asyncio.shield(read), self._timeout_s)
                    except TimeoutError:
                        self._fail(BookieUnavailableError(
                            self.bookie_id, "UNAVAILABLE", f"{what}: no acknowledgement for {self._timeout_s}s"))
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
            self._fail(self._channels.failed(self.bookie_id, exc, what))
        except asyncio.CancelledError:
            self._fail(BookieUnavailableError(self.bookie_id, "UNAVAILABLE", f"{what}: closed"))
            raise
        finally:
            if read is not None and not read.done():
                read.cancel()

    async def close(self, timeout_s: float | None = None) -> None:
        """Stop taking adds, let the bookie acknowledge what is pending (up to ``timeout_s``, default
        the client's timeout), then end the call. Entries still unacknowledged then fail. Idempotent.

        Raises:
            asyncio.CancelledError: the caller was cancelled meanwhile; the call is ended first (its
                pending entries fail) and the cancellation goes on (it used to be swallowed here).
        """
        if self._closing:
            return
        self._closing = True
        try:
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await self._call.done_writing()
            try:
                await asyncio.wait_for(asyncio.shield(self._reader), timeout_s or self._timeout_s)
            except TimeoutError:
                pass  # pending entries still unacknowledged: they fail below
            except asyncio.CancelledError:
                if _cancelling():
                    raise
                # the reader was cancelled (not us): it failed what was pending
            except Exception as exc:  # noqa: BLE001 - the reader's own failure, already in self._error
                log.debug("add stream reader failed", bookie_id=self.bookie_id, ledger_id=self.ledger_id, error=str(exc))
        except asyncio.CancelledError:
            self._reader.cancel()  # it fails what is pending ("closed")
            self._call.cancel()
            raise
        self._reader.cancel()
        try:
            await self._reader
        except asyncio.CancelledError:
            if _cancelling():
                self._call.cancel()
                raise
        except Exception as exc:  # noqa: BLE001 - recorded by the reader (self._error), nothing to add
            log.debug("add stream reader failed", bookie_id=self.bookie_id, ledger_id=self.ledger_id, error=str(exc))
        self._call.cancel()


def _cancelling() -> bool:
    """Whether the running task has a cancellation request pending (it must propagate, not be
    mistaken for the end of a task this one cancelled)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
