"""The machine's own limits, shared by the benches: fdatasync write rate, loopback TCP rate, page cache.

Every bench prints what it measured next to what the machine can do at all (issue 29): a rate means
little without the ceiling it is a fraction of. Measured here, in the bench's own run:

* :func:`fdatasync_rate`: MB/s of writing ``mib`` MiB of zeros in 1 MiB ``write`` calls to a file in the
  bench's work directory, then one ``fdatasync`` (what ``dd if=/dev/zero of=F bs=1M count=256
  conv=fdatasync`` measures; done in Python so that no ``dd`` is needed and no output is parsed);
* :func:`loopback_rate`: MB/s of one loopback TCP stream between two threads (``sendall`` / ``recv_into``
  of 1 MiB buffers), a ceiling for one gRPC stream between two processes on this host;
* :func:`drop_caches`: ``sync`` then ``3`` to ``/proc/sys/vm/drop_caches`` (needs root; the benches run as
  root on the test VM) for ``--cold-cache`` runs: the source bookies then read from the disk;
* :func:`machine_line`: cores, load average, both rates, one line.

Rates are 10^6 bytes/s. Not a test.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path


def fdatasync_rate(directory: Path, mib: int = 256) -> float:
    """MB/s of ``mib`` MiB written in 1 MiB writes to a new file in ``directory`` plus one ``fdatasync``.

    Raises:
        OSError: the file cannot be written (disk full, read-only directory).
    """
    path = Path(directory) / f".limits-{os.getpid()}.tmp"
    buf = b"\0" * 2**20
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(mib):
            os.write(fd, buf)
        os.fdatasync(fd)
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return mib * 2**20 / dt / 1e6


def loopback_rate(nbytes: int = 256 * 2**20, chunk: int = 2**20) -> float:
    """MB/s of one loopback TCP stream: a thread sends ``nbytes`` (``sendall`` of ``chunk``), this one receives."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def send() -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            buf, left = b"\0" * chunk, nbytes
            while left > 0:
                s.sendall(buf[:min(chunk, left)])
                left -= chunk

    t = threading.Thread(target=send, daemon=True)
    t0 = time.perf_counter()
    t.start()
    conn, _ = srv.accept()
    buf, got = bytearray(chunk), 0
    with conn:
        while got < nbytes:
            n = conn.recv_into(buf)
            if not n:
                break
            got += n
    dt = time.perf_counter() - t0
    t.join(10)
    srv.close()
    return got / dt / 1e6


def drop_caches() -> str:
    """``sync`` and drop the page cache, dentries and inodes; returns ``"dropped"`` or why it was refused
    (the bench then says it ran warm)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as exc:
        return f"refused ({exc.strerror or exc}; drop_caches needs root and a writable /proc/sys)"
    return "dropped"


@dataclass(frozen=True)
class Limits:
    """The machine's ceilings measured at the start of a bench run (MB/s) and its load then."""

    disk: float
    loopback: float
    cores: int
    load1: float

    def line(self, where: Path) -> str:
        """One line for the bench's header."""
        return (f"machine: {self.cores} cores, load average {self.load1:.1f} at the start (6 engineers share them); "
                f"fdatasync write {self.disk:.0f} MB/s (256 MiB in {where}); loopback TCP {self.loopback:.0f} MB/s "
                f"(one Python socket stream of 256 MiB)")

    def fractions(self, rate_mb_s: float) -> str:
        """``rate`` as fractions of both ceilings: ``"0.12 of fdatasync, 0.05 of loopback"``."""
        return f"{rate_mb_s / self.disk:.3f} of fdatasync, {rate_mb_s / self.loopback:.3f} of loopback"


def measure(directory: Path) -> Limits:
    """Measure both ceilings (about a second each on the test VM) in ``directory``."""
    return Limits(fdatasync_rate(directory), loopback_rate(), os.cpu_count() or 1, os.getloadavg()[0])


def cold(enabled: bool) -> str:
    """Before a timed part: drop the page cache when ``enabled`` (``--cold-cache``); a phrase saying what
    was done, for the output."""
    if not enabled:
        return "page cache warm"
    return f"page cache {drop_caches()}"
