"""Ok-to-stop: may this bookie be stopped now, for a planned restart, without any fragment falling short? (PURE)

Ours; upstream has no such command (the nearest is Ceph's ``ceph osd ok-to-stop``). The answer is made
from ledger metadata (the auditor's index, or a scan of the ledger tree) and the bookies' states only:

* **readable** bookies serve reads: the writable ones and the read-only ones (registered under
  ``available`` or ``available/readonly``);
* **going** bookies are counted as down although they may still be registered: bookies in a maintenance
  window (their own or their rack's: someone is stopping them right now) and bookies being drained;
* every other bookie of an ensemble is lost (down).

A *fragment* is one write set of one segment that stores entries (upstream's ``LedgerFragment``, split by
write set): of a CLOSED ledger, the write sets that hold entries between the segment's first entry and
its last; the last segment of a ledger that is not CLOSED may get any entry, so all its write sets
count; an empty last segment of a closed ledger stores nothing and never blocks.

The rule: a planned stop keeps the bookie's data on its disk, so its copies come back with it. Stopping
is ok when every fragment it belongs to keeps its ack quorum *counting the stopped bookie's own copy*
(readable copies left + 1 >= AQ) and at least one readable copy (entries stay readable throughout). In
other words the planned stop may be the only copy a fragment misses below AQ: an E3/WQ2/AQ2 ledger with
every bookie up may lose one, one with a write-set partner already down may not, and neither may an
E2/WQ2/AQ2 ledger with one bookie down. The verdict also counts the fragments (and ledgers) that would
drop below WQ: they stay readable but are short of copies while the bookie is away.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.ledger.striping import residues_in_range, write_set

#: at most this many blocking ledger ids are named (the count is always exact)
BLOCKING_LIMIT = 20


@dataclass(frozen=True)
class Verdict:
    """The answer for one bookie.

    Attributes:
        bookie: the bookie id asked about.
        ok: stopping it now leaves every fragment with its ack quorum, counting the stopped bookie's copy,
            and at least one readable copy.
        blocking: ids of ledgers that would drop below that (ascending, at most ``limit`` of them).
        blocking_count: how many ledgers would (exact).
        blocking_fragments: how many fragments would.
        below_wq_ledgers / below_wq_fragments: ledgers / fragments that would have fewer than WQ
            readable copies (blocking ones included).
        ledgers: ledgers with a fragment on the bookie.
        fragments: fragments on the bookie.
        down: the other bookies counted as down (lost, in a window, draining), sorted.
        registered: whether the bookie is registered now (False: it is already down).
    """

    bookie: str
    ok: bool
    blocking: tuple[int, ...] = ()
    blocking_count: int = 0
    blocking_fragments: int = 0
    below_wq_ledgers: int = 0
    below_wq_fragments: int = 0
    ledgers: int = 0
    fragments: int = 0
    down: tuple[str, ...] = ()
    registered: bool = True
    limit: int = BLOCKING_LIMIT
    details: dict[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON shape of ``shell oktostop --json`` and ``GET /api/v1/autorecovery/ok_to_stop``."""
        return {"bookie": self.bookie, "ok": self.ok, "registered": self.registered,
                "blocking_ledgers": list(self.blocking), "blocking_ledger_count": self.blocking_count,
                "blocking_fragment_count": self.blocking_fragments,
                "below_write_quorum_ledgers": self.below_wq_ledgers,
                "below_write_quorum_fragments": self.below_wq_fragments,
                "ledgers_on_bookie": self.ledgers, "fragments_on_bookie": self.fragments,
                "counted_down": list(self.down),
                "blocking_detail": {str(k): v for k, v in sorted(self.details.items())}}


def fragments(md: LedgerMetadata) -> Iterable[tuple[int, tuple[str, ...]]]:
    """``(segment first entry id, write set members)`` of every fragment of ``md`` that stores entries
    (or may: the last segment of a ledger that is not CLOSED). Write sets are those of
    :func:`autorecovery.ledger.striping.write_set` (upstream RoundRobinDistributionSchedule)."""
    e_size, wq = md.ensemble_size, md.write_quorum
    segs = md.segments
    for i, seg in enumerate(segs):
        last_seg = i == len(segs) - 1
        if last_seg and md.state != LedgerState.CLOSED:
            residues: Iterable[int] = range(e_size)
        else:
            end = segs[i + 1].first_entry_id - 1 if not last_seg else md.last_entry_id
            residues = residues_in_range(seg.first_entry_id, end, e_size)
        for r in residues:
            yield seg.first_entry_id, tuple(seg.ensemble[j] for j in write_set(r, e_size, wq))


def ok_to_stop(bookie: str, ledgers: Iterable[tuple[int, LedgerMetadata]], *, readable: Iterable[str],
               going: Iterable[str] = (), limit: int = BLOCKING_LIMIT) -> Verdict:
    """Whether stopping ``bookie`` now leaves every fragment with its ack quorum counting the stopped
    bookie's copy (copies left + 1 >= AQ) and at least one readable copy (see the module docstring).

    Args:
        bookie: the bookie id to stop.
        ledgers: ``(ledger id, metadata)`` of every ledger (those without the bookie are skipped).
        readable: registered bookies, writable and read-only (read-only ones serve reads).
        going: bookies counted as down although registered (maintenance windows, drains).
        limit: how many blocking ledger ids to name.

    Returns:
        A :class:`Verdict`; ``ok`` is True when nothing blocks (also when the bookie is already down).
    """
    readable_set = set(readable)
    going_set = set(going) - {bookie}
    alive_after = readable_set - going_set - {bookie}
    blocking: list[int] = []
    details: dict[int, str] = {}
    n_block = n_block_frag = n_wq_led = n_wq_frag = n_led = n_frag = 0
    down: set[str] = set(going_set)
    for lid, md in ledgers:
        if bookie not in md.all_bookies():
            continue
        mine = [(first, ws) for first, ws in fragments(md) if bookie in ws]
        if not mine:
            continue
        n_led += 1
        led_block = led_wq = False
        for first, ws in mine:
            n_frag += 1
            down |= {b for b in ws if b not in alive_after and b != bookie}
            left = sum(1 for b in ws if b in alive_after)
            if left < md.write_quorum:
                n_wq_frag += 1
                led_wq = True
            if left + 1 < md.ack_quorum or left == 0:
                n_block_frag += 1
                if not led_block and len(blocking) < limit:
                    others = sorted(b for b in ws if b != bookie and b not in alive_after)
                    details[lid] = (f"entries from {first}: write set {', '.join(ws)} would keep {left} readable "
                                    f"copies (ack quorum {md.ack_quorum}, write quorum {md.write_quorum})"
                                    + (f"; down: {', '.join(others)}" if others else ""))
                led_block = True
        if led_block:
            n_block += 1
            if len(blocking) < limit:
                blocking.append(lid)
        if led_wq:
            n_wq_led += 1
    blocking.sort()
    return Verdict(bookie, n_block == 0, tuple(blocking), n_block, n_block_frag, n_wq_led, n_wq_frag, n_led, n_frag,
                   tuple(sorted(down)), bookie in readable_set, limit, details)


def summary(v: Verdict, for_s: int | None = None, window_would_open: bool | None = None) -> str:
    """One line for people: ``ok to stop 10.0.0.1:3181: ...`` or ``NOT ok to stop ...: ledgers 7, 9 ...``."""
    if not v.registered:
        head = f"ok to stop {v.bookie}: it is not registered (already down)"
    elif v.ok:
        head = (f"ok to stop {v.bookie}: every one of its {v.fragments} fragments ({v.ledgers} ledgers) keeps its "
                f"ack quorum counting this bookie's copy")
        if v.below_wq_fragments:
            head += f"; {v.below_wq_fragments} fragments of {v.below_wq_ledgers} ledgers drop below write quorum"
    else:
        more = f" and {v.blocking_count - len(v.blocking)} more" if v.blocking_count > len(v.blocking) else ""
        head = (f"NOT ok to stop {v.bookie}: {v.blocking_count} ledgers ({v.blocking_fragments} fragments) would "
                f"drop below ack quorum: ledgers {', '.join(map(str, v.blocking))}{more}")
    if v.down:
        head += f"; counted down: {', '.join(v.down)}"
    if for_s is not None and window_would_open is not None:
        head += (f"; a {for_s} s maintenance window would be opened" if window_would_open
                 else f"; no maintenance window would be opened for {for_s} s")
    return head
