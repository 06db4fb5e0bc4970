"""What the parts of the gRPC bookie client share (EDGE): its settings (:class:`GrpcSettings`), its one
declared connection state (:class:`GrpcChannels`: channels, stubs, TLS generations, the features each
bookie reported, unary calls and the failure mapping), batch limits and the mapping of gRPC failures and
bookie statuses to :class:`~autorecovery.errors.BookieError` (see :mod:`autorecovery.rpc.bookie_client`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from google.protobuf.message import Message

from autorecovery.config.tls import BookieTls
from autorecovery.errors import BookieError, BookieUnavailableError, LedgerFencedError
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.rpc.convert import status_name
from autorecovery.rpc.tls import ChannelCredentialSource, tls_failure
from autorecovery.rpc.wire import BookieStub, bookie_stub

log = structlog.get_logger("autorecovery.rpc.bookie_client")

#: Default most body bytes / entries per batch message (BATCHED_ENTRIES framing, issue 13).
DEFAULT_BATCH_BYTES = 1024 * 1024
DEFAULT_BATCH_ENTRIES = 512
#: Room kept in a message for the protobuf framing of a batch around its bodies (ids, keys, tags).
GRPC_FRAMING_BYTES = 64 * 1024

TOTAL_DISK_CAPACITY = pb.TOTAL_DISK_CAPACITY
FREE_DISK_SPACE = pb.FREE_DISK_SPACE


#: Extra time the worker waits for a pull report beyond its own timeout: the target itself waits up
#: to its peer client's timeout (10 s) for the source before it reports the source as failed, s.
PULL_SOURCE_GRACE_S = 15.0


def _status_error(bookie_id: str, code: int, message: str) -> BookieError:
    name = status_name(code)
    if name == "EFENCED":
        return LedgerFencedError(bookie_id, name, message)
    return BookieError(bookie_id, name, message)


def _rpc_error(bookie_id: str, exc: grpc.aio.AioRpcError, what: str, tls: bool = False) -> BookieError:
    code = exc.code()
    detail = f"{what}: gRPC {code.name}: {exc.details()}"
    why = tls_failure(exc.details() or "") if tls and code == grpc.StatusCode.UNAVAILABLE else None
    if why is not None:
        detail = f"{what}: TLS handshake failed: {why}"
        log.warning("TLS handshake failed", bookie_id=bookie_id, error=why)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return BookieUnavailableError(bookie_id, "UNAVAILABLE", detail)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return BookieError(bookie_id, "EBADREQ", detail)
    return BookieError(bookie_id, "EIO", detail)


@dataclass(frozen=True, slots=True)
class GrpcSettings:
    """How the gRPC bookie client talks (fixed at construction; see
    :class:`~autorecovery.rpc.bookie_client.GrpcBookieClient` for each argument).

    Attributes:
        timeout_s: deadline of each unary call and idle timeout of streaming calls, s.
        max_message_bytes: max gRPC message size sent and received, bytes.
        batching: use the batched framing with bookies that report ``BATCHED_ENTRIES``.
        batch_bytes / batch_entries: most body bytes / entries per batch message (already clamped so
            that a batch and its framing fit in one message).
        tls: TLS to the bookies, or None for plaintext.
    """

    timeout_s: float
    max_message_bytes: int
    batching: bool
    batch_bytes: int
    batch_entries: int
    tls: BookieTls | None


class GrpcChannels:
    """The gRPC bookie client's connection state, the one object its parts share: a channel and stub per
    bookie id (``host:port``, dialled directly, opened on first use), the TLS generation each channel was
    opened with, the ``BookieFeature`` bits each bookie reported, and the channels being closed after a
    TLS rotation. Use from one event loop.

    Args:
        settings: the client's settings.

    Raises:
        ConfigError: a TLS file cannot be read or is not PEM (naming the key), at construction.
    """

    def __init__(self, settings: GrpcSettings) -> None:
        self.settings = settings
        self._credentials = ChannelCredentialSource(settings.tls) if settings.tls is not None else None
        self._channels: dict[str, tuple[grpc.aio.Channel, BookieStub]] = {}
        self._generations: dict[str, int] = {}  # bookie id → generation of its channel's TLS credentials
        #: bookie id → the ``BookieFeature`` bits it reported (absent: ask it; see :meth:`features`)
        self.known_features: dict[str, int] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    def _options(self) -> list[tuple[str, int]]:
        size = self.settings.max_message_bytes
        return [
            ("grpc.max_send_message_length", size),
            ("grpc.max_receive_message_length", size),
            # a restarted bookie must be found again quickly (gRPC's default backoff grows to 120 s)
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            ("grpc.enable_retries", 0),
        ]

    def stub(self, bookie_id: str) -> BookieStub:
        """The stub of ``bookie_id``'s channel, opening the channel on first use.

        Raises:
            RuntimeError: the client is closed.
        """
        if self._closed:
            raise RuntimeError("GrpcBookieClient is closed")
        ch = self._channels.get(bookie_id)
        if ch is None:
            if self._credentials is not None:
                creds, self._generations[bookie_id] = self._credentials.current()
                channel = grpc.aio.secure_channel(bookie_id, creds, options=self._options())
            else:
                channel = grpc.aio.insecure_channel(bookie_id, options=self._options())
            ch = (channel, bookie_stub(channel))
            self._channels[bookie_id] = ch
        return ch[1]

    async def close(self) -> None:
        """Close every channel (and wait for those closing after a rotation). Idempotent."""
        self._closed = True
        channels, self._channels = self._channels, {}
        for channel, _stub in channels.values():
            try:
                await channel.close()
            except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                log.debug("best-effort step failed", step="close", error=repr(cleanup_exc))
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def forget(self, bookie_id: str) -> None:
        """Close the channel to one bookie and forget what it reported."""
        self.known_features.pop(bookie_id, None)
        self._generations.pop(bookie_id, None)
        ch = self._channels.pop(bookie_id, None)
        if ch is not None:
            try:
                await ch[0].close()
            except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                log.debug("best-effort step failed", step="forget", error=repr(cleanup_exc))

    async def unary(self, bookie_id: str, method: str, request: Message, what: str) -> Any:
        """Call the unary ``method`` of the bookie's stub with the settings' deadline and return its
        response (the generated response message); after a failed TLS handshake on a channel older than
        our rotated TLS files, once more on a new channel.

        Raises:
            BookieError / BookieUnavailableError: the call failed (see :func:`_rpc_error`), naming ``what``.
        """
        for attempt in range(2):
            stub = self.stub(bookie_id)
            try:
                return await getattr(stub, method)(request, timeout=self.settings.timeout_s)
            except grpc.aio.AioRpcError as exc:
                if attempt == 0 and self._renew_after_rotation(bookie_id, exc):
                    continue  # once, on a channel with the rotated credentials
                raise self.failed(bookie_id, exc, what) from None
        raise AssertionError("unreachable")

    def _renew_after_rotation(self, bookie_id: str, exc: grpc.aio.AioRpcError) -> bool:
        """After a failed TLS handshake, look at the TLS files now; when the channel to ``bookie_id`` was
        opened with credentials older than theirs, drop it (closed in the background) so the next call
        opens one with the new ones. Returns whether it was dropped."""
        source = self._credentials
        if (source is None or not source.files.reloads or exc.code() != grpc.StatusCode.UNAVAILABLE
                or tls_failure(exc.details() or "") is None or bookie_id not in self._channels):
            return False
        _creds, generation = source.current(force=True)
        if self._generations.get(bookie_id) == generation:
            return False
        self._generations.pop(bookie_id, None)
        channel, _stub = self._channels.pop(bookie_id)
        task = asyncio.get_running_loop().create_task(channel.close(grace=self.settings.timeout_s))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        log.info("TLS files changed since the channel was opened: new channel", bookie_id=bookie_id,
                 generation=generation)
        return True

    def failed(self, bookie_id: str, exc: grpc.aio.AioRpcError, what: str) -> BookieError:
        """Map a gRPC failure; a bookie that went away may come back as another version, so what it
        reported about its features is forgotten; a failed handshake after a rotation of our TLS files
        replaces the channel (see :meth:`_renew_after_rotation`)."""
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED):
            self.known_features.pop(bookie_id, None)
        self._renew_after_rotation(bookie_id, exc)
        return _rpc_error(bookie_id, exc, what, self.settings.tls is not None)

    async def features(self, bookie_id: str) -> int:
        """The ``BookieFeature`` bits the bookie reports (GetBookieInfo ``features``; 0 for a bookie
        that predates the field), asked once and remembered until the bookie fails a call as
        unavailable or unimplemented, or :meth:`forget`. A non-EOK answer (a busy bookie's
        ``ETOOMANYREQUESTS``) counts as 0 for this call only and is not remembered.

        Raises:
            BookieUnavailableError: the bookie cannot be reached (nothing is remembered).
        """
        f = self.known_features.get(bookie_id)
        if f is None:
            resp = await self.unary(bookie_id, "GetBookieInfo", pb.GetBookieInfoRequest(requested=0),
                                    "get bookie features")
            if resp.status != pb.EOK:
                return 0  # this call only (a busy bookie answers ETOOMANYREQUESTS): asked again next time
            f = int(resp.features)
            self.known_features[bookie_id] = f
        return f

    async def offers(self, bookie_id: str, feature: int) -> bool:
        """Whether batching is on and the bookie reports ``feature`` (a ``BookieFeature`` bit): the
        optional framings and calls are used only then (see :meth:`features` for the errors)."""
        return self.settings.batching and bool(await self.features(bookie_id) & feature)
