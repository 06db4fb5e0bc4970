"""Field checks of the reference bookie's requests (issue 25): each bad field is named, good ones pass."""

from __future__ import annotations

import pytest

from autorecovery.bookie.request_fields import MAX_MASTER_KEY_BYTES, add_problem, problem
from autorecovery.proto import bookie_pb2 as pb

MK = b"k" * 20


@pytest.mark.parametrize("msg, field", [
    (pb.AddRequest(ledger_id=-1, entry_id=0, master_key=MK), "ledger_id"),
    (pb.AddRequest(ledger_id=1, entry_id=-(2**63), master_key=MK), "entry_id"),
    (pb.AddRequest(ledger_id=1, entry_id=0, master_key=b""), "master_key"),
    (pb.AddRequest(ledger_id=1, entry_id=0, master_key=b"k" * (MAX_MASTER_KEY_BYTES + 1)), "master_key"),
    (pb.AddRequest(ledger_id=1, entry_id=0, master_key=MK, flags=2), "flags"),
])
def test_bad_adds_name_the_field(msg, field):
    assert field in (add_problem(msg) or "")


@pytest.mark.parametrize("msg, field", [
    (pb.ReadRequest(ledger_id=-5), "ledger_id"),
    (pb.ReadRequest(ledger_id=1, entry_id=-2), "entry_id"),
    (pb.ReadRequest(ledger_id=1, flags=pb.FENCE_LEDGER), "master_key"),
    (pb.ReadRequest(ledger_id=1, flags=2**31), "flags"),
    (pb.ReadRangeRequest(ledger_id=1, first_entry_id=-1), "first_entry_id"),
    (pb.ReadRangeRequest(ledger_id=1, max_batch_bytes=-1), "max_batch_bytes"),
    (pb.PullRequest(ledger_id=1, master_key=MK, source_bookie_id=""), "source_bookie_id"),
    (pb.PullRequest(ledger_id=1, master_key=MK, source_bookie_id="bk\x00:3181"), "source_bookie_id"),
    (pb.PullRequest(ledger_id=1, master_key=MK, source_bookie_id="bk\n:3181"), "source_bookie_id"),
    (pb.PullRequest(ledger_id=1, master_key=MK, source_bookie_id="b" * 300 + ":1"), "source_bookie_id"),
    (pb.PullRequest(ledger_id=1, master_key=MK, source_bookie_id="bk:70000"), "source_bookie_id"),
    (pb.PullRequest(ledger_id=1, source_bookie_id="bk:3181"), "master_key"),
    (pb.ReadLacRequest(ledger_id=-1), "ledger_id"),
    (pb.GetListOfEntriesOfLedgerRequest(ledger_id=-1), "ledger_id"),
    (pb.GetBookieInfoRequest(requested=4), "requested"),
])
def test_bad_requests_name_the_field(msg, field):
    assert field in (problem(msg) or "")


def test_good_requests_pass_and_a_long_id_is_not_echoed_whole():
    good = [pb.ReadRequest(ledger_id=1, entry_id=-1), pb.ReadRequest(ledger_id=1, flags=pb.FENCE_LEDGER, master_key=MK),
            pb.ReadRangeRequest(ledger_id=2**63 - 1, first_entry_id=0, last_entry_id=-1),
            pb.PullRequest(ledger_id=1, master_key=MK, source_bookie_id="127.0.0.1:3181", digest_type=3),
            pb.ReadLacRequest(ledger_id=0), pb.GetBookieInfoRequest(requested=3), pb.AddBatch()]
    assert [problem(m) for m in good] == [None] * len(good)
    assert add_problem(pb.AddRequest(ledger_id=1, entry_id=0, master_key=MK, flags=pb.RECOVERY_ADD)) is None
    msg = problem(pb.PullRequest(ledger_id=1, master_key=MK, source_bookie_id="\x01" * 200))
    assert msg is not None and len(msg) < 120


def test_the_add_streams_field_check_gives_each_add_the_same_answer_as_the_message_check():
    """``add_fields_problem`` (the add streams' per-entry check, on fields taken out once) answers every
    add, good or bad, exactly as the field-by-field check of the message does."""
    from autorecovery.bookie import request_fields as validate

    cases = [(1, 0, 0, MK), (1, 0, pb.RECOVERY_ADD, MK), (0, 2**63 - 1, 0, b"k"),
             (1, 0, 0, b"k" * MAX_MASTER_KEY_BYTES), (-1, 0, 0, MK), (1, -1, 0, MK), (1, 0, 2, MK),
             (1, 0, 2**31, MK), (1, 0, 0, b""), (1, 0, 0, b"k" * (MAX_MASTER_KEY_BYTES + 1)), (-1, -1, 2, b"")]
    for lid, eid, flags, key in cases:
        slow = validate._first(validate._nonneg(ledger_id=lid, entry_id=eid),
                               validate._bits("flags", flags, pb.AddFlag), validate._key(key, "an add"))
        assert validate.add_fields_problem(lid, eid, flags, key) == slow, (lid, eid, flags, key)
        msg = pb.AddRequest(ledger_id=lid, entry_id=eid, flags=flags, master_key=key)
        assert add_problem(msg) == slow
