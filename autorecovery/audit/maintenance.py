"""Maintenance windows and the rack-loss guard: which lost bookies the Auditor holds back (PURE).

Ours; upstream has only the cluster-wide switch (``autorecovery -disable``) and one global
``lostBookieRecoveryDelay``. Modelled on HDFS's per-node maintenance state with an expiry
(``IN_MAINTENANCE``, ``maintenanceExpireTimeInMS``) and Ceph's ``noout`` flag and
``mon_osd_down_out_subtree_limit`` (never auto-out a whole rack):

* **Maintenance window** (:class:`Window`) on a bookie or a rack (network location), with a reason and
  an expiry time (ms since the epoch). While a lost bookie is covered by a window, its loss is not
  audited. When the window expires or is stopped, the bookie is treated as newly lost: the normal
  ``lostBookieRecoveryDelay`` applies from then.
* **Rack-loss guard** (``autorecoveryDownOutSubtreeLimit=rack|zone|region``, off by default for
  upstream parity): when every bookie of a failure domain is lost at once (at least two), their loss is
  held ("rack /r1 lost as a whole: waiting") instead of copying everything into the surviving domains,
  which is what left every ledger of the BP-54 seed's DR drill on one rack. An ``override`` record for
  the domain lifts the guard.
* **Data first**: a held bookie never protects a ledger in danger. If the bookies lost right now
  leave some fragment of a ledger with fewer than AQ readable copies, and not only because of bookies
  in maintenance windows (planned: they come back), that ledger is marked at once, window or guard
  notwithstanding (:func:`data_first`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from autorecovery.errors import ConfigError, MalformedMetadataError
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.ledger.striping import residues_in_range, write_set

KINDS = ("bookie", "rack", "override")
#: values of ``autorecoveryDownOutSubtreeLimit``: the failure-domain level the guard watches
GUARD_LEVELS = ("", "none", "rack", "zone", "region")


@dataclass(frozen=True)
class Window:
    """A maintenance window (``kind`` bookie or rack) or a guard override (``kind`` override, on a
    domain). Times in ms since the epoch."""

    kind: str
    target: str
    reason: str
    started_ms: int
    expires_ms: int
    by: str = ""
    #: close by itself once the bookie, seen down while the window lasted, is registered again and no
    #: under-replication marker names it (a planned restart: ``shell oktostop --open-window``)
    auto_close: bool = False
    #: when the elected auditor first saw the bookie down under this window (0: not yet)
    lost_seen_ms: int = 0
    #: when the elected auditor loaded the window (0: not yet); ``--open-window`` waits for it
    acked_ms: int = 0

    def expired(self, now_ms: int) -> bool:
        return now_ms >= self.expires_ms

    @property
    def znode_name(self) -> str:
        """Child name under ``underreplication/maintenance``: ``<kind>:<target, percent-encoded>``."""
        return znode_name(self.kind, self.target)

    def to_json(self) -> bytes:
        d: dict = {"kind": self.kind, "target": self.target, "reason": self.reason,
                   "started_ms": self.started_ms, "expires_ms": self.expires_ms, "by": self.by}
        for k in ("auto_close", "lost_seen_ms", "acked_ms"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Window:
        """Parse a window record.

        Raises:
            MalformedMetadataError: naming ``where`` (the znode path) when the record is not one.
        """
        try:
            d = json.loads(data.decode("utf-8"))
            w = cls(str(d["kind"]), str(d["target"]), str(d.get("reason", "")), int(d["started_ms"]),
                    int(d["expires_ms"]), str(d.get("by", "")), bool(d.get("auto_close", False)),
                    int(d.get("lost_seen_ms", 0)), int(d.get("acked_ms", 0)))
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
            # OverflowError: a time of 1e999 (JSON infinity); RecursionError: nesting too deep
            raise MalformedMetadataError(f"{where}: not a maintenance window record: {str(exc)[:200]}") from exc
        if w.kind not in KINDS:
            raise MalformedMetadataError(f"{where}: unknown maintenance kind {w.kind!r} (expected {KINDS})")
        return w


def znode_name(kind: str, target: str) -> str:
    """``bookie:10.0.0.1:3181`` / ``rack:%2Frack1``: ``/`` (not allowed in a znode name) and ``%`` are
    percent-encoded."""
    return f"{kind}:{target.replace('%', '%25').replace('/', '%2F')}"


def parse_ttl(text: str) -> int:
    """``90s``, ``30m``, ``2h``, ``1d`` or plain seconds → ms.

    Raises:
        ConfigError: naming the value when it is not a positive duration.
    """
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    t = text.strip().lower()
    mult = 1
    if t and t[-1] in units:
        mult, t = units[t[-1]], t[:-1]
    try:
        v = float(t)
    except ValueError:
        raise ConfigError(f"bad duration {text!r}: expected e.g. 90s, 30m, 2h, 1d") from None
    if not v > 0 or v * mult > 365 * 86400:
        raise ConfigError(f"bad duration {text!r}: must be > 0 and at most 365 days")
    return int(v * mult * 1000)


def domain_of(location: str, level: str) -> str:
    """The failure domain of a network location at ``level``: ``rack`` → the whole location
    (``/region/rack`` or ``/rack``); ``zone`` / ``region`` → its first component (``/region``)."""
    if level == "rack":
        return location
    parts = [p for p in location.split("/") if p]
    return "/" + parts[0] if parts else location


@dataclass(frozen=True)
class Holds:
    """What the Auditor holds back of the currently lost bookies.

    Attributes:
        windows: held bookie → the window covering it.
        guarded: failure domain lost as a whole → its lost bookies (held by the guard).
    """

    windows: Mapping[str, Window]
    guarded: Mapping[str, frozenset[str]]
    settling: frozenset[str] = frozenset()
    settle_at_s: float | None = None

    @property
    def held(self) -> frozenset[str]:
        out = set(self.windows) | set(self.settling)
        for bs in self.guarded.values():
            out |= bs
        return frozenset(out)


def holds(lost: Iterable[str], available: Iterable[str], location_of: Callable[[str], str],
          windows: Iterable[Window], now_ms: int, guard_level: str = "",
          lost_since_s: Mapping[str, float] | None = None, now_s: float = 0.0, settle_s: float = 0.0) -> Holds:
    """Which of ``lost`` to hold back: covered by an unexpired window (bookie, or rack of the bookie),
    or (guard on) in a domain whose every known bookie is lost, at least two, and that has no
    unexpired override.

    With the guard on, a lost bookie also *settles* for ``settle_s`` (``lostBookieRecoveryDelay``)
    from ``lost_since_s[b]`` before it is audited, even when several bookies fail together (upstream
    audits at once then): a rack goes down bookie by bookie, and only a settled view shows it lost as
    a whole (Ceph's per-OSD down→out interval). ``settle_at_s`` is when the next one settles.
    """
    lost = set(lost)
    settling: set[str] = set()
    settle_at: float | None = None
    if guard_level not in ("", "none") and settle_s > 0 and lost_since_s is not None:
        for b in lost:
            since = lost_since_s.get(b, now_s)
            if now_s - since < settle_s:
                settling.add(b)
                at = since + settle_s
                settle_at = at if settle_at is None else min(settle_at, at)
    live = [w for w in windows if not w.expired(now_ms)]
    by_bookie = {w.target: w for w in live if w.kind == "bookie"}
    by_rack = {w.target: w for w in live if w.kind == "rack"}
    overrides = {w.target for w in live if w.kind == "override"}
    covered: dict[str, Window] = {}
    for b in sorted(lost):
        w = by_bookie.get(b) or by_rack.get(location_of(b))
        if w is not None:
            covered[b] = w
    guarded: dict[str, frozenset[str]] = {}
    if guard_level not in ("", "none"):
        lost_by_domain: dict[str, set[str]] = {}
        for b in lost:
            lost_by_domain.setdefault(domain_of(location_of(b), guard_level), set()).add(b)
        alive_domains = {domain_of(location_of(b), guard_level) for b in available}
        for d, bs in lost_by_domain.items():
            if len(bs) >= 2 and d not in alive_domains and d not in overrides:
                guarded[d] = frozenset(bs - set(covered))
        guarded = {d: bs for d, bs in guarded.items() if bs}
    in_guard = set().union(*guarded.values()) if guarded else set()
    return Holds(covered, guarded, frozenset(settling - set(covered) - in_guard), settle_at)


def endangered(md: LedgerMetadata, lost: set[str]) -> bool:
    """Whether the ``lost`` bookies leave some stored entry of ``md`` with fewer than AQ readable copies.

    Every write set of every segment that stores entries is counted (the last segment of a ledger
    that is not CLOSED stores all of them); the round-robin rule is :mod:`autorecovery.ledger.striping`.
    """
    e_size, wq, aq = md.ensemble_size, md.write_quorum, md.ack_quorum
    segs = md.segments
    for i, seg in enumerate(segs):
        first = seg.first_entry_id
        last_seg = i == len(segs) - 1
        residues: Iterable[int]
        if last_seg and md.state != LedgerState.CLOSED:
            residues = range(e_size)
        else:
            end = segs[i + 1].first_entry_id - 1 if not last_seg else md.last_entry_id
            residues = residues_in_range(first, end, e_size)
        for r in residues:
            members = {seg.ensemble[j] for j in write_set(r, e_size, wq)}
            if len(members - lost) < aq:
                return True
    return False


def data_first(md: LedgerMetadata, lost: set[str], planned: set[str]) -> bool:
    """Whether a ledger must be marked although some of its lost bookies are held: the bookies lost
    now leave a fragment below AQ, and not only because of ``planned`` losses (bookies in a
    maintenance window: the operator took them down on purpose and they come back). Bookies held by
    the rack-loss guard are not planned: their loss counts like any other."""
    return endangered(md, lost) and not endangered(md, lost & planned)


def guard_level(value: str) -> str:
    """Validate ``autorecoveryDownOutSubtreeLimit``.

    Raises:
        ConfigError: naming the key and value.
    """
    v = (value or "").strip().lower()
    if v not in GUARD_LEVELS:
        raise ConfigError(f"bad value {value!r} for autorecoveryDownOutSubtreeLimit: expected one of "
                          "none, rack, zone, region")
    return "" if v == "none" else v


def auto_close_due(windows: Iterable[Window], available: Iterable[str], named: Iterable[str]) -> list[Window]:
    """Bookie windows to close by themselves: ``auto_close`` set, the bookie seen down while the window
    lasted (``lost_seen_ms``), registered again now (``available``: writable or read-only) and named by
    no under-replication marker (``named``: its ledgers are whole). A window opened on a running bookie
    is never closed before the bookie has gone down and come back. Ours (upstream has no windows)."""
    avail, nm = set(available), set(named)
    return [w for w in windows if w.kind == "bookie" and w.auto_close and w.lost_seen_ms > 0
            and w.target in avail and w.target not in nm]
