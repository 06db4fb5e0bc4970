"""The demo's progress line, from the daemons' own progress (issue 28).

Each autorecovery daemon counts what its worker did as it happens (``plan.progress.ProgressTracker``:
ledgers healed and bytes copied since it started) and serves it with the cluster's view (ledgers and
bytes left, smoothed rate, ETA, blocked) at ``GET /api/v1/autorecovery/progress``. A
:class:`HealWatch` takes the daemons' counters when a step starts (before the host is killed), so a
line tells what the daemons did *since that start*, however fast the heal: a heal done between two
samples shows as done, never as a line of zeros (the demo used to sample the under-replication
markers in ZooKeeper, and a heal finished between samples printed ``0 ledgers marked, 0.00 MB left``).

Lines: ``    re-replication: 12 ledgers done, 6.14 MB copied; 8 left (4.10 MB), 2.05 MB/s, ETA 2.0s``
(``, 3 blocked`` when some cannot progress). A line is printed when the numbers change (at most one a
second) and once when the step's check passes; nothing is printed while no daemon has anything to
report yet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import click

PROGRESS_PATH = "/api/v1/autorecovery/progress"


@dataclass(frozen=True)
class HealSample:
    """The daemons' progress summed over daemons, counters relative to the watch's start.

    healed / copied_bytes: ledgers the daemons' workers finished (re-replicated, or found with nothing
    left to copy) and bytes they wrote, since the watch started. left / left_bytes / blocked: the cluster view (largest over daemons: each sees the
    whole cluster, up to refresh delays). rate_bytes_per_s and eta_s: the daemons' smoothed cluster
    rate and ETA (of the daemon seeing the most left; ``None`` when unknown). answered: daemons that
    answered this sample.
    """

    healed: int = 0
    copied_bytes: int = 0
    left: int = 0
    left_bytes: int = 0
    blocked: int = 0
    rate_bytes_per_s: float = 0.0
    eta_s: float | None = None
    answered: int = 0

    @property
    def has_news(self) -> bool:
        """Something was done or is left to do (a line of only zeros says nothing)."""
        return bool(self.healed or self.copied_bytes or self.left or self.blocked)

    def line(self, label: str) -> str:
        eta = "-" if self.eta_s is None else f"{self.eta_s:.1f}s"
        blocked = f", {self.blocked} blocked" if self.blocked else ""
        return (f"    {label}: {self.healed} ledgers done, {self.copied_bytes / 1e6:.2f} MB copied; "
                f"{self.left} left ({self.left_bytes / 1e6:.2f} MB), {self.rate_bytes_per_s / 1e6:.2f} MB/s, "
                f"ETA {eta}{blocked}")


def summarize(docs: Mapping[int, Mapping[str, Any]], baseline: Mapping[int, tuple[int, int]]) -> HealSample:
    """One :class:`HealSample` from the progress documents of the daemons that answered (daemon index →
    ``/progress`` JSON) and the ``(ledgers_done, bytes_copied)`` each had when the watch started (a
    daemon started later counts from 0). Pure."""
    healed = copied = left = left_bytes = blocked = 0
    rate, eta = 0.0, None
    for i, doc in docs.items():
        worker = doc.get("worker") or {}
        cluster = doc.get("cluster") or {}
        done0, bytes0 = baseline.get(i, (0, 0))
        healed += max(0, int(worker.get("ledgers_done", 0)) - done0)
        copied += max(0, int(worker.get("bytes_copied", 0)) - bytes0)
        n_left = int(cluster.get("ledgers_remaining", 0))
        if n_left >= left:
            left, left_bytes, eta = n_left, int(cluster.get("bytes_remaining", 0)), cluster.get("eta_s")
        blocked = max(blocked, int(cluster.get("ledgers_blocked", 0)))
        rate = max(rate, float(cluster.get("rate_bytes_per_s", 0.0)))
    return HealSample(healed, copied, left, left_bytes, blocked, rate, eta, len(docs))


@dataclass
class HealWatch:
    """Follows a heal through the daemons' progress endpoints (daemon index → HTTP port).

    Create it with :meth:`start` *before* the event that starts the heal (a host killed, a rack back):
    ``started`` is then the heal's own start for the step's time, and the counters taken then are the
    baseline of every line.
    """

    ports: dict[int, int]
    started: float = field(default_factory=time.monotonic)
    baseline: dict[int, tuple[int, int]] = field(default_factory=dict)
    last: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    finished_at: float | None = None

    @classmethod
    async def start(cls, ports: Mapping[int, int]) -> HealWatch:
        watch = cls(dict(ports))
        for i, doc in (await watch._fetch()).items():
            worker = doc.get("worker") or {}
            watch.baseline[i] = (int(worker.get("ledgers_done", 0)), int(worker.get("bytes_copied", 0)))
        return watch

    def forget(self, indexes) -> None:
        """Daemons that were stopped: their counters so far still count; they are not asked again."""
        for i in indexes:
            self.ports.pop(i, None)

    def add(self, ports: Mapping[int, int]) -> None:
        """Daemons started after the watch (their counters count from 0)."""
        self.ports.update(ports)

    async def _fetch(self) -> dict[int, Mapping[str, Any]]:
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            async def one(i: int, port: int):
                try:
                    async with http.get(f"http://127.0.0.1:{port}{PROGRESS_PATH}") as r:
                        return i, (await r.json()) if r.status == 200 else None
                except (TimeoutError, aiohttp.ClientError, ValueError):
                    return i, None  # a daemon that does not answer keeps its last counters

            got = await asyncio.gather(*(one(i, p) for i, p in self.ports.items()))
        return {i: doc for i, doc in got if isinstance(doc, dict)}

    async def sample(self) -> HealSample:
        """Ask every daemon once; a daemon that does not answer counts with its last answer."""
        self.last.update(await self._fetch())
        return summarize(self.last, self.baseline)

    async def follow(self, done: Callable[[], Awaitable[bool]], timeout_s: float, label: str,
                     every_s: float = 1.0, echo: Callable[[str], None] = click.echo,
                     settle_s: float = 5.0) -> tuple[bool, HealSample]:
        """Print progress lines until ``done()`` (the step's own check) is true or ``timeout_s`` passes.

        When the check passes, the daemons are asked again for up to ``settle_s`` until their counters
        show the work and their cluster view nothing left (their trackers update right after the markers
        go, and refresh the marker set every few seconds), so the closing line agrees with the check.
        :attr:`finished_at` is when the check passed (the step's end). Returns (finished, the last sample).
        """
        deadline = time.monotonic() + timeout_s
        printed, last_print = "", 0.0
        while True:
            s = await self.sample()
            finished = await done()
            if finished:
                self.finished_at = time.monotonic()
                settle = self.finished_at + settle_s
                while not ((s.healed or s.copied_bytes) and not s.left) and time.monotonic() < settle:
                    await asyncio.sleep(0.1)  # polling other processes' counters, bounded by `settle`
                    s = await self.sample()
            line = s.line(label)
            if s.has_news and line != printed and (finished or time.monotonic() - last_print >= every_s):
                echo(line)
                printed, last_print = line, time.monotonic()
            if finished or time.monotonic() >= deadline:
                return finished, s
            await asyncio.sleep(0.25)  # a progress display polls at a fixed pace


__all__ = ["HealSample", "HealWatch", "summarize", "PROGRESS_PATH"]
