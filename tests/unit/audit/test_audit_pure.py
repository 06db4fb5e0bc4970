"""Unit tests of the pure auditor modules (milliseconds, no I/O)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from autorecovery.audit import checker, decisions, replicas, schedule
from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.record_index import holds_entries
from autorecovery.ledger.striping import bookie_holds_entries
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment


def md(E, WQ, AQ, segs, state=LedgerState.CLOSED, last=-1, length=0):
    return LedgerMetadata(E, WQ, AQ, tuple(Segment(f, tuple(e)) for f, e in segs), state=state,
                          last_entry_id=last, length=length)


# -- index --------------------------------------------------------------------------------------
def test_precise_marking_skips_segments_without_entries_on_the_bookie():
    # E3/WQ2, closed with one entry (0): stored on indexes 0 and 1 only
    one = md(3, 2, 2, [(0, ["a:1", "b:1", "c:1"])], last=0)
    assert holds_entries(one, 0, 0) and holds_entries(one, 0, 1) and not holds_entries(one, 0, 2)
    # closed empty ledger: nothing anywhere
    empty = md(3, 2, 2, [(0, ["a:1", "b:1", "c:1"])], last=-1)
    assert not bookie_holds_entries(empty, "a:1")
    # open ledger: the last segment always counts
    opn = md(3, 2, 2, [(0, ["a:1", "b:1", "c:1"])], state=LedgerState.OPEN)
    assert bookie_holds_entries(opn, "c:1")
    # ensemble change at entry 1 (x replaced c): c held entry 0? index 2 stores 0? (2-0)%3=2 >= 2 → no
    changed = md(3, 2, 2, [(0, ["a:1", "b:1", "c:1"]), (1, ["a:1", "b:1", "x:1"])], state=LedgerState.OPEN)
    assert not bookie_holds_entries(changed, "c:1")
    assert bookie_holds_entries(changed, "x:1")
    idx = BookieLedgerIndex()
    for lid, m in enumerate([one, empty, opn, changed]):
        idx.put(lid, m)
    assert idx.ledgers_of("c:1") == {0, 1, 2, 3}  # upstream's imprecise index
    assert idx.ledgers_to_mark(["c:1"]) == {2: ["c:1"]}
    assert idx.ledgers_to_mark(["a:1", "c:1"]) == {0: ["a:1"], 2: ["a:1", "c:1"], 3: ["a:1"]}


def test_index_updates_and_reconcile():
    idx = BookieLedgerIndex()
    a = md(2, 2, 2, [(0, ["a:1", "b:1"])], state=LedgerState.OPEN)
    assert idx.put(1, a) and not idx.put(1, a)
    b = a.with_new_segment(5, ("a:1", "c:1"))
    idx.put(1, b)
    assert idx.bookies() == {"a:1", "b:1", "c:1"}
    idx.put(1, md(2, 2, 2, [(0, ["a:1", "d:1"])], last=3))
    assert idx.bookies() == {"a:1", "d:1"} and idx.ledgers_of("b:1") == frozenset()
    idx.remove(1)
    assert len(idx) == 0 and idx.bookies() == set()
    idx.put(2, a)
    idx.put(3, a)
    rep = idx.reconcile({3: b, 4: a})
    assert (rep.added, rep.removed, rep.changed) == ([4], [2], [3]) and rep.mismatches == 3
    assert idx.diff({3: b, 4: a}).mismatches == 0
    assert idx.total_length([3, 4, 99]) == 0


# -- checker ------------------------------------------------------------------------------------
def test_fragments_of_closed_open_and_probe():
    ens1, ens2 = ("a:1", "b:1", "c:1"), ("a:1", "b:1", "d:1")
    m = md(3, 2, 2, [(0, ens1), (10, ens2)], last=19)
    frags, probe = checker.fragments_of(m)
    assert probe is None
    assert [(f.first_entry_id, f.last_entry_id, f.closed) for f in frags] == [(0, 9, True), (10, 19, True)]
    # open ledger, LAC below the last segment start: the tail becomes a probe of entry 10
    o = md(3, 2, 2, [(0, ens1), (10, ens2)], state=LedgerState.OPEN)
    frags, probe = checker.fragments_of(o, lac=5)
    assert [(f.first_entry_id, f.last_entry_id, f.closed) for f in frags] == [(0, 9, False)]
    assert (probe.first_entry_id, probe.last_entry_id) == (10, 10)
    assert checker.probe_entry(probe) == (10, [1, 2])
    assert checker.probe_says_exists(["ENOENTRY", "EIO"]) and not checker.probe_says_exists(["ENOENTRY", "ENOLEDGER"])
    frags, _ = checker.fragments_of(o, lac=9)
    assert frags[0].closed  # LAC ≥ lastSegmentStart − 1
    # closed empty ledger: one empty fragment, nothing stored anywhere
    e = md(3, 2, 2, [(0, ens1)], last=-1)
    frags, probe = checker.fragments_of(e)
    assert probe is None and frags[0].stored_range(0) == (-1, -1)
    assert checker.index_is_bad(-1, bookie_available=False, read_failures=0)
    assert not checker.index_is_bad(-1, bookie_available=True, read_failures=0)


def test_entries_to_read_sampling():
    assert list(checker.entries_to_read(0, 9, 0, 3, 3)) == [0, 9]
    assert list(checker.entries_to_read(4, 4, 0, 3, 3)) == [4]
    assert list(checker.entries_to_read(0, 9, 0, 3, 3, percentage=100)) == list(range(10))
    # E3/WQ2 index 0 stores e with (0-e)%3 < 2: 0,2,3,5,6,8,9
    assert list(checker.entries_to_read(0, 9, 0, 3, 2, percentage=100)) == [0, 2, 3, 5, 6, 8, 9]
    got = list(checker.entries_to_read(0, 99, 0, 1, 1, percentage=10, rng=random.Random(1)))
    assert got[0] == 0 and got[-1] == 99 and 10 <= len(got) <= 12
    f = checker.Fragment(0, 9, 0, ("a", "b", "c"), 3, 2, True)
    bf = checker.bad_fragment(f, {0: "a"})
    assert bf.bad_bookies == {"a"} and checker.bad_fragment(f, {}) is None
    assert checker.bad_bookies([bf, checker.bad_fragment(f, {1: "b", 0: "a"})]) == ["a", "b"]


# -- decisions ----------------------------------------------------------------------------------
ALL = {"a", "b", "c"}


def test_delay_then_second_failure_audits_at_once():
    t = decisions.LostBookieTracker(ALL, delay_s=10)
    assert t.on_bookies_changed(ALL, 10, 0) == decisions.Decision()
    d = t.on_bookies_changed({"b", "c"}, 10, 1)
    assert d.schedule_at == 11 and d.delayed == 1 and not d.audit_now and t.pending
    d = t.on_bookies_changed({"c"}, 10, 2)
    assert d.audit_now and d.cancel_pending and d.cancelled == 1 and d.lost == {"a", "b"}
    assert not t.pending


def test_rolling_restart_cancels_and_rearms():
    t = decisions.LostBookieTracker(ALL, delay_s=5)
    assert t.on_bookies_changed({"b", "c"}, 5, 0).schedule_at == 5
    d = t.on_bookies_changed(ALL, 5, 2)  # a is back
    assert d.cancel_pending and d.cancelled == 1 and not d.audit_now and not t.pending
    d = t.on_bookies_changed({"a", "c"}, 5, 3)  # b goes
    assert d.schedule_at == 8 and d.lost == {"b"}
    assert t.on_pending_fired(8).audit_now and not t.pending


def test_delay_zero_and_trigger():
    t = decisions.LostBookieTracker(ALL, delay_s=0)
    assert t.on_bookies_changed({"a", "b"}, 0, 0).audit_now
    t = decisions.LostBookieTracker(ALL, delay_s=50)
    t.on_bookies_changed({"a", "b"}, 50, 0)
    d = t.on_delay_changed(0, 1)
    assert d.audit_now and d.cancelled == 1 and t.previous_delay == 0
    t = decisions.LostBookieTracker(ALL, delay_s=5)
    t.on_bookies_changed({"a", "b"}, 5, 0)
    d = t.on_delay_changed(5, 1)  # same value → triggeraudit
    assert d.audit_now and not t.pending
    # no pending audit: rewriting the same value still audits (testTriggerAuditorWithNoPendingAuditTask)
    assert t.on_delay_changed(5, 2).audit_now
    # another value re-arms a pending audit
    t.on_bookies_changed({"a"}, 5, 3)
    d = t.on_delay_changed(4, 4)
    assert d.schedule_at == 8 and d.delayed == 1 and d.cancelled == 1
    assert t.on_delay_changed(7, 5).schedule_at == 12
    # another value without a pending audit: nothing
    t2 = decisions.LostBookieTracker(ALL, delay_s=5)
    assert t2.on_delay_changed(9, 0) == decisions.Decision()


def test_cookie_bookie_dead_before_start_is_noticed():
    t = decisions.LostBookieTracker({"a", "b", "c", "dead"}, delay_s=0)
    d = t.on_bookies_changed(ALL, 0, 0)
    assert d.audit_now and d.lost == {"dead"}


def test_healed_lost_bookie_is_not_a_second_loss():
    """Issue 25: "old" died long ago and was healed (no ensemble lists it) but keeps its cookie; a new
    auditor knows it from the cookies. It arms no delayed audit, and the next single loss is delayed."""
    holding = {"a", "b", "c"}
    t = decisions.LostBookieTracker(ALL | {"old"}, delay_s=10)
    assert t.on_bookies_changed(ALL, 10, 0, holding.__contains__) == decisions.Decision()
    assert not t.pending
    d = t.on_bookies_changed({"a", "c"}, 10, 5, holding.__contains__)  # b lost: one loss, delayed
    assert not d.audit_now and d.schedule_at == 15 and d.lost == {"b"} and t.pending
    assert t.on_pending_fired(15) == decisions.Decision(audit_now=True, lost=frozenset({"b"}))
    # b back within the delay cancels it although "old" is still down
    t = decisions.LostBookieTracker(ALL | {"old"}, delay_s=10)
    t.on_bookies_changed({"a", "c"}, 10, 0, holding.__contains__)
    d = t.on_bookies_changed(ALL, 10, 3, holding.__contains__)
    assert d.cancel_pending and d.cancelled == 1 and not t.pending
    # two losses that hold ledgers still audit at once; upstream's counting without the index
    t = decisions.LostBookieTracker(ALL | {"old"}, delay_s=10)
    assert t.on_bookies_changed({"c"}, 10, 0, holding.__contains__).audit_now
    t = decisions.LostBookieTracker(ALL | {"old"}, delay_s=10)
    assert t.on_bookies_changed(ALL, 10, 0).schedule_at == 10
    assert t.on_bookies_changed({"a", "c"}, 10, 1).audit_now


def test_readonly_is_available():
    t = decisions.LostBookieTracker(ALL, delay_s=0)
    assert not t.on_bookies_changed({"a", "b"} | {"c"}, 0, 0).audit_now


# -- schedule -----------------------------------------------------------------------------------
def test_initial_delay_from_ctime():
    now = 10_000_000
    assert schedule.initial_delay_s(1000, -1, now) == 0
    assert schedule.initial_delay_s(1000, now - 999_000, now) == 1
    assert schedule.initial_delay_s(1000, now - 1_001_000, now) == 0
    assert schedule.initial_delay_s(1000, now + 5000, now) == 1000  # clock skew: elapsed clamps at 0
    assert schedule.first_run_s(0, 5, 100.0, now) is None
    assert schedule.first_run_s(86400, None, 100.0, now) == 100.0
    assert schedule.next_run_s(0, 10, 3) == 10 and schedule.next_run_s(0, 10, 25) == 25


# -- replicas -----------------------------------------------------------------------------------
def test_replicas_buckets_upstream_examples():
    b = ["b0:1", "b1:1", "b2:1", "b3:1"]
    m = md(4, 3, 2, [(0, b)], last=3)
    ans = {"b0:1": [(0, 0)], "b1:1": [(0, 1), (3, 3)], "b2:1": [(0, 1)], "b3:1": [(1, 3)]}
    v = replicas.classify(m, ans)
    assert v.bucket == replicas.Bucket.LESS_THAN_AQ and v.least_replicas == 1
    assert v.missing_counts == {2: 2, 3: 1} and v.bookies_missing == ["b0:1", "b2:1"]
    # everything present
    full = {"b0:1": [(0, 0), (2, 3)], "b1:1": [(0, 1), (3, 3)], "b2:1": [(0, 2)], "b3:1": [(1, 3)]}
    assert replicas.classify(m, full).bucket == replicas.Bucket.OK
    # one copy missing → WQ bucket; an over-replicated copy elsewhere does not help
    one = dict(full, **{"b0:1": [(0, 0), (2, 2)], "b1:1": [(0, 3)]})
    assert replicas.classify(m, one).bucket == replicas.Bucket.LESS_THAN_WQ
    # E3/WQ3 entry 1 missing everywhere → no replica; NoSuchLedger = holds nothing
    m3 = md(3, 3, 2, [(0, b[:3])], last=1)
    v = replicas.classify(m3, {"b0:1": [(0, 0)], "b1:1": [(0, 0)], "b2:1": None})
    assert v.bucket == replicas.Bucket.NO_REPLICA
    # an unavailable bookie is not counted as missing
    v = replicas.classify(m3, {"b0:1": [(0, 1)], "b1:1": [(0, 1)], "b2:1": RuntimeError("down")})
    assert v.bucket == replicas.Bucket.OK and v.unavailable == ["b2:1"]


def test_replicas_empty_segments_ignored():
    b = ["b0:1", "b1:1", "b2:1"]
    m = md(3, 3, 2, [(0, b), (5, b), (5, ["x:1", "b1:1", "b2:1"])], last=7)
    assert [s[:2] for s in replicas.segment_bounds(m)] == [(0, 4), (5, 7)]
    assert not replicas.should_check(md(3, 3, 2, [(0, b)], last=-1))
    assert not replicas.should_check(md(3, 3, 2, [(0, b)], state=LedgerState.OPEN))
    assert replicas.missing_entries(0, 9, 0, 3, 3, [(2, 3), (7, 20)]) == [0, 1, 4, 5, 6]


def _brute_classify(m, answers):
    """The old per-entry definition: every missing entry listed (fine for small ledgers)."""
    counts: dict[int, int] = {}
    for first, last, ens in replicas.segment_bounds(m):
        for idx, bookie in enumerate(ens):
            ans = answers.get(bookie, KeyError(bookie))
            if isinstance(ans, Exception):
                continue
            for e in replicas.missing_entries(first, last, idx, m.ensemble_size, m.write_quorum, ans or ()):
                counts[e] = counts.get(e, 0) + 1
    return counts


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_replicas_range_classify_equals_the_per_entry_definition(data):
    """Issue 15: classify now works on ranges; it must agree with the per-entry definition."""
    E = data.draw(st.integers(1, 5))
    WQ = data.draw(st.integers(1, E))
    AQ = data.draw(st.integers(1, WQ))
    last = data.draw(st.integers(0, 60))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, last)), max_size=2))))
    bookies = [f"b{i}:1" for i in range(E + 2)]
    segs = [(0, bookies[:E])] + [(c, bookies[2:E + 2]) for c in cuts]
    m = md(E, WQ, AQ, segs, last=last)
    answers = {}
    for b in bookies:
        kind = data.draw(st.sampled_from(["ranges", "none", "error"]))
        if kind == "none":
            answers[b] = None
        elif kind == "error":
            answers[b] = RuntimeError("down")
        else:
            rs = data.draw(st.lists(st.tuples(st.integers(0, last), st.integers(0, 8)), max_size=4))
            answers[b] = [(a, a + n) for a, n in rs]
    counts = _brute_classify(m, answers)
    v = replicas.classify(m, answers)
    assert v.missing_total == len(counts)
    assert v.missing_counts == dict(sorted(counts.items())[:replicas.SAMPLE_SIZE])
    if counts:
        assert v.least_replicas == WQ - max(counts.values())
    else:
        assert v.bucket == replicas.Bucket.OK


def test_replicas_check_of_a_2_pow_31_entry_ledger_that_nobody_holds_is_bounded():
    """Issue 15: a CLOSED ledger with lastEntryId 2^31 whose bookies answer nothing made the check build
    a list of every missing entry id. Now it is classified from ranges, with a bounded sample."""
    b = ["b0:1", "b1:1", "b2:1"]
    m = md(3, 2, 2, [(0, b)], last=2**31)  # the per-entry version needed ~2^31 list items here
    v = replicas.classify(m, {x: None for x in b})
    assert v.bucket == replicas.Bucket.NO_REPLICA and v.missing_total == 2**31 + 1
    assert len(v.missing_counts) == replicas.SAMPLE_SIZE and v.bookies_missing == b


def test_probe_answer_known_without_reads():
    """A one-entry fragment's probe (upstream EntryExistsCallback) says "may exist" without a read when a
    member of the entry's write set is unregistered (its read would fail) or proven; else it must read."""
    f = checker.Fragment(5, 5, 5, ("a", "b", "c"), 3, 2, True)
    _e, idx = checker.probe_entry(f)
    members = [f.ensemble[i] for i in idx]
    everyone = {"a", "b", "c"}
    assert not checker.probe_known_without_reads(f, everyone)
    assert checker.probe_known_without_reads(f, everyone - {members[0]})
    outside = (everyone - set(members)).pop()
    assert not checker.probe_known_without_reads(f, everyone - {outside}), "not in the write set: irrelevant"
    assert checker.probe_known_without_reads(f, everyone, {(5, members[1])})
    assert not checker.probe_known_without_reads(f, everyone, {(0, members[1])}), "another segment's proof"
