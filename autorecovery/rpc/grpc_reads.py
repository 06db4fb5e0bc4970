"""The read side of the gRPC bookie client (EDGE): entries, LAC, disk figures, entry listings and
bookie-to-bookie PullEntries.

Upstream source: the v3 protocol's READ_ENTRY / READ_LAC / GET_BOOKIE_INFO / GET_LIST_OF_ENTRIES_OF_LEDGER
(ours streams ranges with server-side filtering and offers ``PullEntries``). A part of
:class:`~autorecovery.rpc.bookie_client.GrpcBookieClient`, held by it: it is given the client's settings
and its connection state (:class:`~autorecovery.rpc.grpc_common.GrpcChannels`: stubs, unary calls,
features, error mapping); see :mod:`autorecovery.rpc.bookie_client` for the error mapping.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator

import grpc
import structlog
from google.protobuf.message import DecodeError

from autorecovery.errors import BookieError, BookieUnavailableError
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.rpc.convert import ranges_from_proto
from autorecovery.rpc.grpc_add_stream import _raise
from autorecovery.rpc.grpc_common import (
    PULL_SOURCE_GRACE_S,
    GrpcChannels,
    GrpcSettings,
    _status_error,
)
from autorecovery.rpc.results import BookieInfo, PullReport, ReadResult, flatten
from autorecovery.rpc.wire import decode_read_batch

_EOK, _ENOENTRY = pb.EOK, pb.ENOENTRY

log = structlog.get_logger("autorecovery.rpc.bookie_client")

class GrpcReads:
    """Reads of :class:`~autorecovery.rpc.bookie_client.GrpcBookieClient` (see the module docstring).

    Args:
        settings: the client's settings (timeouts, batching, ``batch_bytes``).
        channels: the client's connection state, shared with its other parts.
    """

    def __init__(self, settings: GrpcSettings, channels: GrpcChannels) -> None:
        self._settings = settings
        self._channels = channels

    # -- reads ---------------------------------------------------------------------------------
    async def read_entry(
        self, bookie_id: str, ledger_id: int, entry_id: int, *, fence: bool = False, master_key: bytes = b""
    ) -> ReadResult:
        """Read one entry; ``entry_id=-1`` reads the highest entry the bookie has.

        ``fence=True`` (needs ``master_key``) durably fences the ledger on the bookie first (creating
        it fenced if the bookie did not know it), as upstream recovery's fencing read does.

        Raises:
            BookieError: ``ENOLEDGER`` (bookie does not know the ledger), ``ENOENTRY`` (entry absent;
                with entry -1: the bookie has no entry of the ledger), ``EUA`` (fence with another
                master key), ``EIO``; BookieUnavailableError.
        """
        req = pb.ReadRequest(
            ledger_id=ledger_id,
            entry_id=entry_id,
            flags=pb.FENCE_LEDGER if fence else pb.READ_NONE,
            master_key=master_key,
        )
        resp = await self._channels.unary(bookie_id, "ReadEntry", req, f"read ledger {ledger_id} entry {entry_id}")
        if resp.status != pb.EOK:
            raise _status_error(bookie_id, resp.status, resp.message)
        return ReadResult(resp.entry_id, resp.body, resp.lac)

    def read_entries(
        self,
        bookie_id: str,
        ledger_id: int,
        first: int,
        last: int,
        *,
        ensemble_size: int = 0,
        write_quorum: int = 0,
        bookie_index: int = 0,
    ) -> AsyncIterator[ReadResult | BookieError]:
        """Stream entries ``first..last`` (inclusive) in order from one bookie.

        With ``ensemble_size > 0`` only the ids that ensemble index ``bookie_index`` stores under
        round-robin striping (``(bookie_index - e) mod E < WQ``) are returned. Ids the bookie should
        have but lacks come as ``BookieError(status="ENOENTRY")`` items whose ``entry_id`` names the entry. Break out of the loop (or
        ``aclose()``) to cancel the stream.

        Raises:
            BookieError: ``ENOLEDGER`` when the bookie does not know the ledger, ``EBADREQ`` for a bad
                range (more than 1,000,000 ids, negative first id, bad striping), ``EIO``.
            BookieUnavailableError: transport failure, or no message for ``timeout_s`` seconds.
        """
        return flatten(self.read_entry_batches(bookie_id, ledger_id, first, last, ensemble_size=ensemble_size,
                                               write_quorum=write_quorum, bookie_index=bookie_index))

    async def read_entry_batches(
        self,
        bookie_id: str,
        ledger_id: int,
        first: int,
        last: int,
        *,
        ensemble_size: int = 0,
        write_quorum: int = 0,
        bookie_index: int = 0,
        views: bool = False,
    ) -> AsyncGenerator[list[ReadResult | BookieError], None]:
        """:meth:`read_entries`, a list per message received (up to ``batch_bytes`` of bodies with the
        batched framing, one entry with the old one): for callers that handle entries a group at a time
        (a bookie's PullEntries). Same items, order, errors and cancellation.

        ``views``: with the batched framing, each ``body`` is a read-only ``memoryview`` of the message
        received (:func:`~autorecovery.rpc.wire.decode_read_batch`), not ``bytes``: no copy per entry, but
        the message stays in memory while any of its bodies does. For callers that only verify, measure
        and write the bodies (a bookie's PullEntries).
        """
        req = pb.ReadRangeRequest(
            ledger_id=ledger_id,
            first_entry_id=first,
            last_entry_id=last,
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            bookie_index=bookie_index,
            max_batch_bytes=self._settings.batch_bytes,
        )
        what = f"read ledger {ledger_id} entries {first}..{last}"
        channels = self._channels
        timeout_s = self._settings.timeout_s
        batched = await channels.offers(bookie_id, pb.BATCHED_ENTRIES)
        stub = channels.stub(bookie_id)
        raw = batched and views
        call = (stub.ReadEntryBatchesRaw(req) if raw else stub.ReadEntryBatches(req)) if batched else stub.ReadEntries(req)
        started = False  # something came back: a fallback would repeat it
        try:
            while True:
                try:
                    # asyncio.timeout, not wait_for: no task per message on the hot path
                    async with asyncio.timeout(timeout_s):
                        msg = await call.read()
                except TimeoutError:
                    raise BookieUnavailableError(
                        bookie_id, "UNAVAILABLE", f"{what}: no response for {timeout_s}s"
                    ) from None
                except grpc.aio.AioRpcError as exc:
                    if batched and not started and exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                        # the bookie was replaced by one without the feature since we asked: start over
                        channels.known_features[bookie_id] = 0
                        call.cancel()
                        batched, raw, started = False, False, False
                        call = stub.ReadEntries(req)
                        continue
                    raise channels.failed(bookie_id, exc, what) from None
                if msg is grpc.aio.EOF:
                    return
                started = True
                if raw:
                    items, failed = self._raw_items(bookie_id, msg, what)
                    if failed is not None:
                        if items:  # what came before the failure, then the failure
                            yield items
                        _raise(failed)
                    yield items
                    continue
                out: list[ReadResult | BookieError] = []
                for resp in (msg.entries if batched else (msg,)):
                    if resp.status == pb.EOK:
                        out.append(ReadResult(resp.entry_id, resp.body, resp.lac))
                    elif resp.status == pb.ENOENTRY:
                        missing = BookieError(bookie_id, "ENOENTRY", resp.message)
                        missing.entry_id = resp.entry_id
                        out.append(missing)
                    else:
                        if out:  # what came before the failure, then the failure
                            yield out
                        _raise(_status_error(bookie_id, resp.status, resp.message))
                yield out
        finally:
            call.cancel()

    @staticmethod
    def _raw_items(bookie_id: str, data: bytes, what: str) -> tuple[list[ReadResult | BookieError], BookieError | None]:
        """The items of one ``ReadBatch`` received as bytes (bodies are views of ``data``), as
        :meth:`read_entry_batches` makes them from a decoded message, up to the first answer that is
        neither EOK nor ENOENTRY, and that answer's error (None: there is none; ``EIO`` for a message
        that does not parse)."""
        try:
            answers = decode_read_batch(data)
        except DecodeError as exc:
            return [], BookieError(bookie_id, "EIO", f"{what}: {exc}")
        out: list[ReadResult | BookieError] = []
        for status, eid, body, lac, message in answers:
            if status == _EOK:
                out.append(ReadResult(eid, body, lac))  # type: ignore[arg-type]  # a view: see ``views``
            elif status == _ENOENTRY:
                missing = BookieError(bookie_id, "ENOENTRY", message)
                missing.entry_id = eid
                out.append(missing)
            else:
                return out, _status_error(bookie_id, status, message)
        return out, None

    async def pulls(self, bookie_id: str) -> bool:
        """Whether ``bookie_id`` serves :meth:`pull_entries` (feature ``PULL_ENTRIES``; False with
        ``batching=False``, the benchmarks' old framing).

        Raises:
            BookieUnavailableError: the bookie cannot be reached.
        """
        return await self._channels.offers(bookie_id, pb.PULL_ENTRIES)

    async def pull_entries(
        self,
        target: str,
        source: str,
        ledger_id: int,
        master_key: bytes,
        first: int,
        last: int,
        *,
        ensemble_size: int = 0,
        write_quorum: int = 0,
        bookie_index: int = 0,
        digest_type: int = 0,
    ) -> AsyncGenerator[PullReport, None]:
        """Have ``target`` copy entries ``first..last`` of the ledger from ``source`` itself (feature
        ``PULL_ENTRIES``): the target reads them with the striping filter of :meth:`read_entries`,
        verifies each entry's digest and stores it as a ``RECOVERY_ADD`` under ``master_key``. Yields a
        :class:`PullReport` as entries become durable on the target; the last one has ``done``. Break
        out of the loop (or ``aclose()``) to cancel: what was reported stored stays stored.

        ``digest_type`` is the ledger's (upstream's ``DigestType`` number; 0 = CRC32C): the target
        verifies each entry with it. Only a target that reports ``PULL_DIGEST_TYPES`` honours it, and
        none verifies HMAC (``EBADREQ``: it would need the password); copy such ledgers yourself.

        Each report is waited for at most ``timeout_s`` + :data:`PULL_SOURCE_GRACE_S` seconds.

        Raises:
            BookieError: the *target* refused (``EUA`` other master key, ``EREADONLY``, ``EIO``,
                ``EBADREQ`` bad range or a target that does not pull, ``ETOOMANYREQUESTS``); its
                ``entry_id`` (or None) names the entry refused, every entry reported before is durable.
            BookieUnavailableError: the target cannot be reached or stopped answering.
        """
        req = pb.PullRequest(ledger_id=ledger_id, master_key=master_key, source_bookie_id=source,
                             first_entry_id=first, last_entry_id=last, ensemble_size=ensemble_size,
                             write_quorum=write_quorum, bookie_index=bookie_index, digest_type=digest_type)
        what = f"pull ledger {ledger_id} entries {first}..{last} from {source}"
        call = self._channels.stub(target).PullEntries(req)
        wait_s = self._settings.timeout_s + PULL_SOURCE_GRACE_S
        try:
            while True:
                try:
                    msg = await asyncio.wait_for(call.read(), wait_s)
                except TimeoutError:
                    raise BookieUnavailableError(target, "UNAVAILABLE", f"{what}: no progress for {wait_s:g}s") from None
                except grpc.aio.AioRpcError as exc:
                    raise self._channels.failed(target, exc, what) from None
                if msg is grpc.aio.EOF:
                    raise BookieUnavailableError(target, "UNAVAILABLE", f"{what}: the stream ended without a last report")
                report = PullReport(tuple(msg.stored_entry_ids), msg.bytes_stored,
                                    {f.entry_id: f.reason for f in msg.failed}, msg.source_status,
                                    msg.message if msg.source_status else "", msg.done)
                if msg.status != pb.EOK:
                    if report.stored or report.failed:
                        yield dataclasses.replace(report, done=False)
                    err = _status_error(target, msg.status, msg.message)
                    err.entry_id = msg.failed_entry_id if msg.failed_entry_id >= 0 else None
                    raise err
                yield report
                if msg.done:
                    return
        finally:
            call.cancel()

    async def read_lac(self, bookie_id: str, ledger_id: int) -> int:
        """The bookie's last-add-confirmed of the ledger (-1 when no stored entry carried one).

        Raises:
            BookieError: ``ENOLEDGER``, ``EIO``; BookieUnavailableError.
        """
        resp = await self._channels.unary(
            bookie_id, "ReadLac", pb.ReadLacRequest(ledger_id=ledger_id), f"read LAC of ledger {ledger_id}"
        )
        if resp.status != pb.EOK:
            raise _status_error(bookie_id, resp.status, resp.message)
        return resp.lac

    async def get_bookie_info(self, bookie_id: str, requested: int = 3) -> BookieInfo:
        """Disk figures in bytes (upstream GET_BOOKIE_INFO). ``requested`` is a bitmask of
        ``TOTAL_DISK_CAPACITY`` (1) and ``FREE_DISK_SPACE`` (2); unrequested figures are 0.

        Raises:
            BookieError: ``EIO``; BookieUnavailableError.
        """
        resp = await self._channels.unary(
            bookie_id, "GetBookieInfo", pb.GetBookieInfoRequest(requested=requested), "get bookie info"
        )
        if resp.status != pb.EOK:
            raise _status_error(bookie_id, resp.status, "")
        return BookieInfo(resp.total_disk_capacity, resp.free_disk_space)

    async def get_list_of_entries(self, bookie_id: str, ledger_id: int) -> list[tuple[int, int]]:
        """Entry ids of the ledger stored on the bookie as sorted, disjoint, inclusive
        ``(first, last)`` ranges (upstream GET_LIST_OF_ENTRIES_OF_LEDGER).

        Raises:
            BookieError: ``ENOLEDGER``, ``EIO``; BookieUnavailableError.
        """
        resp = await self._channels.unary(
            bookie_id,
            "GetListOfEntriesOfLedger",
            pb.GetListOfEntriesOfLedgerRequest(ledger_id=ledger_id),
            f"list entries of ledger {ledger_id}",
        )
        if resp.status != pb.EOK:
            raise _status_error(bookie_id, resp.status, f"ledger {ledger_id}")
        return ranges_from_proto(resp.ranges)
