"""The checks behind every line ``make demo`` prints (EDGE): a claim is printed only when it was checked.

Each check returns the text of the claim it verified, or raises :class:`DemoStepFailed` (a
``click.ClickException``: the demo exits 1 with the step and what was found instead). Issue 9: the
demo used to print "auditor elected, workers running", "6 bookies writable" and "all processes
stopped" without looking.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping

import click


class DemoStepFailed(click.ClickException):
    """A demo step's check failed; the message names the step and what was found. Exit code 1."""

    exit_code = 1

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"demo step failed: {step}: {detail}")
        self.step, self.detail = step, detail


def require(ok: bool, step: str, detail: str) -> None:
    """Raise :class:`DemoStepFailed` (``step``: ``detail``) unless ``ok``."""
    if not ok:
        raise DemoStepFailed(step, detail)


async def writable_bookies(watcher, n: int, step: str, timeout_s: float = 15.0) -> str:
    """Wait (watch-driven, bounded) until exactly ``n`` bookies are writable; returns ``"n bookies writable"``.

    ``watcher``: a started :class:`~autorecovery.zk.bookies.BookieWatcher`."""
    ok = await watcher.wait_until(lambda w: len(w.writable) == n, timeout_s)
    require(ok, step, f"{len(watcher.writable)} of {n} bookies writable after {timeout_s:.0f} s: "
                      f"{sorted(watcher.writable)}")
    return f"{n} bookies writable"


async def unregistered(watcher, bookie_ids: Iterable[str], step: str, timeout_s: float = 15.0) -> str:
    """Wait until none of ``bookie_ids`` is registered (writable or read-only); returns them joined."""
    ids = set(bookie_ids)
    ok = await watcher.wait_until(lambda w: not (ids & set(w.available)), timeout_s)
    require(ok, step, f"still registered after {timeout_s:.0f} s: {sorted(ids & set(watcher.available))}")
    return ", ".join(sorted(ids))


def processes_dead(cluster, names: Iterable[str], step: str) -> None:
    """Every named process of ``cluster`` (``LocalCluster.status()`` names) is gone."""
    status = cluster.status()
    alive = sorted(n for n in names if status.get(n))
    require(not alive, step, f"still running: {alive}")


def all_processes_stopped(cluster, step: str = "shut the cluster down") -> str:
    """Every process the cluster started (bookies, daemons, ZooKeeper) is gone; returns the claim."""
    status = cluster.status()
    alive = sorted(n for n, up in status.items() if up)
    require(not alive, step, f"still running: {alive}")
    return f"all {len(status)} processes stopped"


def _get(port: int, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _elected(metrics_text: str) -> bool:
    return "\nautorecovery_auditor_elected 1.0\n" in "\n" + metrics_text


def daemons_ready(ports: Mapping[int, int], step: str, timeout_s: float = 30.0) -> str:
    """Every daemon (index → HTTP port) answers ``/readyz`` ready with its worker running, and exactly
    one exports ``autorecovery_auditor_elected 1``. Polls the daemons' HTTP endpoints until
    ``timeout_s`` (a bounded wait on a condition). Returns ``"auditor elected (daemon i), n workers running"``."""
    deadline = time.monotonic() + timeout_s
    problem = "no answer"
    while True:
        try:
            not_ready, elected = [], []
            for i, port in sorted(ports.items()):
                code, body = _get(port, "/readyz")
                doc = json.loads(body)
                if code != 200 or not doc.get("ready") or not doc.get("roles", {}).get("worker"):
                    not_ready.append(i)
                if _elected(_get(port, "/metrics")[1]):
                    elected.append(i)
            if not not_ready and len(elected) == 1:
                return f"auditor elected (daemon {elected[0]}), {len(ports)} workers running"
            problem = f"not ready: {not_ready}; electing autorecovery_auditor_elected=1: {elected}"
        except (OSError, ValueError) as exc:
            problem = f"HTTP check failed: {exc}"
        if time.monotonic() >= deadline:
            raise DemoStepFailed(step, f"after {timeout_s:.0f} s {problem}")
        time.sleep(0.2)  # polling other processes' HTTP endpoints, bounded by the deadline


__all__ = ["DemoStepFailed", "require", "writable_bookies", "unregistered", "processes_dead",
           "all_processes_stopped", "daemons_ready"]
