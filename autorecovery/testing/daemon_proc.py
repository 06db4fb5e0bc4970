"""Our autorecovery daemon as a child process on a generated bk_server.conf, for tests and benchmarks
against clusters this package did not start itself (e.g. :class:`~autorecovery.testing.upstream_cluster.JavaCluster`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

READY_RE = re.compile(rb"AUTORECOVERY_READY bookie_id=(\S+) http=([\d.]+):(\d+)")


class DaemonProcess:
    """``python -m autorecovery run -c <dir>/<name>.conf`` with its log in ``<dir>/<name>.log``.

    Args:
        workdir: where the conf and log go.
        name: file stem (``autorecovery-0``).
        properties: bk_server.conf keys (upstream names).
    """

    def __init__(self, workdir: Path, name: str, properties: Mapping[str, object]) -> None:
        self.workdir = Path(workdir)
        self.name = name
        self.conf = self.workdir / f"{name}.conf"
        self.log = self.workdir / f"{name}.log"
        self.properties = dict(properties)
        self.proc: subprocess.Popen | None = None
        self.http_port = 0
        self._mark = 0  # where this run's lines start in the log

    def start(self, timeout_s: float = 30.0) -> DaemonProcess:
        """:meth:`spawn` it, then :meth:`wait_ready`.

        Raises:
            RuntimeError: with the tail of its log when it exits or is not ready within ``timeout_s``.
        """
        return self.spawn().wait_ready(timeout_s)

    def spawn(self) -> DaemonProcess:
        """Write its conf and start it in its own session (process group); does not wait."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        with open(self.log, "ab") as logf:
            self._mark = logf.tell()
            self.proc = subprocess.Popen([sys.executable, "-m", "autorecovery", "run", "-c", str(self.conf)],
                                         stdout=logf, stderr=logf, stdin=subprocess.DEVNULL, start_new_session=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> DaemonProcess:
        """Wait (with a deadline) for the ``AUTORECOVERY_READY`` line this run printed; keeps its HTTP port.

        Raises:
            RuntimeError: with the tail of its log when it exits or is not ready within ``timeout_s``
                (it is killed first).
        """
        assert self.proc is not None, "spawn() first"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log, "rb") as f:
                f.seek(self._mark)
                m = READY_RE.search(f.read())
            if m:
                self.http_port = int(m.group(3))
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)  # polling the log for a condition, with a deadline
        self.kill()
        raise RuntimeError(f"autorecovery daemon {self.name} did not start: {self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL, timeout_s: float = 15.0) -> None:
        """Send ``sig`` (SIGKILL by default) and reap it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def stop(self) -> None:
        """SIGTERM (a clean drain), SIGKILL after 15 s."""
        self.kill(signal.SIGTERM)

    def lines(self, *levels: str) -> list[str]:
        """Its JSON log lines at any of ``levels`` (``"error"``, ``"critical"``)."""
        out = []
        for ln in self.tail(10**8).splitlines():
            if ln.startswith("{"):
                try:
                    if json.loads(ln).get("level") in levels:
                        out.append(ln)
                except ValueError:
                    continue
        return out
