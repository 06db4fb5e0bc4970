"""The gRPC bookie client: our own bookie protocol, one of the two transports behind
:class:`autorecovery.rpc.transport.BookieClient` (EDGE).

One ``grpc.aio`` channel per bookie id (``host:port``, dialled directly), created on first use and
reused; explicit max send/receive message sizes; a deadline on every unary call; streaming calls are
guarded by an idle timeout instead (a long copy is fine as long as it keeps moving).

The client is composed of parts: this module (:class:`GrpcBookieClient`, which holds them and offers
their operations), :mod:`~autorecovery.rpc.grpc_common` (:class:`~autorecovery.rpc.grpc_common.GrpcSettings`
and the one shared, declared connection state :class:`~autorecovery.rpc.grpc_common.GrpcChannels`:
channels, stubs, unary calls, TLS renewal, features, limits and the error mapping),
:mod:`~autorecovery.rpc.grpc_writes` (adds), :mod:`~autorecovery.rpc.grpc_reads` (reads, listings,
PullEntries) and :mod:`~autorecovery.rpc.grpc_add_stream` (:class:`AddStream`); each part's constructor
takes the settings and the connection state it uses.

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

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Coroutine, Iterable, Iterator, Sequence
from typing import Any

from autorecovery.config.tls import BookieTls
from autorecovery.errors import BookieError
from autorecovery.rpc.grpc_add_stream import AddStream
from autorecovery.rpc.grpc_common import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_ENTRIES,
    GRPC_FRAMING_BYTES,
    GrpcChannels,
    GrpcSettings,
)
from autorecovery.rpc.grpc_reads import GrpcReads
from autorecovery.rpc.grpc_writes import GrpcWrites
from autorecovery.rpc.results import BookieInfo, PullReport, ReadResult


class GrpcBookieClient:
    """Talks to bookies over gRPC. Use from one event loop; ``await close()`` when done.

    Its operations are those of its parts (:class:`~autorecovery.rpc.grpc_reads.GrpcReads`,
    :class:`~autorecovery.rpc.grpc_writes.GrpcWrites`), which document them; each method here hands on
    the part's coroutine or iterator itself (no extra await per call or entry).

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
        self.settings = GrpcSettings(
            timeout_s=timeout_s,
            max_message_bytes=max_message_bytes,
            batching=batching,
            # a batch (plus its framing) must fit in one message whatever the caller asks for
            batch_bytes=max(1, min(batch_bytes, max_message_bytes - GRPC_FRAMING_BYTES)),
            batch_entries=max(1, batch_entries),
            tls=tls if tls is not None and tls.enabled else None,
        )
        #: the connection state the parts share (channels, stubs, features)
        self.channels = GrpcChannels(self.settings)
        self._reads = GrpcReads(self.settings, self.channels)
        self._writes = GrpcWrites(self.settings, self.channels)

    # -- settings (read-only) -------------------------------------------------------------------
    @property
    def timeout_s(self) -> float:
        """Deadline of each unary call and idle timeout of streaming calls, s."""
        return self.settings.timeout_s

    @property
    def max_message_bytes(self) -> int:
        """Max gRPC message size sent and received, bytes."""
        return self.settings.max_message_bytes

    @property
    def batching(self) -> bool:
        """Whether the batched framing is used with bookies that offer it."""
        return self.settings.batching

    @property
    def batch_bytes(self) -> int:
        """Most body bytes per batch message (clamped to fit a message)."""
        return self.settings.batch_bytes

    @property
    def batch_entries(self) -> int:
        """Most entries per batch message."""
        return self.settings.batch_entries

    @property
    def tls(self) -> BookieTls | None:
        """TLS to the bookies, None for plaintext."""
        return self.settings.tls

    # -- channels and capabilities --------------------------------------------------------------
    async def close(self) -> None:
        """Close every channel. Idempotent."""
        await self.channels.close()

    async def forget(self, bookie_id: str) -> None:
        """Close the channel to one bookie (e.g. after it was decommissioned)."""
        await self.channels.forget(bookie_id)

    def features(self, bookie_id: str) -> Coroutine[Any, Any, int]:
        """See :meth:`~autorecovery.rpc.grpc_common.GrpcChannels.features`."""
        return self.channels.features(bookie_id)

    # -- reads (see GrpcReads) ------------------------------------------------------------------
    def read_entry(self, bookie_id: str, ledger_id: int, entry_id: int, *, fence: bool = False,
                   master_key: bytes = b"") -> Coroutine[Any, Any, ReadResult]:
        """See :meth:`~autorecovery.rpc.grpc_reads.GrpcReads.read_entry`."""
        return self._reads.read_entry(bookie_id, ledger_id, entry_id, fence=fence, master_key=master_key)

    def read_entries(self, bookie_id: str, ledger_id: int, first: int, last: int, *, ensemble_size: int = 0,
                     write_quorum: int = 0, bookie_index: int = 0) -> AsyncIterator[ReadResult | BookieError]:
        """See :meth:`~autorecovery.rpc.grpc_reads.GrpcReads.read_entries`."""
        return self._reads.read_entries(bookie_id, ledger_id, first, last, ensemble_size=ensemble_size,
                                        write_quorum=write_quorum, bookie_index=bookie_index)

    def read_entry_batches(self, bookie_id: str, ledger_id: int, first: int, last: int, *, ensemble_size: int = 0,
                           write_quorum: int = 0, bookie_index: int = 0,
                           views: bool = False) -> AsyncGenerator[list[ReadResult | BookieError], None]:
        """See :meth:`~autorecovery.rpc.grpc_reads.GrpcReads.read_entry_batches`."""
        return self._reads.read_entry_batches(bookie_id, ledger_id, first, last, ensemble_size=ensemble_size,
                                              write_quorum=write_quorum, bookie_index=bookie_index, views=views)

    def pulls(self, bookie_id: str) -> Coroutine[Any, Any, bool]:
        """See :meth:`~autorecovery.rpc.grpc_reads.GrpcReads.pulls`."""
        return self._reads.pulls(bookie_id)

    def pull_entries(self, target: str, source: str, ledger_id: int, master_key: bytes, first: int, last: int, *,
                     ensemble_size: int = 0, write_quorum: int = 0, bookie_index: int = 0,
                     digest_type: int = 0) -> AsyncGenerator[PullReport, None]:
        """See :meth:`~autorecovery.rpc.grpc_reads.GrpcReads.pull_entries`."""
        return self._reads.pull_entries(target, source, ledger_id, master_key, first, last,
                                        ensemble_size=ensemble_size, write_quorum=write_quorum,
                                        bookie_index=bookie_index, digest_type=digest_type)

    def read_lac(self, bookie_id: str, ledger_id: int) -> Coroutine[Any, Any, int]:
        """See :meth:`~autorecovery.rpc.grpc_reads.GrpcReads.read_lac`."""
        return self._reads.read_lac(bookie_id, ledger_id)

    def get_bookie_info(self, bookie_id: str, requested: int = 3) -> Coroutine[Any, Any, BookieInfo]:
        """See :meth:`~autorecovery.rpc.grpc_reads.GrpcReads.get_bookie_info`."""
        return self._reads.get_bookie_info(bookie_id, requested)

    def get_list_of_entries(self, bookie_id: str, ledger_id: int) -> Coroutine[Any, Any, list[tuple[int, int]]]:
        """See :meth:`~autorecovery.rpc.grpc_reads.GrpcReads.get_list_of_entries`."""
        return self._reads.get_list_of_entries(bookie_id, ledger_id)

    # -- writes (see GrpcWrites) ----------------------------------------------------------------
    def add_entry(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *,
                  recovery: bool = False) -> Coroutine[Any, Any, None]:
        """See :meth:`~autorecovery.rpc.grpc_writes.GrpcWrites.add_entry`."""
        return self._writes.add_entry(bookie_id, ledger_id, entry_id, master_key, body, recovery=recovery)

    def add_entries(self, bookie_id: str, ledger_id: int, master_key: bytes,
                    entries: AsyncIterable[tuple[int, bytes]] | Iterable[tuple[int, bytes]], *,
                    recovery: bool = True) -> Coroutine[Any, Any, tuple[int, int]]:
        """See :meth:`~autorecovery.rpc.grpc_writes.GrpcWrites.add_entries`."""
        return self._writes.add_entries(bookie_id, ledger_id, master_key, entries, recovery=recovery)

    def add_entry_batches(self, bookie_id: str, ledger_id: int, master_key: bytes,
                          batches: AsyncIterable[Sequence[tuple[int, bytes]]] | Iterable[Sequence[tuple[int, bytes]]],
                          *, recovery: bool = True) -> Coroutine[Any, Any, tuple[int, int]]:
        """See :meth:`~autorecovery.rpc.grpc_writes.GrpcWrites.add_entry_batches`."""
        return self._writes.add_entry_batches(bookie_id, ledger_id, master_key, batches, recovery=recovery)

    def open_add_stream(self, bookie_id: str, ledger_id: int, master_key: bytes, *,
                        recovery: bool = False) -> Coroutine[Any, Any, AddStream | None]:
        """See :meth:`~autorecovery.rpc.grpc_writes.GrpcWrites.open_add_stream`."""
        return self._writes.open_add_stream(bookie_id, ledger_id, master_key, recovery=recovery)

    def cut(self, entries: Iterable[tuple[int, bytes]]) -> Iterator[list[tuple[int, bytes]]]:
        """See :meth:`~autorecovery.rpc.grpc_writes.GrpcWrites.cut`."""
        return self._writes.cut(entries)
