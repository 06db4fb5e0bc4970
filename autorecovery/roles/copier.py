"""Streams a fragment's entries from surviving replicas to target bookies (EDGE).

Upstream source: ``LedgerFragmentReplicator`` (``replicate`` → batches of ``rereplicationEntryBatchSize``
entries; per entry a client read, a digest re-pack, and an ADD with ``RECOVERY_ADD`` to every target;
``replicationRateByBytes`` throttle; metrics NUM_ENTRIES_READ / NUM_BYTES_READ / READ_DATA_LATENCY /
NUM_ENTRIES_WRITTEN / NUM_BYTES_WRITTEN / WRITE_DATA_LATENCY).

Ours executes a :class:`~autorecovery.plan.targets.FragmentPlan`: for each
:class:`~autorecovery.plan.targets.StreamSpec`, one server-side filtered ``ReadEntries`` stream from the
source feeds one client-streamed ``AddEntries`` call per target through a bounded queue (reads and
writes overlap; memory per stream is bounded by ``window_entries`` entries and ``window_bytes`` bytes
per target, whichever comes first: enough in flight to hide the target's group-commit fsync).

* **Bookie to bookie (ours, issue 13).** When a stream has a single target and that bookie reports
  ``PULL_ENTRIES``, the worker asks the *target* to read the range from the source itself
  (``PullEntries``): the target verifies every entry's digest (the ledger's digest type travels in the
  request; never its password), stores it as a ``RECOVERY_ADD`` and reports the entry ids as they
  become durable. The bytes cross the network once instead of twice
  (upstream's replicator reads every entry to itself and writes it out), and the worker's host carries
  none of them. What the pull could not get (missing, corrupt, a failed source) is copied through this
  process exactly as below. Not used while ``replicationRateByBytes`` limits the worker (the bucket is
  charged per entry here), nor towards a bookie that does not pull (``--no-pull-entries``, a TLS bookie
  without a trust store, an older version; a TLS bookie with one dials its source with TLS itself),
  nor for HMAC ledgers (a target cannot verify an HMAC without the ledger's password, which never leaves
  this process), nor for CRC32/DUMMY ledgers towards a bookie that does not report ``PULL_DIGEST_TYPES``
  (it would check them as CRC32C).
* Every entry's digest (the ledger's own type, a :class:`~autorecovery.ledger.digest.EntryDigest`) is
  verified *before* it is handed to a target, and the **same body bytes** are written (the body
  carries ledger id, entry id, LAC, cumulative length and digest; upstream re-packs with the handle's
  current LAC, we do not need to). A corrupt or missing copy is never written: the entry is retried on the other replicas of its
  write set — first as a new range stream from an alternate source that stores the whole arc, then
  entry by entry.
* Entries no replica can serve are returned with, per replica, why not (``ENOENTRY``, ``ENOLEDGER``,
  ``DIGEST``, ``NOT_REGISTERED``, or a transient status); the worker decides whether that is data
  loss or a retry.
* Throttles: the worker's byte :class:`~autorecovery.plan.throttle.TokenBucket` is charged each
  entry's actual size before it is written; a stream starts only when its source and every target are
  below the per-bookie stream caps, in this process (:class:`~autorecovery.plan.throttle.StreamCaps`)
  and across the cluster (:class:`~autorecovery.zk.stream_slots.ClusterStreamSlots`).
* ``should_abort()`` is polled between entries (the worker aborts when a lost bookie comes back,
  #2766, or on stop). Aborting or failing leaves the metadata untouched: the worker updates the
  ensemble only after :meth:`FragmentCopier.copy` returns a complete result.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field

import structlog

from autorecovery.errors import BookieError, DigestMismatchError
from autorecovery.ledger.digest import CRC32C, EntryDigest
from autorecovery.ledger.metadata import DigestType
from autorecovery.ledger.striping import index_stores, write_set
from autorecovery.plan.pass_plan import DEFINITIVE  # noqa: F401 (re-exported: the one definition)
from autorecovery.plan.targets import FragmentPlan, StreamSpec
from autorecovery.plan.throttle import StreamCaps, TokenBucket
from autorecovery.proto import bookie_pb2 as pb

log = structlog.get_logger("autorecovery.copier")

#: The bookie refuses ranges longer than this (service.MAX_RANGE_ENTRIES is 1,000,000).
MAX_STREAM_IDS = 500_000


class TargetWriteError(Exception):
    """A target bookie refused or failed a write; the fragment copy is abandoned.

    Attributes: bookie_id, cause (the BookieError).
    """

    def __init__(self, bookie_id: str, cause: BaseException) -> None:
        self.bookie_id = bookie_id
        self.cause = cause
        super().__init__(f"write to target {bookie_id} failed: {cause}")


@dataclass
class CopyResult:
    """Outcome of one fragment copy.

    Attributes:
        entries_read / bytes_read: verified entries read from sources.
        entries_written / bytes_written: (entry, target) writes the targets confirmed.
        unreadable: entry id → {bookie: reason} for entries no replica could serve.
        corrupt: (entry id, bookie) pairs whose copy failed the digest check (never written).
        aborted: why the copy stopped early, or None.
    """

    entries_read: int = 0
    bytes_read: int = 0
    entries_written: int = 0
    bytes_written: int = 0
    unreadable: dict[int, dict[str, str]] = field(default_factory=dict)
    corrupt: list[tuple[int, str]] = field(default_factory=list)
    aborted: str | None = None

    @property
    def complete(self) -> bool:
        return not self.unreadable and self.aborted is None

    def unrecoverable_entries(self) -> list[int]:
        """Entries for which every replica definitively has no valid copy (see :data:`DEFINITIVE`)."""
        return sorted(e for e, why in self.unreadable.items() if why and all(r in DEFINITIVE for r in why.values()))


class _Aborted(Exception):
    pass


class FragmentCopier:
    """Runs fragment plans against bookies.

    Args:
        bookies: the gRPC :class:`~autorecovery.rpc.transport.BookieClient`.
        byte_bucket: ``replicationRateByBytes`` bucket shared by the whole worker.
        caps: per-bookie stream caps shared by the whole worker; ``caps_changed`` is notified when a
            stream ends.
        window_entries / window_bytes: entries / body bytes queued per target between reading and
            writing (one entry is always allowed, whatever its size).
        metrics: object with the worker's metric handles (see ``roles/worker.py``), or None.
        sleep: awaitable sleep (injected for tests).
        pull: let a single target bookie that reports ``PULL_ENTRIES`` copy a stream's range from the
            source itself (the first source tried, no byte rate limit set); the entries it cannot get
            are then copied through this process like any other fallback.
        cluster_slots: :class:`~autorecovery.zk.stream_slots.ClusterStreamSlots` making the stream caps
            hold across every worker of the cluster (None: this process's caps only).
    """

    def __init__(self, bookies, *, byte_bucket: TokenBucket, caps: StreamCaps, caps_changed: asyncio.Condition,
                 window_entries: int = 256, window_bytes: int = 16 * 1024 * 1024, metrics=None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, cluster_slots=None,
                 pull: bool = True) -> None:
        self.bookies = bookies
        self.bucket = byte_bucket
        self.caps = caps
        self.caps_changed = caps_changed
        self.window_entries = max(1, window_entries)
        self.window_bytes = max(1, window_bytes)
        self.m = metrics
        self.sleep = sleep
        self.cluster_slots = cluster_slots
        self.pull = pull
        #: PullEntries calls that completed (a target copied a range from its source itself)
        self.pulls = 0

    # -- stream slots ------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _slot(self, source: str, targets: Collection[str]):
        async with self.caps_changed:
            await self.caps_changed.wait_for(lambda: self.caps.try_start(source, targets))
        held: list[str] = []
        try:
            if self.cluster_slots is not None:  # then the cluster-wide slots (all or none, may wait)
                held = await self.cluster_slots.acquire(source, targets)
            yield
        finally:
            if held:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.cluster_slots.release(held))
            self.caps.finish(source, targets)
            async with self.caps_changed:
                self.caps_changed.notify_all()

    # -- public ------------------------------------------------------------------------------------
    async def copy(
        self,
        *,
        ledger_id: int,
        master_key: bytes,
        ensemble: tuple[str, ...],
        write_quorum: int,
        plan: FragmentPlan,
        registered: Callable[[], Collection[str]],
        skip_sources: Collection[str] = (),
        should_abort: Callable[[], str | None] = lambda: None,
        on_bytes: Callable[[int], None] = lambda n: None,
        digest: EntryDigest = CRC32C,
    ) -> CopyResult:
        """Copy everything ``plan`` describes; returns a :class:`CopyResult` (never partial silently).

        Args:
            master_key: what the targets' adds carry (``ledger.digest.master_key`` of the password).
            ensemble / write_quorum: the segment's ensemble before replacement and WQ (used to find
                every replica of an entry for fallback reads and to explain unreadable entries).
            registered: current writable ∪ read-only bookies (unregistered bookies are not asked).
            skip_sources: bookies never to read from (e.g. an in-place target that lost its data).
            digest: the ledger's digest (``ledger.digest.ledger_digest(md)``): every entry read is
                verified with it.

        Raises:
            TargetWriteError: a target refused a write (the caller may exclude it and retry later).
        """
        res = CopyResult()
        for e in plan.unsourced:
            res.unreadable[e] = {}
        if not plan.streams:
            await self.explain(ledger_id, ensemble, write_quorum, res, registered, digest)
            return res
        tasks = [asyncio.create_task(self._stream(ledger_id, master_key, ensemble, write_quorum, spec, res,
                                                  registered, skip_sources, should_abort, on_bytes, digest))
                 for spec in plan.streams]
        try:
            done = await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        errors = [d for d in done if isinstance(d, BaseException)]
        for err in errors:
            if isinstance(err, _Aborted):
                res.aborted = res.aborted or str(err)
            elif isinstance(err, TargetWriteError):
                raise err
            else:
                raise err
        await self.explain(ledger_id, ensemble, write_quorum, res, registered, digest)
        return res

    async def explain(self, ledger_id: int, ensemble, wq: int, res: CopyResult,
                      registered: Callable[[], Collection[str]], digest: EntryDigest = CRC32C) -> None:
        """Fill in, for unreadable entries without reasons yet, why each replica of the write set cannot
        serve them (unregistered bookies are not asked; one read per registered replica; copies are
        verified with the ledger's ``digest``)."""
        todo = [e for e, why in res.unreadable.items() if not why]
        if not todo:
            return
        reg = set(registered())
        for e in todo:
            why: dict[str, str] = {}
            for j in write_set(e, len(ensemble), wq):
                b = ensemble[j]
                if b in why:
                    continue
                if b not in reg:
                    why[b] = "NOT_REGISTERED"
                    continue
                try:
                    r = await self.bookies.read_entry(b, ledger_id, e)
                    digest.verify(r.body, ledger_id, e, source=b)
                    why[b] = "READABLE_BUT_EXCLUDED"
                except DigestMismatchError:
                    why[b] = "DIGEST"
                except BookieError as exc:
                    why[b] = exc.status
            res.unreadable[e] = why

    # -- one stream ----------------------------------------------------------------------------------
    async def _stream(self, ledger_id, master_key, ensemble, wq, spec: StreamSpec, res: CopyResult,
                      registered, skip_sources, should_abort, on_bytes, digest: EntryDigest) -> None:
        e_size = len(ensemble)
        missing: set[int] = set(spec.entry_ids())
        tried: dict[int, dict[str, str]] = {}
        queues: dict[str, _Window] = {t: _Window(self.window_entries, self.window_bytes) for t in spec.targets}
        failed: dict[str, BaseException] = {}
        sizes: dict[str, list[int]] = {t: [] for t in spec.targets}

        async def drain(q: _Window):
            # everything queued meanwhile leaves in one message (batched framing, issue 13)
            limit = self.bookies.batch_bytes
            while (batch := await q.get_batch(limit)) is not None:
                yield batch

        async def write(target: str) -> tuple[int, int]:
            t0 = time.monotonic()
            n, nbytes = await self.bookies.add_entry_batches(target, ledger_id, master_key, drain(queues[target]),
                                                             recovery=True)
            if self.m is not None:
                self.m.write_latency.record((time.monotonic() - t0) * 1000.0)
            return n, nbytes

        def on_writer_done(target: str, task: asyncio.Task) -> None:
            if task.cancelled():
                failed.setdefault(target, asyncio.CancelledError())
            elif task.exception() is not None:
                failed.setdefault(target, task.exception())
            if target in failed:  # unblock a reader waiting on this full window
                queues[target].discard()

        writers: dict[str, asyncio.Task] = {}

        def start_writers() -> None:
            # opened with the first entry copied through this process (none when a pull did it all)
            for t in spec.targets:
                if t not in writers:
                    writers[t] = task = asyncio.create_task(write(t))
                    task.add_done_callback(lambda tk, t=t: on_writer_done(t, tk))

        async def emit(eid: int, body: bytes) -> None:
            start_writers()
            wait = self.bucket.reserve(len(body) * len(spec.targets))
            if wait > 0:
                await self.sleep(wait)
            for t in spec.targets:
                if failed:
                    raise TargetWriteError(next(iter(failed)), next(iter(failed.values())))
                await queues[t].put((eid, body))
                sizes[t].append(len(body))
            on_bytes(len(body) * len(spec.targets))

        def accept(eid: int, body: bytes, source: str, t_read: float) -> bool:
            try:
                digest.verify(body, ledger_id, eid, source=source)
            except DigestMismatchError as exc:
                res.corrupt.append((eid, source))
                tried.setdefault(eid, {})[source] = "DIGEST"
                if self.m is not None:
                    self.m.corrupt_source_entries.inc()
                log.error("corrupt replica not copied", ledger_id=ledger_id, entry_id=eid, bookie_id=source, error=str(exc))
                return False
            res.entries_read += 1
            res.bytes_read += len(body)
            if self.m is not None:
                self.m.entries_read.inc()
                self.m.bytes_read.record(len(body))
                self.m.read_latency.record(t_read * 1000.0)
            return True

        pulled = [0, 0]  # entries, bytes stored on the target by PullEntries

        async def pull(source: str, a: int, b: int) -> str | None:
            """Have the single target copy ``a..b`` from ``source`` itself (PullEntries): the bytes cross
            the network once. Returns None when it cannot (the caller copies through this process), else
            the source's failure status (``""``: the source served the whole range)."""
            target = spec.targets[0]
            if not self.pull or len(spec.targets) != 1 or not self.bucket.unlimited or target in writers:
                return None
            if digest.digest_type == DigestType.HMAC:
                # the target would have to verify each entry's HMAC, which needs the ledger's password;
                # passwords never go to bookies (they get the master key, a one-way hash of it), so an
                # HMAC ledger is always copied through this process, which verifies it
                return None
            try:
                if not await self.bookies.pulls(target, source):
                    return None
                if digest.digest_type != DigestType.CRC32C and not (
                        await self.bookies.features(target) & pb.PULL_DIGEST_TYPES):
                    return None  # an older bookie would check every pulled entry as CRC32C
            except BookieError:
                return None  # the target is unreachable: the local path reports it as a target failure
            source_failed = ""
            t0 = t_prev = time.monotonic()
            try:
                async with contextlib.aclosing(self.bookies.pull_entries(
                    target, source, ledger_id, master_key, a, b, ensemble_size=e_size,
                    write_quorum=spec.arc_len, bookie_index=spec.arc_end, digest_type=int(digest.digest_type),
                )) as reports:
                    async for rep in reports:
                        now = time.monotonic()
                        for eid, why in rep.failed.items():
                            tried.setdefault(eid, {})[source] = why
                            if why == "DIGEST":
                                res.corrupt.append((eid, source))
                                if self.m is not None:
                                    self.m.corrupt_source_entries.inc()
                                log.error("corrupt replica not copied", ledger_id=ledger_id, entry_id=eid,
                                          bookie_id=source, target=target)
                        n = len(rep.stored)
                        if n:
                            missing.difference_update(rep.stored)
                            pulled[0] += n
                            pulled[1] += rep.bytes_stored
                            res.entries_read += n
                            res.bytes_read += rep.bytes_stored
                            if self.m is not None:
                                per_entry_ms = (now - t_prev) * 1000.0 / n
                                self.m.entries_read.inc(n)
                                self.m.entries_written.inc(n)
                                for _ in range(n):
                                    self.m.read_latency.record(per_entry_ms)
                                mean = rep.bytes_stored // n
                                for _ in range(n):
                                    self.m.bytes_read.record(mean)
                                    self.m.bytes_written.record(mean)
                            on_bytes(rep.bytes_stored)
                        t_prev = now
                        if rep.source_status:
                            source_failed = rep.source_status
                            log.warning("copy stream failed", ledger_id=ledger_id, bookie_id=source, target=target,
                                        status=rep.source_status, error=rep.source_message)
                            for eid in missing:
                                if a <= eid <= b:
                                    tried.setdefault(eid, {}).setdefault(source, rep.source_status)
                        why = should_abort()
                        if why:
                            raise _Aborted(why)
            except BookieError as exc:
                raise TargetWriteError(target, exc) from exc
            if self.m is not None:
                self.m.write_latency.record((time.monotonic() - t0) * 1000.0)
            self.pulls += 1
            return source_failed

        try:
            reg = set(registered())
            sources = [spec.source] + [a for a in spec.alternates
                                       if all(index_stores(ensemble.index(a), r, e_size, wq) for r in spec.residues())]
            for source in sources:
                if not missing:
                    break
                if source in skip_sources:
                    continue
                if source not in reg:
                    for eid in missing:
                        tried.setdefault(eid, {})[source] = "NOT_REGISTERED"
                    continue
                lo, hi = min(missing), max(missing)
                untouched = len(missing) == spec.entries  # nothing copied or tried yet: a pull copies exactly these
                async with self._slot(source, spec.targets):
                    for a in range(lo, hi + 1, MAX_STREAM_IDS):
                        b = min(hi, a + MAX_STREAM_IDS - 1)
                        pulled_from = await pull(source, a, b) if untouched else None
                        if pulled_from is not None:
                            if pulled_from:  # the source failed: its other chunks are not tried either
                                break
                            continue
                        try:
                            t_prev = time.monotonic()
                            # aclosing: leaving the loop early (abort, a dead target) closes the stream
                            # here, not in a finaliser task that may outlive the copy (issue 9)
                            async with contextlib.aclosing(self.bookies.read_entries(
                                source, ledger_id, a, b, ensemble_size=e_size,
                                write_quorum=spec.arc_len, bookie_index=spec.arc_end,
                            )) as stream:
                                async for item in stream:
                                    now = time.monotonic()
                                    why = should_abort()
                                    if why:
                                        raise _Aborted(why)
                                    if isinstance(item, BookieError):
                                        eid = _entry_of(item)
                                        if eid is not None:
                                            tried.setdefault(eid, {})[source] = item.status
                                        t_prev = now
                                        continue
                                    eid = item.entry_id
                                    if eid in missing and accept(eid, item.body, source, now - t_prev):
                                        missing.discard(eid)
                                        await emit(eid, item.body)
                                    t_prev = now
                        except BookieError as exc:
                            log.warning("copy stream failed", ledger_id=ledger_id, bookie_id=source,
                                        status=exc.status, error=str(exc))
                            for eid in missing:
                                if a <= eid <= b:
                                    tried.setdefault(eid, {}).setdefault(source, exc.status)
                            break
                # anything the stream skipped silently (filtered out by a stale striping) stays missing
            # entry-by-entry fallback over every replica of the write set
            for eid in sorted(missing):
                why = should_abort()
                if why:
                    raise _Aborted(why)
                reasons = tried.setdefault(eid, {})
                got = None
                order = [spec.source, *spec.alternates] + [ensemble[j] for j in write_set(eid, e_size, wq)]
                for b in dict.fromkeys(order):
                    # bookies the checker flagged (skip_sources) are tried too: they may hold this entry
                    if reasons.get(b) in DEFINITIVE:
                        continue
                    if not index_stores(ensemble.index(b), eid, e_size, wq):
                        continue
                    if b not in reg:
                        reasons[b] = "NOT_REGISTERED"
                        continue
                    t0 = time.monotonic()
                    try:
                        r = await self.bookies.read_entry(b, ledger_id, eid)
                    except BookieError as exc:
                        reasons[b] = exc.status
                        continue
                    if accept(eid, r.body, b, time.monotonic() - t0):
                        got = r.body
                        break
                if got is not None:
                    missing.discard(eid)
                    await emit(eid, got)
                else:
                    for j in write_set(eid, e_size, wq):
                        b = ensemble[j]
                        if b not in reasons:
                            reasons[b] = "NOT_REGISTERED" if b not in reg else "UNTRIED"
                    res.unreadable[eid] = dict(reasons)
                    if self.m is not None:
                        self.m.unable_to_read.inc()
            for t in writers:
                if t not in failed:
                    await queues[t].put(None)
            results = await asyncio.gather(*writers.values(), return_exceptions=True)
        except BaseException:
            for task in writers.values():
                task.cancel()
            await asyncio.gather(*writers.values(), return_exceptions=True)
            raise
        res.entries_written += pulled[0]
        res.bytes_written += pulled[1]
        for t, r in zip(writers, results):
            if isinstance(r, BaseException):
                raise TargetWriteError(t, r)
            n, nbytes = r
            expected = len(sizes[t])
            if n != expected:
                raise TargetWriteError(t, BookieError(t, "EIO", f"wrote {n} of {expected} entries"))
            res.entries_written += n
            res.bytes_written += nbytes
            if self.m is not None:
                self.m.entries_written.inc(n)
                for s in sizes[t]:
                    self.m.bytes_written.record(s)


class _Window:
    """A FIFO between a copy stream's reader and one target's writer, bounded by entries and bytes.

    ``put`` waits while the window is full (it always admits an entry into an empty window);
    ``discard`` drops everything and admits every later put (the writer is gone). Waiters wake on a
    per-change event, so ``discard`` (called from a task's done-callback) needs no task of its own: a
    task spawned there could outlive the copy ("Task was destroyed but it is pending!", issue 9).
    """

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: deque = deque()
        self._bytes = 0
        self._changed = asyncio.Event()
        self._dead = False

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self, ready: Callable[[], bool]) -> None:
        while not ready():
            await self._changed.wait()

    async def put(self, item) -> None:
        size = len(item[1]) if item is not None else 0
        await self._wait(lambda: self._dead or not self._items or (
            len(self._items) < self.max_entries and self._bytes + size <= self.max_bytes))
        if self._dead:
            return
        self._items.append(item)
        self._bytes += size
        self._notify()

    async def get(self):
        await self._wait(lambda: bool(self._items))
        item = self._items.popleft()
        if item is not None:
            self._bytes -= len(item[1])
        self._notify()
        return item

    async def get_batch(self, max_bytes: int) -> list | None:
        """Everything queued now, in order, up to ``max_bytes`` of bodies (at least one entry, waiting
        for it); None at the end-of-stream marker."""
        await self._wait(lambda: bool(self._items))
        if self._items[0] is None:
            self._items.popleft()
            self._notify()
            return None
        batch: list = []
        size = 0
        while self._items and self._items[0] is not None:
            n = len(self._items[0][1])
            if batch and size + n > max_bytes:
                break
            batch.append(self._items.popleft())
            size += n
        self._bytes -= size
        self._notify()
        return batch

    def discard(self) -> None:
        self._dead = True
        self._items.clear()
        self._bytes = 0
        self._notify()


def _entry_of(err: BookieError) -> int | None:
    """Entry id of an ENOENTRY stream item (``BookieClient.read_entries`` sets ``entry_id``)."""
    return getattr(err, "entry_id", None)


def ranges(entry_ids: Iterable[int]) -> list[list[int]]:
    """Sorted inclusive ``[first, last]`` runs of ``entry_ids`` (for logs and the side znode)."""
    out: list[list[int]] = []
    for e in sorted(set(entry_ids)):
        if out and out[-1][1] + 1 == e:
            out[-1][1] = e
        else:
            out.append([e, e])
    return out
