"""Each documented rule of the reports on a small hand-built snapshot, the expected figure worked out by
hand in the test (docs/reports.md, "What the models assume"):

* the heal-time source term is a lower bound of any schedule (every readable copy busy all along; the
  bytes only one bookie holds), not an even split of each entry over its copies;
* the BP-54 copy time reads from readable copies only (a read-only bookie serves reads, a gone one
  nothing);
* a failure domain counts the ledgers it stores a copy of not lost already (not one whose only member
  there sits in an empty last segment, not one whose copies there are all lost already);
* the copy rate measured from the snapshot's heal history is used, and said so (``rate_assumed`` false);
* a snapshot written before the LAC columns loads, LAC unknown.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autorecovery.reports.build import run
from autorecovery.reports.spark_io import spark_session
from autorecovery.reports.snapshot import BOOKIES, LEDGERS, MARKERS, SEGMENTS, TableWriter, write_manifest

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
#: one stream per source bookie, one ledger per daemon, targets unlimited: the bounds are easy to write
THROTTLES = {"replicationWorkerConcurrentLedgers": "1", "replicationMaxStreamsPerSourceBookie": "1",
             "replicationMaxStreamsPerTargetBookie": "0", "replicationRateByBytes": "-1"}
PLACEMENT = {"ensemblePlacementPolicy": "rackaware", "minNumRacksPerWriteQuorum": "2"}


def write_bookies(path: Path, bookies: dict[str, tuple[str, str]]) -> None:
    bw = TableWriter(path / "bookies.parquet", BOOKIES)
    for b, (rack, state) in sorted(bookies.items()):
        bw.add({"bookie_id": b, "state": state, "location": f"/{rack}", "rack": rack, "zone": "z", "region": "r",
                "free_bytes": 10_000, "total_bytes": 20_000})
    bw.close()


def write_segments(path: Path, segs: list[tuple[int, int, int, list[str]]]) -> None:
    sw = TableWriter(path / "segments.parquet", SEGMENTS)
    for lid, first, last, ens in segs:
        sw.add({"ledger_id": lid, "first_entry_id": first, "last_entry_id": last, "ensemble": ens})
    sw.close()


# -- snapshot 1: heal bound, domain rule, measured rate, an old ledgers table ---------------------------
# racks A: a1 a2, B: b1, C: c1 c2; every bookie writable
BOOKIES_1 = {"a1:1": ("A", "writable"), "a2:1": ("A", "writable"), "b1:1": ("B", "writable"),
             "c1:1": ("C", "writable"), "c2:1": ("C", "writable")}
# ledger id: (state, E, WQ, AQ, last entry id, length)
LEDGERS_1 = {1: ("CLOSED", 3, 3, 2, 2, 300),   # (a1, b1, c1): 3 entries of 100 bytes, a copy on each
             2: ("CLOSED", 3, 3, 2, 2, 300),   # (a1, b1, c2)
             3: ("CLOSED", 2, 2, 1, 4, 500),   # (c1, a2): 5 entries of 100 bytes on both
             4: ("OPEN", 2, 2, 2, -1, 0)}      # entries 0..3 on (b1, c1); an empty last segment on (b1, a2)
SEGMENTS_1 = [(1, 0, 2, ["a1:1", "b1:1", "c1:1"]), (2, 0, 2, ["a1:1", "b1:1", "c2:1"]),
              (3, 0, 4, ["c1:1", "a2:1"]), (4, 0, 3, ["b1:1", "c1:1"]), (4, 4, -1, ["b1:1", "a2:1"])]
# ledger 4's copies on c1 are marked missing: only b1 holds its entries
HISTORY = {"episodes": [
    # closed: 3000 bytes in 10 s by two daemons → 150 bytes/s per daemon
    {"name": "e-0000000001", "kind": "bookie_lost", "state": "closed", "closed_ms": T0 - 1000, "duration_s": 10.0,
     "bytes_healed": 3000, "workers": {"w1:1": 2, "w2:1": 1}},
    # still open: not a measurement
    {"name": "e-0000000002", "kind": "bookie_lost", "state": "open", "closed_ms": None, "duration_s": None,
     "bytes_healed": 900, "workers": {"w1:1": 1}},
], "errors": []}
RATE_1 = 3000 / (10.0 * 2)


def make_snapshot_1(path: Path) -> None:
    path.mkdir(parents=True)
    # written as a snapshot from before the LAC columns: ledgers.parquet without lac and lac_length
    old = pa.schema([f for f in LEDGERS if f.name not in ("lac", "lac_length")])
    rows = [{"ledger_id": lid, "state": st, "ensemble_size": E, "write_quorum": WQ, "ack_quorum": AQ,
             "last_entry_id": last, "length": length, "ctime": T0 - 86_400_000, "digest_type": "CRC32C",
             "managed_ledger": "", "custom_metadata": []} for lid, (st, E, WQ, AQ, last, length) in LEDGERS_1.items()]
    pq.write_table(pa.Table.from_pylist(rows, schema=old), path / "ledgers.parquet")
    write_segments(path, SEGMENTS_1)
    write_bookies(path, BOOKIES_1)
    mw = TableWriter(path / "markers.parquet", MARKERS)
    mw.add({"ledger_id": 4, "kind": "underreplicated", "replicas": ["c1:1"], "ctime": 0})
    mw.close()
    (path / "history.json").write_text(json.dumps(HISTORY))
    write_manifest(path, {"time_ms": T0, "instance_id": "t", "ledgers_root": "/ledgers", "layout": "",
                          "counts": {"ledgers": len(LEDGERS_1)}, "throttles": THROTTLES, "placement": PLACEMENT})


@pytest.fixture(scope="module")
def spark():
    s = spark_session("local[2]")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def report_1(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("rules1")
    make_snapshot_1(base / "snap")
    summary = run(base / "snap", base / "out", "risk", spark=spark, k_bookies=False)
    dom = pd.read_csv(base / "out" / "risk_domains.csv")
    return summary, {(r.kind, r.name): r for r in dom.itertuples()}


def test_old_snapshot_loads_with_lac_unknown(report_1):
    summary, dom = report_1
    assert summary["risk"]["open_ledgers_lac"].startswith("unknown")
    # ledger 4's empty last segment counts empty: its entries are 0..3 only, all on b1 (c1's are marked)
    assert dom[("rack", "B")].ledgers_data_loss == 1


def test_rate_measured_from_the_heal_history(report_1):
    summary, _dom = report_1
    hm = summary["risk"]["heal_model"]
    assert hm["rate_assumed"] is False and summary["risk"]["rate_assumed"] is False
    assert hm["rate_source"].startswith("measured") and "1 closed episode" in hm["rate_source"]
    assert hm["daemon_rate_bytes_per_s"] == pytest.approx(RATE_1)  # 150 bytes/s
    assert hm["stream_rate_bytes_per_s"] == pytest.approx(RATE_1)  # one ledger per daemon


def test_heal_source_term_is_a_lower_bound_not_an_even_split(report_1):
    _summary, dom = report_1
    s = RATE_1  # one stream per source bookie at the stream rate
    # rack B lost: ledgers 1 and 2 lose their b1 copy; 300 bytes readable from {a1, c1}, 300 from {a1, c2}.
    # Any schedule: a1, c1, c2 serve 600 bytes, at best 200 each → 200 / s. (An even split over the
    # copies would have a1 read 300.) Daemons: a1, a2, c1, c2 → 600 / (4 s) = 150 / s.
    b = dom[("rack", "B")]
    assert b.heal_bytes == pytest.approx(600) and b.surviving_daemons == 4
    assert b.heal_time_s == pytest.approx(200 / s) and b.heal_limited_by == "sources"
    # rack A lost: 300 bytes from {b1, c1} (ledger 1), 300 from {b1, c2} (ledger 2), 500 only from c1
    # (ledger 3). c1 alone must serve 500 → 500 / s; b1 and c2 take the rest (300 each at most).
    a = dom[("rack", "A")]
    assert a.heal_bytes == pytest.approx(1100) and a.surviving_daemons == 3
    assert a.heal_time_s == pytest.approx(500 / s) and a.heal_limited_by == "source c1:1"


def test_domain_counts_the_ledgers_it_stores_a_live_copy_of(report_1):
    _summary, dom = report_1
    # rack A: a2 is in ledger 4 only through its empty last segment → ledger 4 is not rack A's (it would
    # have shown with its existing damage: below AQ). Rack A: ledgers 1, 2 (two copies left, AQ 2) and 3
    # (one left, AQ 1): copies lost only.
    a = dom[("rack", "A")]
    assert (a.ledgers_data_loss, a.ledgers_below_ack_quorum, a.ledgers_copy_lost) == (0, 0, 3)
    # rack C: c1's copies of ledger 4 are lost already (marked) → not rack C's; ledgers 1, 2 (copy lost),
    # 3 (copy lost: a2 keeps one, AQ 1)
    c = dom[("rack", "C")]
    assert (c.ledgers_data_loss, c.ledgers_below_ack_quorum, c.ledgers_copy_lost) == (0, 0, 3)
    # rack B: ledgers 1, 2 lose a copy; ledger 4 loses its last copy (b1)
    b = dom[("rack", "B")]
    assert (b.ledgers_data_loss, b.ledgers_below_ack_quorum, b.ledgers_copy_lost) == (1, 0, 2)
    # the pair A|C: ledger 4 is neither's → ledgers 1, 2 keep b1 (below AQ 2), 3 loses both copies
    ac = dom[("rack_pair", "A|C")]
    assert (ac.ledgers_data_loss, ac.ledgers_below_ack_quorum) == (1, 2)


# -- snapshot 2: the BP-54 copy plan reads from readable copies ---------------------------------------
# rack A: a1 writable, r1 read-only, g1 gone; rack B: b1, b2; rack C: c1
BOOKIES_2 = {"a1:1": ("A", "writable"), "r1:1": ("A", "readonly"), "g1:1": ("A", "gone"),
             "b1:1": ("B", "writable"), "b2:1": ("B", "writable"), "c1:1": ("C", "writable")}
# every ledger E = WQ = AQ = 2 on two bookies of rack A: each fails minNumRacksPerWriteQuorum=2
LEDGERS_2 = {1: (["a1:1", "r1:1"], 400),   # r1 (read-only) swapped out; readable from a1 or r1
             2: (["g1:1", "a1:1"], 600),   # g1 (gone) swapped out; readable from a1 only
             3: (["g1:1", "r1:1"], 800)}   # both swapped out; readable from r1 only


def make_snapshot_2(path: Path) -> None:
    path.mkdir(parents=True)
    lw = TableWriter(path / "ledgers.parquet", LEDGERS)
    for lid, (_ens, length) in LEDGERS_2.items():
        lw.add({"ledger_id": lid, "state": "CLOSED", "ensemble_size": 2, "write_quorum": 2, "ack_quorum": 2,
                "last_entry_id": length // 100 - 1, "length": length, "ctime": T0 - 86_400_000,
                "digest_type": "CRC32C", "managed_ledger": "", "custom_metadata": []})
    lw.close()
    write_segments(path, [(lid, 0, length // 100 - 1, ens) for lid, (ens, length) in LEDGERS_2.items()])
    write_bookies(path, BOOKIES_2)
    TableWriter(path / "markers.parquet", MARKERS).close()
    write_manifest(path, {"time_ms": T0, "instance_id": "t", "ledgers_root": "/ledgers", "layout": "",
                          "counts": {"ledgers": len(LEDGERS_2)}, "throttles": THROTTLES, "placement": PLACEMENT})


def test_bp54_copy_time_reads_from_readable_copies(spark, tmp_path):
    make_snapshot_2(tmp_path / "snap")
    summary = run(tmp_path / "snap", tmp_path / "out", "placement", spark=spark, assumed_rate=1.0, k_bookies=False)
    rep = summary["placement"]["repair"]
    swaps = pd.read_parquet(tmp_path / "out" / "placement_repair_swaps.parquet")
    # the plan swaps out every member that is not writable (read-only r1 and gone g1 take no writes)
    got = sorted(zip(swaps["ledger_id"], swaps["source"], swaps["bytes"], strict=True))
    assert got == [(1, "r1:1", 400.0), (2, "g1:1", 600.0), (3, "g1:1", 800.0), (3, "r1:1", 800.0)]
    assert rep["ledgers_without_fix"] == 0 and rep["bytes_to_copy"] == pytest.approx(2600)
    # reads: ledger 1's 400 bytes from a1 or r1; ledger 2's 600 from a1 only (g1 is gone); ledger 3's
    # two swaps, 1600 bytes, from r1 only (read-only: it serves reads). r1 must serve 1600 bytes at one
    # stream × 1 byte/s → 1600 s (a1 takes ledger 1: 1000). Reading each swap from the member it
    # replaces would have g1, which serves nothing, read 1400 bytes. Daemons: a1, r1, b1, b2, c1 →
    # 2600 / 5 = 520 s.
    assert rep["copy_time_s"] == pytest.approx(1600.0) and rep["copy_limited_by"] == "source r1:1"
    assert rep["rate_assumed"] is True and rep["rate_source"].startswith("given")
