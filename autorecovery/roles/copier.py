"""Streams a fragment's entries from surviving replicas to target bookies (EDGE).

Upstream source: ``LedgerFragmentReplicator`` (``replicate`` → batches of ``rereplicationEntryBatchSize``
entries; per entry a client read, a digest re-pack, and an ADD with ``RECOVERY_ADD`` to every target;
``replicationRateByBytes`` throttle; metrics NUM_ENTRIES_READ / NUM_BYTES_READ / READ_DATA_LATENCY /
NUM_ENTRIES_WRITTEN / NUM_BYTES_WRITTEN / WRITE_DATA_LATENCY).

The copier is three modules: this one (:class:`FragmentCopier`: stream slots, the copy as a whole,
what a bookie holds, why entries are unreadable), :mod:`autorecovery.roles.copy_stream` (one
stream) and :mod:`autorecovery.roles.copy_result` (:class:`CopyResult`, :class:`TargetWriteError`).

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
  and across the cluster (:class:`~autorecovery.zk.stream_slots.ClusterStreamSlots`). A copy the
  caller estimates at :data:`SLOTLESS_COPY_BYTES` or less takes no cluster-wide slots (issue 29: two
  ZooKeeper ``multi`` and the listing reads they need cost more than copying 1 MiB); the per-process
  caps still bound it, so N workers may each add their own cap of such small streams on one bookie.
* ``should_abort()`` is polled between entries (the worker aborts when a lost bookie comes back,
  #2766, or on stop). Aborting or failing leaves the metadata untouched: the worker updates the
  ensemble only after :meth:`FragmentCopier.copy` returns a complete result.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable, Collection, Iterable

import structlog

from autorecovery.errors import BookieError, DigestMismatchError
from autorecovery.ledger.digest import CRC32C, EntryDigest
from autorecovery.ledger.striping import write_set
from autorecovery.plan import entry_runs
from autorecovery.plan.adaptive_rate import AdaptiveRates
from autorecovery.plan.entry_runs import Gap, merge_gaps, split_gaps
from autorecovery.plan.targets import FragmentPlan
from autorecovery.plan.throttle import StreamCaps, TokenBucket
from autorecovery.roles import holdings
from autorecovery.roles.copy_result import CopyResult, TargetWriteError, _Aborted
from autorecovery.roles.copy_stream import StreamCopy

log = structlog.get_logger("autorecovery.copier")

#: A copy estimated at this many bytes or fewer takes no cluster-wide stream slots (1 MiB; the
#: per-process stream caps still apply). See the module docstring.
SLOTLESS_COPY_BYTES = 1024 * 1024

#: True inside a copy that takes no cluster-wide slots (set by :meth:`FragmentCopier.copy` before it
#: starts the copy's stream tasks, which inherit it).
_SLOTLESS: contextvars.ContextVar[bool] = contextvars.ContextVar("slotless_copy", default=False)


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
        adaptive: the adaptive throttle (:class:`~autorecovery.plan.adaptive_rate.AdaptiveRates`): fed
            the latency of the copy's requests to each bookie (the bookie client's
            ``latency_observers``, stock bookies), it limits the bytes each source and target moves;
            None: no adaptive limit. ``replicationRateByBytes`` (``byte_bucket``) applies as well.
    """

    def __init__(self, bookies, *, byte_bucket: TokenBucket, caps: StreamCaps, caps_changed: asyncio.Condition,
                 window_entries: int = 256, window_bytes: int = 16 * 1024 * 1024, metrics=None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, cluster_slots=None,
                 pull: bool = True, adaptive: AdaptiveRates | None = None) -> None:
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
        self.adaptive = adaptive if adaptive is not None and adaptive.settings.enabled else None
        self._bookie_buckets: dict[str, TokenBucket] = {}
        #: runs each stream of a copy (composed: it uses this copier's parts)
        self.streams = StreamCopy(self)
        self._decisions_seen: dict[str, int] = {}
        if self.adaptive is not None:
            # the upstream transport reports its requests' latency (BookieClient holds it as .upstream)
            for client in (bookies, getattr(bookies, "upstream", None)):
                observers = getattr(client, "latency_observers", None)
                if isinstance(observers, list):
                    observers.append(self._observe)

    # -- the adaptive throttle ---------------------------------------------------------------------
    def _observe(self, bookie_id: str, latency_s: float, nbytes: int, entries: int = 1) -> None:
        if self.adaptive is not None:
            self.adaptive.observe(bookie_id, latency_s, nbytes, time.monotonic(), entries)

    def adaptive_wait(self, bookies: Iterable[str], nbytes: int) -> float:
        """Seconds to wait before ``nbytes`` go through ``bookies`` (a stream's source and targets) under
        their adaptive limits (0: none limits them); the limits' decisions due now are taken here and
        published to the metrics."""
        if self.adaptive is None:
            return 0.0
        now = time.monotonic()
        wait = 0.0
        for b in bookies:
            lim = self.adaptive.limit(b, now)
            st = self.adaptive.bookies.get(b)
            if st is not None and self._decisions_seen.get(b) != st.decisions:
                self._decisions_seen[b] = st.decisions
                if self.m is not None and hasattr(self.m, "rate_limit"):
                    self.m.rate_limit(b, lim, st.reason)
            if lim is None:
                continue
            bucket = self._bookie_buckets.get(b)
            if bucket is None:
                bucket = self._bookie_buckets[b] = TokenBucket(lim, time.monotonic)
            bucket.rate = lim
            wait = max(wait, bucket.reserve(nbytes))
        return wait

    # -- stream slots ------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def slot(self, source: str, targets: Collection[str]):
        async with self.caps_changed:
            await self.caps_changed.wait_for(lambda: self.caps.try_start(source, targets))
        held: list[str] = []
        try:
            if self.cluster_slots is not None and not _SLOTLESS.get():  # then the cluster-wide slots (all or none, may wait)
                held = await self.cluster_slots.acquire(source, targets)
            yield
        finally:
            if held:
                try:
                    await asyncio.shield(self.cluster_slots.release(held))
                except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.debug("best-effort step failed", step="_slot", error=repr(cleanup_exc))
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
        estimated_bytes: int | None = None,
        listings: dict | None = None,
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
            estimated_bytes: the caller's estimate of the bytes to read (None: unknown); at most
                :data:`SLOTLESS_COPY_BYTES` → no cluster-wide stream slots for this copy.
            listings: what each bookie stores of the ledger, as :meth:`absent` of the same segment
                just asked (:data:`autorecovery.roles.holdings.Cache`); None: asked again.

        Raises:
            TargetWriteError: a target refused a write (the caller may exclude it and retry later).
        """
        res = CopyResult()
        res.unreadable.extend(Gap(run) for run in plan.unsourced)
        held: dict = {} if listings is None else listings  # bookie -> what it stores (asked once per copy)
        if not plan.streams:
            await self.explain(ledger_id, ensemble, write_quorum, res, registered, digest, held)
            return res
        token = _SLOTLESS.set(estimated_bytes is not None and 0 <= estimated_bytes <= SLOTLESS_COPY_BYTES)
        try:  # the stream tasks copy the context (and the flag) when they are created
            tasks = [asyncio.create_task(self.streams.run(ledger_id, master_key, ensemble, write_quorum, spec, res,
                                                      registered, skip_sources, should_abort, on_bytes, digest,
                                                      held))
                     for spec in plan.streams]
        finally:
            _SLOTLESS.reset(token)
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
                stores, absent = await self.held(b, ledger_id, cache, (j, e_size, wq))
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
    async def held(self, bookie: str, ledger_id: int, cache: dict,
                    striping: tuple[int, int, int]) -> tuple[list[tuple[int, int]] | None, str]:
        """:func:`autorecovery.roles.holdings.held` through this copier's bookie client."""
        return await holdings.held(self.bookies, bookie, ledger_id, cache, striping)

    async def absent(self, ledger_id: int, ensemble: tuple[str, ...], wq: int, first: int, last: int,
                     registered: Callable[[], Collection[str]], listings: dict | None = None) -> list[Gap]:
        """:func:`autorecovery.roles.holdings.absent` through this copier's bookie client: the entries of
        ``[first, last]`` no bookie of their write set holds (data loss found before any target is
        chosen or any entry read, issue 25)."""
        return await holdings.absent(self.bookies, ledger_id, ensemble, wq, first, last, registered, listings)

#: Sorted inclusive ``[first, last]`` runs of entry ids (for logs); runs of runs: ``entry_runs.spans``.
ranges = entry_runs.id_ranges
