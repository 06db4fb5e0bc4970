"""Smoke test of the stock-BookKeeper fixture: 4 upstream bookies in 2 racks, upstream's client writes
and reads ledgers, upstream's shell sees the bookies and no under-replication."""

from __future__ import annotations

import base64
import json
import re
import subprocess

import pytest

from autorecovery.testing.upstream_java import TOOL_CLASS, expected_payload, java_cmd

pytestmark = pytest.mark.integration

PW = "interop-pw"


def test_stock_cluster_writes_reads_and_lists(java_cluster) -> None:
    c = java_cluster(bookies=4, racks=2)
    assert len({b.host for b in c.bookies}) == 4
    racks = c.rack_mapping()
    assert sorted(racks.values()) == ["/rack-a", "/rack-a", "/rack-b", "/rack-b"]

    # our daemon's view of the racks: Pulsar's document under the root (= its chroot)
    data, _ = c.kz.get(f"{c.root}/bookies")
    assert {bid: v["rack"] for bid, v in json.loads(data)["default"].items()} == racks

    w = c.writer(ledgers=5, entries=200, entry_size=1024, ensemble=3, wq=2, aq=2, digest="CRC32C", password=PW)
    ledgers = w["ledgers"]
    assert len(ledgers) == 5
    for lg in ledgers:
        assert lg["closed"] and lg["last_acked"] == 199
        (ensemble,) = lg["ensembles"].values()
        assert len(set(ensemble)) == 3 and set(ensemble) <= set(c.bookie_ids)
        # rack-aware placement through the rack script: every ensemble spans both racks
        assert {racks[b] for b in ensemble} == {"/rack-a", "/rack-b"}

    ids = [lg["ledger"] for lg in ledgers]
    r = c.reader(ids, password=PW)
    assert r["ok"], r
    for lg in r["ledgers"]:
        assert lg["closed"] and lg["last_entry_id"] == 199
        assert (lg["entries_read"], lg["bad_entries"], lg["errors"]) == (200, 0, [])

    shown = c.ensembles(ids)
    assert [(x["ensemble_size"], x["write_quorum"], x["ack_quorum"], x["digest"]) for x in shown["ledgers"]] == \
        [(3, 2, 2, "CRC32C")] * 5

    rw = c.shell("listbookies", "-rw")
    assert rw.returncode == 0, rw.stdout + rw.stderr
    listed = set(re.findall(r"BookieID:([\d.]+:\d+),", rw.stdout))
    assert listed == set(c.bookie_ids), rw.stdout

    ur = c.shell("listunderreplicated")
    assert ur.returncode == 0, ur.stdout + ur.stderr
    assert "Under replicated ledger count: 0" in ur.stdout, ur.stdout


def test_python_payload_matches_the_java_writer(tmp_path) -> None:
    """expected_payload() is byte for byte what the Java writer puts in an entry."""
    for ledger, entry, size in [(0, 0, 1024), (7, 123, 5), (12345678901, 9, 300)]:
        out = subprocess.run(java_cmd(TOOL_CLASS, ["payload", "--ledger", str(ledger), "--entry", str(entry),
                                                   "--entry-size", str(size)], log_file=tmp_path / "payload.log"),
                             capture_output=True, text=True, timeout=60, check=True)
        assert base64.b64decode(json.loads(out.stdout)["base64"]) == expected_payload(ledger, entry, size)
