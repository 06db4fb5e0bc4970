"""The checks of a chaos campaign: what is sampled during the run and what is proved after it (EDGE).

During the run, :class:`Sampler` polls every ``interval_s``:

- the under-replication markers (``/ledgers/underreplication/ledgers``): each ledger seen marked is
  counted; a ledger is *under-replicated* from the loss of a bookie (the last bookie lost before the
  ledger was first seen marked) until its marker is gone; the longest such span is reported;
- every ``proc_interval_s`` (5 s), each bookie's and daemon's RSS and open file descriptors, from
  ``/proc`` (psutil), into :class:`~autorecovery.testing.chaos_trend.Trends` (start, peak, end and
  slope per hour of each process's longest incarnation).

After the run (faults stopped, writer stopped), :func:`copies_missing` runs the auditor's own replicas
check maths (:func:`autorecovery.audit.replicas.classify`) over every CLOSED ledger in the metadata,
asking every bookie of every segment for its entries (``GET_LIST_OF_ENTRIES_OF_LEDGER``), and
:func:`error_lines` counts ERROR/CRITICAL lines in the daemons' logs.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from autorecovery.audit.replicas import Bucket, classify, segment_bounds, should_check
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.errors import AutoRecoveryError, BookieError
from autorecovery.ledger.ids import ur_leaf_name
from autorecovery.testing.chaos_trend import Trends
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager


@dataclass
class Timeline:
    """Markers seen during the run: ledger id → its episodes [first seen marked, healed at or None]
    (monotonic s); a ledger marked again after a heal starts a new episode."""

    marked: dict[int, list[list[float | None]]] = field(default_factory=dict)
    losses: list[tuple[float, str]] = field(default_factory=list)

    def bookie_lost(self, bookie_id: str, at: float) -> None:
        """Record that ``bookie_id`` went down at ``at`` (monotonic s): the start of the under-replication of
        the ledgers marked after it."""
        self.losses.append((at, bookie_id))

    def observe(self, marked_now: set[int], at: float) -> None:
        """Fold one poll of the marked ledger ids taken at ``at`` (monotonic s): a ledger newly marked opens
        an episode, a ledger no longer marked closes its open one."""
        for lid in marked_now:
            eps = self.marked.setdefault(lid, [])
            if not eps or eps[-1][1] is not None:
                eps.append([at, None])
        for lid, eps in self.marked.items():
            if lid not in marked_now and eps[-1][1] is None:
                eps[-1][1] = at

    @property
    def healed(self) -> int:
        """Ledgers whose last episode ended (marker gone)."""
        return sum(1 for eps in self.marked.values() if eps[-1][1] is not None)

    def longest_under_replicated_s(self, now: float) -> float:
        """Longest episode, from the bookie loss before the ledger was seen marked to its marker's
        removal (``now`` for a ledger still marked)."""
        return self.longest(now)[0]

    def longest(self, now: float) -> tuple[float, int | None]:
        """(:meth:`longest_under_replicated_s`, the ledger id it belongs to or None)."""
        best, which = 0.0, None
        for lid, eps in self.marked.items():
            for first, healed in eps:
                assert first is not None
                lost = [t for t, _ in self.losses if t <= first]
                start = lost[-1] if lost else first
                span = (healed if healed is not None else now) - start
                if span > best:
                    best, which = span, lid
        return best, which


class Sampler:
    """Background poll of markers (every ``interval_s`` s) and of the bookies' and daemons' /proc
    figures (every ``proc_interval_s`` s); see the module docstring."""

    def __init__(self, cluster: LocalCluster, urm: UnderreplicationManager, interval_s: float = 0.5,
                 proc_interval_s: float = 5.0) -> None:
        self.cluster = cluster
        self.urm = urm
        self.interval_s = interval_s
        self.proc_interval_s = proc_interval_s
        self.timeline = Timeline()
        self.trends = Trends()
        self._next_proc = 0.0
        self._task: asyncio.Task | None = None

    def start(self) -> "Sampler":
        """Start polling in a background task (of the running event loop); returns self."""
        self._task = asyncio.ensure_future(self._run())
        return self

    async def stop(self) -> None:
        """Cancel the polling task and wait for it (idempotent)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def sample_once(self) -> None:
        """One poll: the markers (a ZooKeeper error skips this poll's markers, the next poll retries) and,
        when ``proc_interval_s`` has passed since the last, the processes (:meth:`sample_procs`)."""
        try:
            marked = await self.urm.list_marked_ids()
        except (AutoRecoveryError, NoNodeError, OSError):
            marked = None
        if marked is not None:
            self.timeline.observe(set(marked), time.monotonic())
        now = time.monotonic()
        if now >= self._next_proc:
            self._next_proc = now + self.proc_interval_s
            self.sample_procs(now)

    def sample_procs(self, now: float) -> None:
        """One RSS and fd sample of every bookie and daemon process (a process gone is skipped)."""
        for kind, procs in (("bookie", self.cluster.bookies), ("daemon", self.cluster.daemons)):
            for i, info in list(procs.items()):
                if info.pid <= 0:
                    continue
                try:
                    p = psutil.Process(info.pid)
                    rss, fds = p.memory_info().rss, p.num_fds()
                except (psutil.Error, OSError, ValueError):
                    continue
                if rss == 0:  # a zombie (killed, not yet reaped) has no memory: not a sample
                    continue
                self.trends.add(f"{kind}-{i}", info.pid, now, rss, fds)

    async def _run(self) -> None:
        while True:
            await self.sample_once()
            await asyncio.sleep(self.interval_s)  # a sampling period, not a synchronisation


async def queue_state(zk: ZkClient, paths: Paths, urm: UnderreplicationManager) -> tuple[int, int]:
    """(markers, locks) under the under-replication tree."""
    markers = len(await urm.list_marked_ids())
    try:
        locks = len(await zk.get_children(paths.ur_locks))
    except NoNodeError:
        locks = 0
    return markers, locks


async def queue_dump(zk: ZkClient, paths: Paths, urm: UnderreplicationManager, limit: int = 10) -> list[str]:
    """Up to ``limit`` markers left in the queue, one line each: ledger id, the bookies the marker
    names, the lock holder and whether an unrecoverable record exists, so a settle timeout says what
    stayed (issue 26: the hour's settle once timed out with no word of which ledgers)."""
    try:
        unrecoverable = set(await zk.get_children(paths.unrecoverable))
    except NoNodeError:
        unrecoverable = set()
    out: list[str] = []
    async for m in urm.list_underreplicated():
        holder = await urm.lock_holder(m.ledger_id)
        rec = ur_leaf_name(m.ledger_id) in unrecoverable
        out.append(f"ledger {m.ledger_id}: replicas {sorted(m.replicas)}, lock {holder or '-'}"
                   f"{', unrecoverable record' if rec else ''}")
        if len(out) >= limit:
            break
    return out


@dataclass
class CopiesReport:
    """Result of :func:`copies_missing`: ledgers checked, ledger id → bucket and where for each not OK,
    ledgers some bookie could not answer for."""

    checked: int = 0
    not_ok: dict[int, str] = field(default_factory=dict)
    unanswered: dict[int, list[str]] = field(default_factory=dict)


async def copies_missing(bk: BookKeeper) -> CopiesReport:
    """Every CLOSED, non-empty ledger's replicas, by the auditor's replicas-check maths."""
    rep = CopiesReport()
    sem = asyncio.Semaphore(32)

    async def ask(bookie: str, lid: int):
        """The entries ``bookie`` holds of ``lid``: its answer, None for ENOLEDGER, the exception otherwise."""
        try:
            return await bk.bookies.get_list_of_entries(bookie, lid)
        except BookieError as exc:
            return None if exc.status == "ENOLEDGER" else exc
        except Exception as exc:  # noqa: BLE001 - an unanswered bookie is reported, not fatal
            return exc

    async def one(lid: int) -> None:
        """Classify one ledger's replicas (skips a deleted, open or empty ledger)."""
        async with sem:
            try:
                md, _ = await bk.ledgers.read(lid)
            except NoNodeError:
                return  # deleted meanwhile
            if not should_check(md):
                return
            rep.checked += 1
            bookies = sorted({b for _, _, ens in segment_bounds(md) for b in ens})
            answers = dict(zip(bookies, await asyncio.gather(*(ask(b, lid) for b in bookies))))
            v = classify(md, answers)
            if v.bucket != Bucket.OK:
                rep.not_ok[lid] = (f"{v.bucket.value}: {v.missing_total} entries missing on {', '.join(v.bookies_missing)} "
                                   f"(sample {sorted(v.missing_counts)[:5]}; segments "
                                   f"{[(a, b, list(e)) for a, b, e in segment_bounds(md)]})")
            if v.unavailable:
                rep.unanswered[lid] = v.unavailable

    await asyncio.gather(*(one(lid) for lid in await bk.ledgers.list_ledger_ids()))
    return rep


def error_lines(log: Path) -> list[str]:
    """JSON log lines at level error/critical in a daemon's log, and tracebacks."""
    out: list[str] = []
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if "Traceback (most recent call last)" in line:
            out.append(line)
        elif line.startswith("{"):
            try:
                if json.loads(line).get("level") in ("error", "critical", "exception"):
                    out.append(line)
            except ValueError:
                continue
    return out
