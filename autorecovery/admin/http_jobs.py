"""Background admin jobs: a recover or decommission started over HTTP runs as a :class:`Job` in
:class:`Jobs` (bounded: finished jobs are kept for ``keep_s`` seconds, at most ``max_finished`` of them),
whose progress ``GET /api/v1/autorecovery/progress`` shows.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from autorecovery.admin import ops
from autorecovery.errors import AutoRecoveryError

log = structlog.get_logger("autorecovery.http")


# -- background admin jobs (recover / decommission started over HTTP) -----------------------------------
@dataclass
class Job:
    """One background admin operation; ``progress`` is the latest progress snapshot (a dict)."""

    id: int
    kind: str
    target: str
    started_at: float
    state: str = "running"  # running | done | failed | cancelled
    error: str = ""
    result: Any = None
    progress: dict[str, Any] = field(default_factory=dict)
    task: asyncio.Task | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "kind": self.kind, "target": self.target, "state": self.state,
               "started_at": round(self.started_at, 3), "progress": self.progress}
        if self.error:
            out["error"] = self.error
        if self.result is not None:
            out["result"] = self.result
        return out


class Jobs:
    """Owner of background admin tasks: started by PUT requests, cancelled and awaited by :meth:`stop`.

    Finished jobs (done/failed/cancelled) are kept for ``keep_s`` seconds (default 3600) and at most
    ``max_finished`` of them (default 50, oldest dropped first), so repeated PUTs cannot grow memory or
    ``/progress`` without bound (issue 15: 300 PUTs used to leave 303 jobs). Running jobs are never dropped.
    ``clock`` (seconds, default ``time.monotonic``) is injectable for tests.
    """

    def __init__(self, *, max_finished: int = 50, keep_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._stopped = False
        self.max_finished, self.keep_s, self._clock = max_finished, keep_s, clock
        self._finished_at: dict[int, float] = {}

    def _prune(self) -> None:
        now = self._clock()
        for jid, job in list(self._jobs.items()):
            if job.state != "running" and jid not in self._finished_at:
                self._finished_at[jid] = now
        finished = sorted(self._finished_at.items(), key=lambda kv: (kv[1], kv[0]))
        excess = len(finished) - self.max_finished
        for i, (jid, at) in enumerate(finished):
            if i < excess or now - at >= self.keep_s:
                self._jobs.pop(jid, None)
                self._finished_at.pop(jid, None)

    def start(self, kind: str, target: str, run: Callable[[Job], Awaitable[Any]]) -> Job:
        if self._stopped:
            raise ops.AdminError("the daemon is stopping; no new admin jobs")
        job = Job(next(self._ids), kind, target, time.time())

        async def body() -> None:
            try:
                res = await run(job)
                job.result = res
                job.state = "done"
                log.info("admin job finished", job=job.id, kind=kind, target=target)
            except asyncio.CancelledError:
                job.state = "cancelled"
                raise
            except Exception as exc:  # broad: reported in /progress and logged
                # an exception without a message (kazoo's, asyncio's) is named by its type
                why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                job.state, job.error = "failed", why
                log.error("admin job failed", job=job.id, kind=kind, target=target, error=why,
                          exc_info=not isinstance(exc, AutoRecoveryError))

        job.task = asyncio.ensure_future(body())
        self._prune()
        self._jobs[job.id] = job
        return job

    def snapshot(self) -> list[dict[str, Any]]:
        self._prune()
        return [j.as_dict() for j in sorted(self._jobs.values(), key=lambda j: j.id)]

    async def stop(self) -> None:
        """Cancel every running job and await it. Idempotent."""
        self._stopped = True
        tasks = [j.task for j in self._jobs.values() if j.task is not None and not j.task.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
