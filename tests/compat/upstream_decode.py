"""An independent decoder of BookKeeper's ZooKeeper znodes, written from upstream's rules (no tests here).

It deliberately imports nothing from ``autorecovery`` (not ``autorecovery.ledger.formats``, not
``autorecovery.ledger.metadata``, not ``autorecovery.proto``): the message classes come from upstream's
own ``DataFormats.proto`` (vendored unchanged in ``tests/compat/upstream/``), compiled at test time with
``grpc_tools.protoc`` into a *fresh* :class:`~google.protobuf.descriptor_pool.DescriptorPool`, and the
framing around them (headers, version lines, path shapes) is re-implemented here from the upstream Java
class each function names. A znode our code writes that does not decode here would not decode in a Java
BookKeeper either.

Entry points:

* :meth:`UpstreamFormats.compile` → the upstream message classes;
* :func:`classify` (path → :class:`Rule`) and :func:`decode_znode` (path, data → :class:`Decoded`);
* every error is an :class:`UpstreamFormatError` naming the znode and the upstream rule it breaks.

Where this decoder is stricter than upstream's reader it says so in the docstring (for example trailing
bytes after a v3 metadata message, which upstream silently ignores): such bytes would be a bug in our
writer even if Java tolerates them.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format, unknown_fields
from google.protobuf.message import DecodeError, Message

#: Java ``Integer.MAX_VALUE``: the hybrid hierarchical layout switches to long paths at this id.
JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1

#: Every upstream message we decode (DataFormats.proto, no package).
MESSAGES = (
    "LedgerMetadataFormat",
    "LedgerRereplicationLayoutFormat",
    "UnderreplicatedLedgerFormat",
    "CookieFormat",
    "LockDataFormat",
    "AuditorVoteFormat",
    "CheckAllLedgersFormat",
    "PlacementPolicyCheckFormat",
    "ReplicasCheckFormat",
    "BookieServiceInfoFormat",
)

#: Ledger manager factories upstream ships (LedgerLayout names them by class) → the path layout.
LEDGER_MANAGER_FACTORIES = {
    "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory": "hierarchical",
    "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory": "longhierarchical",
}


class UpstreamFormatError(AssertionError):
    """A znode that upstream BookKeeper would not read (the message names the znode and the rule)."""


# ---------------------------------------------------------------------------------------------------
# message classes from the vendored proto
# ---------------------------------------------------------------------------------------------------
@dataclass
class UpstreamFormats:
    """Upstream's DataFormats message classes, built in a private descriptor pool.

    Attributes:
        pool: the fresh DescriptorPool holding ``DataFormats.proto`` (never the default pool, where our
            own ``autorecovery.formats`` classes live).
        classes: message name (e.g. ``"LedgerMetadataFormat"``) → generated class.
    """

    pool: descriptor_pool.DescriptorPool
    classes: dict[str, type[Message]]

    @classmethod
    def compile(cls, proto: Path, out_dir: Path) -> UpstreamFormats:
        """Compile ``proto`` with ``grpc_tools.protoc`` to a descriptor set in ``out_dir`` and load it.

        Raises:
            RuntimeError: protoc failed (its exit code and the proto path are named).
        """
        from grpc_tools import protoc

        out = Path(out_dir) / "DataFormats.pb"
        rc = protoc.main([
            "grpc_tools.protoc", f"-I{proto.parent}", f"--descriptor_set_out={out}", "--include_imports",
            str(proto),
        ])
        if rc != 0 or not out.exists():
            raise RuntimeError(f"grpc_tools.protoc failed with exit code {rc} on {proto}")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
        pool = descriptor_pool.DescriptorPool()
        for fd in fds.file:
            pool.Add(fd)
        classes = {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name)) for name in MESSAGES}
        return cls(pool, classes)

    def new(self, name: str) -> Message:
        return self.classes[name]()

    def parse_binary(self, name: str, data: bytes, path: str) -> Message:
        """Binary protobuf (upstream lightproto ``parseFrom``), strictly: every required field present,
        no unknown field at any depth.

        Raises:
            UpstreamFormatError: naming ``path`` and the message.
        """
        msg = self.new(name)
        try:
            msg.MergeFromString(data)
        except DecodeError as exc:
            raise UpstreamFormatError(f"{path}: not a binary {name}: {exc}") from exc
        self._check(msg, name, path)
        return msg

    def parse_text(self, name: str, data: bytes, path: str) -> Message:
        """Protobuf text format (upstream ``parseFromTextFormat``), strictly: UTF-8, every required
        field present, no unknown field (google's text parser refuses unknown names).

        Raises:
            UpstreamFormatError: naming ``path`` and the message.
        """
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UpstreamFormatError(f"{path}: {name} text is not UTF-8: {exc}") from exc
        msg = self.new(name)
        try:
            text_format.Parse(text, msg)
        except text_format.ParseError as exc:
            raise UpstreamFormatError(f"{path}: not a text {name}: {exc}; data {text!r}") from exc
        self._check(msg, name, path)
        return msg

    @staticmethod
    def _check(msg: Message, name: str, path: str) -> None:
        missing = msg.FindInitializationErrors()
        if missing:
            raise UpstreamFormatError(f"{path}: {name} lacks required field(s) upstream declares: {missing}")
        unknown = _unknown_fields(msg)
        if unknown:
            raise UpstreamFormatError(f"{path}: {name} carries fields upstream does not declare: {unknown}")


def _unknown_fields(msg: Message, prefix: str = "") -> list[str]:
    """Dotted names of every unknown field number in ``msg`` and its sub-messages."""
    out = [f"{prefix}#{f.field_number}" for f in unknown_fields.UnknownFieldSet(msg)]
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            continue  # map<string, string>: no sub-message to inspect
        items = value if fd.is_repeated else [value]
        for i, sub in enumerate(items):
            out += _unknown_fields(sub, f"{prefix}{fd.name}[{i}].")
    return out


# ---------------------------------------------------------------------------------------------------
# small Java-compatible helpers
# ---------------------------------------------------------------------------------------------------
def java_split(s: str, sep: str) -> list[str]:
    """``String.split(sep)`` for a literal ``sep``: trailing empty strings removed (Java semantics)."""
    if s == "":
        return [""]
    parts = s.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def java_parse_int(s: str, what: str, path: str, bits: int = 32) -> int:
    """``Integer.parseInt`` / ``Long.parseLong``: optional sign, ASCII digits only, no blanks, in range.

    Raises:
        UpstreamFormatError: naming ``what`` and ``path``.
    """
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise UpstreamFormatError(f"{path}: {what} {s!r} is not a Java integer")
    v = int(s)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if not lo <= v <= hi:
        raise UpstreamFormatError(f"{path}: {what} {s!r} overflows a {bits}-bit Java integer")
    return v


def java_read_lines(text: str) -> list[str]:
    """``BufferedReader.readLine`` until EOF: lines end at ``\\n``, ``\\r`` or ``\\r\\n``."""
    lines = re.split(r"\r\n|\r|\n", text)
    if lines[-1] == "":  # text ended with a line terminator (or was empty): no last partial line
        lines.pop()
    return lines


_BOOKIE_ID_RE = re.compile(r"[a-zA-Z0-9:-_.\-]+")


def check_bookie_id(s: str, path: str) -> str:
    """``BookieId.parse``/``validateBookieId``: ``[a-zA-Z0-9:-_.\\-]+`` (note the ``:-_`` range) and not
    ``readonly``.

    Raises:
        UpstreamFormatError: naming the id and ``path``.
    """
    if not _BOOKIE_ID_RE.fullmatch(s) or s.lower() == "readonly":
        raise UpstreamFormatError(f"{path}: {s!r} is not a valid upstream BookieId")
    return s


def _utf8(data: bytes, path: str, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UpstreamFormatError(f"{path}: {what} is not UTF-8: {exc}") from exc


# ---------------------------------------------------------------------------------------------------
# ledger ids ↔ paths (upstream StringUtils, ZkLedgerUnderreplicationManager)
# ---------------------------------------------------------------------------------------------------
def short_hierarchical_path(ledger_id: int) -> str:
    """``StringUtils.getShortHierarchicalLedgerPath``: ``%010d`` split 2-4-4, ``L`` before the last part."""
    s = f"{ledger_id:010d}"
    return f"/{s[0:2]}/{s[2:6]}/L{s[6:10]}"


def long_hierarchical_path(ledger_id: int) -> str:
    """``StringUtils.getLongHierarchicalLedgerPath``: ``%019d`` split 3-4-4-4-4, ``L`` before the last."""
    s = f"{ledger_id:019d}"
    return f"/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def hybrid_hierarchical_path(ledger_id: int) -> str:
    """``StringUtils.getHybridHierarchicalLedgerPath`` (HierarchicalLedgerManager): the short 2-4-4 form
    below ``Integer.MAX_VALUE``, the long 3-4-4-4-4 form from it on."""
    return short_hierarchical_path(ledger_id) if ledger_id < JAVA_INT_MAX else long_hierarchical_path(ledger_id)


#: layout name → (ledger path of an id, the ledger manager's path function's upstream name)
LEDGER_PATH_FUNCS: dict[str, Callable[[int], str]] = {
    "hierarchical": hybrid_hierarchical_path,
    "longhierarchical": long_hierarchical_path,
}

_SHORT_LEAF = re.compile(r"/(\d{2})/(\d{4})/L(\d{4})")
_LONG_LEAF = re.compile(r"/(\d{3})/(\d{4})/(\d{4})/(\d{4})/L(\d{4})")
_SHORT_LEVELS = re.compile(r"/\d{2}(/\d{4})?")
_LONG_LEVELS = re.compile(r"/\d{3}(/\d{4}){0,3}")


def ledger_id_of_path(rel: str, layout: str) -> int | None:
    """The ledger id a metadata znode path (relative to the ledgers root) names under ``layout``, or
    None when it is not a ledger path of that layout (``StringUtils.stringTo*HierarchicalLedgerId`` plus
    the round trip: the id's own path must be exactly ``rel``)."""
    m = _SHORT_LEAF.fullmatch(rel) or _LONG_LEAF.fullmatch(rel)
    if m is None:
        return None
    lid = int("".join(m.groups()))
    if lid > JAVA_LONG_MAX:
        return None
    return lid if LEDGER_PATH_FUNCS[layout](lid) == rel else None


def is_ledger_level(rel: str, layout: str) -> bool:
    """An intermediate level of the ledger tree (``HIERARCHICAL_LEDGER_PARENT_NODE_REGEX`` ``\\d{2,3}``
    for the hybrid layout, ``\\d{3}`` for the long one, then 4-digit levels)."""
    if layout == "hierarchical" and _SHORT_LEVELS.fullmatch(rel):
        return True
    return bool(_LONG_LEVELS.fullmatch(rel))


def ur_marker_path(ledger_id: int) -> str:
    """``ZkLedgerUnderreplicationManager.getUrLedgerZnode`` relative to ``underreplication/ledgers``:
    four ``%04x`` levels of 16 bits each, then ``urL%010d``."""
    return (f"/{ledger_id >> 48 & 0xffff:04x}/{ledger_id >> 32 & 0xffff:04x}/{ledger_id >> 16 & 0xffff:04x}/"
            f"{ledger_id & 0xffff:04x}/urL{ledger_id:010d}")


# ---------------------------------------------------------------------------------------------------
# the decoders, one per upstream class
# ---------------------------------------------------------------------------------------------------
METADATA_HEADER = b"BookieMetadataFormatVersion\t"


def read_raw_varint32(data: bytes, pos: int, path: str) -> tuple[int, int]:
    """``LedgerMetadataSerDe.readRawVarint32``: at most 5 bytes (shift < 32); returns (value, next pos)."""
    result, shift = 0, 0
    while shift < 32:
        if pos >= len(data):
            raise UpstreamFormatError(f"{path}: EOF inside the v3 length varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            result &= 0xFFFFFFFF
            return (result - (1 << 32) if result >= 1 << 31 else result), pos
        shift += 7
    raise UpstreamFormatError(f"{path}: malformed varint32 length")


def decode_ledger_metadata(fmts: UpstreamFormats, data: bytes, path: str, ledger_id: int) -> dict[str, Any]:
    """``LedgerMetadataSerDe.parseConfig`` then ``LedgerMetadataBuilder.build`` checks.

    Header ``BookieMetadataFormatVersion\\t<version>\\n`` (``readHeader``: exact key bytes, at most 10
    digits before the newline). Version 3: varint32 length + binary ``LedgerMetadataFormat``
    (``readDelimited``; stricter than upstream: no byte may follow the message). Version 2: the rest
    is the text format. Version 1: the old line format (``parseVersion1Config``).

    Returns a summary dict (``version``, ``state``, ``ensemble_size``, ``write_quorum``, ``ack_quorum``,
    ``segments`` [(first entry, [bookie ids])], ``last_entry_id``, ``length``, ``custom_metadata``).

    Raises:
        UpstreamFormatError: naming ``path``.
    """
    if not data.startswith(METADATA_HEADER):
        i = next((k for k in range(min(len(data), len(METADATA_HEADER))) if data[k] != METADATA_HEADER[k]),
                 min(len(data), len(METADATA_HEADER)))
        raise UpstreamFormatError(f"{path}: ledger metadata header corrupt at index {i}")
    pos = len(METADATA_HEADER)
    nl = data.find(b"\n", pos, pos + 11)
    if nl < 0:
        raise UpstreamFormatError(f"{path}: unable to find end of version number, metadata appears corrupt")
    version = java_parse_int(data[pos:nl].decode("latin-1"), "metadata format version", path)
    body = data[nl + 1:]
    if version == 3:
        size, p = read_raw_varint32(body, 0, path)
        if size < 0 or p + size > len(body):
            raise UpstreamFormatError(f"{path}: v3 length {size} runs past the {len(body) - p} bytes present")
        if p + size != len(body):
            raise UpstreamFormatError(f"{path}: {len(body) - p - size} byte(s) after the v3 LedgerMetadataFormat "
                                      "(upstream ignores them; we never write them)")
        msg = fmts.parse_binary("LedgerMetadataFormat", body[p:p + size], path)
        return _ledger_metadata_semantics(msg, 3, path, ledger_id)
    if version == 2:
        msg = fmts.parse_text("LedgerMetadataFormat", body, path)
        if msg.HasField("cToken"):
            raise UpstreamFormatError(f"{path}: v2 metadata carries cToken (serializeVersion2 never writes it)")
        return _ledger_metadata_semantics(msg, 2, path, ledger_id)
    if version == 1:
        return _ledger_metadata_v1(_utf8(body, path, "v1 metadata"), path)
    raise UpstreamFormatError(f"{path}: metadata version not compatible: expected between 1 and 3, got {version}")


def _ledger_metadata_semantics(msg: Message, version: int, path: str, ledger_id: int) -> dict[str, Any]:
    """``LedgerMetadataSerDe.decodeFormat`` + ``LedgerMetadataBuilder.build`` + ``LedgerMetadataImpl``."""
    E, WQ = msg.ensembleSize, msg.quorumSize
    AQ = msg.ackQuorumSize if msg.HasField("ackQuorumSize") else WQ
    state = msg.DESCRIPTOR.enum_types_by_name["State"].values_by_number[msg.state].name
    segments: list[tuple[int, list[str]]] = []
    for seg in msg.segment:
        members = [check_bookie_id(b, path) for b in seg.ensembleMember]
        if len(members) != E:
            raise UpstreamFormatError(f"{path}: segment at entry {seg.firstEntryId} has {len(members)} bookies, "
                                      f"ensembleSize is {E} (LedgerMetadataBuilder.newEnsembleEntry)")
        if segments and seg.firstEntryId <= segments[-1][0]:
            raise UpstreamFormatError(f"{path}: segment first entries not increasing ({seg.firstEntryId} after "
                                      f"{segments[-1][0]})")
        segments.append((seg.firstEntryId, members))
    if not segments:
        raise UpstreamFormatError(f"{path}: there must be at least one ensemble in the ledger")
    if ledger_id < 0:
        raise UpstreamFormatError(f"{path}: ledger id must be set")
    if E < WQ:
        raise UpstreamFormatError(f"{path}: write quorum {WQ} > ensemble size {E}")
    if WQ < AQ:
        raise UpstreamFormatError(f"{path}: ack quorum {AQ} > write quorum {WQ}")
    if state == "CLOSED" and not msg.HasField("lastEntryId"):
        raise UpstreamFormatError(f"{path}: closed ledger must have a last entry")
    if msg.HasField("password"):
        digests = msg.DESCRIPTOR.enum_types_by_name["DigestType"].values_by_number
        if msg.digestType not in digests:
            raise UpstreamFormatError(f"{path}: unable to convert digest type {msg.digestType}")
    return {
        "version": version,
        "ledger_id": ledger_id,
        "state": state,
        "ensemble_size": E,
        "write_quorum": WQ,
        "ack_quorum": AQ,
        "segments": segments,
        "last_entry_id": msg.lastEntryId if state == "CLOSED" else None,
        "length": msg.length if state == "CLOSED" else None,
        "digest": (msg.DESCRIPTOR.enum_types_by_name["DigestType"].values_by_number[msg.digestType].name
                   if msg.HasField("password") else None),
        "ctime": msg.ctime if msg.HasField("ctime") else None,
        "ctoken": msg.cToken if msg.HasField("cToken") else None,
        "custom_metadata": {e.key: e.value for e in msg.customMetadata},
        "message": msg,
    }


def _ledger_metadata_v1(text: str, path: str) -> dict[str, Any]:
    """``LedgerMetadataSerDe.parseVersion1Config``: quorum, ensemble size and length lines, then
    ``<first entry>\\t<bookie>...`` lines, optionally ending with ``<last entry>\\tCLOSED`` (``-102``
    meaning in recovery)."""
    lines = java_read_lines(text)
    if len(lines) < 3:
        raise UpstreamFormatError(f"{path}: v1 metadata needs quorum, ensemble size and length lines")
    WQ = java_parse_int(lines[0], "v1 quorum size", path)
    E = java_parse_int(lines[1], "v1 ensemble size", path)
    length = java_parse_int(lines[2], "v1 length", path, bits=64)
    state, last, segments = "OPEN", None, []
    for line in lines[3:]:
        parts = java_split(line, "\t")
        if len(parts) < 2:
            raise UpstreamFormatError(f"{path}: v1 line {line!r} has no second field")
        if parts[1] == "CLOSED":
            n = java_parse_int(parts[0], "v1 last entry", path, bits=64)
            state, last = ("IN_RECOVERY", None) if n == -102 else ("CLOSED", n)
            break
        members = [check_bookie_id(b, path) for b in parts[1:]]
        if len(members) != E:
            raise UpstreamFormatError(f"{path}: v1 ensemble {members} is not of size {E}")
        segments.append((java_parse_int(parts[0], "v1 first entry", path, bits=64), members))
    if not segments:
        raise UpstreamFormatError(f"{path}: there must be at least one ensemble in the ledger")
    return {"version": 1, "state": state, "ensemble_size": E, "write_quorum": WQ, "ack_quorum": WQ,
            "segments": segments, "last_entry_id": last, "length": length if state == "CLOSED" else None,
            "custom_metadata": {}}


def decode_ledger_layout(data: bytes, path: str) -> dict[str, Any]:
    """``LedgerLayout.parseLayout``: ``<layout format version>\\n<factory class>:<manager version>``,
    format version between 1 and 2 (``LAYOUT_MIN_COMPAT_VERSION``..``LAYOUT_FORMAT_VERSION``).

    Returns ``{"format_version", "factory", "manager_version", "layout"}`` (``layout`` is the path shape,
    from :data:`LEDGER_MANAGER_FACTORIES`). Raises UpstreamFormatError naming ``path``.
    """
    text = _utf8(data, path, "LedgerLayout")
    lines = java_split(text, "\n")
    fv = java_parse_int(lines[0] if lines else "", "layout format version", path)
    if not 1 <= fv <= 2:
        raise UpstreamFormatError(f"{path}: metadata version not compatible: expected 2, got {fv}")
    if len(lines) < 2:
        raise UpstreamFormatError(f"{path}: ledger manager and its version absent from layout {text!r}")
    parts = java_split(lines[1], ":")
    if len(parts) != 2:
        raise UpstreamFormatError(f"{path}: invalid ledger manager defined in layout {text!r}")
    factory, mv = parts[0], java_parse_int(parts[1], "ledger manager version", path)
    if factory not in LEDGER_MANAGER_FACTORIES:
        raise UpstreamFormatError(f"{path}: {factory} is not a hierarchical ledger manager factory upstream ships")
    return {"format_version": fv, "factory": factory, "manager_version": mv,
            "layout": LEDGER_MANAGER_FACTORIES[factory]}


def decode_rereplication_layout(fmts: UpstreamFormats, data: bytes, path: str) -> dict[str, Any]:
    """``ZkLedgerUnderreplicationManager.checkLayout``: text ``LedgerRereplicationLayoutFormat`` equal
    to ``type: "BASIC" version: 1`` (anything else is "Incompatible layout found")."""
    m = fmts.parse_text("LedgerRereplicationLayoutFormat", data, path)
    if m.type != "BASIC" or m.version != 1:
        raise UpstreamFormatError(f"{path}: incompatible layout found ({m.type}:{m.version}), expected BASIC:1")
    return {"type": m.type, "version": m.version}


def decode_ur_marker(fmts: UpstreamFormats, data: bytes, path: str) -> dict[str, Any]:
    """``ZkLedgerUnderreplicationManager.getLedgerUnreplicationInfo``: text ``UnderreplicatedLedgerFormat``
    (``replica`` bookie ids, optional ``ctime`` ms)."""
    m = fmts.parse_text("UnderreplicatedLedgerFormat", data, path)
    return {"replicas": [check_bookie_id(r, path) for r in m.replica],
            "ctime": m.ctime if m.HasField("ctime") else None}


def decode_lock(fmts: UpstreamFormats, data: bytes, path: str) -> dict[str, Any]:
    """``ZkLedgerUnderreplicationManager.getReplicationWorkerIdRereplicatingLedger``: text
    ``LockDataFormat`` (``bookieId``: upstream writes the host name, ``getLockData``)."""
    m = fmts.parse_text("LockDataFormat", data, path)
    return {"bookieId": m.bookieId if m.HasField("bookieId") else None}


def decode_vote(fmts: UpstreamFormats, data: bytes, path: str) -> dict[str, Any]:
    """``ZkLedgerAuditorManager.getCurrentAuditor``: text ``AuditorVoteFormat`` whose ``bookieId``
    parses as a ``BookieId``."""
    m = fmts.parse_text("AuditorVoteFormat", data, path)
    if not m.HasField("bookieId"):
        raise UpstreamFormatError(f"{path}: vote without bookieId (getCurrentAuditor would parse null)")
    return {"bookieId": check_bookie_id(m.bookieId, path)}


CTIME_FORMATS = {
    "checkallledgersctime": ("CheckAllLedgersFormat", "checkAllLedgersCTime"),
    "placementpolicycheckctime": ("PlacementPolicyCheckFormat", "placementPolicyCheckCTime"),
    "replicascheckctime": ("ReplicasCheckFormat", "replicasCheckCTime"),
}


def decode_ctime(fmts: UpstreamFormats, name: str, data: bytes, path: str) -> dict[str, Any]:
    """``ZkLedgerUnderreplicationManager.get{CheckAllLedgers,PlacementPolicyCheck,ReplicasCheck}CTime``:
    *binary* ``CheckAllLedgersFormat`` / ``PlacementPolicyCheckFormat`` / ``ReplicasCheckFormat``
    (``setXCTime`` writes ``toByteArray()``), field 1 = ms since the epoch."""
    msg_name, fname = CTIME_FORMATS[name]
    m = fmts.parse_binary(msg_name, data, path)
    if not m.HasField(fname):
        raise UpstreamFormatError(f"{path}: {msg_name} without {fname} (upstream reads -1: never ran)")
    return {fname: getattr(m, fname)}


def decode_lost_bookie_recovery_delay(data: bytes, path: str) -> dict[str, Any]:
    """``ZkLedgerUnderreplicationManager.getLostBookieRecoveryDelay``:
    ``Integer.parseInt(new String(data, UTF_8))`` seconds."""
    return {"seconds": java_parse_int(_utf8(data, path, "lostBookieRecoveryDelay"), "lostBookieRecoveryDelay", path)}


def decode_cookie(fmts: UpstreamFormats, data: bytes, path: str, bookie_id: str) -> dict[str, Any]:
    """``Cookie.parseFromBytes``: a layout version line (trimmed int), then for version 3 three lines
    (bookie id, journal dirs, ledger dirs) and for version ≥ 4 the text ``CookieFormat``. Upstream writes
    ``CURRENT_COOKIE_LAYOUT_VERSION`` 5. The cookie's bookie (``bookieHost``) must be the znode's name
    (``ZKRegistrationManager`` keeps ``cookies/<bookie id>``)."""
    text = _utf8(data, path, "cookie")
    m = re.match(r"([^\r\n]*)(\r\n|\r|\n|$)", text)
    version = java_parse_int(m.group(1).strip(), "cookie layout version", path)
    rest = text[m.end():]
    if version == 3:
        lines = java_read_lines(rest)
        if len(lines) < 3:
            raise UpstreamFormatError(f"{path}: v3 cookie needs bookie id, journal and ledger dir lines")
        host, journal, ledgers = lines[:3]
        out = {"layout_version": 3, "bookieHost": host, "journalDir": journal, "ledgerDirs": ledgers}
    elif version >= 4:
        c = fmts.parse_text("CookieFormat", rest.encode("utf-8"), path)
        out = {"layout_version": version, "bookieHost": c.bookieHost, "journalDir": c.journalDir,
               "ledgerDirs": c.ledgerDirs, "instanceId": c.instanceId if c.HasField("instanceId") else None,
               "indexDirs": c.indexDirs if c.HasField("indexDirs") else None}
    else:
        raise UpstreamFormatError(f"{path}: cookie layout version {version} is too old (3 or more)")
    if out["bookieHost"] != bookie_id:
        raise UpstreamFormatError(f"{path}: cookie names bookie {out['bookieHost']!r}, znode is {bookie_id!r}")
    return out


def decode_service_info(fmts: UpstreamFormats, data: bytes, path: str) -> dict[str, Any]:
    """``ZKRegistrationClient.deserializeBookieServiceInfo``: empty = legacy (one ``bookie-rpc``
    endpoint at the bookie id), otherwise binary ``BookieServiceInfoFormat`` (``ZKRegistrationManager
    .serializeBookieServiceInfo``); every endpoint has id, port, host and protocol (required)."""
    if not data:
        return {"legacy": True, "endpoints": [], "properties": {}}
    m = fmts.parse_binary("BookieServiceInfoFormat", data, path)
    eps = [{"id": e.id, "host": e.host, "port": e.port, "protocol": e.protocol, "auth": list(e.auth),
            "extensions": list(e.extensions)} for e in m.endpoints]
    for e in eps:
        if not 0 <= e["port"] <= 65535:
            raise UpstreamFormatError(f"{path}: endpoint {e['id']} port {e['port']} out of range")
    return {"legacy": False, "endpoints": eps, "properties": dict(m.properties)}


def decode_instance_id(data: bytes, path: str) -> dict[str, Any]:
    """``ZKRegistrationManager.getClusterInstanceId`` reads ``new String(data, UTF_8)``; ``initNewCluster``
    writes ``UUID.randomUUID().toString()`` (lower-case 8-4-4-4-12 hex)."""
    text = _utf8(data, path, "INSTANCEID")
    try:
        u = uuid.UUID(text)
    except ValueError as exc:
        raise UpstreamFormatError(f"{path}: INSTANCEID {text!r} is not a UUID string") from exc
    if str(u) != text:
        raise UpstreamFormatError(f"{path}: INSTANCEID {text!r} is not in UUID.toString() form ({u})")
    return {"instance_id": text}


def decode_json_addition(data: bytes, path: str) -> dict[str, Any]:
    """Our documented additions (not read by upstream): one JSON object per znode."""
    try:
        doc = json.loads(_utf8(data, path, "JSON record"))
    except ValueError as exc:
        raise UpstreamFormatError(f"{path}: our documented addition is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise UpstreamFormatError(f"{path}: our documented addition is not a JSON object: {doc!r}")
    return doc


def decode_pulsar_racks(data: bytes, path: str) -> dict[str, Any]:
    """Pulsar's ``BookieRackAffinityMapping`` rack info (``/bookies``, outside the ledgers root):
    ``{"<group>": {"<bookie id>": {"rack": "/r", "hostname": "h"}}}``."""
    doc = decode_json_addition(data, path)
    for group, bookies in doc.items():
        if not isinstance(bookies, dict):
            raise UpstreamFormatError(f"{path}: group {group!r} is not an object")
        for bid, info in bookies.items():
            check_bookie_id(bid, path)
            if not isinstance(info, dict) or not str(info.get("rack", "")).startswith("/"):
                raise UpstreamFormatError(f"{path}: {bid} has no /rack: {info!r}")
    return doc


# ---------------------------------------------------------------------------------------------------
# path → rule
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """How a znode is read: ``kind`` (e.g. ``"ledger"``, ``"ur-marker"``, ``"container"``), the upstream
    class cited, whether it is one of our documented additions, and the decode function
    (``(fmts, path, data) -> dict``)."""

    kind: str
    upstream: str
    decode: Callable[[UpstreamFormats, str, bytes], dict[str, Any]]
    ours: bool = False


def _empty(upstream: str) -> Callable[[UpstreamFormats, str, bytes], dict[str, Any]]:
    def check(_f: UpstreamFormats, path: str, data: bytes) -> dict[str, Any]:
        if data:
            raise UpstreamFormatError(f"{path}: upstream ({upstream}) writes no data here, found {data[:80]!r}")
        return {}
    return check


def container(upstream: str) -> Rule:
    return Rule("container", upstream, _empty(upstream))


@dataclass
class Layout:
    """What the walk expects: the ledgers root and the ledger path layout (``hierarchical`` or
    ``longhierarchical``)."""

    root: str = "/ledgers"
    layout: str = "hierarchical"


_UR_LEAF = re.compile(r"urL(\d{10,})")


def classify(path: str, where: Layout) -> Rule | None:
    """The rule for ``path`` (absolute, inside the cluster's chroot), or None for an unknown znode.

    ``/zookeeper`` (ZooKeeper's own) is never passed here by the walk.
    """
    root = where.root
    if path == "/bookies":
        return Rule("pulsar-racks", "Pulsar BookieRackAffinityMapping (rack info, outside the ledgers root)",
                    lambda f, p, d: decode_pulsar_racks(d, p))
    if path == "/" or (root.startswith(path + "/")):
        return container("ZkUtils.createFullPathOptimistic (parents of the ledgers root)")
    if path == root:
        return container("ZKRegistrationManager.initNewCluster (ledgers root)")
    if not path.startswith(root + "/"):
        return None
    rel = path[len(root):]
    fixed: dict[str, Rule] = {
        "/LAYOUT": Rule("layout", "LedgerLayout.parseLayout", lambda f, p, d: decode_ledger_layout(d, p)),
        "/INSTANCEID": Rule("instanceid", "ZKRegistrationManager.initNewCluster",
                            lambda f, p, d: decode_instance_id(d, p)),
        "/available": container("ZKRegistrationManager.initNewCluster"),
        "/available/readonly": container("ZKRegistrationManager.initNewCluster"),
        "/cookies": container("ZKRegistrationManager.writeCookie"),
        "/idgen": container("ZkLedgerIdGenerator"),
        "/idgen-long": container("LongZkLedgerIdGenerator"),
        "/underreplication": container("ZkLedgerUnderreplicationManager.checkLayout"),
        "/underreplication/LAYOUT": Rule("ur-layout", "ZkLedgerUnderreplicationManager.checkLayout",
                                         lambda f, p, d: decode_rereplication_layout(f, d, p)),
        "/underreplication/ledgers": container("ZkLedgerUnderreplicationManager.checkLayout"),
        "/underreplication/locks": container("ZkLedgerUnderreplicationManager.checkLayout"),
        "/underreplication/disable": container("ZkLedgerUnderreplicationManager.disableLedgerReplication"),
        "/underreplication/lostBookieRecoveryDelay": Rule(
            "lost-bookie-recovery-delay", "ZkLedgerUnderreplicationManager.getLostBookieRecoveryDelay",
            lambda f, p, d: decode_lost_bookie_recovery_delay(d, p)),
        "/underreplication/auditorelection": Rule(
            "election", "ZkLedgerAuditorManager.tryToBecomeAuditor (setData of the elected vote)",
            lambda f, p, d: decode_vote(f, d, p) if d else {}),
        # ours, documented in README.md / docs/operators.md
        "/underreplication/unrecoverable": Rule("container", "ours (README: unrecoverable ledgers)",
                                                _empty("ours"), ours=True),
        "/underreplication/maintenance": Rule("container", "ours (docs/operators.md: maintenance)",
                                              _empty("ours"), ours=True),
        "/underreplication/maintenance-state": Rule("maintenance-state", "ours (docs/operators.md: maintenance)",
                                                    lambda f, p, d: decode_json_addition(d, p), ours=True),
        "/underreplication/streams": Rule("container", "ours (docs/operators.md: cluster-wide stream slots)",
                                          _empty("ours"), ours=True),
        "/underreplication/history": Rule("history-state", "ours (docs/operators.md: underreplication/history)",
                                          lambda f, p, d: decode_json_addition(d, p), ours=True),
    }
    if rel in fixed:
        return fixed[rel]
    for name in CTIME_FORMATS:
        if rel == f"/underreplication/{name}":
            return Rule("ctime", f"ZkLedgerUnderreplicationManager ({CTIME_FORMATS[name][0]}, binary)",
                        lambda f, p, d, n=name: decode_ctime(f, n, d, p))
    parts = rel.split("/")[1:]
    # registration and cookies
    if len(parts) == 2 and parts[0] in ("available", "cookies") and parts[1] != "readonly":
        bid = parts[1]
        if parts[0] == "available":
            return Rule("registration", "ZKRegistrationManager.registerBookie / ZKRegistrationClient",
                        lambda f, p, d, b=bid: {**decode_service_info(f, d, p), "bookie": check_bookie_id(b, p)})
        return Rule("cookie", "Cookie.parseFromBytes",
                    lambda f, p, d, b=bid: decode_cookie(f, d, p, check_bookie_id(b, p)))
    if len(parts) == 3 and parts[:2] == ["available", "readonly"]:
        bid = parts[2]
        return Rule("registration-readonly", "ZKRegistrationManager.doRegisterReadOnlyBookie",
                    lambda f, p, d, b=bid: {**decode_service_info(f, d, p), "bookie": check_bookie_id(b, p)})
    # id generators (their children are created with no data and deleted at once)
    if len(parts) == 2 and parts[0] == "idgen" and re.fullmatch(r"ID-\d{10}", parts[1]):
        return container("ZkLedgerIdGenerator (ID- sequential)")
    if parts[:1] == ["idgen-long"] and len(parts) in (2, 3) and re.fullmatch(r"HOB-\d{10}", parts[1]) and (
            len(parts) == 2 or re.fullmatch(r"ID-\d{10}", parts[2])):
        return container("LongZkLedgerIdGenerator (HOB-/ID-)")
    # under-replication markers, locks, votes
    if parts[:2] == ["underreplication", "ledgers"]:
        sub = parts[2:]
        if 1 <= len(sub) <= 4 and all(re.fullmatch(r"[0-9a-f]{4}", s) for s in sub):
            return container("ZkLedgerUnderreplicationManager.getParentZnodePath (%04x levels)")
        if len(sub) == 5 and (m := _UR_LEAF.fullmatch(sub[4])):
            lid = int(m.group(1))
            if lid <= JAVA_LONG_MAX and ur_marker_path(lid) == "/" + "/".join(sub):
                return Rule("ur-marker", "ZkLedgerUnderreplicationManager.getUrLedgerZnode + "
                                         "UnderreplicatedLedgerFormat (text)",
                            lambda f, p, d, i=lid: {**decode_ur_marker(f, d, p), "ledger_id": i})
        return None
    if len(parts) == 3 and parts[:2] == ["underreplication", "locks"] and _UR_LEAF.fullmatch(parts[2]):
        return Rule("lock", "ZkLedgerUnderreplicationManager.getUrLedgerLockZnode + LockDataFormat (text)",
                    lambda f, p, d: decode_lock(f, d, p))
    if len(parts) == 3 and parts[:2] == ["underreplication", "auditorelection"] and re.fullmatch(
            r"V_\d{10}", parts[2]):
        return Rule("vote", "ZkLedgerAuditorManager.createMyVote + AuditorVoteFormat (text)",
                    lambda f, p, d: decode_vote(f, d, p))
    # ours: unrecoverable records and maintenance windows
    if len(parts) == 3 and parts[:2] == ["underreplication", "unrecoverable"] and _UR_LEAF.fullmatch(parts[2]):
        return Rule("unrecoverable", "ours (README: underreplication/unrecoverable/urL<id>, JSON)",
                    lambda f, p, d: decode_json_addition(d, p), ours=True)
    if len(parts) == 3 and parts[:2] == ["underreplication", "streams"]:
        return Rule("container", "ours (docs/operators.md: underreplication/streams/<bookie id>)", _empty("ours"),
                    ours=True)
    if len(parts) == 4 and parts[:2] == ["underreplication", "streams"] and re.fullmatch(r"(src|tgt)-\d+", parts[3]):
        return Rule("stream-slot", "ours (docs/operators.md: underreplication/streams/<bookie id>/src-<n>, JSON)",
                    lambda f, p, d: decode_json_addition(d, p), ours=True)
    if len(parts) == 3 and parts[:2] == ["underreplication", "history"] and re.fullmatch(r"e-\d{10}", parts[2]):
        return Rule("heal-episode", "ours (docs/operators.md: underreplication/history/e-<seq>, JSON)",
                    lambda f, p, d: decode_json_addition(d, p), ours=True)
    if len(parts) == 3 and parts[:2] == ["underreplication", "maintenance"]:
        return Rule("maintenance", "ours (docs/operators.md: underreplication/maintenance/<kind>:<target>, JSON)",
                    lambda f, p, d: decode_json_addition(d, p), ours=True)
    # ledger metadata
    lid = ledger_id_of_path(rel, where.layout)
    if lid is not None:
        return Rule("ledger", f"{where.layout} ledger manager path (StringUtils) + LedgerMetadataSerDe.parseConfig",
                    lambda f, p, d, i=lid: decode_ledger_metadata(f, d, p, i))
    if is_ledger_level(rel, where.layout):
        return container("ZkUtils.createFullPathOptimistic (ledger tree levels)")
    return None


@dataclass
class Decoded:
    """One znode read by upstream's rules."""

    path: str
    kind: str
    upstream: str
    ours: bool
    value: dict[str, Any]


def decode_znode(fmts: UpstreamFormats, path: str, data: bytes, where: Layout) -> Decoded:
    """Classify ``path`` and decode ``data`` by its upstream rule.

    Raises:
        UpstreamFormatError: unknown znode (no upstream pattern and not one of our documented additions),
            or data upstream would not read; the message names the path.
    """
    rule = classify(path, where)
    if rule is None:
        raise UpstreamFormatError(f"{path}: matches no upstream znode pattern and is not a documented addition "
                                  f"(data {data[:80]!r})")
    return Decoded(path, rule.kind, rule.upstream, rule.ours, rule.decode(fmts, path, data))


# ---------------------------------------------------------------------------------------------------
# what upstream's writers emit for what its readers read (byte-for-byte comparison)
# ---------------------------------------------------------------------------------------------------
def _escape_text_bytes(raw: bytes) -> str:
    """protobuf-java 3.25 ``TextFormat.escapeBytes`` (upstream 4.17's text writer): ``\\a \\b \\t \\n \\v
    \\f \\r \\\\ \\' \\"``, printable ASCII as is, every other byte as a three-digit octal escape
    (strings: their UTF-8 bytes)."""
    named = {0x07: "\\a", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r",
             0x5C: "\\\\", 0x27: "\\'", 0x22: '\\"'}
    out = []
    for b in raw:
        if b in named:
            out.append(named[b])
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def protobuf_java_text(msg: Message, indent: int = 0) -> str:
    """The text format upstream 4.17 prints (protobuf-java ``TextFormat.printer()``): present
    fields in field-number order, ``name: value`` lines, enums by name, sub-messages as ``name {`` ...
    ``}`` indented by two spaces per level. Map fields are not handled (none of the text znodes has one)."""
    pad = "  " * indent
    out = []
    for fd, value in msg.ListFields():
        values = list(value) if fd.is_repeated else [value]
        for v in values:
            if fd.message_type is not None:
                out.append(f"{pad}{fd.name} {{\n{protobuf_java_text(v, indent + 1)}{pad}}}\n")
            elif fd.enum_type is not None:
                out.append(f"{pad}{fd.name}: {fd.enum_type.values_by_number[v].name}\n")
            elif fd.type == fd.TYPE_STRING:
                out.append(f"{pad}{fd.name}: {_escape_text_bytes(v.encode('utf-8'))}\n")
            elif fd.type == fd.TYPE_BYTES:
                out.append(f"{pad}{fd.name}: {_escape_text_bytes(v)}\n")
            elif fd.type == fd.TYPE_BOOL:
                out.append(f"{pad}{fd.name}: {'true' if v else 'false'}\n")
            else:
                out.append(f"{pad}{fd.name}: {v}\n")
    return "".join(out)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n & ~0x7F == 0:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _upstream_metadata(fmts: UpstreamFormats, v: dict[str, Any]) -> bytes | None:
    """``LedgerMetadataSerDe.serialize`` of what ``parseConfig`` read (``v`` from
    :func:`decode_ledger_metadata`), in the version it was read in; None when upstream's output is not
    determined (several custom metadata entries: a Java HashMap's order)."""
    header = b"BookieMetadataFormatVersion\t%d\n" % v["version"]
    closed = v["state"] == "CLOSED"
    if v["version"] == 1:  # serializeVersion1
        lines = [str(v["write_quorum"]), str(v["ensemble_size"]), str(v["length"] if closed else 0)]
        lines += ["\t".join([str(first), *ens]) for first, ens in v["segments"]]
        text = "".join(line + "\n" for line in lines)
        if v["state"] == "IN_RECOVERY":
            text += "-102\tCLOSED"
        elif closed:
            text += f"{v['last_entry_id']}\tCLOSED"
        return header + text.encode("utf-8")
    src = v["message"]
    if len(src.customMetadata) > 1:
        return None
    m = fmts.new("LedgerMetadataFormat")  # buildLedgerMetadataFormat
    m.quorumSize = v["write_quorum"]
    m.ackQuorumSize = v["ack_quorum"]
    m.ensembleSize = v["ensemble_size"]
    m.length = v["length"] if closed else 0
    m.lastEntryId = v["last_entry_id"] if closed else -1
    m.state = src.state
    if src.HasField("ctime"):
        m.ctime = src.ctime
    if not src.HasField("password"):
        return None  # upstream cannot serialise a ledger without a digest type (getDigestType() is null)
    m.digestType = src.digestType
    m.password = src.password
    for e in src.customMetadata:
        m.customMetadata.add(key=e.key, value=e.value)
    for first, ens in v["segments"]:
        seg = m.segment.add()
        seg.firstEntryId = first
        seg.ensembleMember.extend(ens)
    if v["version"] == 2:  # serializeVersion2: text, never cToken
        return header + protobuf_java_text(m).encode("utf-8")
    m.cToken = src.cToken if src.HasField("cToken") else 0
    body = m.SerializeToString()
    return header + _varint(len(body)) + body


def upstream_rewrite(fmts: UpstreamFormats, d: Decoded, data: bytes) -> bytes | None:
    """The bytes upstream's own writer produces for what upstream's reader read from ``data`` (the
    decoded znode ``d``), or None where upstream's output is not determined or not upstream's to write
    (registration data: a Java HashMap of properties; our additions; Pulsar's rack info).

    Equal bytes mean the znode is byte for byte what upstream would have written; different bytes that
    still decode are a difference, not an incompatibility.
    """
    k, v, p = d.kind, d.value, d.path
    if d.ours or k in ("pulsar-racks", "registration", "registration-readonly"):
        return None
    if k == "container":
        return b""
    if k == "layout":  # LedgerLayout.serialize
        return f"{v['format_version']}\n{v['factory']}:{v['manager_version']}".encode()
    if k == "instanceid":
        return v["instance_id"].encode()
    if k == "lost-bookie-recovery-delay":  # Integer.toString
        return str(v["seconds"]).encode()
    if k == "ledger":
        return _upstream_metadata(fmts, v)
    if k == "ctime":  # toByteArray()
        name = p.rsplit("/", 1)[1]
        return fmts.parse_binary(CTIME_FORMATS[name][0], data, p).SerializeToString()
    if k == "election" and not data:
        return b""
    names = {"ur-layout": "LedgerRereplicationLayoutFormat", "ur-marker": "UnderreplicatedLedgerFormat",
             "lock": "LockDataFormat", "vote": "AuditorVoteFormat", "election": "AuditorVoteFormat"}
    if k in names:
        return protobuf_java_text(fmts.parse_text(names[k], data, p)).encode("utf-8")
    if k == "cookie":  # Cookie.toString: CURRENT_COOKIE_LAYOUT_VERSION (5), then the text CookieFormat
        c = fmts.new("CookieFormat")
        c.bookieHost, c.journalDir, c.ledgerDirs = v["bookieHost"], v["journalDir"], v["ledgerDirs"]
        if v.get("instanceId"):
            c.instanceId = v["instanceId"]
        if v.get("indexDirs"):
            c.indexDirs = v["indexDirs"]
        return ("5\n" + protobuf_java_text(c)).encode("utf-8")
    raise AssertionError(f"{p}: no rewrite rule for kind {k!r}")
