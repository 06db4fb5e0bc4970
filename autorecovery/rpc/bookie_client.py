"""The gRPC bookie client: our own bookie protocol, one of the two transports behind
:class:`autorecovery.rpc.transport.BookieClient` (EDGE).

One ``grpc.aio`` channel per bookie id (``host:port``, dialled directly), created on first use and
reused; explicit max send/receive message sizes; a deadline on every unary call; streaming calls are
guarded by an idle timeout instead (a long copy is fine as long as it keeps moving).

The client is four modules: this one (:class:`GrpcBookieClient`: channels, stubs, unary calls, TLS
renewal, features), :mod:`~autorecovery.rpc.grpc_writes` (adds), :mod:`~autorecovery.rpc.grpc_reads`
(reads, listings, PullEntries), :mod:`~autorecovery.rpc.grpc_add_stream` (:class:`AddStream`), with
limits and the error mapping in :mod:`~autorecovery.rpc.grpc_common`.

Error mapping (every error names the bookie):

* a non-``EOK`` status → :class:`BookieError` with ``status`` = the status name (``"ENOENTRY"``,
  ``"ENOLEDGER"``, ``"EUA"``, ``"EBADREQ"``, ``"EREADONLY"``, ``"EIO"``...), ``EFENCED`` →
  :class:`LedgerFencedError`;
* gRPC ``UNAVAILABLE`` (cannot connect, connection lost), ``DEADLINE_EXCEEDED`` or our idle timeout →
  :class:`BookieUnavailableError` with status ``"UNAVAILABLE"``; with TLS, a failed handshake (the
  bookie's certificate is not trusted or does not name it, or the bookie closed the connection during
  the handshake because it did not accept ours) says ``TLS handshake failed: ...`` and is logged with
  the bookie id. With ``tlsCertFilesRefreshDurationSeconds`` > 0 a failed handshake first makes the
  client look at its TLS files: when they changed since the channel was opened (a rotation), the channel
  is replaced by one with the new credentials and a unary call is retried once on it (a stream fails and
  its caller's retry takes the new channel);
* gRPC ``RESOURCE_EXHAUSTED`` (a message over a size limit on either side) → :class:`BookieError`
  ``"EBADREQ"``;
* any other gRPC failure (``UNKNOWN``, ``INTERNAL``, ``UNIMPLEMENTED``...) → :class:`BookieError` ``"EIO"``.
"""

from __future__ import annotations

import asyncio

import grpc
import structlog

from autorecovery.errors import BookieError
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.proto import bookie_pb2_grpc as pb_grpc
from autorecovery.rpc.grpc_common import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_ENTRIES, GRPC_FRAMING_BYTES, _rpc_error
from autorecovery.rpc.grpc_reads import GrpcReads
from autorecovery.rpc.grpc_writes import GrpcWrites
from autorecovery.rpc.tls import ChannelCredentialSource, tls_failure
from autorecovery.config.tls import BookieTls
from autorecovery.rpc.wire import bookie_stub

log = structlog.get_logger(__name__)


class GrpcBookieClient(GrpcWrites, GrpcReads):
    """Talks to bookies over gRPC. Use from one event loop; ``await close()`` when done.

    Args:
        timeout_s: deadline of each unary call, and the idle timeout of streaming calls, in seconds.
        max_message_bytes: max gRPC message size sent and received, in bytes (an entry plus ~100 bytes
            must fit; the bookie's default max entry size is 5 MiB).
        tls: TLS to the bookies (``tlsProviderFactoryClass``, see :mod:`autorecovery.rpc.tls`); None or
            disabled = plaintext. The credentials are built here, so a missing or malformed file
            raises at construction; with ``tls.refresh_s`` > 0 channels opened later use the files'
            new version once they changed (see :class:`~autorecovery.rpc.tls.ChannelCredentialSource`).
        batching: use the batched framing (``AddEntryBatches`` / ``ReadEntryBatches``) with bookies that
            report ``BATCHED_ENTRIES``; False = one entry per message always (benchmarks' baseline).
        batch_bytes / batch_entries: most body bytes / entries per batch message (adds; reads ask the
            bookie for ``batch_bytes``). An entry larger than ``batch_bytes`` travels alone.

    Raises:
        ConfigError: a TLS file cannot be read or is not PEM (naming the key).
    """

    def __init__(self, *, timeout_s: float = 10.0, max_message_bytes: int = 8 * 1024 * 1024,
                 tls: BookieTls | None = None, batching: bool = True,
                 batch_bytes: int = DEFAULT_BATCH_BYTES, batch_entries: int = DEFAULT_BATCH_ENTRIES) -> None:
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes
        self.batching = batching
        # a batch (plus its framing) must fit in one message whatever the caller asks for
        self.batch_bytes = max(1, min(batch_bytes, max_message_bytes - GRPC_FRAMING_BYTES))
        self.batch_entries = max(1, batch_entries)
        self._features: dict[str, int] = {}
        self.tls = tls if tls is not None and tls.enabled else None
        self._credentials = ChannelCredentialSource(self.tls) if self.tls is not None else None
        self._channels: dict[str, tuple[grpc.aio.Channel, pb_grpc.BookieStub]] = {}
        self._generations: dict[str, int] = {}  # bookie id → generation of its channel's TLS credentials
        self._closing: set[asyncio.Task] = set()
        self._closed = False

    def _options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            # a restarted bookie must be found again quickly (gRPC's default backoff grows to 120 s)
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            ("grpc.enable_retries", 0),
        ]

    def _stub(self, bookie_id: str) -> pb_grpc.BookieStub:
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
        """Close every channel. Idempotent."""
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
        """Close the channel to one bookie (e.g. after it was decommissioned)."""
        self._features.pop(bookie_id, None)
        self._generations.pop(bookie_id, None)
        ch = self._channels.pop(bookie_id, None)
        if ch is not None:
            try:
                await ch[0].close()
            except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                log.debug("best-effort step failed", step="forget", error=repr(cleanup_exc))

    async def _unary(self, bookie_id: str, method: str, request, what: str):
        for attempt in range(2):
            stub = self._stub(bookie_id)
            try:
                return await getattr(stub, method)(request, timeout=self.timeout_s)
            except grpc.aio.AioRpcError as exc:
                if attempt == 0 and self._renew_after_rotation(bookie_id, exc):
                    continue  # once, on a channel with the rotated credentials
                raise self._failed(bookie_id, exc, what) from None
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
        task = asyncio.get_running_loop().create_task(channel.close(grace=self.timeout_s))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        log.info("TLS files changed since the channel was opened: new channel", bookie_id=bookie_id,
                 generation=generation)
        return True

    def _failed(self, bookie_id: str, exc: grpc.aio.AioRpcError, what: str) -> BookieError:
        """Map a gRPC failure; a bookie that went away may come back as another version, so what it
        reported about its features is forgotten; a failed handshake after a rotation of our TLS files
        replaces the channel (see :meth:`_renew_after_rotation`)."""
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED):
            self._features.pop(bookie_id, None)
        self._renew_after_rotation(bookie_id, exc)
        return _rpc_error(bookie_id, exc, what, self.tls is not None)

    # -- capabilities ---------------------------------------------------------------------------
    async def features(self, bookie_id: str) -> int:
        """The ``BookieFeature`` bits the bookie reports (GetBookieInfo ``features``; 0 for a bookie
        that predates the field), asked once and remembered until the bookie fails a call as
        unavailable or unimplemented, or :meth:`forget`. A non-EOK answer (a busy bookie's
        ``ETOOMANYREQUESTS``) counts as 0 for this call only and is not remembered.

        Raises:
            BookieUnavailableError: the bookie cannot be reached (nothing is remembered).
        """
        f = self._features.get(bookie_id)
        if f is None:
            resp = await self._unary(bookie_id, "GetBookieInfo", pb.GetBookieInfoRequest(requested=0),
                                     "get bookie features")
            if resp.status != pb.EOK:
                return 0  # this call only (a busy bookie answers ETOOMANYREQUESTS): asked again next time
            f = int(resp.features)
            self._features[bookie_id] = f
        return f

    async def _batched(self, bookie_id: str) -> bool:
        return self.batching and bool(await self.features(bookie_id) & pb.BATCHED_ENTRIES)

