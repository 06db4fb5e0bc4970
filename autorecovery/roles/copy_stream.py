"""One copy stream of a fragment copy: a source's entries to the stream's targets (EDGE).

Upstream source: ``LedgerFragmentReplicator`` (read each entry, re-pack, ``RECOVERY_ADD`` to the targets).
The stream is a part of :class:`~autorecovery.roles.copier.FragmentCopier`, composed: it holds the
copier whose bookie client, windows, byte bucket, metrics, stream slots and pull option it uses; see
that module for what a copy does as a whole. :meth:`StreamCopy.run` runs one
:class:`~autorecovery.plan.targets.StreamSpec`: a bookie-to-bookie pull when the target offers it,
then ranged ``ReadEntries`` streams from the source (and alternates for what it cannot serve) feeding
one ``AddEntries`` writer per target through bounded windows, every digest verified first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import structlog

from autorecovery.errors import BookieError, DigestMismatchError
from autorecovery.ledger.digest import EntryDigest
from autorecovery.ledger.metadata import DigestType
from autorecovery.ledger.striping import index_stores, write_set
from autorecovery.plan.entry_runs import Gap, IntervalSet, merge_gaps, split_gaps
from autorecovery.plan.pass_plan import DEFINITIVE
from autorecovery.plan.targets import StreamSpec
from autorecovery.plan.throttle import TokenBucket
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.roles.copy_result import MAX_CORRUPT_LISTED, CopyResult, TargetWriteError, _Aborted
from autorecovery.roles.copy_window import Window as _Window


class CopierParts(Protocol):
    """What a stream uses of its :class:`~autorecovery.roles.copier.FragmentCopier` (declared here, so
    this module need not import the copier that composes it)."""

    bookies: Any  #: the bookie client (``read_entry_batches``, ``open_add_stream``, ``pull_entries``...)
    bucket: TokenBucket  #: ``replicationRateByBytes``, shared by the worker
    m: Any  #: the worker's metric handles, or None
    pull: bool  #: a single target that offers ``PULL_ENTRIES`` may copy from the source itself
    pulls: int  #: PullEntries calls completed
    sleep: Callable[[float], Awaitable[None]]
    window_entries: int
    window_bytes: int

    def adaptive_wait(self, bookies: Iterable[str], nbytes: int) -> float: ...

    def slot(self, source: str, targets: Collection[str]) -> AbstractAsyncContextManager[None]: ...

    async def held(self, bookie: str, ledger_id: int, cache: dict,
                   striping: tuple[int, int, int]) -> tuple[list[tuple[int, int]] | None, str]: ...

log = structlog.get_logger("autorecovery.copier")

#: The bookie refuses ranges longer than this (service.MAX_RANGE_ENTRIES is 1,000,000).
MAX_STREAM_IDS = 500_000

class StreamCopy:
    """The streams of a :class:`~autorecovery.roles.copier.FragmentCopier`'s copies (see the module
    docstring); ``copier`` is the copier whose parts they use."""

    def __init__(self, copier: CopierParts) -> None:
        self.copier = copier

    # -- one stream ----------------------------------------------------------------------------------
    async def run(self, ledger_id, master_key, ensemble, wq, spec: StreamSpec, res: CopyResult,
                  registered, skip_sources, should_abort, on_bytes, digest: EntryDigest,
                  held_cache: dict) -> None:
        """Copy ``spec``'s entries from its source to its targets, recording what happened in ``res``."""
        c = self.copier
        e_size = len(ensemble)
        run0 = spec.run().clip(spec.first, spec.last)
        # entries of the stream still to copy, as runs with each tried bookie's reason: O(reason changes)
        gaps: list[Gap] = [Gap(run0)] if run0 is not None else []
        queues: dict[str, _Window] = {t: _Window(c.window_entries, c.window_bytes) for t in spec.targets}
        failed: dict[str, BaseException] = {}
        sent: dict[str, int] = {t: 0 for t in spec.targets}
        queued: dict[str, int] = {t: 0 for t in spec.targets}  # bytes handed to each target's window

        async def drain(q: _Window):
            # everything queued meanwhile leaves in one message (batched framing, issue 13)
            limit = c.bookies.batch_bytes
            while (batch := await q.get_batch(limit)) is not None:
                yield batch

        async def write(target: str) -> tuple[int, int]:
            # NUM_BYTES_WRITTEN counts what the target acknowledged (as upstream, on the add's callback),
            # not what was queued: the dashboard's heal throughput must not include failed copies
            t0 = time.monotonic()
            try:
                n, nbytes = await c.bookies.add_entry_batches(target, ledger_id, master_key,
                                                                 drain(queues[target]), recovery=True)
            except BaseException as exc:
                if c.m is not None:
                    done_n, done_b = getattr(exc, "entries_written", 0), getattr(exc, "bytes_written", 0)
                    c.m.bytes_written.record_many(done_n, done_b)
                    c.m.bytes_written.record_many(sent[target] - done_n, queued[target] - done_b, success=False)
                raise
            if c.m is not None:
                c.m.write_latency.record((time.monotonic() - t0) * 1000.0)
                c.m.bytes_written.record_many(n, nbytes)
            return n, nbytes

        def on_writer_done(target: str, task: asyncio.Task) -> None:
            if task.cancelled():
                failed.setdefault(target, asyncio.CancelledError())
            elif (exc := task.exception()) is not None:
                failed.setdefault(target, exc)
            if target in failed:  # unblock a reader waiting on this full window
                queues[target].discard()

        writers: dict[str, asyncio.Task] = {}

        def start_writers() -> None:
            # opened with the first entry copied through this process (none when a pull did it all)
            for t in spec.targets:
                if t not in writers:
                    writers[t] = task = asyncio.create_task(write(t))
                    task.add_done_callback(functools.partial(on_writer_done, t))

        async def emit(items: list[tuple[int, bytes]], nbytes: int, source: str) -> None:
            """Hand verified ``(entry id, body)`` pairs (``nbytes`` of bodies) to every target's window:
            one bucket reservation and one window hand-over per batch read, not per entry (issue 39)."""
            start_writers()
            n_t = len(spec.targets)
            if not c.bucket.unlimited and len(items) > 1:
                # a rate limit paces entry by entry (and an abort is seen between them), as upstream's
                for item in items:
                    check_abort()
                    await emit([item], len(item[1]), source)
                return
            wait = max(c.bucket.reserve(nbytes * n_t), c.adaptive_wait((source, *spec.targets), nbytes))
            if wait > 0:
                await c.sleep(wait)
            for t in spec.targets:
                if failed:
                    raise TargetWriteError(next(iter(failed)), next(iter(failed.values())))
                await queues[t].put_many(items)
                sent[t] += len(items)
                queued[t] += nbytes
            on_bytes(nbytes * n_t)

        def accept(eid: int, body: bytes, source: str) -> bool:
            try:
                digest.verify(body, ledger_id, eid, source=source)
            except DigestMismatchError as exc:
                if len(res.corrupt) < MAX_CORRUPT_LISTED:
                    res.corrupt.append((eid, source))
                if c.m is not None:
                    c.m.corrupt_source_entries.inc()
                log.error("corrupt replica not copied", ledger_id=ledger_id, entry_id=eid, bookie_id=source, error=str(exc))
                return False
            return True

        def count_read(n: int, nbytes: int, read_s: float) -> None:
            res.entries_read += n
            res.bytes_read += nbytes
            if c.m is not None:
                c.m.entries_read.inc(n)
                c.m.bytes_read.record_many(n, nbytes)
                c.m.read_latency.record_many(n, read_s * 1000.0)

        def check_abort() -> None:
            why = should_abort()
            if why:
                raise _Aborted(why)

        async def read_gap(source: str, g: Gap, index: int, length: int) -> tuple[list[Gap], str]:
            """Stream ``g``'s ids from ``source`` (filter ``bookie_index=index, write_quorum=length``) in
            chunks of :data:`MAX_STREAM_IDS`, copy what verifies, and return the sub-gaps not copied with
            ``source``'s reason, and the status that ended the stream early (``""``: none)."""
            run = g.run
            covers = run.covers
            out: list[Gap] = []
            state: dict[str, Any] = {"cursor": run.first, "reason": "", "seen": run.first - 1}

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
                    async with contextlib.aclosing(c.bookies.read_entry_batches(
                        source, ledger_id, a, b, ensemble_size=e_size, write_quorum=length, bookie_index=index,
                    )) as stream:
                        async for batch in stream:
                            now = time.monotonic()
                            check_abort()
                            ok: list[tuple[int, bytes]] = []
                            nbytes = 0
                            # the cursor in a local while entries follow one another (the common case);
                            # the state dict is brought up to date before close() / note() read it
                            cursor = state["cursor"]
                            for item in batch:
                                if isinstance(item, BookieError):
                                    eid = _entry_of(item)
                                    if eid is not None and eid >= cursor and covers(eid):
                                        state["cursor"], state["seen"] = cursor, max(state["seen"], cursor - 1)
                                        note(eid, item.status)
                                        cursor = state["cursor"]
                                    continue
                                eid = item.entry_id
                                if eid >= cursor and covers(eid):
                                    body = item.body
                                    if accept(eid, body, source):
                                        if eid > cursor or state["reason"]:
                                            state["cursor"], state["seen"] = cursor, max(state["seen"], cursor - 1)
                                            if eid > cursor:
                                                close(eid - 1, state["reason"] or "MISSING")
                                            state["reason"] = ""
                                        cursor = eid + 1
                                        ok.append((eid, body))
                                        nbytes += len(body)
                                    else:
                                        state["cursor"], state["seen"] = cursor, max(state["seen"], cursor - 1)
                                        note(eid, "DIGEST")
                                        cursor = state["cursor"]
                            state["cursor"], state["seen"] = cursor, max(state["seen"], cursor - 1)
                            if ok:
                                count_read(len(ok), nbytes, now - t_prev)
                                await emit(ok, nbytes, source)
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
            if not c.pull or len(spec.targets) != 1 or not c.bucket.unlimited or target in writers:
                return False
            if digest.digest_type == DigestType.HMAC:
                # the target would have to verify each entry's HMAC, which needs the ledger's password;
                # passwords never go to bookies (they get the master key, a one-way hash of it), so an
                # HMAC ledger is always copied through this process, which verifies it
                return False
            try:
                if not await c.bookies.pulls(target, source):
                    return False
                if digest.digest_type != DigestType.CRC32C and not (
                        await c.bookies.features(target) & pb.PULL_DIGEST_TYPES):
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
                    async with contextlib.aclosing(c.bookies.pull_entries(
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
                                    if c.m is not None:
                                        c.m.corrupt_source_entries.inc()
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
                                if c.m is not None:
                                    per_entry_ms = (now - t_prev) * 1000.0 / n
                                    c.m.entries_read.inc(n)
                                    c.m.entries_written.inc(n)
                                    c.m.read_latency.record_many(n, per_entry_ms * n)
                                    c.m.bytes_read.record_many(n, rep.bytes_stored)
                                    c.m.bytes_written.record_many(n, rep.bytes_stored)
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
            if c.m is not None:
                c.m.write_latency.record((time.monotonic() - t0) * 1000.0)
            c.pulls += 1
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
                held, absent = await c.held(source, ledger_id, held_cache, (ensemble.index(source), e_size, wq))
                present, nxt = split_gaps(gaps, held, source, absent)
                pulling = not touched and await can_pull(source)
                touched = True
                if present:
                    async with c.slot(source, spec.targets):
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
                        held, absent = await c.held(b, ledger_id, held_cache, (ensemble.index(b), e_size, wq))
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
                    if c.m is not None:
                        c.m.unable_to_read.inc(x.count())
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
        for t, outcome in zip(writers, results, strict=True):
            if isinstance(outcome, BaseException):
                raise TargetWriteError(t, outcome)
            acked, acked_bytes = outcome
            expected = sent[t]
            if acked != expected:
                raise TargetWriteError(t, BookieError(t, "EIO", f"wrote {acked} of {expected} entries"))
            res.entries_written += acked
            res.bytes_written += acked_bytes
            if c.m is not None:
                c.m.entries_written.inc(acked)


def _entry_of(err: BookieError) -> int | None:
    """Entry id of an ENOENTRY stream item (``BookieClient.read_entries`` sets ``entry_id``)."""
    return getattr(err, "entry_id", None)
