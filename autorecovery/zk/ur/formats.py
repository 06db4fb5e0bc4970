"""Formats of the under-replication znodes (PURE codecs; upstream ``ZkLedgerUnderreplicationManager``).

The text ``UnderreplicatedLedgerFormat`` of a marker, the binary ctime znodes, the marker record, and
the small constants the manager's parts share (:mod:`autorecovery.zk.underreplication`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from google.protobuf import text_format
from google.protobuf.message import DecodeError, Message

from autorecovery.errors import CompatibilityError, UnavailableError
from autorecovery.ledger import textformat
from autorecovery.proto import bookkeeper_formats_pb2 as pb

#: ``held`` value of a lock taken without a marker (admin ``recover``); -1 keeps meaning "any version".
NO_MARKER = -2


def first_failure(results: list) -> tuple[int, Exception] | None:
    """``(index, error)`` of the op that failed a ``multi`` (the others report a roll-back), or None."""
    for i, r in enumerate(results):
        if isinstance(r, Exception) and type(r).__name__ not in ("RolledBackError", "RuntimeInconsistency"):
            return i, r
    return None


#: Values of ``which`` for the ctime znodes, mapped to (Paths attribute, protobuf message, field).
CTIME_KINDS: dict[str, tuple[str, type[Message], str]] = {
    "checkallledgers": ("check_all_ledgers_ctime", pb.CheckAllLedgersFormat, "checkAllLedgersCTime"),
    "placementpolicycheck": ("placement_policy_check_ctime", pb.PlacementPolicyCheckFormat, "placementPolicyCheckCTime"),
    "replicascheck": ("replicas_check_ctime", pb.ReplicasCheckFormat, "replicasCheckCTime"),
}

#: ctime of a marker written without one (upstream UnderreplicatedLedger.UNASSIGNED_CTIME).
UNASSIGNED_CTIME = -1

#: Operations per ZooKeeper multi in :meth:`UnderreplicationManager.mark_many` (each marker costs 2:
#: its own hex leaf level and the marker; jute's 1 MB packet limit is far away at ~100 bytes per op).
MULTI_BATCH_OPS = 1000
#: ``multi`` transactions :meth:`UnderreplicationManager.mark_many` keeps in flight at once
MULTI_IN_FLIGHT = 4

#: Directories listed per ``multiRead`` request by the marker-tree walk (each marker has its own
#: fourth-level directory, so a walk of K markers is about K / WALK_BATCH requests; ~30 B per listing
#: in the answer, far from jute's 1 MB).
WALK_BATCH = 1000
#: Requests one session's walk keeps in flight at once: D daemons walking together (a restart with a
#: backlog, or every session after a ZooKeeper session event) put at most D × this on the server.
WALK_IN_FLIGHT = 2
#: The same bound when the server has no multiRead (before 3.6): one ``getChildren`` per directory.
WALK_IN_FLIGHT_SINGLE = 8
#: Upper bound (s) of the random delay before a worker rebuilds its marker index after a session event
#: (every daemon sees a ZooKeeper restart at about the same moment: spread their walks).
REBUILD_JITTER_S = 1.0


@dataclass(frozen=True)
class UnderreplicatedLedger:
    """One marker: ledger id, missing replicas (bookie ids), ctime in ms (-1 when absent), znode version."""

    ledger_id: int
    replicas: list[str] = field(default_factory=list)
    ctime: int = UNASSIGNED_CTIME
    version: int = -1


def encode_marker(replicas: Iterable[str], ctime_ms: int | None) -> bytes:
    """Text ``UnderreplicatedLedgerFormat``: ``replica: "a"`` lines then ``ctime: <ms>`` when given."""
    m = pb.UnderreplicatedLedgerFormat()
    m.replica.extend(replicas)
    if ctime_ms is not None:
        m.ctime = ctime_ms
    return textformat.print_message(m).encode()


def decode_marker(data: bytes, path: str = "?") -> pb.UnderreplicatedLedgerFormat:
    """Parse a marker's text format.

    Raises:
        CompatibilityError: naming the path when the data is not a text UnderreplicatedLedgerFormat.
    """
    m = pb.UnderreplicatedLedgerFormat()
    try:
        text = data.decode()
        if _parse_plain_marker(text, m):
            return m
        m.Clear()
        textformat.parse(text, m)
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        raise CompatibilityError(f"under-replication marker {path} is not a text UnderreplicatedLedgerFormat: {str(exc)[:500]}") from exc
    return m


#: One line of a marker as upstream and we write it: a replica without escapes, or the ctime.
_PLAIN_LINE = re.compile(r'[ \t]*(?:replica[ \t]*:[ \t]*"([^"\\\n]*)"|ctime[ \t]*:[ \t]*(-?[0-9]{1,19}))[ \t]*')
_INT64 = range(-2**63, 2**63)


def _parse_plain_marker(text: str, m: pb.UnderreplicatedLedgerFormat) -> bool:
    """Fill ``m`` from a marker of plain ``replica: "…"`` and ``ctime: <n>`` lines (what every writer
    produces); False, with ``m`` partly filled, for anything else (escapes, comments, other spellings,
    a second ctime), which the full text-format parser then reads or refuses. About 20 times cheaper
    than ``text_format.Parse``, which every worker ran on every new marker (issue 29)."""
    ctime: int | None = None
    for line in text.split("\n"):
        if not line or line.isspace():
            continue
        g = _PLAIN_LINE.fullmatch(line)
        if g is None:
            return False
        if g.group(1) is not None:
            m.replica.append(g.group(1))
        elif ctime is None and int(g.group(2)) in _INT64:
            ctime = int(g.group(2))
        else:
            return False
    if ctime is not None:
        m.ctime = ctime
    return True


def encode_ctime(which: str, ms: int) -> bytes:
    """Binary ctime znode body: ``0x08`` + varint(ms)."""
    _, cls, fname = CTIME_KINDS[which]
    m = cls()
    setattr(m, fname, ms)
    return m.SerializeToString()


def decode_ctime(which: str, data: bytes, path: str | None = None) -> int:
    """The ms stored in a ``which`` ctime znode (-1 when the field is absent).

    Raises:
        UnavailableError: naming ``path`` when ``path`` is given and ``data`` is not the binary
            ``<which>Format`` (upstream ``getCheckAllLedgersCTime``: "Error while parsing ZK protobuf
            binary data"). Without ``path``, undecodable data gives -1.
    """
    _, cls, fname = CTIME_KINDS[which]
    m = cls()
    try:
        m.ParseFromString(data)
    except DecodeError as exc:
        if path is None:
            return -1
        raise UnavailableError(f"{path}: cannot parse the {which} ctime ({len(data)} bytes): {exc}") from exc
    return getattr(m, fname) if m.HasField(fname) else -1


def text_bytes(msg) -> bytes:
    return textformat.print_message(msg).encode()
