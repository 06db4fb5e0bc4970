"""One bookie client for the roles, two transports behind it, chosen per bookie in one place (EDGE).

Our reference bookies speak our gRPC protocol (:class:`~autorecovery.rpc.bookie_client.GrpcBookieClient`);
stock Apache BookKeeper bookies speak upstream's v3 protocol
(:class:`~autorecovery.rpc.upstream_client.UpstreamBookieClient`). The auditor, checker, copier,
fencing and recovery, the GET_BOOKIE_INFO poller and the admin commands all call
:class:`BookieClient`, which sends each call to the transport the bookie's registration advertises
(:func:`choose_transport`). Features only our bookies have (batched framing, add streams,
bookie-to-bookie PullEntries) stay negotiated optimisations: a stock bookie reports none of them, so
the same code takes its plain path.

:class:`BookieTransport` is the one interface (every operation the roles, the ledger client and the
admin commands use); mypy holds both implementations to it (this module is in pyproject's mypy
files). :meth:`BookieClient.transport` is the one place a transport name becomes an implementation;
the roles import only this module.

The registration is looked up through ``resolve`` (bookie id → the protocols its ``available/<id>``
znode advertises, None when it is not registered), given by whoever composes the client: the daemon
passes its live :class:`~autorecovery.zk.bookies.BookieWatcher`, the admin shell a ZooKeeper read.
Without a resolver, or for a bookie that is not registered, the gRPC transport is used (our own tests
and benchmarks dial bookies directly). A bookie's choice is remembered until it becomes unreachable or
is forgotten, so a bookie replaced by the other implementation under the same id is found again.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from autorecovery.errors import BookieError, BookieUnavailableError
from autorecovery.rpc.bookie_client import GrpcBookieClient
from autorecovery.rpc.grpc_add_stream import AddStream
from autorecovery.rpc.grpc_common import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_ENTRIES
from autorecovery.rpc.convert import ENDPOINT_PROTOCOL
from autorecovery.rpc.results import BookieInfo, PullReport, ReadResult
from autorecovery.config.tls import BookieTls
from autorecovery.rpc.upstream_client import UpstreamBookieClient

#: The two transports, by the name :func:`choose_transport` returns.
GRPC = "grpc"
UPSTREAM = "bookie-rpc"

Resolver = Callable[[str], Awaitable["tuple[str, ...] | None"]]


@runtime_checkable
class BookieTransport(Protocol):
    """What one bookie protocol offers the roles: :class:`GrpcBookieClient` and
    :class:`UpstreamBookieClient` both satisfy it (same arguments, results and errors), and
    :class:`BookieClient` sends each call to one of them. A transport without one of our optional
    features answers as a bookie that lacks it does (``features`` 0, ``pulls`` False,
    ``open_add_stream`` None)."""

    @property
    def timeout_s(self) -> float:
        """Deadline of each request, s."""
        ...

    async def features(self, bookie_id: str) -> int: ...

    async def pulls(self, bookie_id: str) -> bool: ...

    async def open_add_stream(self, bookie_id: str, ledger_id: int, master_key: bytes, *,
                              recovery: bool = False) -> Any: ...

    async def read_entry(self, bookie_id: str, ledger_id: int, entry_id: int, *, fence: bool = False,
                         master_key: bytes = b"") -> ReadResult: ...

    def read_entries(self, bookie_id: str, ledger_id: int, first: int, last: int, *, ensemble_size: int = 0,
                     write_quorum: int = 0, bookie_index: int = 0) -> AsyncIterator[Any]: ...

    def read_entry_batches(self, bookie_id: str, ledger_id: int, first: int, last: int, *, ensemble_size: int = 0,
                           write_quorum: int = 0, bookie_index: int = 0, views: bool = False) -> AsyncIterator[Any]: ...

    async def read_lac(self, bookie_id: str, ledger_id: int) -> int: ...

    async def get_bookie_info(self, bookie_id: str, requested: int = 3) -> BookieInfo: ...

    async def get_list_of_entries(self, bookie_id: str, ledger_id: int) -> list[tuple[int, int]]: ...

    async def add_entry(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *,
                        recovery: bool = False) -> None: ...

    async def add_entries(self, bookie_id: str, ledger_id: int, master_key: bytes, entries: Any, *,
                          recovery: bool = True) -> tuple[int, int]: ...

    async def add_entry_batches(self, bookie_id: str, ledger_id: int, master_key: bytes, batches: Any, *,
                                recovery: bool = True) -> tuple[int, int]: ...

    def pull_entries(self, target: str, source: str, ledger_id: int, master_key: bytes, first: int, last: int, *,
                     ensemble_size: int = 0, write_quorum: int = 0, bookie_index: int = 0,
                     digest_type: int = 0) -> AsyncIterator[PullReport]: ...

    async def forget(self, bookie_id: str) -> None: ...

    async def close(self) -> None: ...


if TYPE_CHECKING:  # mypy holds both implementations to the interface (pyproject's mypy files)
    def _both_transports(grpc_client: GrpcBookieClient, upstream: UpstreamBookieClient) -> list[BookieTransport]:
        return [grpc_client, upstream]


def choose_transport(advertised: tuple[str, ...] | None) -> str:
    """The transport for a bookie from what its registration advertises (PURE).

    ``("grpc",)`` → ours. ``("bookie-rpc", ...)`` (a stock bookie, 4.12+), ``()`` (a registration without
    service info: stock bookies before 4.12) or anything else a BookKeeper registration may carry →
    upstream's. None (not registered, or nobody to ask) → ours.
    """
    if advertised is None or ENDPOINT_PROTOCOL in advertised:
        return GRPC
    return UPSTREAM


class BookieClient:
    """Every bookie operation the roles use, over whichever protocol the bookie speaks.

    Args:
        timeout_s: deadline of each request (and idle timeout of gRPC streams), s.
        max_message_bytes: largest message sent or received, bytes.
        tls: TLS to the bookies; a stock bookie is refused while it is enabled (see
            :mod:`autorecovery.rpc.upstream_client`).
        batching / batch_bytes / batch_entries: gRPC batched framing (see
            :class:`~autorecovery.rpc.bookie_client.GrpcBookieClient`).
        resolve: async bookie id → advertised protocols or None (see the module docstring).

    Raises:
        ConfigError: a TLS file cannot be read or is not PEM (naming the key).
    """

    def __init__(self, *, timeout_s: float = 10.0, max_message_bytes: int = 8 * 1024 * 1024,
                 tls: BookieTls | None = None, batching: bool = True, batch_bytes: int = DEFAULT_BATCH_BYTES,
                 batch_entries: int = DEFAULT_BATCH_ENTRIES, resolve: Resolver | None = None) -> None:
        self.grpc = GrpcBookieClient(timeout_s=timeout_s, max_message_bytes=max_message_bytes, tls=tls,
                                     batching=batching, batch_bytes=batch_bytes, batch_entries=batch_entries)
        self.upstream = UpstreamBookieClient(timeout_s=timeout_s, max_frame_bytes=max_message_bytes,
                                             tls=self.grpc.tls is not None)
        self.resolve = resolve
        self._chosen: dict[str, str] = {}
        self._last_seen: dict[str, str] = {}  # kept when a bookie becomes unreachable (bounded by the bookies seen)

    # the gRPC client's settings, read by callers that size their work to them
    @property
    def timeout_s(self) -> float:
        return self.grpc.timeout_s

    @property
    def batching(self) -> bool:
        return self.grpc.batching

    @property
    def batch_bytes(self) -> int:
        return self.grpc.batch_bytes

    @property
    def tls(self) -> BookieTls | None:
        return self.grpc.tls

    async def transport_name(self, bookie_id: str) -> str:
        """``"grpc"`` or ``"bookie-rpc"``: the transport calls to ``bookie_id`` take. A bookie that is not
        registered (any more) keeps the transport it was last seen with, so a dead stock bookie fails
        with upstream's "cannot connect", not with a gRPC error."""
        name = self._chosen.get(bookie_id)
        if name is None:
            advertised = await self.resolve(bookie_id) if self.resolve is not None else None
            if advertised is None:  # asked again next time
                return self._last_seen.get(bookie_id, GRPC)
            name = self._chosen[bookie_id] = self._last_seen[bookie_id] = choose_transport(advertised)
        return name

    def transport(self, name: str) -> BookieTransport:
        """The implementation behind a transport name (the one place it is chosen): :data:`UPSTREAM` →
        :class:`UpstreamBookieClient`, anything else (:data:`GRPC`) → :class:`GrpcBookieClient`."""
        return self.upstream if name == UPSTREAM else self.grpc

    async def _for(self, bookie_id: str) -> BookieTransport:
        return self.transport(await self.transport_name(bookie_id))

    async def _call(self, bookie_id: str, method: str, *args: Any, **kw: Any) -> Any:
        t = await self._for(bookie_id)
        try:
            return await getattr(t, method)(bookie_id, *args, **kw)
        except BookieUnavailableError:
            self._chosen.pop(bookie_id, None)  # look at its registration again next time
            raise

    async def close(self) -> None:
        """Close both transports. Idempotent."""
        await self.grpc.close()
        await self.upstream.close()

    async def forget(self, bookie_id: str) -> None:
        """Drop what is known about one bookie (its transport, connections, features)."""
        self._chosen.pop(bookie_id, None)
        self._last_seen.pop(bookie_id, None)
        await self.grpc.forget(bookie_id)
        await self.upstream.forget(bookie_id)

    # -- capabilities -----------------------------------------------------------------------------
    async def features(self, bookie_id: str) -> int:
        """Our ``BookieFeature`` bits of the bookie (0 for a stock bookie)."""
        return int(await self._call(bookie_id, "features"))

    async def pulls(self, target: str, source: str | None = None) -> bool:
        """Whether ``target`` can copy from ``source`` itself with PullEntries: both speak our gRPC
        protocol and ``target`` reports ``PULL_ENTRIES`` (a stock bookie does neither).

        Raises:
            BookieUnavailableError: ``target`` cannot be reached.
        """
        if source is not None and await self.transport_name(source) != GRPC:
            return False
        return bool(await self._call(target, "pulls"))

    async def open_add_stream(self, bookie_id: str, ledger_id: int, master_key: bytes, *,
                              recovery: bool = False) -> AddStream | None:
        """An add stream (gRPC bookies with ``ADD_STREAM``), else None: use :meth:`add_entries`."""
        return await self._call(bookie_id, "open_add_stream", ledger_id, master_key, recovery=recovery)

    # -- reads ------------------------------------------------------------------------------------
    async def read_entry(self, bookie_id: str, ledger_id: int, entry_id: int, *, fence: bool = False,
                         master_key: bytes = b"") -> ReadResult:
        """One entry; see :meth:`GrpcBookieClient.read_entry` (same errors over either transport)."""
        return await self._call(bookie_id, "read_entry", ledger_id, entry_id, fence=fence, master_key=master_key)

    def read_entries(self, bookie_id: str, ledger_id: int, first: int, last: int, *, ensemble_size: int = 0,
                     write_quorum: int = 0, bookie_index: int = 0) -> AsyncIterator[Any]:
        """Entries ``first..last`` in order; see :meth:`GrpcBookieClient.read_entries`. When the bookie's
        transport is already known the transport's own iterator is returned (no extra layer per entry)."""
        return self._stream(bookie_id, "read_entries", ledger_id, first, last, ensemble_size=ensemble_size,
                            write_quorum=write_quorum, bookie_index=bookie_index)

    def read_entry_batches(self, bookie_id: str, ledger_id: int, first: int, last: int, *, ensemble_size: int = 0,
                           write_quorum: int = 0, bookie_index: int = 0, views: bool = False) -> AsyncIterator[Any]:
        """:meth:`read_entries`, a list of items at a time; see :meth:`GrpcBookieClient.read_entry_batches`
        (``views``: bodies may be views of the messages received)."""
        return self._stream(bookie_id, "read_entry_batches", ledger_id, first, last, ensemble_size=ensemble_size,
                            write_quorum=write_quorum, bookie_index=bookie_index, views=views)

    def _stream(self, bookie_id: str, method: str, *args: Any, **kw: Any) -> AsyncIterator[Any]:
        name = self._chosen.get(bookie_id)
        if name is not None:
            return getattr(self.transport(name), method)(bookie_id, *args, **kw)
        return self._resolved_stream(bookie_id, method, *args, **kw)

    async def _resolved_stream(self, bookie_id: str, method: str, *args: Any, **kw: Any) -> AsyncIterator[Any]:
        t = await self._for(bookie_id)
        async with contextlib.aclosing(getattr(t, method)(bookie_id, *args, **kw)) as it:
            async for item in it:
                yield item

    async def read_lac(self, bookie_id: str, ledger_id: int) -> int:
        """The bookie's last-add-confirmed of the ledger (-1 when unknown)."""
        return int(await self._call(bookie_id, "read_lac", ledger_id))

    async def get_bookie_info(self, bookie_id: str, requested: int = 3) -> BookieInfo:
        """Disk figures in bytes (GET_BOOKIE_INFO)."""
        return await self._call(bookie_id, "get_bookie_info", requested)

    async def get_list_of_entries(self, bookie_id: str, ledger_id: int) -> list[tuple[int, int]]:
        """The ledger's entry ids on the bookie as inclusive ranges (GET_LIST_OF_ENTRIES_OF_LEDGER)."""
        return await self._call(bookie_id, "get_list_of_entries", ledger_id)

    # -- writes -----------------------------------------------------------------------------------
    async def add_entry(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *,
                        recovery: bool = False) -> None:
        """Store one packed entry; see :meth:`GrpcBookieClient.add_entry`."""
        await self._call(bookie_id, "add_entry", ledger_id, entry_id, master_key, body, recovery=recovery)

    async def add_entries(self, bookie_id: str, ledger_id: int, master_key: bytes,
                          entries: AsyncIterable[tuple[int, bytes]] | Iterable[tuple[int, bytes]], *,
                          recovery: bool = True) -> tuple[int, int]:
        """Store ``(entry_id, body)`` pairs; returns ``(entries_written, bytes_written)``."""
        return await self._call(bookie_id, "add_entries", ledger_id, master_key, entries, recovery=recovery)

    async def add_entry_batches(self, bookie_id: str, ledger_id: int, master_key: bytes,
                                batches: AsyncIterable[Sequence[tuple[int, bytes]]] | Iterable[Sequence[tuple[int, bytes]]],
                                *, recovery: bool = True) -> tuple[int, int]:
        """Store batches of ``(entry_id, body)`` pairs; see :meth:`GrpcBookieClient.add_entry_batches`."""
        return await self._call(bookie_id, "add_entry_batches", ledger_id, master_key, batches, recovery=recovery)

    async def pull_entries(self, target: str, source: str, ledger_id: int, master_key: bytes, first: int, last: int,
                           **kw: Any) -> AsyncIterator[PullReport]:
        """Have gRPC bookie ``target`` copy from gRPC bookie ``source`` itself (check :meth:`pulls` first).

        Raises:
            BookieError: ``EBADREQ`` when either is a stock bookie; otherwise as
                :meth:`GrpcBookieClient.pull_entries`.
        """
        if await self.transport_name(source) != GRPC or await self.transport_name(target) != GRPC:
            raise BookieError(target, "EBADREQ", f"PullEntries from {source} needs two bookies that speak gRPC")
        async with contextlib.aclosing(self.grpc.pull_entries(target, source, ledger_id, master_key, first, last,
                                                              **kw)) as it:
            async for rep in it:
                yield rep
