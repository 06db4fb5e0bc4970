"""Back-pressure for the reference bookie: how many adds and reads may be in progress (no I/O).

Upstream ``maxAddsInProgressLimit`` / ``maxReadsInProgressLimit`` (ServerConfiguration, 0 = no limit)
bound the requests a bookie works on at once; upstream stops reading from the channel when the bound
is reached, and answers ``ETOOMANYREQUESTS`` when a request cannot be queued. Here:

* a unary ``AddEntry`` / ``ReadEntry`` over a limit is answered ``ETOOMANYREQUESTS`` at once (its body
  is already in memory; holding it would be the problem the limit exists to stop);
* an ``AddEntries`` stream waits for room before it takes the next entry off the wire (gRPC flow
  control then holds the sender, as upstream's autoread off does) and answers ``ETOOMANYREQUESTS`` only
  when no room appears within ``stream_wait_s``;
* a ``ReadEntries`` stream counts as one read in progress for its whole life.

Adds are also bounded in bytes (ours, ``max_add_bytes``): the entry count alone does not bound memory
when entries are 5 MiB each (issue 15: 120 concurrent 5 MiB adds took a bookie from 103 MB to 978 MB).
An entry larger than the whole byte budget is still admitted when nothing else is in progress, so a
legal entry is never refused forever.

Receiving is bounded too (ours, ``max_receiving``, issue 25): gRPC holds a whole request message in
memory before a handler sees it, so the limits above only ever saw what had already been received.
Every request message is read only after it got one of ``max_receiving`` receive slots (see
``bookie.service``): a unary call without a free slot is answered ``ETOOMANYREQUESTS`` before its
message is read, a stream waits up to ``stream_wait_s`` for a slot (HTTP/2 flow control holds its
sender meanwhile), then ends with ``ETOOMANYREQUESTS``. A slot is held until the message's entries are
admitted above (the next read of the stream, or the end of the call).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass


@dataclass(frozen=True)
class AdmissionLimits:
    """Limits; 0 means unlimited.

    Attributes:
        max_adds: entries being added at once (upstream ``maxAddsInProgressLimit``).
        max_add_bytes: bytes of entry bodies being added at once (ours).
        max_reads: read requests in progress (upstream ``maxReadsInProgressLimit``).
        stream_wait_s: how long an ``AddEntries`` stream waits for room before ``ETOOMANYREQUESTS``, s.
        max_receiving: request messages being received or held before admission, across all calls
            (ours; each may be up to the server's receive limit, ``max_entry_size + 1 MiB``).
    """

    max_adds: int = 10_000
    max_add_bytes: int = 128 * 1024 * 1024
    max_reads: int = 10_000
    stream_wait_s: float = 10.0
    max_receiving: int = 32

    def __post_init__(self) -> None:
        for name in ("max_adds", "max_add_bytes", "max_reads", "max_receiving"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0 = unlimited), got {getattr(self, name)}")
        if self.stream_wait_s < 0:
            raise ValueError(f"stream_wait_s must be >= 0, got {self.stream_wait_s}")


class Admission:
    """Counts adds and reads in progress against :class:`AdmissionLimits`.

    Attributes:
        adds, add_bytes, reads: what is in progress now.
        receiving: receive slots held now.
        rejected_adds, rejected_reads: requests answered ``ETOOMANYREQUESTS`` so far.
        rejected_receives: calls answered ``ETOOMANYREQUESTS`` for want of a receive slot so far.
    """

    def __init__(self, limits: AdmissionLimits | None = None) -> None:
        self.limits = limits or AdmissionLimits()
        self.adds = 0
        self.add_bytes = 0
        self.reads = 0
        self.rejected_adds = 0
        self.rejected_reads = 0
        self.receiving = 0
        self.rejected_receives = 0
        self._changed = asyncio.Event()
        self._slot_freed = asyncio.Event()

    def add_fits(self, nbytes: int, count: int = 1) -> bool:
        """True when ``count`` adds of ``nbytes`` in all would be admitted now (nothing is counted)."""
        return self._add_fits(nbytes, count)

    def _add_fits(self, nbytes: int, count: int = 1) -> bool:
        lim = self.limits
        # a group larger than the limit is admitted alone (else it could never be)
        if lim.max_adds and self.adds + count > lim.max_adds and self.adds > 0:
            return False
        return not (lim.max_add_bytes and self.add_bytes + nbytes > lim.max_add_bytes and self.adds > 0)

    def try_add(self, nbytes: int, count: int = 1) -> bool:
        """Admit ``count`` adds of ``nbytes`` in all if they fit now (True), else count a rejection (False)."""
        if not self._add_fits(nbytes, count):
            self.rejected_adds += 1
            return False
        self.adds += count
        self.add_bytes += nbytes
        return True

    async def wait_add(self, nbytes: int, count: int = 1) -> bool:
        """Admit ``count`` adds of ``nbytes`` in all, waiting up to ``stream_wait_s`` for room; False (a
        rejection is counted) when none appeared. A caller holding admitted adds of its own must settle
        them before it waits (they may be what fills the budget)."""
        if self.try_add(nbytes, count):
            return True
        self.rejected_adds -= 1  # not rejected yet: we wait
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.stream_wait_s
        while not self._add_fits(nbytes, count):
            remaining = deadline - loop.time()
            if remaining <= 0:
                self.rejected_adds += 1
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        self.adds += count
        self.add_bytes += nbytes
        return True

    def release_add(self, nbytes: int, count: int = 1) -> None:
        """``count`` admitted adds of ``nbytes`` in all finished (stored or failed)."""
        self.adds -= count
        self.add_bytes -= nbytes
        self._changed.set()

    def try_read(self) -> bool:
        """Admit one read request if it fits now, else count a rejection."""
        if self.limits.max_reads and self.reads >= self.limits.max_reads:
            self.rejected_reads += 1
            return False
        self.reads += 1
        return True

    def release_read(self) -> None:
        """One admitted read request finished."""
        self.reads -= 1

    def try_receive(self) -> bool:
        """Take a receive slot if one is free now, else count a rejection (0 slots = unlimited)."""
        lim = self.limits.max_receiving
        if lim and self.receiving >= lim:
            self.rejected_receives += 1
            return False
        self.receiving += 1
        return True

    async def wait_receive(self) -> bool:
        """Take a receive slot for a stream, waiting up to ``stream_wait_s`` for one; False (a rejection
        is counted) when none was freed in time. Streams get at most ``max_receiving - max_receiving // 4``
        slots (at least 1): an open stream holds its slot while it waits for its client's next message,
        and the quarter left keeps unary calls (reads, GetBookieInfo) served while many add streams are open."""
        lim = self.limits.max_receiving
        if lim:
            lim = max(1, lim - lim // 4)
        if not lim or self.receiving < lim:
            self.receiving += 1
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.stream_wait_s
        while self.receiving >= lim:
            remaining = deadline - loop.time()
            if remaining <= 0:
                self.rejected_receives += 1
                return False
            self._slot_freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slot_freed.wait(), remaining)
        self.receiving += 1
        return True

    def release_receive(self) -> None:
        """Give back a receive slot."""
        self.receiving -= 1
        self._slot_freed.set()

    def describe_receiving(self) -> str:
        """``"<n> request messages being received; limit <n>"`` (for ETOOMANYREQUESTS messages)."""
        return (f"{self.receiving} request messages being received; limit max receiving="
                f"{self.limits.max_receiving or 'none'}")

    def describe_adds(self) -> str:
        """``"<n> adds (<b> bytes) in progress, limits maxAddsInProgressLimit=<n>, <b> bytes"``."""
        lim = self.limits
        return (f"{self.adds} adds ({self.add_bytes} bytes) in progress; limits maxAddsInProgressLimit="
                f"{lim.max_adds or 'none'}, max add bytes in progress={lim.max_add_bytes or 'none'}")

    def describe_reads(self) -> str:
        """``"<n> reads in progress; limit maxReadsInProgressLimit=<n>"`` (for ETOOMANYREQUESTS messages)."""
        return f"{self.reads} reads in progress; limit maxReadsInProgressLimit={self.limits.max_reads or 'none'}"


#: Copies of one request body the bookie may hold at once: gRPC's receive buffer, the bytes handed to
#: Python, the parsed message and the body taken out of it (measured with bench/flood.py).
BODY_COPIES = 4
#: Free heap the allocator keeps instead of returning it, bytes: glibc's trim threshold
#: (``malloc.TRIM_THRESHOLD_BYTES``, 64 MiB) in each of the malloc arenas of the event loop, gRPC and
#: writer threads (4 measured: a flood's peak stays about 200 MiB above idle even with one receive slot).
ALLOCATOR_SLACK_BYTES = 4 * 64 * 1024 * 1024


def memory_bound(idle_rss: int, max_message_bytes: int, limits: AdmissionLimits) -> int | None:
    """The documented bound on a bookie's resident memory under any flood of adds, bytes (issue 25):

    ``idle_rss + BODY_COPIES * (max_receiving * max_message_bytes + max_add_bytes + max_message_bytes)
    + ALLOCATOR_SLACK_BYTES``

    where ``max_message_bytes`` is the gRPC receive limit (``max_entry_size + 1 MiB``): at most
    ``max_receiving`` request messages are being received or wait for admission, at most
    ``max_add_bytes`` (plus one entry admitted alone) are admitted. None when either limit is 0
    (unlimited). Reads are bounded separately (``max_reads`` streams of two 4 MiB chunks each).
    """
    if not limits.max_receiving or not limits.max_add_bytes:
        return None
    held = limits.max_receiving * max_message_bytes + limits.max_add_bytes + max_message_bytes
    return idle_rss + BODY_COPIES * held + ALLOCATOR_SLACK_BYTES
