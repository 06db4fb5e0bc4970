"""Test helpers for the reference bookie: a bookie child process and a minimal formatted cluster.

``BookieProcess`` runs ``python -m autorecovery.bookie`` as a child process, reads its stdout for the
``BOOKIE_READY <id>`` line (with a deadline; no sleeps) and keeps its stderr (JSON logs) in a file for
assertions and post-mortems. ``format_test_cluster`` writes just enough metadata for a bookie to start
(the chroot and ``<root>/INSTANCEID``); real cluster initialisation is ``autorecovery.zk.ledgers``'s job.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from autorecovery.zk.bridge import NodeExistsError, ZkClient

READY_PREFIX = "BOOKIE_READY"


async def format_test_cluster(zk_hosts: str, ledgers_root: str = "/ledgers", chroot: str | None = None) -> str:
    """Create a fresh chroot with ``<ledgers_root>/INSTANCEID`` on the ZooKeeper at ``zk_hosts``.

    Returns the connect string with the chroot (``host:port/<chroot>``) for bookies and clients.
    """
    chroot = chroot or f"/t-{uuid.uuid4().hex[:12]}"
    zk = await ZkClient(zk_hosts).start()
    try:
        await zk.ensure_path(chroot + ledgers_root)
        with contextlib.suppress(NodeExistsError):
            await zk.create(f"{chroot}{ledgers_root}/INSTANCEID", uuid.uuid4().hex.encode())
    finally:
        await zk.stop()
    return zk_hosts + chroot


class BookieProcess:
    """One ``python -m autorecovery.bookie`` child process.

    Args:
        args: command-line options after the module name (``["--zk", ..., "--data-dir", ...]``).
        log_path: file receiving the child's stderr.
    """

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.args = [sys.executable, "-m", "autorecovery.bookie", *args]
        self.log_path = Path(log_path)
        self.bookie_id: str | None = None
        self.stdout_lines: list[str] = []
        self._ready = threading.Event()
        self._eof = threading.Event()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - held while the process/object lives, closed when it stops
        self.proc = subprocess.Popen(
            self.args,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.stdout_lines.append(line)
            if line.startswith(READY_PREFIX + " ") and self.bookie_id is None:
                self.bookie_id = line.split(" ", 1)[1].strip()
                self._ready.set()
        self._eof.set()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout_s: float = 30.0) -> str:
        """Block until the child printed ``BOOKIE_READY``; returns its bookie id.

        Raises:
            RuntimeError: with the tail of its log when it exited or did not get ready in time.
        """
        deadline_hit = not self._wait_either(timeout_s)
        if self._ready.is_set():
            assert self.bookie_id is not None
            return self.bookie_id
        reason = f"did not print {READY_PREFIX} within {timeout_s}s" if deadline_hit else (
            f"exited with {self.proc.poll()} before printing {READY_PREFIX}"
        )
        raise RuntimeError(f"bookie process {self.pid} {reason}: {self.log_tail()}")

    def _wait_either(self, timeout_s: float) -> bool:
        # ready, or stdout closed (the process is exiting)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._ready.wait(0.05) or self._eof.is_set():
                return True
        return False

    async def await_ready(self, timeout_s: float = 30.0) -> str:
        """:meth:`wait_ready` without blocking the event loop."""
        return await asyncio.to_thread(self.wait_ready, timeout_s)

    def wait(self, timeout_s: float = 30.0) -> int:
        """Wait for the process to exit; returns its exit status (negative = killed by a signal)."""
        rc = self.proc.wait(timeout_s)
        self._reader.join(timeout_s)
        self._log.close()
        return rc

    async def await_exit(self, timeout_s: float = 30.0) -> int:
        """:meth:`wait` without blocking the event loop."""
        return await asyncio.to_thread(self.wait, timeout_s)

    def terminate(self) -> None:
        """Send SIGTERM (clean shutdown)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """Send SIGKILL (crash)."""
        if self.proc.poll() is None:
            self.proc.kill()

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``. Idempotent."""
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.wait()
        self._log.close()

    def log_text(self) -> str:
        """Everything the child wrote to stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 3000) -> str:
        return self.log_text()[-n:]
