"""Benchmark: the offline reports on Spark local[2] against a single-process pandas/pyarrow run of the same
code, on a synthetic snapshot (issue 11: 1M ledgers / 1k bookies, target under 2 minutes on local[2]).

Set-up (not timed): ``autorecovery export --synthetic`` writes the snapshot (1M ledgers, 1k bookies,
40 racks by default; ``--quick``: 100k ledgers).

Timed, in the same run, each from reading the snapshot to the final tables:
* **spark**: ``autorecovery.reports.build.run(..., "all")`` on ``local[2]`` (capacity, placement with a
  what-if and the BP-54 repair plan, risk over racks, zones, regions and rack pairs), session start included;
* **baseline**: one Python process: pyarrow reads the tables, pandas groups segments per ledger, and the
  very same fused partition function (``reports/jobs.py``: one pass, views built once per batch) runs
  over all ledgers, with pandas roll-ups.

Prints seconds, the ratio baseline / spark, and the peak memory of every process of each run: for Spark,
this Python process, the driver JVM (executors are its threads on ``local[N]``) and the Python workers
(``pyspark.daemon`` and its forks), each part's own peak and the peak of their sum; for the baseline,
this process. Not a test.

    .venv/bin/python bench/reports.py           # 1M ledgers
    .venv/bin/python bench/reports.py --quick   # 100k ledgers
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402
import psutil  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from autorecovery.reports import jobs  # noqa: E402
from autorecovery.reports.build import RECENT_DAYS  # noqa: E402
from autorecovery.reports.synthetic import generate  # noqa: E402


class PeakRss:
    """Samples, every 50 ms, the RSS (bytes) of this process and, with ``tree``, of every descendant: the
    Spark driver JVM and its Python workers. ``peak`` is the peak of the sum; ``parts`` the peak of each
    kind (``python driver``, ``jvm``, ``python workers``) on its own."""

    def __init__(self, tree: bool) -> None:
        self.tree = tree
        self.peak = 0
        self.parts: dict[str, int] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            now = {"python driver": me.memory_info().rss}
            if self.tree:
                for c in me.children(recursive=True):
                    try:
                        kind = "jvm" if "java" in c.name() else "python workers"
                        now[kind] = now.get(kind, 0) + c.memory_info().rss
                    except psutil.Error:
                        pass
            self.peak = max(self.peak, sum(now.values()))
            for k, v in now.items():
                self.parts[k] = max(self.parts.get(k, 0), v)
            self._stop.wait(0.05)

    def __enter__(self) -> "PeakRss":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()

    def breakdown(self) -> str:
        """``python driver 210 MB, jvm 1,400 MB, python workers 600 MB`` (each part's own peak)."""
        return ", ".join(f"{k} {v / 2**20:,.0f} MB" for k, v in self.parts.items())


def baseline(snapshot: Path, what_if: dict[str, str]) -> dict:
    """The same partition functions over the whole snapshot in this process; pandas roll-ups."""
    import json

    manifest = json.loads((snapshot / "manifest.json").read_text())
    ledgers = pq.read_table(snapshot / "ledgers.parquet", columns=[
        "ledger_id", "state", "ensemble_size", "write_quorum", "ack_quorum", "last_entry_id", "length", "ctime",
        "managed_ledger"]).to_pandas()
    segs = pq.read_table(snapshot / "segments.parquet").to_pandas()
    segs["seg"] = [{"first_entry_id": f, "last_entry_id": la, "ensemble": e}
                   for f, la, e in zip(segs["first_entry_id"], segs["last_entry_id"], segs["ensemble"])]
    grouped = segs.sort_values(["ledger_id", "first_entry_id"]).groupby("ledger_id")["seg"].apply(list)
    view = ledgers.merge(grouped.rename("segs"), left_on="ledger_id", right_index=True)
    bk = pq.read_table(snapshot / "bookies.parquet").to_pandas()
    batches = [view.iloc[i:i + 10_000] for i in range(0, len(view), 10_000)]
    since = int(manifest["time_ms"]) - RECENT_DAYS * jobs.DAY_MS
    locations = dict(zip(bk["bookie_id"], bk["location"]))
    members = (list(bk.loc[bk["state"] == "writable", "bookie_id"]), list(bk.loc[bk["state"] == "readonly", "bookie_id"]))
    current = dict(manifest.get("placement", {}))
    target = {**current, **what_if}
    location = {r.bookie_id: {"rack": r.rack, "zone": r.zone, "region": r.region} for r in bk.itertuples()}
    fns = {"capacity": jobs.capacity_partition(since),
           "placement": jobs.placement_partition(current, target, locations, members),
           "repair": jobs.repair_partition(target, locations, members),
           "risk": jobs.risk_partition(location, ("rack", "zone", "region"))}
    rows = pd.concat(jobs.fused_partition(fns)(iter(batches)))  # one pass, as the Spark job does
    cap = rows[rows["part"] == "capacity"].groupby("bookie_id")[["used_bytes", "recent_bytes"]].sum()
    ver = rows[rows["part"] == "placement"]
    counts = ver.groupby(["current", "what_if"]).size()
    plan = rows[rows["part"] == "repair"]
    risk = rows[rows["part"] == "risk"].groupby(["kind", "name", "outcome", "namespace"])[
        ["ledgers", "lost_bytes", "heal_bytes"]].sum()
    return {"bookies": len(cap), "verdicts": counts.to_dict(), "swaps": int(plan["fixable"].sum()),
            "risk_rows": len(risk)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k ledgers instead of 1M")
    ap.add_argument("--ledgers", type=int, default=None)
    ap.add_argument("--bookies", type=int, default=1000)
    ap.add_argument("--racks", type=int, default=40)
    ap.add_argument("--master", default="local[2]")
    a = ap.parse_args()
    n = a.ledgers or (100_000 if a.quick else 1_000_000)
    base = Path(tempfile.mkdtemp(prefix="bench-reports-"))
    try:
        t = time.perf_counter()
        generate(base / "snap", ledgers=n, bookies=a.bookies, racks=a.racks)
        print(f"set-up: synthetic snapshot of {n} ledgers, {a.bookies} bookies, {a.racks} racks in "
              f"{time.perf_counter() - t:.1f}s ({sum(f.stat().st_size for f in (base / 'snap').iterdir()) / 1e6:.0f} MB)")
        what_if = {"minNumRacksPerWriteQuorum": "3"}
        from autorecovery.reports.build import run

        with PeakRss(tree=True) as mem:
            t = time.perf_counter()
            summary = run(base / "snap", base / "out", "all", master=a.master, what_if=what_if)
            spark_s = time.perf_counter() - t
        spark_mb, spark_parts = mem.peak / 2**20, mem.breakdown()
        with PeakRss(tree=False) as mem:
            t = time.perf_counter()
            got = baseline(base / "snap", what_if)
            base_s = time.perf_counter() - t
        base_mb = mem.peak / 2**20
        assert got["swaps"] == summary["placement"]["repair"]["swaps"], (got["swaps"], summary["placement"]["repair"])
        print(f"spark {a.master}:      {spark_s:7.1f} s, peak memory {spark_mb:6,.0f} MB, every process "
              f"({spark_parts})")
        print(f"single-process pandas: {base_s:7.1f} s, peak memory {base_mb:6.0f} MB")
        print(f"ratio baseline/spark = {base_s / spark_s:.2f}x; target: spark under 120 s for 1M ledgers: "
              f"{'PASS' if spark_s < 120 or n < 1_000_000 else 'FAIL'}; both found {got['swaps']} BP-54 swaps")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    main()
