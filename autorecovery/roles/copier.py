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
* **Ranges, never entries (issue 25).** What is still to copy is a list of
  :class:`~autorecovery.plan.entry_runs.Gap` runs, split only where an entry was copied or a reason
  changes; each source is first asked what it stores (``GetListOfEntriesOfLedger``, once per bookie
  per copy) and only those ranges are read, in chunks of :data:`MAX_STREAM_IDS`. Memory per stream is
  the window plus O(gaps) whatever the fragment claims (2**62 entries that nobody holds: one gap per
  residue, no read). :meth:`FragmentCopier.absent` finds, before any target is chosen, the entries that
  no bookie of their write set holds.
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
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field

import structlog

from autorecovery.errors import BookieError, DigestMismatchError
from autorecovery.ledger.digest import CRC32C, EntryDigest
from autorecovery.ledger.metadata import DigestType
from autorecovery.ledger.striping import index_stores, write_set
from autorecovery.plan import entry_runs
from autorecovery.plan.entry_runs import Gap, IntervalSet, merge_gaps, split_gaps
from autorecovery.plan.pass_plan import DEFINITIVE  # noqa: F401 (re-exported: the one definition)
from autorecovery.plan.targets import FragmentPlan, StreamSpec
from autorecovery.plan.throttle import StreamCaps, TokenBucket
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.roles import holdings
from autorecovery.roles.copy_window import Window as _Window

log = structlog.get_logger("autorecovery.copier")

#: The bookie refuses ranges longer than this (service.MAX_RANGE_ENTRIES is 1,000,000).
MAX_STREAM_IDS = 500_000
#: At most this many corrupt (entry, bookie) pairs are listed in a :class:`CopyResult`.
MAX_CORRUPT_LISTED = 1000


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
        unreadable: entries no replica could serve, as :class:`~autorecovery.plan.entry_runs.Gap` runs
            (one residue each) with, per replica, why not; O(reason changes), never one item per entry.
        corrupt: (entry id, bookie) pairs whose copy failed the digest check (never written; the first
            :data:`MAX_CORRUPT_LISTED` are listed, the metric counts them all).
        aborted: why the copy stopped early, or None.
    """

    entries_read: int = 0
    bytes_read: int = 0
    entries_written: int = 0
    bytes_written: int = 0
    unreadable: list[Gap] = field(default_factory=list)
    corrupt: list[tuple[int, str]] = field(default_factory=list)
    aborted: str | None = None

    @property
    def complete(self) -> bool:
        return not self.unreadable and self.aborted is None

    def unreadable_count(self) -> int:
        """How many entries no replica could serve (O(runs))."""
        return entry_runs.count(self.unreadable)

    def unrecoverable(self) -> list[Gap]:
        """The unreadable runs for which every replica definitively has no valid copy (see :data:`DEFINITIVE`)."""
        return [g for g in self.unreadable if g.why and all(r in DEFINITIVE for r in g.why.values())]


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
        res.unreadable.extend(Gap(run) for run in plan.unsourced)
        held: dict = {}  # bookie -> what it stores of the ledger (asked once per copy)
        if not plan.streams:
            await self.explain(ledger_id, ensemble, write_quorum, res, registered, digest, held)
            return res
        tasks = [asyncio.create_task(self._stream(ledger_id, master_key, ensemble, write_quorum, spec, res,
                                                  registered, skip_sources, should_abort, on_bytes, digest, held))
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
        await self.explain(ledger_id, ensemble, write_quorum, res, registered, digest, held)
        return res

    async def explain(self, ledger_id: int, ensemble, wq: int, res: CopyResult,
                      registered: Callable[[], Collection[str]], digest: EntryDigest = CRC32C,
                      held: dict | None = None) -> None:
        """Fill in, for unreadable runs without reasons yet (one residue each), why each replica of the
        write set cannot serve them: unregistered bookies are not asked; a registered one says what it
        stores (``GetListOfEntriesOfLedger``: the ids outside are ``ENOENTRY``/``ENOLEDGER``) and the
        first id of each part it stores is read and verified with the ledger's ``digest`` (that answer
        stands for the part). O(runs × WQ) requests, whatever the runs' length."""
        todo = [g for g in res.unreadable if not g.why]
        if not todo:
            return
        cache: dict = {} if held is None else held
        keep = [g for g in res.unreadable if g.why]
        reg = set(registered())
        e_size = len(ensemble)
        for g in todo:
            pending = [g]
            for j in dict.fromkeys(write_set(g.run.arc_end, e_size, wq)):
                b = ensemble[j]
                nxt: list[Gap] = []
                if b not in reg:
                    pending = [x.because(b, "NOT_REGISTERED", keep=True) for x in pending]
                    continue
                stores, absent = await self._held(b, ledger_id, cache, (j, e_size, wq))
                present, missing = split_gaps(pending, stores, b, absent)
                nxt.extend(missing)
                for x in present:
                    e = x.run.bounds()[0]
                    try:
                        r = await self.bookies.read_entry(b, ledger_id, e)
                        digest.verify(r.body, ledger_id, e, source=b)
                        reason = "READABLE_BUT_EXCLUDED"
                    except DigestMismatchError:
                        reason = "DIGEST"
                    except BookieError as exc:
                        reason = exc.status
                    nxt.append(x.because(b, reason))
                pending = merge_gaps(nxt)
            keep.extend(pending)
        res.unreadable[:] = keep

    # -- what a bookie holds -----------------------------------------------------------------------
    async def _held(self, bookie: str, ledger_id: int, cache: dict,
                    striping: tuple[int, int, int]) -> tuple[list[tuple[int, int]] | None, str]:
        """:func:`autorecovery.roles.holdings.held` through this copier's bookie client."""
        return await holdings.held(self.bookies, bookie, ledger_id, cache, striping)

    async def absent(self, ledger_id: int, ensemble: tuple[str, ...], wq: int, first: int, last: int,
                     registered: Callable[[], Collection[str]]) -> list[Gap]:
        """:func:`autorecovery.roles.holdings.absent` through this copier's bookie client: the entries of
        ``[first, last]`` no bookie of their write set holds (data loss found before any target is
        chosen or any entry read, issue 25)."""
        return await holdings.absent(self.bookies, ledger_id, ensemble, wq, first, last, registered)

    # -- one stream ----------------------------------------------------------------------------------
    async def _stream(self, ledger_id, master_key, ensemble, wq, spec: StreamSpec, res: CopyResult,
                      registered, skip_sources, should_abort, on_bytes, digest: EntryDigest,
                      held_cache: dict) -> None:
        e_size = len(ensemble)
        run0 = spec.run().clip(spec.first, spec.last)
        # entries of the stream still to copy, as runs with each tried bookie's reason: O(reason changes)
        gaps: list[Gap] = [Gap(run0)] if run0 is not None else []
        queues: dict[str, _Window] = {t: _Window(self.window_entries, self.window_bytes) for t in spec.targets}
        failed: dict[str, BaseException] = {}
        sent: dict[str, int] = {t: 0 for t in spec.targets}
        queued: dict[str, int] = {t: 0 for t in spec.targets}  # bytes handed to each target's window

        async def drain(q: _Window):
            # everything queued meanwhile leaves in one message (batched framing, issue 13)
            limit = self.bookies.batch_bytes
            while (batch := await q.get_batch(limit)) is not None:
                yield batch

        async def write(target: str) -> tuple[int, int]:
            # NUM_BYTES_WRITTEN counts what the target acknowledged (as upstream, on the add's callback),
            # not what was queued: the dashboard's heal throughput must not include failed copies
            t0 = time.monotonic()
            try:
                n, nbytes = await self.bookies.add_entry_batches(target, ledger_id, master_key,
                                                                 drain(queues[target]), recovery=True)
            except BaseException as exc:
                if self.m is not None:
                    done_n, done_b = getattr(exc, "entries_written", 0), getattr(exc, "bytes_written", 0)
                    self.m.bytes_written.record_many(done_n, done_b)
                    self.m.bytes_written.record_many(sent[target] - done_n, queued[target] - done_b, success=False)
                raise
            if self.m is not None:
                self.m.write_latency.record((time.monotonic() - t0) * 1000.0)
                self.m.bytes_written.record_many(n, nbytes)
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
                sent[t] += 1
                queued[t] += len(body)
            on_bytes(len(body) * len(spec.targets))

        def accept(eid: int, body: bytes, source: str, t_read: float) -> bool:
            try:
                digest.verify(body, ledger_id, eid, source=source)
            except DigestMismatchError as exc:
                if len(res.corrupt) < MAX_CORRUPT_LISTED:
                    res.corrupt.append((eid, source))
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

        def check_abort() -> None:
            why = should_abort()
            if why:
                raise _Aborted(why)

        async def read_gap(source: str, g: Gap, index: int, length: int) -> tuple[list[Gap], str]:
            """Stream ``g``'s ids from ``source`` (filter ``bookie_index=index, write_quorum=length``) in
            chunks of :data:`MAX_STREAM_IDS`, copy what verifies, and return the sub-gaps not copied with
            ``source``'s reason, and the status that ended the stream early (``""``: none)."""
            run = g.run
            out: list[Gap] = []
            state = {"cursor": run.first, "reason": "", "seen": run.first - 1}

            def close(upto: int, reason: str) -> None:
                piece = run.clip(state["cursor"], upto)
                if piece is not None:
                    out.append(Gap(piece, {**g.why, source: reason}))
                state["cursor"] = max(state["cursor"], upto + 1)
                state["reason"] = ""

            def note(eid: int, reason: str) -> None:
                if state["reason"] and state["reason"] != reason:
                    close(eid - 1, state["reason"])
                state["reason"] = reason
                state["seen"] = max(state["seen"], eid)

            for a in range(run.first, run.last + 1, MAX_STREAM_IDS):
                b = min(run.last, a + MAX_STREAM_IDS - 1)
                try:
                    t_prev = time.monotonic()
                    # aclosing: leaving the loop early (abort, a dead target) closes the stream
                    # here, not in a finaliser task that may outlive the copy (issue 9)
                    async with contextlib.aclosing(self.bookies.read_entries(
                        source, ledger_id, a, b, ensemble_size=e_size, write_quorum=length, bookie_index=index,
                    )) as stream:
                        async for item in stream:
                            now = time.monotonic()
                            check_abort()
                            if isinstance(item, BookieError):
                                eid = _entry_of(item)
                                if eid is not None and eid >= state["cursor"] and run.covers(eid):
                                    note(eid, item.status)
                                t_prev = now
                                continue
                            eid = item.entry_id
                            if eid >= state["cursor"] and run.covers(eid):
                                if accept(eid, item.body, source, now - t_prev):
                                    if eid > state["cursor"]:
                                        close(eid - 1, state["reason"] or "MISSING")
                                    state["cursor"], state["reason"] = eid + 1, ""
                                    state["seen"] = max(state["seen"], eid)
                                    await emit(eid, item.body)
                                else:
                                    note(eid, "DIGEST")
                            t_prev = now
                except BookieError as exc:
                    log.warning("copy stream failed", ledger_id=ledger_id, bookie_id=source,
                                status=exc.status, error=str(exc))
                    if state["reason"]:
                        close(state["seen"], state["reason"])
                    close(run.last, exc.status)  # the rest of the gap, this chunk's and later ones
                    return out, exc.status
            close(run.last, state["reason"] or "MISSING")  # anything the stream skipped silently
            return out, ""

        async def can_pull(source: str) -> bool:
            """Whether the single target can copy from ``source`` itself (PullEntries)."""
            target = spec.targets[0]
            if not self.pull or len(spec.targets) != 1 or not self.bucket.unlimited or target in writers:
                return False
            if digest.digest_type == DigestType.HMAC:
                # the target would have to verify each entry's HMAC, which needs the ledger's password;
                # passwords never go to bookies (they get the master key, a one-way hash of it), so an
                # HMAC ledger is always copied through this process, which verifies it
                return False
            try:
                if not await self.bookies.pulls(target, source):
                    return False
                if digest.digest_type != DigestType.CRC32C and not (
                        await self.bookies.features(target) & pb.PULL_DIGEST_TYPES):
                    return False  # an older bookie would check every pulled entry as CRC32C
            except BookieError:
                return False  # the target is unreachable: the local path reports it as a target failure
            return True

        pulled = [0, 0]  # entries, bytes stored on the target by PullEntries

        async def pull_gap(source: str, g: Gap) -> tuple[list[Gap], str]:
            """Have the single target copy ``g`` from ``source`` itself: the bytes cross the network once.
            Returns the sub-gaps it could not get (with ``source``'s reason) and the source's failure
            status (``""``: the source served the whole gap)."""
            target = spec.targets[0]
            run = g.run
            stored = IntervalSet(run)  # joined over ids the stream does not carry: O(holes)
            failures: dict[str, IntervalSet] = {}
            source_failed = ""
            t0 = time.monotonic()
            try:
                for a in range(run.first, run.last + 1, MAX_STREAM_IDS):
                    b = min(run.last, a + MAX_STREAM_IDS - 1)
                    t_prev = time.monotonic()
                    async with contextlib.aclosing(self.bookies.pull_entries(
                        target, source, ledger_id, master_key, a, b, ensemble_size=e_size,
                        write_quorum=spec.arc_len, bookie_index=spec.arc_end, digest_type=int(digest.digest_type),
                    )) as reports:
                        async for rep in reports:
                            now = time.monotonic()
                            for eid, why in rep.failed.items():
                                failures.setdefault(why, IntervalSet(run)).add(eid)
                                if why == "DIGEST":
                                    if len(res.corrupt) < MAX_CORRUPT_LISTED:
                                        res.corrupt.append((eid, source))
                                    if self.m is not None:
                                        self.m.corrupt_source_entries.inc()
                                    log.error("corrupt replica not copied", ledger_id=ledger_id, entry_id=eid,
                                              bookie_id=source, target=target)
                            n = len(rep.stored)
                            if n:
                                for eid in rep.stored:
                                    stored.add(eid)
                                pulled[0] += n
                                pulled[1] += rep.bytes_stored
                                res.entries_read += n
                                res.bytes_read += rep.bytes_stored
                                if self.m is not None:
                                    per_entry_ms = (now - t_prev) * 1000.0 / n
                                    self.m.entries_read.inc(n)
                                    self.m.entries_written.inc(n)
                                    self.m.read_latency.record_many(n, per_entry_ms * n)
                                    self.m.bytes_read.record_many(n, rep.bytes_stored)
                                    self.m.bytes_written.record_many(n, rep.bytes_stored)
                                on_bytes(rep.bytes_stored)
                            t_prev = now
                            if rep.source_status:
                                source_failed = rep.source_status
                                log.warning("copy stream failed", ledger_id=ledger_id, bookie_id=source, target=target,
                                            status=rep.source_status, error=rep.source_message)
                            check_abort()
                    if source_failed:  # its other chunks are not tried either
                        break
            except BookieError as exc:
                raise TargetWriteError(target, exc) from exc
            if self.m is not None:
                self.m.write_latency.record((time.monotonic() - t0) * 1000.0)
            self.pulls += 1
            out: list[Gap] = []
            for a, b in stored.complement(run.first, run.last):
                piece = run.clip(a, b)
                if piece is None:
                    continue
                lo = piece.first
                reason = next((why for why, ids in failures.items() if lo in ids), "") or source_failed or "MISSING"
                out.append(Gap(piece, {**g.why, source: reason}))
            return out, source_failed

        try:
            reg = set(registered())
            sources = [spec.source] + [a for a in spec.alternates
                                       if all(index_stores(ensemble.index(a), r, e_size, wq) for r in spec.residues())]
            touched = False  # a pull copies exactly a stream's own range, before anything else was tried
            for source in sources:
                if not gaps:
                    break
                if source in skip_sources:
                    continue
                if source not in reg:
                    gaps = [g.because(source, "NOT_REGISTERED") for g in gaps]
                    continue
                held, absent = await self._held(source, ledger_id, held_cache, (ensemble.index(source), e_size, wq))
                present, nxt = split_gaps(gaps, held, source, absent)
                pulling = not touched and await can_pull(source)
                touched = True
                if present:
                    async with self._slot(source, spec.targets):
                        for i, g in enumerate(present):
                            got, status = await (pull_gap(source, g) if pulling else
                                                 read_gap(source, g, spec.arc_end, spec.arc_len))
                            nxt.extend(got)
                            if status:  # the source failed: its other gaps are not tried either
                                nxt.extend(x.because(source, status) for x in present[i + 1:])
                                break
                gaps = merge_gaps(nxt)
            # fallback over every replica of the write set, residue by residue (each residue has one
            # write set): replicas that store only part of the stream's arc are read here
            pending_all: list[Gap] = []
            for g in gaps:
                for r in g.run.residues():
                    sub = g.run.with_residue(r)
                    if sub is not None:
                        pending_all.append(Gap(sub, g.why))
            for g in pending_all:
                check_abort()
                r = g.run.arc_end
                order = [spec.source, *spec.alternates] + [ensemble[j] for j in write_set(r, e_size, wq)]
                pending = [g]
                for b in dict.fromkeys(order):
                    if not pending:
                        break
                    # bookies the checker flagged (skip_sources) are tried too: they may hold these entries
                    if not index_stores(ensemble.index(b), r, e_size, wq):
                        continue
                    nxt, todo = [], []
                    for x in pending:
                        if x.why.get(b) in DEFINITIVE:
                            nxt.append(x)
                        elif b not in reg:
                            nxt.append(x.because(b, "NOT_REGISTERED"))
                        else:
                            todo.append(x)
                    if todo:
                        held, absent = await self._held(b, ledger_id, held_cache, (ensemble.index(b), e_size, wq))
                        present, missing = split_gaps(todo, held, b, absent)
                        nxt.extend(missing)
                        for i, x in enumerate(present):
                            got, status = await read_gap(b, x, r, 1)
                            nxt.extend(got)
                            if status:
                                nxt.extend(y.because(b, status) for y in present[i + 1:])
                                break
                    pending = merge_gaps(nxt)
                for x in pending:
                    why = dict(x.why)
                    for j in write_set(r, e_size, wq):
                        b = ensemble[j]
                        if b not in why:
                            why[b] = "NOT_REGISTERED" if b not in reg else "UNTRIED"
                    res.unreadable.append(Gap(x.run, why))
                    if self.m is not None:
                        self.m.unable_to_read.inc(x.count())
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
            expected = sent[t]
            if n != expected:
                raise TargetWriteError(t, BookieError(t, "EIO", f"wrote {n} of {expected} entries"))
            res.entries_written += n
            res.bytes_written += nbytes
            if self.m is not None:
                self.m.entries_written.inc(n)


def _entry_of(err: BookieError) -> int | None:
    """Entry id of an ENOENTRY stream item (``BookieClient.read_entries`` sets ``entry_id``)."""
    return getattr(err, "entry_id", None)


#: Sorted inclusive ``[first, last]`` runs of entry ids (for logs); runs of runs: ``entry_runs.spans``.
ranges = entry_runs.id_ranges
