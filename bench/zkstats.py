"""What a heal costs ZooKeeper and how many copy streams it ran, seen from outside the daemons (benches).

* :func:`mntr`: the server's ``mntr`` counters (``zk_packets_received``: every request and ping of
  every client);
* :func:`packets_by_process`: the server's ``cons`` listing (each connection's ``recved`` packets),
  each connection mapped to the local process that owns its client port (psutil), so a bench counts
  the requests of the processes it measures and not its own or the bookies'. These are the server's
  own counts of what arrived, with no hook in the daemons; they include each session's pings (one per
  ``zkTimeout / 3``), which a bench states next to the figure;
* :class:`SlotWatch`: child watches (kazoo, in its own thread) on every bookie's stream-slot directory
  (``<root>/underreplication/streams/<bookie>``, ``src-<n>`` per copy stream reading from it,
  autorecovery/zk/stream_slots.py): a step function of the copy streams running cluster-wide, whose
  peak and time-weighted mean a bench reports and uses as the raw baseline's stream count. Watch-driven:
  one read per change, no polling.

Not a test.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterable

import psutil

_CONS = re.compile(r"/([\d.]+):(\d+)\[\d+\]\(([^)]*)\)")


def four_letter(connect: str, word: str) -> str:
    """The answer of ZooKeeper's four-letter word ``word`` from the first server of ``connect``."""
    host, port = connect.split(",")[0].split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(word.encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.decode()


def mntr(connect: str) -> dict[str, float]:
    """Every numeric ``mntr`` value (``zk_packets_received``, ``zk_znode_count``, ...)."""
    out = {}
    for line in four_letter(connect, "mntr").splitlines():
        k, _, v = line.partition("\t")
        with contextlib.suppress(ValueError):
            out[k] = float(v)
    return out


def cons(connect: str) -> dict[int, int]:
    """Client port (on 127.0.0.x) -> packets the server received on that connection so far."""
    out = {}
    for m in _CONS.finditer(four_letter(connect, "cons")):
        fields = dict(kv.split("=", 1) for kv in m.group(3).split(",") if "=" in kv)
        if "recved" in fields:
            out[int(m.group(2))] = int(fields["recved"])
    return out


def ports_of(pids: Iterable[int]) -> dict[int, int]:
    """Local TCP port -> pid, for every connection of the processes ``pids`` (those gone are skipped)."""
    out = {}
    for pid in pids:
        try:
            for c in psutil.Process(pid).net_connections(kind="tcp"):
                if c.laddr:
                    out[c.laddr.port] = pid
        except psutil.Error:
            pass
    return out


def packets_by_process(connect: str, pids: Iterable[int]) -> dict[int, int]:
    """pid -> packets the ZooKeeper server received so far on the live connections of that process."""
    owner = ports_of(pids)
    out: dict[int, int] = {}
    for port, n in cons(connect).items():
        if port in owner:
            out[owner[port]] = out.get(owner[port], 0) + n
    return out


class SlotWatch:
    """Copy streams running cluster-wide over time, from the stream-slot znodes (see the module doc).

    ``start(bookies)`` creates each bookie's slot directory if missing (as the daemons do on their
    first slot, ``makepath``) and watches it; ``stats(t0, t1)`` returns ``(peak, mean)`` of the sum of
    ``src-*`` slots over ``[t0, t1]`` (``time.perf_counter`` seconds).
    """

    def __init__(self, connect: str, streams_dir: str) -> None:
        from kazoo.client import KazooClient

        self.kz = KazooClient(connect, timeout=10.0)
        self.dir = streams_dir
        self.lock = threading.Lock()
        self.now: dict[str, int] = {}
        self.steps: list[tuple[float, int]] = []  # (time, total src slots from then on)

    def start(self, bookies: Iterable[str]) -> SlotWatch:
        self.kz.start(15)
        for b in bookies:
            path = f"{self.dir}/{b}"
            self.kz.ensure_path(path)
            self.kz.ChildrenWatch(path, self._cb(b))
        return self

    def _cb(self, bookie: str):
        def changed(children: list[str]) -> None:
            with self.lock:
                self.now[bookie] = sum(1 for c in children if c.startswith("src-"))
                self.steps.append((time.perf_counter(), sum(self.now.values())))
        return changed

    def stats(self, t0: float, t1: float) -> tuple[int, float]:
        with self.lock:
            steps = list(self.steps)
        level, peak, area, at = 0, 0, 0.0, t0
        for t, n in steps:
            if t <= t0:
                level = n
                continue
            if t >= t1:
                break
            area += level * (t - at)
            peak = max(peak, level)
            level, at = n, t
        area += level * (t1 - at)
        peak = max(peak, level)
        return peak, area / max(1e-9, t1 - t0)

    def stop(self) -> None:
        self.kz.stop()
        self.kz.close()
