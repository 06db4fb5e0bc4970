"""The Spark reports on a small hand-made snapshot against brute-force answers (every entry, write set
and failure domain enumerated here, independently of reports/model.py). The same report on a Spark
standalone cluster: test_reports_spark_standalone.py."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest

from autorecovery.reports.build import run
from autorecovery.reports.spark_io import spark_session
from autorecovery.reports.snapshot import BOOKIES, LEDGERS, MARKERS, SEGMENTS, TableWriter, write_manifest

pytestmark = pytest.mark.integration

RACKS = {"A": ["a1:3181", "a2:3181"], "B": ["b1:3181", "b2:3181"], "C": ["c1:3181", "c2:3181"]}
RACK_OF = {b: r for r, bs in RACKS.items() for b in bs}
# (E, WQ, AQ, last entry id, bytes, [(first entry, ensemble)], state)
LEDGER_SPECS = {
    1: (3, 2, 2, 5, 600, [(0, ("a1:3181", "a2:3181", "b1:3181"))], "CLOSED"),        # two members in A
    2: (3, 2, 2, 8, 900, [(0, ("a1:3181", "b1:3181", "c1:3181"))], "CLOSED"),        # three racks
    3: (2, 2, 2, 3, 400, [(0, ("a1:3181", "a2:3181"))], "CLOSED"),                   # single rack: BP-54
    4: (3, 3, 2, 9, 1000, [(0, ("a1:3181", "b1:3181", "c1:3181")),
                           (5, ("a2:3181", "b2:3181", "c2:3181"))], "CLOSED"),       # an ensemble change
    5: (2, 2, 1, 4, 500, [(0, ("b2:3181", "c2:3181"))], "CLOSED"),
    6: (3, 2, 2, -1, 0, [(0, ("a1:3181", "b1:3181", "c1:3181"))], "OPEN"),
}
NS = {1: "t1/n1", 2: "t1/n1", 3: "t1/n2", 4: "t2/n1", 5: "t2/n1", 6: "t1/n1"}


def make_snapshot(path: Path) -> None:
    path.mkdir(parents=True)
    lw, sw = TableWriter(path / "ledgers.parquet", LEDGERS), TableWriter(path / "segments.parquet", SEGMENTS)
    for lid, (E, WQ, AQ, last, length, segs, state) in LEDGER_SPECS.items():
        ml = f"{NS[lid]}/persistent/topic-{lid}"
        lw.add({"ledger_id": lid, "state": state, "ensemble_size": E, "write_quorum": WQ, "ack_quorum": AQ,
                "last_entry_id": last, "length": length, "ctime": 1_700_000_000_000 - lid * 86_400_000,
                "digest_type": "CRC32C", "managed_ledger": ml, "custom_metadata": [("pulsar/managed-ledger", ml.encode())]})
        for i, (first, ens) in enumerate(segs):
            seg_last = segs[i + 1][0] - 1 if i + 1 < len(segs) else last
            sw.add({"ledger_id": lid, "first_entry_id": first, "last_entry_id": seg_last, "ensemble": list(ens)})
    lw.close()
    sw.close()
    bw = TableWriter(path / "bookies.parquet", BOOKIES)
    for b, r in sorted(RACK_OF.items()):
        bw.add({"bookie_id": b, "state": "writable", "location": f"/{r}", "rack": r, "zone": "z" + r,
                "region": "reg", "free_bytes": 10_000, "total_bytes": 20_000})
    bw.close()
    TableWriter(path / "markers.parquet", MARKERS).close()
    write_manifest(path, {"time_ms": 1_700_000_000_000, "instance_id": "t", "ledgers_root": "/ledgers",
                          "layout": "", "counts": {"ledgers": len(LEDGER_SPECS)},
                          "placement": {"ensemblePlacementPolicy": "rackaware", "minNumRacksPerWriteQuorum": "2"}})


def brute_outcome(lid: int, dead: set[str]) -> tuple[str, float]:
    """Worst outcome of losing ``dead`` for ledger ``lid`` and its bytes to heal, entry by entry."""
    E, WQ, AQ, last, length, segs, _state = LEDGER_SPECS[lid]
    bpe = length / (last + 1) if last >= 0 else 0
    worst, heal = 0, 0.0
    for i, (first, ens) in enumerate(segs):
        seg_last = segs[i + 1][0] - 1 if i + 1 < len(segs) else last
        for e in range(first, seg_last + 1):
            copies = [ens[(e + k) % E] for k in range(WQ)]
            gone = sum(1 for b in copies if b in dead)
            if gone == 0:
                continue
            left = WQ - gone
            worst = max(worst, 3 if left == 0 else 2 if left < AQ else 1)
            if left:
                heal += gone * bpe
    return {0: "unaffected", 1: "copy_lost", 2: "below_ack_quorum", 3: "data_loss"}[worst], heal


def brute_domains() -> dict[tuple[str, str], dict[str, int]]:
    out: dict[tuple[str, str], dict[str, int]] = {}
    domains = [("rack", r, set(bs)) for r, bs in RACKS.items()]
    domains += [("rack_pair", f"{a}|{b}", set(RACKS[a]) | set(RACKS[b])) for a, b in itertools.combinations(RACKS, 2)]
    for kind, name, dead in domains:
        counts: dict[str, int] = {}
        for lid in LEDGER_SPECS:
            o, _h = brute_outcome(lid, dead)
            if o != "unaffected":
                counts[o] = counts.get(o, 0) + 1
        out[(kind, name)] = counts
    return out


@pytest.fixture(scope="module")
def spark():
    s = spark_session("local[2]")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def local_report(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("reports")
    make_snapshot(base / "snap")
    summary = run(base / "snap", base / "out", "all", what_if={"minNumRacksPerWriteQuorum": "3"}, spark=spark)
    return base, summary


def test_risk_matches_brute_force(local_report):
    base, summary = local_report
    dom = pd.read_csv(base / "out" / "risk_domains.csv")
    got = {}
    for r in dom.itertuples():
        if r.kind in ("rack", "rack_pair"):
            got[(r.kind, r.name)] = {k: int(getattr(r, f"ledgers_{k}")) for k in
                                     ("data_loss", "below_ack_quorum", "copy_lost") if getattr(r, f"ledgers_{k}") > 0}
    want = {k: v for k, v in brute_domains().items() if v}
    assert got == want
    # heal bytes of rack A, entry by entry
    heal_a = sum(brute_outcome(lid, set(RACKS["A"]))[1] for lid in LEDGER_SPECS)
    row = dom[(dom["kind"] == "rack") & (dom["name"] == "A")].iloc[0]
    assert row["heal_bytes"] == pytest.approx(heal_a)
    assert summary["risk"]["racks_whose_loss_loses_data"] == ["A"]  # ledgers 1 and 3 lose entries with A
    by_ns = pd.read_csv(base / "out" / "risk_by_namespace.csv")
    assert set(by_ns.loc[(by_ns["name"] == "A") & (by_ns["outcome_name"] == "data_loss"), "namespace"]) == \
        {"t1/n1", "t1/n2"}


def test_capacity_matches_brute_force(local_report):
    base, summary = local_report
    want: dict[str, float] = {}
    for (E, WQ, _AQ, last, length, segs, _s) in LEDGER_SPECS.values():
        bpe = length / (last + 1) if last >= 0 else 0
        for i, (first, ens) in enumerate(segs):
            seg_last = segs[i + 1][0] - 1 if i + 1 < len(segs) else last
            for e in range(first, seg_last + 1):
                for k in range(WQ):
                    want[ens[(e + k) % E]] = want.get(ens[(e + k) % E], 0.0) + bpe
    cap = pd.read_csv(base / "out" / "capacity_bookies.csv").set_index("bookie_id")
    for b in RACK_OF:
        assert cap.loc[b, "used_bytes"] == pytest.approx(want.get(b, 0.0)), b
    racks = pd.read_csv(base / "out" / "capacity_rack.csv").set_index("rack")
    assert racks.loc["A", "used_bytes"] == pytest.approx(want["a1:3181"] + want["a2:3181"])
    assert summary["capacity"]["used_bytes"] == pytest.approx(sum(want.values()))
    assert (base / "out" / "report.html").read_text().count("<svg ") >= 2  # inline SVG charts


def test_placement_verdicts_and_bp54_plan(local_report):
    base, summary = local_report
    per = pd.read_parquet(base / "out" / "placement_ledgers.parquet").set_index("ledger_id")
    # E3/WQ2 (a1,a2,b1): write set (a1,a2) is one rack; E2 (a1,a2): one rack; others span two racks
    assert per.loc[1, "current"] == "FAIL" and per.loc[3, "current"] == "FAIL"
    assert per.loc[2, "current"] == "MEETS_STRICT" and per.loc[6, "current"] == "OPEN_SKIPPED"
    assert summary["placement"]["current"] == {"FAIL": 2, "MEETS_STRICT": 3, "OPEN_SKIPPED": 1}
    # what-if minNumRacksPerWriteQuorum=3: WQ=2 sets cannot span 3 racks (capped at WQ); ledger 4 (WQ3) can
    assert per.loc[4, "what_if"] == "MEETS_STRICT"
    repair = summary["placement"]["repair"]
    swaps = pd.read_parquet(base / "out" / "placement_repair_swaps.parquet")
    assert repair["swaps"] == len(swaps[swaps["fixable"]]) and repair["bytes_to_copy"] > 0
    assert set(swaps.loc[swaps["fixable"], "ledger_id"]) <= {1, 3}


# -- a damaged cluster: a gone bookie, a marker, unknown disks, an open ledger with its LAC -------------
GONE = "d1:3181"  # rack C, known only by its cookie
DAMAGED_SPECS = {**LEDGER_SPECS,
                 7: (3, 2, 2, 5, 600, [(0, ("c1:3181", GONE, "a1:3181"))], "CLOSED")}
MARKED = {2: {"b1:3181"}}       # ledger 2's copies on b1 are marked missing
OPEN_LAC = {6: (4, 500)}        # ledger 6: LAC 4, 500 bytes at entry 4
NO_DISK = {"c1:3181", "c2:3181"}  # did not answer GET_BOOKIE_INFO: rack C's disk is unknown


def make_damaged_snapshot(path: Path) -> None:
    path.mkdir(parents=True)
    lw, sw = TableWriter(path / "ledgers.parquet", LEDGERS), TableWriter(path / "segments.parquet", SEGMENTS)
    for lid, (E, WQ, AQ, last, length, segs, state) in DAMAGED_SPECS.items():
        lac, lac_length = OPEN_LAC.get(lid, (None, None))
        lw.add({"ledger_id": lid, "state": state, "ensemble_size": E, "write_quorum": WQ, "ack_quorum": AQ,
                "last_entry_id": last, "length": length, "ctime": 1_700_000_000_000 - lid * 86_400_000,
                "digest_type": "CRC32C", "managed_ledger": "", "custom_metadata": [], "lac": lac,
                "lac_length": lac_length})
        for i, (first, ens) in enumerate(segs):
            seg_last = segs[i + 1][0] - 1 if i + 1 < len(segs) else last
            sw.add({"ledger_id": lid, "first_entry_id": first, "last_entry_id": seg_last, "ensemble": list(ens)})
    lw.close()
    sw.close()
    bw = TableWriter(path / "bookies.parquet", BOOKIES)
    for b, r in sorted({**RACK_OF, GONE: "C"}.items()):
        disk = -1 if b in NO_DISK or b == GONE else 10_000
        bw.add({"bookie_id": b, "state": "gone" if b == GONE else "writable", "location": f"/{r}", "rack": r,
                "zone": "z" + r, "region": "reg", "free_bytes": disk, "total_bytes": 2 * disk if disk > 0 else -1})
    bw.close()
    mw = TableWriter(path / "markers.parquet", MARKERS)
    for lid, reps in MARKED.items():
        mw.add({"ledger_id": lid, "kind": "underreplicated", "replicas": sorted(reps), "ctime": 0})
    mw.close()
    write_manifest(path, {"time_ms": 1_700_000_000_000, "instance_id": "t", "ledgers_root": "/ledgers",
                          "layout": "", "counts": {"ledgers": len(DAMAGED_SPECS)},
                          "throttles": {"replicationWorkerConcurrentLedgers": "2",
                                        "replicationMaxStreamsPerSourceBookie": "1",
                                        "replicationMaxStreamsPerTargetBookie": "3"},
                          "placement": {"ensemblePlacementPolicy": "rackaware", "minNumRacksPerWriteQuorum": "2"}})


def brute_damaged(lid: int, dead: set[str]) -> tuple[int, float, float]:
    """(outcome 0..3, bytes lost, bytes to heal) of losing ``dead`` on top of the existing damage, entry by
    entry; the open ledger runs to its LAC with the LAC's length."""
    E, WQ, AQ, last, length, segs, _state = DAMAGED_SPECS[lid]
    if lid in OPEN_LAC:
        last, length = OPEN_LAC[lid]
    bpe = length / (last + 1) if last >= 0 else 0
    dead = dead | {GONE} | MARKED.get(lid, set())
    worst, lost, heal = 0, 0.0, 0.0
    for i, (first, ens) in enumerate(segs):
        seg_last = segs[i + 1][0] - 1 if i + 1 < len(segs) else last
        for e in range(first, seg_last + 1):
            gone = sum(1 for k in range(WQ) if ens[(e + k) % E] in dead)
            if gone == 0:
                continue
            left = WQ - gone
            worst = max(worst, 3 if left == 0 else 2 if left < AQ else 1)
            if left:
                heal += gone * bpe
            else:
                lost += bpe
    return worst, lost, heal


def stored_live(lid: int) -> set[str]:
    """The bookies storing a copy of an entry of ``lid`` not lost already (the open ledger up to its LAC):
    the ledgers a domain or a set of bookies counts."""
    E, WQ, _AQ, last, _length, segs, _state = DAMAGED_SPECS[lid]
    if lid in OPEN_LAC:
        last = OPEN_LAC[lid][0]
    out = set()
    for i, (first, ens) in enumerate(segs):
        seg_last = segs[i + 1][0] - 1 if i + 1 < len(segs) else last
        out |= {ens[(e + k) % E] for e in range(first, seg_last + 1) for k in range(WQ)}
    return out - {GONE} - MARKED.get(lid, set())


def brute_set(dead: set[str]) -> tuple[int, float, int]:
    """(data-loss ledgers, bytes lost, below-AQ ledgers) over the ledgers of which a member of ``dead``
    stores a copy not lost already."""
    res = [brute_damaged(lid, dead) for lid in DAMAGED_SPECS if stored_live(lid) & dead]
    return (sum(1 for o, _l, _h in res if o == 3), sum(lb for _o, lb, _h in res), sum(1 for o, _l, _h in res if o == 2))


@pytest.fixture(scope="module")
def damaged_report(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("damaged")
    make_damaged_snapshot(base / "snap")
    summary = run(base / "snap", base / "out", "all", spark=spark, decommission="a1:3181", add_bookies=("D", 2),
                  assumed_rate=1000.0)
    return base, summary


def test_existing_damage_and_open_ledger_count_in_the_risk(damaged_report):
    base, summary = damaged_report
    dom = pd.read_csv(base / "out" / "risk_domains.csv")
    for rack, members in RACKS.items():
        touching = [lid for lid in DAMAGED_SPECS if stored_live(lid) & set(members)]
        res = [brute_damaged(lid, set(members)) for lid in touching]
        row = dom[(dom["kind"] == "rack") & (dom["name"] == rack)].iloc[0]
        assert int(row["ledgers_data_loss"]) == sum(1 for o, _l, _h in res if o == 3), rack
        assert int(row["ledgers_below_ack_quorum"]) == sum(1 for o, _l, _h in res if o == 2), rack
        assert row["heal_bytes"] == pytest.approx(sum(h for _o, _l, h in res)), rack
        assert row["lost_bytes_data_loss"] == pytest.approx(sum(lb for _o, lb, _h in res)), rack
    ex = summary["risk"]["existing_damage"]
    res = [brute_damaged(lid, set()) for lid in DAMAGED_SPECS]
    assert ex["gone_bookies"] == [GONE]
    assert (ex["ledgers_data_loss"], ex["ledgers_below_ack_quorum"], ex["ledgers_copy_lost"]) == \
        tuple(sum(1 for o, _l, _h in res if o == k) for k in (3, 2, 1))
    assert ex["heal_bytes"] == pytest.approx(sum(h for _o, _l, h in res))
    assert summary["risk"]["open_ledgers_lac"] == "read at export"


def test_heal_time_uses_surviving_daemons_and_stream_caps(damaged_report):
    base, summary = damaged_report
    dom = pd.read_csv(base / "out" / "risk_domains.csv")
    row = dom[(dom["kind"] == "rack") & (dom["name"] == "A")].iloc[0]
    assert int(row["surviving_daemons"]) == 4  # b1, b2, c1, c2: A's daemons and the gone bookie's are lost
    # heal A: bytes read from each survivor, entry by entry (each healed entry read once, from its copies)
    reads: dict[str, float] = {}
    sole: dict[str, float] = {}
    dead = set(RACKS["A"])
    for lid, (E, WQ, _AQ, last, length, segs, _s) in DAMAGED_SPECS.items():
        if lid in OPEN_LAC:
            last, length = OPEN_LAC[lid]
        bpe = length / (last + 1) if last >= 0 else 0
        lost_now = dead | {GONE} | MARKED.get(lid, set())
        for i, (first, ens) in enumerate(segs):
            seg_last = segs[i + 1][0] - 1 if i + 1 < len(segs) else last
            for e in range(first, seg_last + 1):
                copies = [ens[(e + k) % E] for k in range(WQ)]
                left = [b for b in copies if b not in lost_now]
                if left and len(left) < WQ:
                    for b in left:
                        reads[b] = reads.get(b, 0.0) + bpe / len(left)
                    if len(left) == 1:
                        sole[left[0]] = sole.get(left[0], 0.0) + bpe
    heal = row["heal_bytes"]
    stream = 1000.0 / 2  # the assumed daemon rate over replicationWorkerConcurrentLedgers
    # the source bound: every readable copy busy all along, and the bytes only one bookie holds
    source = max(sum(reads.values()) / (len(reads) * stream), max(sole.values(), default=0.0) / stream)
    want = max(heal / (4 * 1000.0), source, heal / (4 * 3 * stream))
    assert row["heal_time_s"] == pytest.approx(want)
    assert summary["risk"]["heal_model"]["replicationMaxStreamsPerSourceBookie"] == 1


def test_unknown_disk_is_null_and_not_summed(damaged_report):
    base, summary = damaged_report
    racks = pd.read_csv(base / "out" / "capacity_rack.csv").set_index("rack")
    assert pd.isna(racks.loc["C", "free_bytes"]) and pd.isna(racks.loc["C", "days_until_full"])
    assert racks.loc["C", "disk_unknown_bookies"] == 3  # c1, c2 and the gone d1
    assert racks.loc["A", "free_bytes"] == 20_000 and racks.loc["A", "disk_unknown_bookies"] == 0
    assert summary["capacity"]["free_bytes"] == 40_000  # a1, a2, b1, b2
    assert summary["capacity"]["bookies_disk_unknown"] == sorted(NO_DISK | {GONE})


def test_worst_k_bookies_match_brute_force(damaged_report):
    _base, summary = damaged_report
    live = sorted(RACK_OF)
    wb = summary["what_if_bookies"]
    for k in (1, 2, 3):
        sets = {c: brute_set(set(c)) for c in itertools.combinations(live, k)}
        worst = max(sets.values())
        top = wb[f"k{k}"][0]
        got = (top["ledgers_data_loss"], top["lost_bytes"], top["ledgers_below_ack_quorum"])
        named = sets[tuple(sorted(top["bookies"]))]
        assert got[0] == named[0] and got[1] == pytest.approx(named[1]) and got[2] == named[2], k
        if k < 3:  # exact
            assert (named[0], round(named[1], 6), named[2]) == (worst[0], round(worst[1], 6), worst[2]), k
        else:      # a sound search: a real triple, never worse than the true worst
            assert named <= worst


def test_decommission_and_add_bookies(damaged_report):
    _base, summary = damaged_report
    dec = summary["what_if_decommission"]
    # a1's bytes, entry by entry: segments holding a1 (ledger 6 up to its LAC)
    want, segs_with = 0.0, 0
    for lid, (E, WQ, _AQ, last, length, segs, _s) in DAMAGED_SPECS.items():
        if lid in OPEN_LAC:
            last, length = OPEN_LAC[lid]
        bpe = length / (last + 1) if last >= 0 else 0
        for i, (first, ens) in enumerate(segs):
            if "a1:3181" not in ens:
                continue
            segs_with += 1
            seg_last = segs[i + 1][0] - 1 if i + 1 < len(segs) else last
            want += sum(bpe for e in range(first, seg_last + 1) if "a1:3181" in [ens[(e + k) % E] for k in range(WQ)])
    assert dec["segments_to_move"] == segs_with and dec["bytes_to_move"] == pytest.approx(want)
    assert "a1:3181" not in {t["bookie_id"] for t in dec["targets"]}
    assert sum(v["segments"] for v in dec["verdicts"]) + dec["segments_without_target"] == segs_with
    add = summary["what_if_add_bookies"]
    assert add["new_rack"] and add["racks_after"] == add["racks_before"] + 1 == 4
    assert add["cluster_after"]["free_bytes"] == add["cluster_before"]["free_bytes"] + 2 * add["disk_bytes_each"]
    dist = summary["capacity"]["distribution"]
    assert dist["ledgers"]["count"] == 6 and dist["ledgers"]["max"] == 6  # a1 holds ledgers 1, 2, 3, 4, 6, 7
    # the plan moves bytes between bookies; only swaps away from the gone bookie add to the live ones
    by_src = pd.read_csv(_base / "out" / "placement_repair_by_source.csv").set_index("source")["bytes"]
    after = summary["capacity_after_bp54"]["used_bytes"]
    assert after["count"] == 6
    assert after["mean"] * 6 == pytest.approx(dist["used_bytes"]["mean"] * 6 + float(by_src.get(GONE, 0.0)))
