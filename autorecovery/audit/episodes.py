"""Heal episodes: what was lost, what was healed, how long it took (PURE).

Ours; upstream keeps no history: once the markers of a lost bookie are gone nothing says what was
marked, healed or left behind. An *episode* is one event that marked ledgers under-replicated — a
bookie lost (``bookie-lost``), every bookie of a rack lost together (``rack-lost``), a placement repair
(``placement``), a replicas or ledger check that marked ledgers (``replicas``, ``ledger-check``) or an
admin run (``recover``; ``decommission`` and ``drain`` for the admin operations of those names) — with the figures of its heal. The Auditor opens one when it writes
markers for ledgers that were not marked yet (a ledger already marked stays with its episode), follows
it as markers disappear and closes it when every ledger is healed, or when what is left has been
unrecoverable or blocked for :data:`SETTLE_MS` with no heal (the state then says so).

Records are JSON, bounded: :data:`MAX_EPISODES` kept (oldest dropped), at most :data:`MAX_RECORD_BYTES`
each (the ledger ids of an open episode are stored compressed, and beyond the bound only their count:
``ids_dropped``), at most :data:`MAX_NAMES` named workers / target bookies (the rest under
``"(others)"``). :func:`decode` refuses bad data with a one-line ``ValueError`` naming the field.

Units: times in ms since the epoch (wall clock), sizes in bytes (the ledgers' metadata ``length``),
rates in bytes per second.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

KINDS = ("bookie-lost", "rack-lost", "placement", "replicas", "ledger-check", "recover", "decommission", "drain")
STATES = ("open", "healed", "unrecoverable", "blocked")
#: episodes kept in ZooKeeper; the oldest closed ones are dropped first
MAX_EPISODES = 50
#: largest record, bytes of JSON (ZooKeeper's default ``jute.maxbuffer`` is 1 MiB)
MAX_RECORD_BYTES = 128 * 1024
#: named workers / target bookies kept per episode
MAX_NAMES = 16
OTHERS = "(others)"
MAX_SUBJECT = 200
#: an episode whose remaining ledgers are all unrecoverable or blocked closes after this long without
#: a heal, ms
SETTLE_MS = 60_000
VERSION = 1


@dataclass(frozen=True)
class Episode:
    """One heal episode (see the module docstring); ``name`` is its znode's name (``e-<seq>``)."""

    kind: str
    subject: str
    detected_ms: int
    ledgers_marked: int
    bytes_marked: int
    name: str = ""
    state: str = "open"
    updated_ms: int = 0
    closed_ms: int | None = None
    last_heal_ms: int | None = None
    ledgers_healed: int = 0
    bytes_healed: int = 0
    ledgers_left: int = 0
    ledgers_blocked: int = 0
    ledgers_unrecoverable: int = 0
    auditors: tuple[str, ...] = ()
    workers: Mapping[str, int] = field(default_factory=dict)
    copied_to: Mapping[str, int] = field(default_factory=dict)
    ids: frozenset[int] = frozenset()
    ids_dropped: int = 0

    @property
    def open(self) -> bool:
        return self.state == "open"

    @property
    def duration_s(self) -> float | None:
        """Time to heal (closed: detection → close; open: None), s."""
        return None if self.closed_ms is None else max(0.0, (self.closed_ms - self.detected_ms) / 1000)

    def rate_bytes_per_s(self, now_ms: int) -> float:
        """Bytes healed per second since detection (0 before the first heal)."""
        end = self.closed_ms if self.closed_ms is not None else (self.last_heal_ms or now_ms)
        span = max(0.001, (end - self.detected_ms) / 1000)
        return self.bytes_healed / span if self.bytes_healed else 0.0

    def eta_s(self, now_ms: int) -> float | None:
        """Seconds until the healable rest is healed at :meth:`rate_bytes_per_s`; None when closed,
        unknown (no heal yet) or when all that is left is blocked/unrecoverable."""
        if not self.open:
            return None
        healable = self.ledgers_left - self.ledgers_blocked - self.ledgers_unrecoverable
        if self.ledgers_left == 0:
            return 0.0
        rate = self.rate_bytes_per_s(now_ms)
        if healable <= 0 or rate <= 0:
            return None
        left_bytes = max(0, self.bytes_marked - self.bytes_healed) * healable / self.ledgers_left
        return left_bytes / rate

    def as_dict(self, now_ms: int | None = None) -> dict[str, Any]:
        """The JSON shown by ``shell history --json`` and ``GET /api/v1/autorecovery/history`` (no ids)."""
        now = now_ms if now_ms is not None else self.updated_ms
        eta = self.eta_s(now)
        return {
            "name": self.name, "kind": self.kind, "subject": self.subject, "state": self.state,
            "detected_ms": self.detected_ms, "updated_ms": self.updated_ms, "closed_ms": self.closed_ms,
            "duration_s": None if self.duration_s is None else round(self.duration_s, 3),
            "ledgers_marked": self.ledgers_marked, "bytes_marked": self.bytes_marked,
            "ledgers_healed": self.ledgers_healed, "bytes_healed": self.bytes_healed,
            "ledgers_left": self.ledgers_left, "ledgers_blocked": self.ledgers_blocked,
            "ledgers_unrecoverable": self.ledgers_unrecoverable,
            "rate_bytes_per_s": round(self.rate_bytes_per_s(now), 1),
            "eta_s": None if eta is None else round(eta, 1),
            "auditors": list(self.auditors), "workers": dict(self.workers), "copied_to": dict(self.copied_to),
            "ids_dropped": self.ids_dropped,
        }


# -- ids codec --------------------------------------------------------------------------------------------
def encode_ids(ids: Iterable[int]) -> str:
    """Sorted ids as base64 of zlib-compressed varint deltas (a 10,000-ledger episode: a few KB)."""
    out = bytearray()
    prev = 0
    for i in sorted(set(ids)):
        d = i - prev
        prev = i
        while True:
            b = d & 0x7F
            d >>= 7
            if d:
                out.append(b | 0x80)
            else:
                out.append(b)
                break
    return base64.b64encode(zlib.compress(bytes(out), 6)).decode()


def decode_ids(text: str) -> frozenset[int]:
    """Inverse of :func:`encode_ids`. Raises ValueError on bad base64, zlib or varints."""
    try:
        raw = zlib.decompress(base64.b64decode(text.encode(), validate=True))
    except (ValueError, zlib.error) as exc:
        raise ValueError(f"field ids is not base64 zlib data ({exc})") from None
    ids: list[int] = []
    cur = shift = prev = 0
    for b in raw:
        cur |= (b & 0x7F) << shift
        if b & 0x80:
            shift += 7
            if shift > 63:
                raise ValueError("field ids has a varint longer than 64 bits")
            continue
        prev += cur
        ids.append(prev)
        cur = shift = 0
    if shift:
        raise ValueError("field ids ends inside a varint")
    return frozenset(ids)


# -- JSON ---------------------------------------------------------------------------------------------------
def encode(ep: Episode, max_bytes: int = MAX_RECORD_BYTES) -> bytes:
    """The record's JSON bytes, at most ``max_bytes``: the ids of an open episode are kept while they fit
    (else dropped, their count added to ``ids_dropped``); closed episodes keep no ids."""
    doc: dict[str, Any] = {"v": VERSION, **ep.as_dict(ep.updated_ms), "last_heal_ms": ep.last_heal_ms}
    for k in ("rate_bytes_per_s", "eta_s", "duration_s", "name"):
        doc.pop(k)
    ids = sorted(ep.ids) if ep.open else []
    doc["ids"] = encode_ids(ids) if ids else ""
    data = json.dumps(doc, sort_keys=True).encode()
    while len(data) > max_bytes and ids:
        ids = ids[: len(ids) // 2]
        doc["ids"] = encode_ids(ids) if ids else ""
        doc["ids_dropped"] = ep.ids_dropped + len(ep.ids) - len(ids)
        data = json.dumps(doc, sort_keys=True).encode()
    return data


def _int(doc: Mapping[str, Any], key: str, optional: bool = False) -> Any:
    v = doc.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"field {key} must be a non-negative integer, got {v!r:.40}")
    return v


def _names(doc: Mapping[str, Any], key: str) -> dict[str, int]:
    v = doc.get(key, {})
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool)
                                          for k, n in v.items()):
        raise ValueError(f"field {key} must be an object of name -> count")
    return {k[:MAX_SUBJECT]: n for k, n in list(v.items())[:MAX_NAMES + 1]}


def decode(data: bytes, name: str = "") -> Episode:
    """Parse a record. Raises ValueError (one line, naming the field) on anything malformed."""
    if len(data) > 4 * MAX_RECORD_BYTES:
        raise ValueError(f"record of {len(data)} bytes is larger than {4 * MAX_RECORD_BYTES}")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if doc.get("v") != VERSION:
        raise ValueError(f"field v must be {VERSION}, got {doc.get('v')!r:.20}")
    kind, state, subject = doc.get("kind"), doc.get("state"), doc.get("subject")
    if kind not in KINDS:
        raise ValueError(f"field kind must be one of {', '.join(KINDS)}, got {kind!r:.40}")
    if state not in STATES:
        raise ValueError(f"field state must be one of {', '.join(STATES)}, got {state!r:.40}")
    if not isinstance(subject, str):
        raise ValueError("field subject must be a string")
    auditors = doc.get("auditors", [])
    if not isinstance(auditors, list) or not all(isinstance(a, str) for a in auditors):
        raise ValueError("field auditors must be a list of bookie ids")
    ids_text = doc.get("ids", "")
    if not isinstance(ids_text, str):
        raise ValueError("field ids must be a string")
    return Episode(
        kind=kind, subject=subject[:MAX_SUBJECT], detected_ms=_int(doc, "detected_ms"),
        ledgers_marked=_int(doc, "ledgers_marked"), bytes_marked=_int(doc, "bytes_marked"), name=name,
        state=state, updated_ms=_int(doc, "updated_ms"), closed_ms=_int(doc, "closed_ms", True),
        last_heal_ms=_int(doc, "last_heal_ms", True), ledgers_healed=_int(doc, "ledgers_healed"),
        bytes_healed=_int(doc, "bytes_healed"), ledgers_left=_int(doc, "ledgers_left"),
        ledgers_blocked=_int(doc, "ledgers_blocked"), ledgers_unrecoverable=_int(doc, "ledgers_unrecoverable"),
        auditors=tuple(a[:MAX_SUBJECT] for a in auditors[:MAX_NAMES]), workers=_names(doc, "workers"),
        copied_to=_names(doc, "copied_to"), ids=decode_ids(ids_text) if ids_text else frozenset(),
        ids_dropped=_int(doc, "ids_dropped"))


# -- the reducer --------------------------------------------------------------------------------------------
def opened(kind: str, subject: str, lengths: Mapping[int, int], now_ms: int, auditor: str) -> Episode:
    """A new episode for the newly marked ledgers ``lengths`` (ledger id → bytes).

    Raises ValueError on an unknown ``kind``."""
    if kind not in KINDS:
        raise ValueError(f"unknown episode kind {kind!r}: expected one of {', '.join(KINDS)}")
    return Episode(kind=kind, subject=subject[:MAX_SUBJECT], detected_ms=now_ms, ledgers_marked=len(lengths),
                   bytes_marked=sum(lengths.values()), updated_ms=now_ms, ledgers_left=len(lengths),
                   auditors=(auditor,), ids=frozenset(lengths))


def credit(counts: Mapping[str, int], names: Mapping[str, int], cap: int = MAX_NAMES) -> dict[str, int]:
    """``counts`` plus ``names`` (name → ledgers), at most ``cap`` names: the rest under :data:`OTHERS`."""
    out = dict(counts)
    for n, k in names.items():
        if n in out or len([x for x in out if x != OTHERS]) < cap:
            out[n] = out.get(n, 0) + k
        else:
            out[OTHERS] = out.get(OTHERS, 0) + k
    return out


def with_auditor(ep: Episode, auditor: str) -> Episode:
    """``ep`` with ``auditor`` appended to its auditors (a new auditor continued it)."""
    if auditor in ep.auditors:
        return ep
    return replace(ep, auditors=(*ep.auditors, auditor)[-MAX_NAMES:])


def advance(ep: Episode, marked: Iterable[int], unrecoverable: Iterable[int], blocked: Iterable[int],
            lengths: Mapping[int, int], now_ms: int, *, workers: Mapping[str, int] | None = None,
            copied_to: Mapping[str, int] | None = None, settle_ms: int = SETTLE_MS) -> tuple[Episode, list[int]]:
    """One progress step of an open episode: its ledgers no longer ``marked`` are healed.

    Args:
        marked: every ledger id marked in the cluster now. unrecoverable: marked ids with an
            ``unrecoverable`` record. blocked: marked ids that cannot progress now (held back, no target).
        lengths: ledger id → bytes (ids missing count 0). workers / copied_to: name → ledgers to credit.
    Returns the new episode and the ids healed by this step (closed episodes are returned unchanged).
    """
    if not ep.open:
        return ep, []
    marked_set = marked if isinstance(marked, (set, frozenset)) else set(marked)
    healed = sorted(i for i in ep.ids if i not in marked_set)
    left = ep.ids - set(healed)
    unrec = left & set(unrecoverable)
    blk = (left & set(blocked)) - unrec
    last_heal = now_ms if healed else ep.last_heal_ms
    # ledgers dropped from the record (too many to store) are counted healed when nothing tracked is left
    dropped_left = ep.ids_dropped if not left else 0
    new = replace(
        ep, updated_ms=now_ms, last_heal_ms=last_heal, ids=frozenset(left),
        ledgers_healed=ep.ledgers_healed + len(healed) + (ep.ids_dropped if not left else 0),
        bytes_healed=(min(ep.bytes_marked, ep.bytes_healed + sum(lengths.get(i, 0) for i in healed))
                      if left else ep.bytes_marked),
        ledgers_left=len(left) + dropped_left, ledgers_blocked=len(blk), ledgers_unrecoverable=len(unrec),
        workers=credit(ep.workers, workers or {}), copied_to=credit(ep.copied_to, copied_to or {}),
        ids_dropped=0 if not left else ep.ids_dropped)
    if not left:
        new = replace(new, state="healed", closed_ms=now_ms, ledgers_left=0)
    elif len(unrec) + len(blk) == len(left) and now_ms - (last_heal or ep.detected_ms) >= settle_ms:
        new = replace(new, state="unrecoverable" if unrec and not blk else "blocked", closed_ms=now_ms)
    return new, healed


def log_line(ep: Episode) -> str:
    """One line of figures for the INFO log when the episode opens or closes."""
    base = (f"{ep.kind} {ep.subject}: {ep.ledgers_marked} ledgers, {ep.bytes_marked} bytes marked")
    if ep.open:
        return base
    dur = ep.duration_s or 0.0
    return (f"{base}; {ep.state} after {dur:.1f} s: {ep.ledgers_healed} ledgers, {ep.bytes_healed} bytes healed, "
            f"{ep.ledgers_unrecoverable} unrecoverable, {ep.ledgers_blocked} blocked")


def to_drop(names_oldest_first: list[str], open_names: Iterable[str], keep: int = MAX_EPISODES) -> list[str]:
    """Names to delete so that at most ``keep`` episodes stay: closed ones first, oldest first; open ones
    only if they alone exceed ``keep``."""
    excess = len(names_oldest_first) - keep
    if excess <= 0:
        return []
    opened_ = set(open_names)
    closed = [n for n in names_oldest_first if n not in opened_]
    out = closed[:excess]
    if len(out) < excess:
        out += [n for n in names_oldest_first if n in opened_][: excess - len(out)]
    return out


__all__ = ["Episode", "KINDS", "STATES", "MAX_EPISODES", "MAX_RECORD_BYTES", "MAX_NAMES", "SETTLE_MS",
           "encode", "decode", "encode_ids", "decode_ids", "opened", "advance", "credit", "with_auditor",
           "log_line", "to_drop"]
