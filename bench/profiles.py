"""py-spy profiles of a bench's server processes, shared by the benches (``--profile DIR``).

* :func:`start_profiles`: ``py-spy record --native`` (raw collapsed stacks, under ``nice -n 19`` so the
  profiler does not take the measured processes' CPU) on every process of ``procs`` (name ->
  ``psutil.Process`` or ``Popen``) whose name starts with one of ``prefixes``, into ``out/<name>.txt``;
* :func:`stop_profiles`: SIGINT to each profiler (py-spy writes its file then) and a bounded wait.

Not a test.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from pathlib import Path


def start_profiles(procs: dict, out: Path | str, prefixes: tuple[str, ...], rate_hz: int) -> list:
    """One ``py-spy record`` per process of ``procs`` named with one of ``prefixes``, sampling at
    ``rate_hz`` Hz into ``out/<name>.txt``; returns the profilers' ``Popen`` objects."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return [subprocess.Popen(["nice", "-n", "19", spy, "record", "--native", "--rate", str(rate_hz),
                              "--format", "raw", "-o", str(out / f"{k}.txt"), "-p", str(p.pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for k, p in procs.items() if k.startswith(prefixes)]


def stop_profiles(spies: list, timeout_s: float) -> None:
    """Stop the profilers (SIGINT: py-spy writes its file) and wait up to ``timeout_s`` s for each."""
    for s in spies:
        s.send_signal(signal.SIGINT)
    for s in spies:
        with contextlib.suppress(Exception):
            s.wait(timeout_s)
