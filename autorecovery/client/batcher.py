"""Group send: concurrent adds to the same bookie and ledger travel together (EDGE).

A writer with many adds in flight (a window per ledger, many ledgers) would otherwise pay one unary
gRPC call per entry per replica. Adds that arrive while the previous ones are being sent queue up and
leave together as one batch.

* With a bookie that reports ``ADD_STREAM`` (issue 13) each (bookie, ledger) has one long-lived
  :class:`~autorecovery.rpc.grpc_add_stream.AddStream`: a batch is written to it as soon as the previous
  one is handed to gRPC, without waiting for acknowledgements, and each add completes when the bookie
  acknowledges it durable. No call set-up per batch, several batches in flight. A stream with nothing
  sent for ``idle_close_s`` is closed (well before the bookie's own idle timeout, so that an idle close
  by the bookie never fails an add).
* Otherwise the batcher keeps at most one call in flight per (bookie, ledger); a lone add goes out as
  a plain ``AddEntry``, queued adds as one ``AddEntries`` call.

Error semantics follow the bookie protocol: a stream stops at its first failure, every entry before it
is durable (``entries_written``), and the failed entry and the ones after it receive the error, which
the ledger handle treats as a bookie failure (ensemble change) or EFENCED, as for a single add.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from autorecovery.errors import BookieError
from autorecovery.rpc.grpc_add_stream import AddStream

Key = tuple[str, int, bytes, bool]  # bookie id, ledger id, master key, recovery flag


@dataclass
class _Queue:
    items: list[tuple[int, bytes, asyncio.Future]] = field(default_factory=list)
    sender: asyncio.Task | None = None


class AddBatcher:
    """Coalesces adds per (bookie, ledger).

    Args:
        bookies: the gRPC :class:`~autorecovery.rpc.transport.BookieClient`.
        max_entries: most entries in one call or message. max_bytes: most body bytes in one.
        idle_close_s: an add stream with nothing sent for this long is closed, s.
    """

    def __init__(self, bookies, *, max_entries: int = 256, max_bytes: int = 4 * 1024 * 1024,
                 idle_close_s: float = 10.0) -> None:
        self.bookies = bookies
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.idle_close_s = idle_close_s
        self._queues: dict[Key, _Queue] = {}
        self._streams: dict[Key, AddStream] = {}
        self._reaper: asyncio.Task | None = None
        self.calls = 0
        self.streams_opened = 0

    async def add(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *,
                  recovery: bool = False) -> None:
        """Store one entry on ``bookie_id``; returns once it is durable there.

        Raises:
            BookieError and its subclasses, as ``BookieClient.add_entry`` does.
        """
        await self.submit(bookie_id, ledger_id, entry_id, master_key, body, recovery=recovery)

    def submit(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *,
               recovery: bool = False) -> asyncio.Future:
        """Queue one entry for ``bookie_id`` without waiting (call from the event loop): the future
        resolves to None once the entry is durable there, or fails as :meth:`add` raises. Entries of
        one (bookie, ledger) are sent in the order they were queued."""
        key = (bookie_id, ledger_id, master_key, recovery)
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = _Queue()
        fut = asyncio.get_running_loop().create_future()
        q.items.append((entry_id, body, fut))
        if q.sender is None:
            q.sender = asyncio.ensure_future(self._send(key, q))
        return fut

    def _take(self, q: _Queue) -> list[tuple[int, bytes, asyncio.Future]]:
        batch: list[tuple[int, bytes, asyncio.Future]] = []
        size = 0
        while q.items and len(batch) < self.max_entries:
            item = q.items[0]
            if batch and size + len(item[1]) > self.max_bytes:
                break
            batch.append(q.items.pop(0))
            size += len(item[1])
        return batch

    async def _stream(self, key: Key) -> AddStream | None:
        """The usable add stream of ``key``, opened if needed; None when the bookie has none."""
        st = self._streams.get(key)
        if st is not None and st.usable:
            return st
        if st is not None:
            self._streams.pop(key, None)
            await st.close()
        bookie_id, ledger_id, master_key, recovery = key
        st = await self.bookies.open_add_stream(bookie_id, ledger_id, master_key, recovery=recovery)
        if st is not None:
            self._streams[key] = st
            self.streams_opened += 1
            if self._reaper is None or self._reaper.done():
                self._reaper = asyncio.ensure_future(self._reap())
        return st

    async def _reap(self) -> None:
        """Close streams idle for ``idle_close_s`` (nothing pending); ends when none is left."""
        loop = asyncio.get_running_loop()
        while self._streams:
            await asyncio.sleep(self.idle_close_s / 2)  # a housekeeping period, not synchronisation
            now = loop.time()
            for key, st in list(self._streams.items()):
                if not st.pending and (now - st.last_used >= self.idle_close_s or not st.usable):
                    if self._streams.get(key) is st:
                        del self._streams[key]
                    await st.close()

    async def close(self) -> None:
        """Close every add stream (pending adds are acknowledged or fail). Idempotent."""
        streams, self._streams = list(self._streams.values()), {}
        for st in streams:
            await st.close()
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
            self._reaper = None

    async def _send(self, key: Key, q: _Queue) -> None:
        bookie_id, ledger_id, master_key, recovery = key
        try:
            while q.items:
                batch = self._take(q)
                self.calls += 1
                try:
                    stream = await self._stream(key)
                    if stream is not None:
                        # the stream resolves the adds' own futures: no second future per entry
                        await stream.send([(eid, body) for eid, body, _ in batch], [fut for _, _, fut in batch])
                        continue  # the next batch goes at once; acks complete the adds
                except BookieError as exc:
                    for _, _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                try:
                    if len(batch) == 1:
                        eid, body, _ = batch[0]
                        await self.bookies.add_entry(bookie_id, ledger_id, eid, master_key, body, recovery=recovery)
                    else:
                        await self.bookies.add_entries(bookie_id, ledger_id, master_key,
                                                       [(eid, body) for eid, body, _ in batch], recovery=recovery)
                except BookieError as exc:
                    # entries before the failed one are durable; -1 (transport failure) means unknown
                    done = 0 if len(batch) == 1 else max(0, getattr(exc, "entries_written", 0) or 0)
                    for i, (_, _, fut) in enumerate(batch):
                        if not fut.done():
                            if i < done:
                                fut.set_result(None)
                            else:
                                fut.set_exception(exc)
                    continue
                except BaseException as exc:  # cancellation or a bug: nobody may wait forever
                    for _, _, fut in batch + q.items:
                        if not fut.done():
                            fut.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
                    q.items.clear()
                    raise
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_result(None)
        finally:
            q.sender = None
            if not q.items and self._queues.get(key) is q:
                del self._queues[key]
