"""Field checks of the reference bookie's gRPC requests (PURE; issue 25).

:func:`problem` says what is wrong with a request message, naming the field (None: nothing), for every
request message of ``autorecovery.bookie.Bookie``; the service answers ``EBADREQ`` with it (see
``bookie.request_gate``). :func:`add_problem` is the part of it for one ``AddRequest``, checked entry by entry
on the add streams (the entries before a refused one are still stored, as bookie.proto says).

What is checked (beyond what the service checks itself with its configuration: entry size, range
length, striping, the entry header):

* ledger ids >= 0; entry ids >= 0 (a read's ``-1`` = the last entry); range ``max_batch_bytes`` >= 0;
* master keys: at most :data:`MAX_MASTER_KEY_BYTES` (upstream's are 20-byte SHA-1 digests); not empty
  on an add, a fencing read or a pull;
* flag and bitmask fields: no bit their enum does not define (``AddFlag``, ``ReadFlag``,
  ``BookieInfoFlag``);
* a PullEntries source: a ``host:port`` bookie id of at most :data:`MAX_BOOKIE_ID_CHARS` characters
  (no NUL or control characters, no path).

Every function returns a one-line reason or None and never raises, whatever the values (the messages
come from clients). Source: ours (issue 25); the bounds are not taken from upstream's request
processors.
"""

from __future__ import annotations

from typing import Any

from autorecovery.ledger.ids import validate_bookie_id
from autorecovery.proto import bookie_pb2 as pb

#: Longest master key accepted, bytes (upstream's are 20).
MAX_MASTER_KEY_BYTES = 1024
#: Longest bookie id accepted (a DNS name is at most 253 characters, plus ``:port``).
MAX_BOOKIE_ID_CHARS = 261


def _bits(name: str, value: int, enum: Any) -> str | None:
    """Why ``value`` (a bitmask field ``name``) has bits the protobuf ``enum`` does not define, or None."""
    known = 0
    for v in enum.values():
        known |= v
    if value & ~known:
        return f"{name} {value:#x} has bits {enum.DESCRIPTOR.name} does not define (known: {known:#x})"
    return None


def _key(value: bytes, required: str | None) -> str | None:
    """Why master key ``value`` is refused (too long; empty when ``required`` names what needs it), or None."""
    if len(value) > MAX_MASTER_KEY_BYTES:
        return f"master_key of {len(value)} bytes, more than {MAX_MASTER_KEY_BYTES}"
    if required is not None and not value:
        return f"master_key is empty ({required} needs it)"
    return None


def _nonneg(**fields: int) -> str | None:
    """Why the first negative one of ``fields`` (name → id) is refused, or None."""
    for name, value in fields.items():
        if value < 0:
            return f"{name}: invalid {name.replace('_', ' ')} {value} (negative)"
    return None


def _first(*problems: str | None) -> str | None:
    """The first problem that is not None (checks in the order their fields are listed)."""
    return next((p for p in problems if p is not None), None)


#: Every bit ``AddFlag`` defines (an add's ``flags`` may carry no other).
_ADD_FLAG_BITS = 0
for _v in pb.AddFlag.values():
    _ADD_FLAG_BITS |= _v


def add_problem(req: pb.AddRequest) -> str | None:
    """What is wrong with one add's ids, key or flags (None: nothing), naming the field: ledger and
    entry ids >= 0, no flag bit ``AddFlag`` lacks, a master key of 1 to :data:`MAX_MASTER_KEY_BYTES`
    bytes. The body is the service's to check (size, header, ids: ``bookie.add_handlers``)."""
    return add_fields_problem(req.ledger_id, req.entry_id, req.flags, req.master_key)


def add_fields_problem(ledger_id: int, entry_id: int, flags: int, master_key: bytes) -> str | None:
    """:func:`add_problem` on an add's fields already taken out of its message (the add streams check
    every entry: the common, valid case costs a few comparisons; a bad add gets the same answer)."""
    if (ledger_id >= 0 and entry_id >= 0 and not flags & ~_ADD_FLAG_BITS
            and 0 < len(master_key) <= MAX_MASTER_KEY_BYTES):
        return None
    return _first(
        _nonneg(ledger_id=ledger_id, entry_id=entry_id),
        _bits("flags", flags, pb.AddFlag),
        _key(master_key, "an add"),
    )


def bookie_id_problem(name: str, value: str) -> str | None:
    """What is wrong with a bookie id field ``name`` of value ``value`` (None: nothing): empty, more
    than :data:`MAX_BOOKIE_ID_CHARS` characters, or not ``host:port``
    (:func:`~autorecovery.ledger.ids.validate_bookie_id`); quotes at most 64 characters of it."""
    if not value:
        return f"{name} is empty"
    if len(value) > MAX_BOOKIE_ID_CHARS:
        return f"{name} of {len(value)} characters, more than {MAX_BOOKIE_ID_CHARS}"
    try:
        validate_bookie_id(value)
    except ValueError:
        shown = repr(value)
        return f"{name} {shown if len(shown) <= 64 else shown[:60] + '...'} is not host:port"
    return None


def problem(msg: Any) -> str | None:
    """What is wrong with a request message of the Bookie service (None: nothing), naming the field.
    An ``AddBatch`` or ``AddRequest`` is checked entry by entry by the add handlers (:func:`add_problem`)."""
    if isinstance(msg, pb.ReadRequest):
        return _first(
            _nonneg(ledger_id=msg.ledger_id),
            None if msg.entry_id >= -1 else f"entry_id: invalid entry id {msg.entry_id} (-1 = the last entry)",
            _bits("flags", msg.flags, pb.ReadFlag),
            _key(msg.master_key, "FENCE_LEDGER" if msg.flags & pb.FENCE_LEDGER else None),
        )
    if isinstance(msg, pb.ReadRangeRequest):
        return _nonneg(ledger_id=msg.ledger_id, first_entry_id=msg.first_entry_id,
                       max_batch_bytes=msg.max_batch_bytes)
    if isinstance(msg, pb.PullRequest):  # its ids and striping: the service's range checks ("bad pull ...")
        return _first(
            bookie_id_problem("source_bookie_id", msg.source_bookie_id),
            _key(msg.master_key, "a pull"),
        )
    if isinstance(msg, (pb.ReadLacRequest, pb.GetListOfEntriesOfLedgerRequest)):
        return _nonneg(ledger_id=msg.ledger_id)
    if isinstance(msg, pb.GetBookieInfoRequest):
        return _bits("requested", msg.requested, pb.BookieInfoFlag)
    return None
