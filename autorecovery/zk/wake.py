"""How full kazoo's wake-up socket pair is, so the event loop never writes into a full one (issue 26).

kazoo hands a request to its I/O thread by queueing it and writing one byte to a socket pair; the I/O
thread reads one byte per request it sends, and only while connected. The kernel charges each one-byte
write at its whole buffer size, so some 280 unread bytes fill the pair and the next write blocks the
writing thread. Requests queued when a connection drops leave their bytes behind too (kazoo fails the
requests, not the bytes). The bridge asks :func:`wake_backlog` before each request and, over
:data:`SAFE_BACKLOG`, submits from :func:`submit_thread` instead, where a blocked write waits without
stopping the event loop (the one-hour chaos run's runner froze for 340 s that way, and the ZooKeeper
members it was to restart stayed down meanwhile).
"""

from __future__ import annotations

import fcntl
import struct
import termios
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: unread wake-up bytes (one per request) under which a write cannot block: well under the ~280 the
#: default socket buffer (212,992 bytes) holds at one skb per byte
SAFE_BACKLOG = 64


def wake_backlog(kz: Any) -> int:
    """Unread bytes in ``kz``'s wake-up socket pair (FIONREAD on its read end); 0 when it has none
    (not started, closed) or the kernel does not say."""
    conn = getattr(kz, "_connection", None)
    sock = getattr(conn, "_read_sock", None)
    if sock is None:
        return 0
    try:
        return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0])
    except (OSError, ValueError):
        return 0


def submit_thread() -> ThreadPoolExecutor:
    """One thread per client for submissions made while the socket pair is backed up: one thread keeps
    them in order among themselves."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="zk-submit")
