"""The checks of a chaos campaign: what is sampled during the run and what is proved after it (EDGE).

During the run, :class:`Sampler` polls every ``interval_s``:

- the under-replication markers (``/ledgers/underreplication/ledgers``): each ledger seen marked is
  counted; a ledger is *under-replicated* from the loss of a bookie (the last bookie lost before the
  ledger was first seen marked) until its marker is gone; the longest such span is reported;
- every ``proc_interval_s`` (5 s), each bookie's and daemon's RSS and open file descriptors, from
  ``/proc`` (psutil), into :class:`~autorecovery.testing.chaos.trend.Trends` (start, peak, end and
  slope per hour of each process's longest incarnation).

After the run (faults stopped, writer stopped), :func:`copies_missing` runs the auditor's own replicas
check maths (:func:`autorecovery.audit.replicas.classify`) over every CLOSED ledger in the metadata,
asking every bookie of every segment for its entries (``GET_LIST_OF_ENTRIES_OF_LEDGER``), and
:func:`error_lines` counts ERROR/CRITICAL lines in the daemons' logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from autorecovery.audit.replicas import Bucket, classify, segment_bounds, should_check
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.errors import AutoRecoveryError, BookieError
from autorecovery.ledger.ids import ur_leaf_name
from autorecovery.testing.chaos.trend import Trends
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
    #: the faults as applied: (start, end monotonic s, ``#seq kind``)
    faults: list[tuple[float, float, str]] = field(default_factory=list)
    #: ledger id → [(poll time, the blocked reason some daemon's progress endpoint named, or None)] for
    #: every poll of the progress endpoints that saw the ledger marked
    reasons: dict[int, list[tuple[float, str | None]]] = field(default_factory=dict)

    def fault(self, start: float, end: float, label: str) -> None:
        """Record a fault applied from ``start`` to ``end`` (monotonic s)."""
        self.faults.append((start, end, label))

    def observe_reasons(self, marked_now: set[int], blocked: dict[int, str], at: float) -> None:
        """Fold one poll of the daemons' progress endpoints: each marked ledger's reason (or None)."""
        for lid in marked_now:
            self.reasons.setdefault(lid, []).append((at, blocked.get(lid)))

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


@dataclass(frozen=True)
class Episode:
    """One under-replication episode judged against the bound: ``ledger``; ``start``/``end`` (monotonic
    s; ``end`` is the heal, or the report's time when still marked); ``last_fault`` (label) and
    ``from_s``, the later of the episode's start and that fault's end; ``over_s`` seconds past ``from_s``
    + bound (<= 0: within it); ``reason`` the last blocked reason named for it; ``excused`` when a reason
    was named at every progress poll after ``from_s`` + bound."""

    ledger: int
    start: float
    end: float
    healed: bool
    last_fault: str | None
    from_s: float
    over_s: float
    reason: str | None
    excused: bool

    @property
    def span_s(self) -> float:
        return self.end - self.start

    def describe(self, t0: float = 0.0) -> str:
        """One line: ledger, span, time past the last fault's end, the reason."""
        state = "healed" if self.healed else "still marked"
        if self.last_fault is None:
            when = f"{self.end - self.from_s:.1f}s after it was marked, no fault before it"
        elif self.end <= self.from_s:
            when = f"{'healed' if self.healed else 'ended'} during {self.last_fault}"
        else:
            when = f"{self.end - self.from_s:.1f}s after {self.last_fault} ended (at {self.from_s - t0:.1f}s)"
        return (f"ledger {self.ledger}: {self.span_s:.1f}s under-replicated ({state}), {when}; "
                f"reason: {self.reason or 'none named'}"
                + (" (named throughout)" if self.excused and self.over_s > 0 else ""))


def bound_episodes(tl: Timeline, now: float, bound_s: float) -> list[Episode]:
    """Every episode of ``tl`` judged against ``bound_s`` (PURE): a ledger must be healed within
    ``bound_s`` of the end of the last fault that began before its heal (any fault: in a one-lane
    campaign any fault can stall the healing of any ledger — a daemon down, ZooKeeper without quorum), or
    of the episode's start when later, unless a blocked reason was named for it at every progress poll
    from then on. Longest first."""
    out: list[Episode] = []
    for lid, eps in tl.marked.items():
        polls = tl.reasons.get(lid, [])
        for first, healed in eps:
            assert first is not None
            lost = [t for t, _ in tl.losses if t <= first]
            start = lost[-1] if lost else first
            end = healed if healed is not None else now
            before = [f for f in tl.faults if f[0] < end]
            last = max(before, key=lambda f: f[1]) if before else None
            from_s = max(start, last[1]) if last else start
            over = end - from_s - bound_s
            seen = [(t, r) for t, r in polls if first <= t <= end]
            late = [r for t, r in seen if t >= from_s + bound_s]
            named = [r for _, r in seen if r]
            excused = over > 0 and bool(late) and all(late)
            out.append(Episode(lid, start, end, healed is not None, last[2] if last else None, from_s, over,
                               named[-1] if named else None, excused))
    return sorted(out, key=lambda e: e.span_s, reverse=True)


def progress_blocked(port: int, timeout_s: float = 1.0) -> dict[int, str] | None:
    """A daemon's ``GET /api/v1/autorecovery/progress`` ``cluster.blocked`` (ledger id → reason), or None
    when it does not answer (blocking: run it off the event loop)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/autorecovery/progress", timeout=timeout_s) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError):
        return None
    blocked = ((doc or {}).get("cluster") or {}).get("blocked") or {}
    return {int(k): str(v) for k, v in blocked.items()}


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
        #: nodes whose daemon serves our progress endpoint (all, by default; the stock cluster's
        #: AutoRecoveryMain nodes have none)
        self.progress_nodes: list[int] | None = None
        self.progress_interval_s = 2.0
        self._next_progress = 0.0
        self._next_proc = 0.0
        self._task: asyncio.Task | None = None

    def start(self) -> Sampler:
        """Start polling in a background task (of the running event loop); returns self."""
        self._task = asyncio.ensure_future(self._run())
        return self

    async def stop(self) -> None:
        """Cancel the polling task and wait for it (idempotent)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

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
        if marked and now >= self._next_progress:
            self._next_progress = now + self.progress_interval_s
            blocked: dict[int, str] = {}
            nodes = self.progress_nodes if self.progress_nodes is not None else sorted(self.cluster.daemons)
            for i in nodes:
                info = self.cluster.daemons.get(i)
                if info is None or info.port <= 0:
                    continue
                got = await asyncio.to_thread(progress_blocked, info.port)
                for lid, why in (got or {}).items():
                    blocked.setdefault(lid, why)
            self.timeline.observe_reasons(set(marked), blocked, time.monotonic())
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
            answers = dict(zip(bookies, await asyncio.gather(*(ask(b, lid) for b in bookies)), strict=True))
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
