"""The reference bookie's gRPC service (grpc.aio) over :class:`BookieStorage` (EDGE).

Request semantics follow upstream's v3 request processors (``WriteEntryProcessorV3``,
``ReadEntryProcessorV3``, ``ReadLacProcessorV3``, ``GetBookieInfoProcessorV3``,
``GetListOfEntriesOfLedgerProcessorV3``); status codes keep upstream's numbers (see bookie.proto).

Limits (all in bytes unless said otherwise):

* ``max_entry_size`` (default 5 MiB, ``--max-entry-size``, upstream ``nettyMaxFrameSizeBytes`` is the
  closest knob): an add whose body is larger is answered ``EBADREQ`` with a message naming both sizes.
* gRPC's receive limit is ``max_entry_size + 1 MiB`` (:func:`grpc_server_options`), so bodies up to
  1 MiB over the limit still reach the check above and get a readable answer; larger messages are
  refused by gRPC itself with ``RESOURCE_EXHAUSTED`` (the client maps that to ``EBADREQ`` too).
* gRPC's send limit is ``max(max_entry_size + 1 MiB, 64 MiB)`` so GetListOfEntriesOfLedger answers for
  very fragmented ledgers still fit.
* ReadEntries ranges are capped at ``max_range_entries`` ids (default 1,000,000) → ``EBADREQ``.
* Batched framing (feature ``BATCHED_ENTRIES``, reported by GetBookieInfo): ``AddEntryBatches`` and
  ``ReadEntryBatches`` carry many entries per gRPC message (read batches at most 1 MiB of bodies) with
  the same semantics, limits and answers as ``AddEntries`` / ``ReadEntries``. The per-message cost of
  gRPC in Python (a few tens of µs per message on each side) is paid once per batch instead of once per
  entry, which is what made small entries slow (issue 13).
* AddEntries keeps at most ``stream_window_bytes`` of bodies (and 256 entries) in flight per stream;
  ReadEntries reads SQLite in chunks of at most 256 entries / 4 MiB. Memory per stream is bounded.
* Across all requests, adds and reads in progress are bounded by :mod:`autorecovery.bookie.admission`
  (upstream ``maxAddsInProgressLimit`` / ``maxReadsInProgressLimit``, plus a byte budget): over the
  limit a request is answered ``ETOOMANYREQUESTS`` (an AddEntries stream first waits for room).
* An AddEntries stream that sends nothing for ``stream_idle_timeout_s`` is answered (``EBADREQ``,
  naming the idle time) and closed, so idle streams do not pile up.
* Modules: this one composes the servicer and answers GetBookieInfo; the handlers are
  :mod:`bookie.add_handlers`, :mod:`bookie.read_handlers` and :mod:`bookie.pull_handler`, the limits
  :mod:`bookie.limits`, the server set-up :mod:`bookie.grpc_server`. Their public names still resolve
  from here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import grpc
import structlog

from autorecovery.bookie.add_handlers import AddHandlers
from autorecovery.bookie.admission import Admission, AdmissionLimits
from autorecovery.bookie.disk import DiskProbe
from autorecovery.bookie.request_gate import Gate
from autorecovery.bookie.limits import DEFAULT_MAX_ENTRY_SIZE, MAX_RANGE_ENTRIES
from autorecovery.bookie.pull_handler import PullHandler
from autorecovery.bookie.read_handlers import ReadHandlers
from autorecovery.bookie.storage import BookieStorage
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.proto import bookie_pb2_grpc as pb_grpc
from autorecovery.rpc.wire import add_bookie_servicer

if TYPE_CHECKING:
    from autorecovery.rpc.bookie_client import GrpcBookieClient

log = structlog.get_logger("autorecovery.bookie.service")

#: The BookieFeature bits every bookie serves (reported by GetBookieInfo); ``PULL_ENTRIES`` and
#: ``PULL_DIGEST_TYPES`` are added when the bookie has a client to reach its peers with (see
#: ``BookieService(peers=...)``).
FEATURES = pb.BATCHED_ENTRIES | pb.ADD_STREAM
_OK = pb.StatusCode.EOK


class BookieService(AddHandlers, ReadHandlers, PullHandler, pb_grpc.BookieServicer):
    """gRPC servicer of one bookie.

    Args:
        storage: the opened entry store.
        bookie_id: ``host:port``, used in messages.
        disk: disk probe for GetBookieInfo.
        is_readonly: returns True while the bookie is read-only (adds are refused with ``EREADONLY``).
        max_entry_size: largest accepted entry body in bytes.
        max_range_entries: largest ReadEntries range in entry ids.
        stream_window_bytes: AddEntries bytes in flight per stream before the handler waits for commits.
        limits: adds/reads in progress across all requests (``ETOOMANYREQUESTS`` beyond).
        stream_idle_timeout_s: an AddEntries stream with no message for this long is answered and
            closed, s.
        peers: a :class:`~autorecovery.rpc.bookie_client.GrpcBookieClient` this bookie reads other bookies
            with, to serve PullEntries (feature ``PULL_ENTRIES``); None = the bookie does not pull
            (the worker then copies through itself). The service does not close it.
        peer_check: ``async (bookie id) -> bool``, whether a PullEntries source is a bookie of the cluster
            (the server checks its registration in ZooKeeper), so a caller cannot point this bookie at
            an arbitrary address; None = no check (tests).
    """

    def __init__(
        self,
        storage: BookieStorage,
        bookie_id: str,
        *,
        disk: DiskProbe,
        is_readonly: Callable[[], bool] = lambda: False,
        max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE,
        max_range_entries: int = MAX_RANGE_ENTRIES,
        stream_window_bytes: int = 16 * 1024 * 1024,
        limits: AdmissionLimits | None = None,
        stream_idle_timeout_s: float = 120.0,
        peers: GrpcBookieClient | None = None,
        peer_check: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self.storage = storage
        self.bookie_id = bookie_id
        self.disk = disk
        self.is_readonly = is_readonly
        self.max_entry_size = max_entry_size
        self.max_range_entries = max_range_entries
        self.stream_window_bytes = max(stream_window_bytes, max_entry_size)
        self.admission = Admission(limits)
        self.stream_idle_timeout_s = stream_idle_timeout_s
        self._closing = False
        self._intakes: set[asyncio.Task] = set()
        self.peers = peers
        self.peer_check = peer_check
        self.features = FEATURES | (pb.PULL_ENTRIES | pb.PULL_DIGEST_TYPES if peers is not None else 0)

    def begin_shutdown(self) -> None:
        """Stop reading every open AddStream (call before stopping the gRPC server): each settles and
        acknowledges what it took, then ends, so a long-lived stream left open by a client does not hold
        the server's shutdown grace period. New AddStreams end at once."""
        self._closing = True
        for t in list(self._intakes):
            t.cancel()

    async def GetBookieInfo(
        self, request: pb.GetBookieInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetBookieInfoResponse:
        """Total and/or free bytes of the data directory's file system, per the ``requested`` bitmask
        (upstream GetBookieInfoProcessorV3; fakeable, see ``bookie.disk``). Statuses: EOK, EIO."""
        try:
            usage = await asyncio.to_thread(self.disk.probe)
        except OSError as exc:
            log.error("disk probe failed", error=str(exc))
            return pb.GetBookieInfoResponse(status=pb.EIO, message=f"bookie {self.bookie_id}: disk probe failed: {exc}")
        resp = pb.GetBookieInfoResponse(status=_OK, features=self.features)
        if request.requested & pb.TOTAL_DISK_CAPACITY:
            resp.total_disk_capacity = usage.total_bytes
        if request.requested & pb.FREE_DISK_SPACE:
            resp.free_disk_space = usage.free_bytes
        return resp


def add_service(server: grpc.aio.Server, service: BookieService) -> None:
    """Register ``service`` as the ``autorecovery.bookie.Bookie`` servicer of ``server``, its batch
    answers encoded by :func:`autorecovery.rpc.wire.encode_batch`, every method behind the receive
    slots and request checks of :class:`autorecovery.bookie.request_gate.Gate`."""
    gate = Gate(service.admission, service.bookie_id)
    add_bookie_servicer(service, server, wrap=gate.wrap)
