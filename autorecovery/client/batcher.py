"""Group send: concurrent adds to the same bookie and ledger travel in one AddEntries stream (EDGE).

A writer with many adds in flight (a window per ledger, many ledgers) would otherwise pay one unary
gRPC call per entry per replica. The batcher keeps at most one call in flight per (bookie, ledger); adds
that arrive meanwhile queue up and leave together in the next call, so small entries share the per-call
cost while a lone add still goes out at once as a plain ``AddEntry``.

Error semantics follow the bookie protocol: a stream stops at its first failure, every entry before it
is durable (``entries_written``), and the failed entry and the ones after it receive the error, which
the ledger handle treats as a bookie failure (ensemble change) or EFENCED, as for a single add.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from autorecovery.errors import BookieError

Key = tuple[str, int, bytes, bool]  # bookie id, ledger id, master key, recovery flag


@dataclass
class _Queue:
    items: list[tuple[int, bytes, asyncio.Future]] = field(default_factory=list)
    sender: asyncio.Task | None = None


class AddBatcher:
    """Coalesces adds per (bookie, ledger).

    Args:
        bookies: the gRPC :class:`~autorecovery.rpc.bookie_client.BookieClient`.
        max_entries: most entries in one call. max_bytes: most body bytes in one call.
    """

    def __init__(self, bookies, *, max_entries: int = 256, max_bytes: int = 4 * 1024 * 1024) -> None:
        self.bookies = bookies
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._queues: dict[Key, _Queue] = {}
        self.calls = 0

    async def add(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *,
                  recovery: bool = False) -> None:
        """Store one entry on ``bookie_id``; returns once it is durable there.

        Raises:
            BookieError and its subclasses, as ``BookieClient.add_entry`` does.
        """
        key = (bookie_id, ledger_id, master_key, recovery)
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = _Queue()
        fut = asyncio.get_running_loop().create_future()
        q.items.append((entry_id, body, fut))
        if q.sender is None:
            q.sender = asyncio.ensure_future(self._send(key, q))
        await fut

    def _take(self, q: _Queue) -> list[tuple[int, bytes, asyncio.Future]]:
        batch, size = [], 0
        while q.items and len(batch) < self.max_entries:
            item = q.items[0]
            if batch and size + len(item[1]) > self.max_bytes:
                break
            batch.append(q.items.pop(0))
            size += len(item[1])
        return batch

    async def _send(self, key: Key, q: _Queue) -> None:
        bookie_id, ledger_id, master_key, recovery = key
        try:
            while q.items:
                batch = self._take(q)
                self.calls += 1
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
