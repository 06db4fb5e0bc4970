"""kazoo's threading handler with a ``select`` that costs one system call, not four (EDGE; issue 29).

kazoo 2.11 (pinned) waits on its socket through ``kazoo.handlers.utils.selector_select``, which builds a
new ``selectors.DefaultSelector`` for every call: ``epoll_create1``, one ``epoll_ctl`` per descriptor,
``epoll_wait`` and ``close``, plus the Python objects around them. Its connection thread calls it
before every read: once per loop turn, then again before a reply's 4-byte length and before its body,
so three times per packet received. Measured with ``py-spy`` on a daemon healing thousands of small
ledgers (issue 29: about 9 ZooKeeper packets and 36 watch notifications per healed ledger across six
daemons), building and closing those selectors was about a quarter of the daemon's busy samples.

:func:`poll_select` keeps kazoo's contract (``(rlist, wlist, xlist)`` in, the ready objects of each out,
``timeout`` in seconds or None, the same errors for a bad descriptor or timeout) on one
``poll(2)``: a ``select.poll`` object is built in user space, so the call is the one system call that
waits. ``poll`` has no ``FD_SETSIZE`` limit, which is why kazoo left ``select.select``. A descriptor in
error or hung up is reported ready to whoever waited on it, as ``select`` does: the read or write that
follows raises, and kazoo reconnects.

:class:`PollHandler` is kazoo's ``SequentialThreadingHandler`` with that ``select``; nothing else changes.
"""

from __future__ import annotations

import math
import select

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT
_TROUBLE = select.POLLERR | select.POLLHUP | select.POLLNVAL


def poll_select(rlist, wlist, xlist, timeout: float | None = None) -> tuple[list, list, list]:
    """``select``-style wait on ``poll(2)``: the objects of ``rlist`` ready to read and of ``wlist``
    ready to write (``xlist`` is accepted and never reported, as in kazoo's own implementation).

    Args:
        rlist, wlist: sockets or descriptors (anything with ``fileno()``, or an int).
        timeout: seconds to wait (None: until ready; 0: do not wait).

    Raises:
        TypeError: ``timeout`` is not a number, or an object has no valid descriptor (as kazoo's).
        ValueError: ``timeout`` is negative.
    """
    if timeout is not None:
        if not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    masks: dict[int, int] = {}
    readers: dict[int, list] = {}
    writers: dict[int, list] = {}
    for objs, bit, owners in ((rlist, _READ, readers), (wlist, _WRITE, writers)):
        for obj in objs:
            fd = fileobj_to_fd(obj)  # TypeError for an object without a descriptor, or a negative one
            masks[fd] = masks.get(fd, 0) | bit
            owners.setdefault(fd, []).append(obj)
    poller = select.poll()
    for fd, mask in masks.items():
        poller.register(fd, mask)
    ms = None if timeout is None else math.ceil(timeout * 1000)
    r: list = []
    w: list = []
    for fd, ev in poller.poll(ms):
        if ev & (_READ | _TROUBLE):
            r.extend(readers.get(fd, ()))
        if ev & (_WRITE | _TROUBLE):
            w.extend(writers.get(fd, ()))
    return r, w, []


class PollHandler(SequentialThreadingHandler):
    """kazoo's ``SequentialThreadingHandler`` whose ``select`` is :func:`poll_select`."""

    def select(self, *args, **kwargs):  # kazoo's signature
        return poll_select(*args, **kwargs)
