"""Protobuf text format exactly as upstream BookKeeper 4.17 prints it (PURE).

Source: upstream 4.17 writes its text znodes (ledger metadata format v2, cookies, under-replication
markers, locks, auditor votes) with protobuf-java 3.25's ``TextFormat.printer()``. Python's
``text_format`` differs in escapes, so this printer follows protobuf-java:

- set fields in field-number order, one ``name: value`` line each, repeated fields one line per value;
- enums by name; sub-messages as ``name {`` … ``}`` indented two spaces per level;
- strings as their UTF-8 bytes and bytes values quoted with ``TextFormat.escapeBytes``: ``\\a \\b \\t \\n
  \\v \\f \\r \\" \\' \\\\`` named, printable ASCII (0x20..0x7e) as is, every other byte as three octal
  digits (``\\000``, ``\\177``, ``\\377``).

``tests/data/upstream_metadata_vectors.json`` holds ``escapeBytes`` of each byte 0..255 as printed by
protobuf-java itself (``tests/data/UpstreamMetadataVectors.java``); the unit tests compare all 256.
"""

from __future__ import annotations

import warnings
from typing import TypeVar

from google.protobuf import text_format
from google.protobuf.message import Message

M = TypeVar("M", bound=Message)

#: protobuf-java ``TextFormat.escapeBytes``' named escapes (Python's ``text_format`` writes \007, \010,
#: \013 and \014 for the first four).
NAMED_ESCAPES = {0x07: "\\a", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r",
                 0x22: '\\"', 0x27: "\\'", 0x5C: "\\\\"}
#: escape of every byte value, index = byte
_ESCAPE = [NAMED_ESCAPES.get(b, chr(b) if 0x20 <= b <= 0x7E else f"\\{b:03o}") for b in range(256)]


def escape_bytes(raw: bytes) -> str:
    """protobuf-java ``TextFormat.escapeBytes(raw)`` (no surrounding quotes)."""
    return "".join(_ESCAPE[b] for b in raw)


def print_message(msg: Message, indent: int = 0) -> str:
    """``TextFormat.printer().printToString(msg)`` for messages without map, float or unknown fields
    (none of upstream's text znodes has one): see the module docstring for the rules."""
    pad = "  " * indent
    out = []
    for fd, value in msg.ListFields():
        for v in (list(value) if fd.is_repeated else [value]):
            if fd.message_type is not None:
                out.append(f"{pad}{fd.name} {{\n{print_message(v, indent + 1)}{pad}}}\n")
            elif fd.enum_type is not None:
                out.append(f"{pad}{fd.name}: {fd.enum_type.values_by_number[v].name}\n")
            elif fd.type == fd.TYPE_STRING:
                out.append(f'{pad}{fd.name}: "{escape_bytes(v.encode("utf-8"))}"\n')
            elif fd.type == fd.TYPE_BYTES:
                out.append(f'{pad}{fd.name}: "{escape_bytes(v)}"\n')
            elif fd.type == fd.TYPE_BOOL:
                out.append(f"{pad}{fd.name}: {'true' if v else 'false'}\n")
            else:
                out.append(f"{pad}{fd.name}: {v}\n")
    return "".join(out)


def parse(text: str, msg: M) -> M:
    """``text_format.Parse(text, msg)`` as strict on escapes as upstream's reader (protobuf-java
    ``TextFormat``, which throws ``InvalidEscapeSequenceException``): an invalid escape in a string
    (``"\\ "``, ``"\\q"``) raises, where Python's codec only warns (``DeprecationWarning``) and keeps the
    backslash. Used for every text znode and cookie we read (cookies, ledger metadata v2, markers,
    locks, votes). The warning filter is set for this call only; callers run on the event loop thread.

    Returns: ``msg``, filled in.
    Raises:
        text_format.ParseError: bad text, including an invalid escape sequence (named as such).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        try:
            return text_format.Parse(text, msg)
        except DeprecationWarning as exc:
            raise text_format.ParseError(f"invalid escape sequence in a string ({exc})") from None
