"""The workload's ack log (one line per acknowledged entry) and the `-D key=value` parser."""

from __future__ import annotations

import click
import pytest

from autorecovery.cli.local_cluster import parse_defines
from autorecovery.workload import ACK_LOG_HEADER, AckLog, payload_hash, read_ack_log


def test_ack_log_round_trip_and_append(tmp_path):
    p = tmp_path / "a.acks"
    log = AckLog(p)
    log.record(7, 0, b"abc")
    log.record(7, 1, b"")
    log.close()
    again = AckLog(p)  # appends, no second header
    again.record(9, 0, b"x" * 10)
    again.close()
    lines = p.read_text().splitlines()
    assert lines[0] == ACK_LOG_HEADER and lines.count(ACK_LOG_HEADER) == 1
    recs = read_ack_log(p)
    assert [(r.ledger_id, r.entry_id, r.length, r.line) for r in recs] == [(7, 0, 3, 2), (7, 1, 0, 3), (9, 0, 10, 4)]
    assert recs[0].digest == payload_hash(b"abc") and len(recs[0].digest) == 32


@pytest.mark.parametrize("line", ["1 2 3", "1 2 3 nothex" + "0" * 25, "-1 0 3 " + "0" * 32, "a b c " + "0" * 32])
def test_malformed_record_names_file_and_line(tmp_path, line):
    p = tmp_path / "bad.acks"
    p.write_text(f"{ACK_LOG_HEADER}\n1 0 3 {'0' * 32}\n{line}\n")
    with pytest.raises(ValueError, match=r"bad.acks:3: malformed ack record"):
        read_ack_log(p)


def test_missing_header_is_refused(tmp_path):
    p = tmp_path / "x.acks"
    p.write_text(f"1 0 3 {'0' * 32}\n")
    with pytest.raises(ValueError, match=r"x.acks:1: not an ack log"):
        read_ack_log(p)


def test_parse_defines():
    assert parse_defines(("a=1", " b = x=y ", "c=")) == {"a": "1", "b": "x=y", "c": ""}
    for bad in ("novalue", "=1"):
        with pytest.raises(click.BadParameter, match=repr(bad)):
            parse_defines((bad,))
