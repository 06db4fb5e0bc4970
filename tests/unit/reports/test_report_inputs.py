"""``autorecovery report`` refuses every bad input on the driver before Spark starts (issue 27): one line
on stderr naming the offending file, column, master or key, exit 2, in well under a second or two (the
old behaviour: a Python traceback; a Java stack trace after 19 s; 211 lines after 71 s; a failure inside
Spark tasks after 39 s)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autorecovery.reports.snapshot import BOOKIES, LEDGERS, MARKERS, SEGMENTS, TableWriter, write_manifest
from autorecovery.reports.input_checks import BadInput, check_master, check_snapshot, check_what_if

ROOT = Path(__file__).resolve().parents[3]
#: the old failures took 19 to 71 s; the checks run before Spark, so a few seconds covers a loaded machine
FAST_S = 8.0


def make_snapshot(path: Path) -> Path:
    path.mkdir(parents=True)
    lw = TableWriter(path / "ledgers.parquet", LEDGERS)
    lw.add({"ledger_id": 1, "state": "CLOSED", "ensemble_size": 2, "write_quorum": 2, "ack_quorum": 2,
            "last_entry_id": 3, "length": 400, "ctime": 1, "digest_type": "CRC32C", "managed_ledger": "",
            "custom_metadata": []})
    lw.close()
    sw = TableWriter(path / "segments.parquet", SEGMENTS)
    sw.add({"ledger_id": 1, "first_entry_id": 0, "last_entry_id": 3, "ensemble": ["a:1", "b:1"]})
    sw.close()
    bw = TableWriter(path / "bookies.parquet", BOOKIES)
    for b, r in (("a:1", "A"), ("b:1", "B")):
        bw.add({"bookie_id": b, "state": "writable", "location": f"/{r}", "rack": r, "zone": "z", "region": "r",
                "free_bytes": 100, "total_bytes": 200})
    bw.close()
    TableWriter(path / "markers.parquet", MARKERS).close()
    write_manifest(path, {"time_ms": 1_700_000_000_000, "instance_id": "t", "counts": {"ledgers": 1},
                          "placement": {"minNumRacksPerWriteQuorum": "2"}, "throttles": {}})
    return path


@pytest.fixture
def snap(tmp_path):
    return make_snapshot(tmp_path / "snap")


def corrupt_manifest(s: Path) -> str:
    (s / "manifest.json").write_text('{"time_ms": ')
    return "manifest.json: not valid JSON"


def manifest_wrong_type(s: Path) -> str:
    (s / "manifest.json").write_text(json.dumps({"time_ms": "yesterday"}))
    return "time_ms 'yesterday'"


def manifest_newer_format(s: Path) -> str:
    (s / "manifest.json").write_text(json.dumps({"format": 99, "time_ms": 1}))
    return "snapshot format 99 is newer"


def truncated_parquet(s: Path) -> str:
    data = (s / "segments.parquet").read_bytes()
    (s / "segments.parquet").write_bytes(data[: len(data) // 2])
    return "segments.parquet: not a readable Parquet file"


def wrong_column_type(s: Path) -> str:
    pq.write_table(pa.table({"ledger_id": pa.array(["x"]), "kind": ["u"], "replicas": [["a"]], "ctime": [0]}),
                   s / "markers.parquet")
    return "markers.parquet: column 'ledger_id' is string, expected int64"


def missing_column(s: Path) -> str:
    t = pq.read_table(s / "bookies.parquet").drop(["free_bytes"])
    pq.write_table(t, s / "bookies.parquet")
    return "bookies.parquet: no column 'free_bytes'"


def missing_table(s: Path) -> str:
    (s / "ledgers.parquet").unlink()
    return "has no ledgers.parquet"


@pytest.mark.parametrize("breaker", [corrupt_manifest, manifest_wrong_type, manifest_newer_format, truncated_parquet,
                                     wrong_column_type, missing_column, missing_table])
def test_bad_snapshot_is_named_in_one_line(snap, breaker):
    want = breaker(snap)
    with pytest.raises(BadInput) as exc:
        check_snapshot(snap)
    assert want in str(exc.value) and "\n" not in str(exc.value)


def test_good_snapshot_passes_and_extra_columns_are_allowed(snap):
    t = pq.read_table(snap / "ledgers.parquet")
    pq.write_table(t.append_column("last_add_confirmed", pa.array([3], pa.int64())), snap / "ledgers.parquet")
    assert check_snapshot(snap)["time_ms"] == 1_700_000_000_000


def test_snapshot_without_the_lac_columns_passes_and_a_wrong_lac_type_is_named(snap):
    t = pq.read_table(snap / "ledgers.parquet")
    pq.write_table(t.drop(["lac", "lac_length"]), snap / "ledgers.parquet")  # written before the LAC columns
    assert check_snapshot(snap)["time_ms"] == 1_700_000_000_000
    pq.write_table(t.drop(["lac"]).set_column(t.schema.get_field_index("lac_length") - 1, "lac_length",
                                              pa.array(["x"], pa.string())), snap / "ledgers.parquet")
    with pytest.raises(BadInput, match="column 'lac_length' is string, expected int64"):
        check_snapshot(snap)


@pytest.mark.parametrize("master", ["local", "local[1]", "local[*]", "local[4,2]", "yarn", "k8s://https://10.0.0.1:6443",
                                    "k8s://kube.example:443"])
def test_master_forms_spark_accepts(master):
    check_master(master)


@pytest.mark.parametrize("master", ["foo", "local[0]", "local[x]", "spark://", "spark://host", "spark://host:99999",
                                    "mesos://h:5050", "local [2]", "yarn-client"])
def test_other_masters_are_refused_at_once(master):
    t0 = time.monotonic()
    with pytest.raises(BadInput, match="--master"):
        check_master(master)
    assert time.monotonic() - t0 < 0.5


def test_spark_master_probe():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        check_master(f"spark://127.0.0.1:{port}")  # something listens: accepted
    finally:
        srv.close()
    with pytest.raises(BadInput, match="no Spark master answers"):
        check_master(f"spark://127.0.0.1:{port}")


@pytest.mark.parametrize("what_if,want", [
    ({"minNumRacksPerWriteQuorun": "3"}, "--what-if minNumRacksPerWriteQuorun: unknown key (did you mean minNumRacksPerWriteQuorum?)"),
    ({"zkTimeout": "3"}, "--what-if zkTimeout: not a placement key"),
    ({"minNumRacksPerWriteQuorum": "three"}, "bad value for minNumRacksPerWriteQuorum: 'three'"),
    ({"enforceMinNumRacksPerWriteQuorum": "maybe"}, "bad value for enforceMinNumRacksPerWriteQuorum"),
    ({"ensemblePlacementPolicy": "org.example.Nope"}, "ensemblePlacementPolicy"),
])
def test_what_if_keys_checked_by_the_key_table(what_if, want):
    with pytest.raises(BadInput) as exc:
        check_what_if(what_if, {"minNumRacksPerWriteQuorum": "2"})
    assert want in str(exc.value) and "\n" not in str(exc.value)


def test_good_what_if_passes():
    assert check_what_if({"minNumRacksPerWriteQuorum": "3"}, {}) == {"minNumRacksPerWriteQuorum": "3"}


def cli(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "autorecovery", "report", "all", *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    return p, time.monotonic() - t0


@pytest.mark.parametrize("case", ["corrupt_manifest", "truncated_parquet", "bad_master", "unreachable_master",
                                  "unknown_what_if", "bad_what_if_value"])
def test_cli_bad_input_one_line_exit_2_fast(snap, tmp_path, case):
    args = ["--snapshot", str(snap), "--out", str(tmp_path / "out")]
    if case == "corrupt_manifest":
        want = corrupt_manifest(snap)
    elif case == "truncated_parquet":
        want = truncated_parquet(snap)
    elif case == "bad_master":
        args += ["--master", "sparkk://h:7077"]
        want = "--master 'sparkk://h:7077': not a Spark master URL"
    elif case == "unreachable_master":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        args += ["--master", f"spark://127.0.0.1:{port}"]
        want = "no Spark master answers"
    elif case == "unknown_what_if":
        args += ["--what-if", "minNumRacksPerWriteQuorun=3"]
        want = "unknown key (did you mean minNumRacksPerWriteQuorum?)"
    else:
        args += ["--what-if", "minNumRacksPerWriteQuorum=x"]
        want = "bad value for minNumRacksPerWriteQuorum"
    p, took = cli(*args)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR: ") and want in lines[0], p.stderr
    assert p.stdout == ""
    assert took < FAST_S
    assert not (tmp_path / "out").exists()  # nothing started



def test_a_written_manifest_carries_the_format_and_a_newer_one_is_refused(snap):
    from autorecovery.reports.snapshot import SNAPSHOT_FORMAT

    doc = json.loads((snap / "manifest.json").read_text())
    assert doc["format"] == SNAPSHOT_FORMAT  # written by write_manifest, not left for readers to assume
    (snap / "manifest.json").write_text(json.dumps({**doc, "format": SNAPSHOT_FORMAT + 1}))
    with pytest.raises(BadInput, match=f"snapshot format {SNAPSHOT_FORMAT + 1} is newer"):
        check_snapshot(snap)
