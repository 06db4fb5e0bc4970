"""Benches that start servers or child processes leave none behind when stopped (a helper, not a bench).

The test servers run in their own process group (``ZooKeeperServer`` starts ZooKeeper with
``start_new_session``), so a SIGTERM to the bench does not reach them and, by default, ends the bench
without running its ``finally`` blocks: the ZooKeeper JVM was left running. :func:`exit_on_signals`
turns SIGTERM and SIGHUP into ``SystemExit`` (SIGINT is ``KeyboardInterrupt`` already), so the bench
unwinds and every ``finally`` stops what it started; :class:`Children` keeps the bench's own child
processes and ends them (SIGTERM, then SIGKILL) on the way out, atexit as a last resort.
"""

from __future__ import annotations

import atexit
import signal
import subprocess
import sys
from types import FrameType


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    # once unwinding, a second signal must not interrupt the clean-up half way
    signal.signal(signum, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def exit_on_signals() -> None:
    """SIGTERM and SIGHUP raise ``SystemExit(128 + signal)`` in the main thread from now on."""
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _raise_exit)


class Children:
    """The bench's child processes (``subprocess.Popen``), each ended by :meth:`stop_all` (idempotent;
    also registered with atexit)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        atexit.register(self.stop_all)

    def add(self, proc: subprocess.Popen) -> subprocess.Popen:
        self.procs.append(proc)
        return proc

    def stop_all(self, timeout_s: float = 5.0) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout_s)
        self.procs.clear()


def child_command(script: str, *args: str) -> list[str]:
    """The command line that runs ``script`` again with ``args`` under this interpreter."""
    return [sys.executable, script, *args]
