"""Issue 15 regression: finished HTTP admin jobs were kept forever (300 PUTs → 303 jobs)."""

from __future__ import annotations

import asyncio

from autorecovery.admin.http_jobs import Jobs


async def test_finished_jobs_are_bounded_and_expire_running_ones_kept():
    now = [0.0]
    jobs = Jobs(max_finished=5, keep_s=100.0, clock=lambda: now[0])
    release = asyncio.Event()

    async def slow(_job):
        await release.wait()
        return "slow"

    async def quick(_job):
        return "ok"

    running = jobs.start("recover", "b:1", slow)
    done = [jobs.start("decommission", f"b:{i}", quick) for i in range(300)]
    await asyncio.gather(*(j.task for j in done))
    snap = jobs.snapshot()
    assert len(snap) == 6  # the running one + the newest 5 finished
    assert snap[0]["id"] == running.id and snap[0]["state"] == "running"
    assert [j["id"] for j in snap[1:]] == [j.id for j in done[-5:]]
    now[0] = 150.0  # past keep_s: every finished job expires, the running one stays
    assert [j["id"] for j in jobs.snapshot()] == [running.id]
    release.set()
    await running.task
    await jobs.stop()
