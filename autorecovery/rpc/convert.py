"""Conversions between the bookie protocol's protobuf messages and plain Python values (PURE).

No gRPC, asyncio or sockets here: only protobuf messages, so the bookie server, the bookie client and
unit tests share one definition of status names, entry ranges, the round-robin placement rule and the
``BookieServiceInfoFormat`` registration data.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import DecodeError

from autorecovery.errors import MalformedMetadataError
from autorecovery.ledger.striping import index_stores
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.proto import bookkeeper_formats_pb2 as fmt

#: Status name of a successful answer.
EOK = "EOK"

#: Endpoint id and protocol under which a bookie advertises its gRPC service in its registration znode
#: (upstream advertises ``id: "bookie"``, ``protocol: "bookie-rpc"`` for its Netty protocol; ours speaks gRPC).
ENDPOINT_ID = "bookie"
ENDPOINT_PROTOCOL = "grpc"
#: The protocol a stock bookie advertises for upstream's own wire protocol (v3 over TCP).
UPSTREAM_PROTOCOL = "bookie-rpc"


def speaks_a_known_protocol(advertised: tuple[str, ...]) -> bool:
    """Whether a registration advertises a bookie protocol we speak: ours (``grpc``), upstream's
    (``bookie-rpc``), or nothing at all (a stock bookie before 4.12 wrote no service info)."""
    return not advertised or ENDPOINT_PROTOCOL in advertised or UPSTREAM_PROTOCOL in advertised


def status_name(code: int) -> str:
    """Name of a ``StatusCode`` value (``504`` → ``"EFENCED"``); unknown numbers become ``"E<number>"``."""
    try:
        return pb.StatusCode.Name(code)
    except ValueError:
        return f"E{code}"


def status_code(name: str) -> pb.StatusCode:
    """``StatusCode`` number for a status name (``"ENOENTRY"`` → 403).

    Raises:
        ValueError: for a name that is not in the protocol's ``StatusCode`` enum.
    """
    return pb.StatusCode.Value(name)


def stored_on(entry_id: int, ensemble_size: int, write_quorum: int, bookie_index: int) -> bool:
    """Whether ensemble index ``bookie_index`` stores ``entry_id`` under round-robin striping.

    Upstream ``RoundRobinDistributionSchedule``: index ``i`` stores ``e`` iff ``(i - e) mod E < WQ``
    (the rule is :func:`autorecovery.ledger.striping.index_stores`). ``ensemble_size <= 0`` means "no
    striping" (the protocol's unset filter): every index stores every entry.

    Raises:
        ValueError: ``ensemble_size >= 1`` with ``write_quorum < 1``.
    """
    if ensemble_size <= 0:
        return True
    return index_stores(bookie_index, entry_id, ensemble_size, write_quorum)


def compact_ranges(entry_ids: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted, disjoint, inclusive ``(first, last)`` ranges covering exactly ``entry_ids``.

    ``[0, 1, 2, 5, 7, 8]`` → ``[(0, 2), (5, 5), (7, 8)]``. Duplicates are ignored.
    """
    out: list[tuple[int, int]] = []
    for e in sorted(set(entry_ids)):
        if out and out[-1][1] + 1 == e:
            out[-1] = (out[-1][0], e)
        else:
            out.append((e, e))
    return out


def ranges_to_proto(ranges: Iterable[tuple[int, int]]) -> list[pb.EntryRange]:
    """``[(first, last), ...]`` → repeated ``EntryRange`` messages."""
    return [pb.EntryRange(first=a, last=b) for a, b in ranges]


def ranges_from_proto(ranges: Iterable[pb.EntryRange]) -> list[tuple[int, int]]:
    """Repeated ``EntryRange`` messages → ``[(first, last), ...]``."""
    return [(r.first, r.last) for r in ranges]


def encode_service_info(host: str, port: int, properties: dict[str, str] | None = None) -> bytes:
    """Binary ``BookieServiceInfoFormat`` for a bookie's ``available/<id>`` registration znode.

    One endpoint (id ``"bookie"``, protocol ``"grpc"``) at ``host:port``; upstream field numbers, so
    upstream tools can decode it (BookieServiceInfoUtils / ZKRegistrationManager).
    """
    info = fmt.BookieServiceInfoFormat()
    ep = info.endpoints.add()
    ep.id = ENDPOINT_ID
    ep.host = host
    ep.port = port
    ep.protocol = ENDPOINT_PROTOCOL
    for k, v in (properties or {}).items():
        info.properties[k] = v
    return info.SerializeToString()


def decode_service_properties(data: bytes) -> dict[str, str]:
    """The ``properties`` map of a registration znode's ``BookieServiceInfoFormat`` ({} when empty or
    undecodable)."""
    if not data:
        return {}
    info = fmt.BookieServiceInfoFormat()
    try:
        info.ParseFromString(data)
        # a map entry with non-UTF-8 text only fails when read (upb decodes map strings lazily)
        props = dict(info.properties)
    except (DecodeError, UnicodeDecodeError):  # foreign data is simply "no properties"
        return {}
    return {k: v for k, v in props.items() if isinstance(k, str) and isinstance(v, str)}


def advertised_protocols(data: bytes) -> tuple[str, ...]:
    """Protocols of the endpoints a registration znode's ``BookieServiceInfoFormat`` advertises.

    ``("grpc",)`` for our bookies; ``("bookie-rpc", "http")`` or similar for a stock BookKeeper bookie
    (4.12+); ``()`` for empty data (upstream bookies before 4.12 wrote none); ``("<undecodable>",)``
    when the data is not a ``BookieServiceInfoFormat``. Never raises.
    """
    if not data:
        return ()
    info = fmt.BookieServiceInfoFormat()
    try:
        info.ParseFromString(data)
        protocols = [ep.protocol for ep in info.endpoints]
    except (DecodeError, UnicodeDecodeError):  # foreign data
        return ("<undecodable>",)
    # a proto2 string that is not UTF-8 comes back as bytes: name it, never return bytes
    return tuple((p if isinstance(p, str) else "<undecodable>") or "<unnamed>" for p in protocols)


def speaks_grpc(data: bytes) -> bool:
    """Whether a registration znode advertises our gRPC bookie protocol (see :func:`advertised_protocols`)."""
    return ENDPOINT_PROTOCOL in advertised_protocols(data)


def decode_service_info(data: bytes, path: str = "?") -> tuple[str, int] | None:
    """``(host, port)`` of the gRPC endpoint in a registration znode's data, or ``None`` if absent.

    Empty data (upstream bookies before 4.12 wrote none) gives ``None``.

    Args:
        data: the znode's bytes. path: the registration znode (``<root>/available/<bookie id>``),
            named in the error.

    Raises:
        MalformedMetadataError: naming ``path`` when ``data`` is not a ``BookieServiceInfoFormat``
            (or its gRPC endpoint's host is not UTF-8 text).
    """
    if not data:
        return None
    info = fmt.BookieServiceInfoFormat()
    try:
        info.ParseFromString(data)
        endpoints = [(ep.protocol, ep.host, ep.port) for ep in info.endpoints]
    except (DecodeError, UnicodeDecodeError) as exc:
        raise MalformedMetadataError(f"bookie registration {path} is not a BookieServiceInfoFormat: {exc}") from exc
    for protocol, host, port in endpoints:
        if protocol == ENDPOINT_PROTOCOL:
            if not isinstance(host, str):
                raise MalformedMetadataError(f"bookie registration {path}: endpoint host {host!r} is not UTF-8 text")
            return host, port
    return None
