"""Benchmark: the offline reports on Spark local[2] against a single-process pandas/pyarrow run of the same
code, on a synthetic snapshot (issue 27: 1M ledgers under 2 minutes on local[2]; 10M completes with the
driver's memory bounded).

Set-up (not timed): ``autorecovery export --synthetic`` writes the snapshot (1M ledgers, 1k bookies,
40 racks by default; ``--quick``: 100k ledgers), or ``--snapshot`` names one made before (10M ledgers
take minutes to generate: make it once, run ``--only spark`` and ``--only baseline`` apart).

Timed, in the same run, each from reading the snapshot to the final tables:
* **spark**: ``autorecovery.reports.build.run(..., "all")`` on ``local[2]`` (capacity, placement with a
  what-if and the BP-54 repair plan, risk over racks, zones, regions and rack pairs, the worst loss of
  1, 2 and 3 bookies), session start included;
* **baseline**: one fresh Python process: pyarrow reads the tables, pandas groups segments per ledger,
  the very same fused partition function (``reports/jobs.py``: one pass, views built once per batch)
  runs over all ledgers, then the same k = 3 pass, with pandas roll-ups. Its RSS is capped
  (``--baseline-cap-gb``, default 10): over the cap it is killed and reported as such.

Prints seconds, the ratio baseline / spark, the 1-minute load average (the machine is shared) and the
peak memory of every process of each run: for Spark, this Python process (the driver's Python), the
driver JVM (executors are its threads on ``local[N]``) and the Python workers (``pyspark.daemon`` and its
forks), each part's own peak and the peak of their sum; for the baseline, its process. Checks that both
find the same BP-54 swaps and the same worst three bookies. Not a test.

    .venv/bin/python bench/reports.py           # 1M ledgers
    .venv/bin/python bench/reports.py --quick   # 100k ledgers
    .venv/bin/python bench/reports.py --snapshot /tmp/s10m --only spark
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
    """Samples, every 50 ms, the RSS (bytes) of process ``pid`` (default: this one) and, with ``tree``, of
    every descendant: the Spark driver JVM and its Python workers. ``peak`` is the peak of the sum;
    ``parts`` the peak of each kind (``python driver``, ``jvm``, ``python workers``) on its own. With
    ``cap_bytes``, a sum over the cap kills ``pid`` (``capped`` is then True)."""

    def __init__(self, tree: bool, pid: int | None = None, cap_bytes: int = 0) -> None:
        self.tree = tree
        self.pid = pid
        self.cap = cap_bytes
        self.capped = False
        self.peak = 0
        self.parts: dict[str, int] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process(self.pid)
        while not self._stop.is_set():
            try:
                now = {"python driver": me.memory_info().rss}
            except psutil.Error:
                return
            if self.tree:
                for c in me.children(recursive=True):
                    try:
                        kind = "jvm" if "java" in c.name() else "python workers"
                        now[kind] = now.get(kind, 0) + c.memory_info().rss
                    except psutil.Error:
                        pass
            self.peak = max(self.peak, sum(now.values()))
            if self.cap and sum(now.values()) > self.cap and not self.capped:
                self.capped = True
                me.kill()
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
    """The same partition functions over the whole snapshot in this process, one partition of 10k-ledger
    batches, then the worst-triple pass (k = 3) as the Spark run does; pandas roll-ups."""
    import json

    from autorecovery.reports import whatif
    from autorecovery.reports.scenarios import K3_CANDIDATES

    manifest = json.loads((snapshot / "manifest.json").read_text())
    ledgers = pq.read_table(snapshot / "ledgers.parquet", columns=[
        "ledger_id", "state", "ensemble_size", "write_quorum", "ack_quorum", "last_entry_id", "length", "ctime",
        "managed_ledger"]).to_pandas()
    segs = pq.read_table(snapshot / "segments.parquet").to_pandas()
    segs["seg"] = [{"first_entry_id": f, "last_entry_id": la, "ensemble": e}
                   for f, la, e in zip(segs["first_entry_id"], segs["last_entry_id"], segs["ensemble"])]
    grouped = segs.sort_values(["ledger_id", "first_entry_id"]).groupby("ledger_id")["seg"].apply(list)
    del segs
    view = ledgers.merge(grouped.rename("segs"), left_on="ledger_id", right_index=True)
    del ledgers, grouped
    markers = pq.read_table(snapshot / "markers.parquet").to_pandas()
    if len(markers):
        marked = markers.groupby("ledger_id")["replicas"].apply(lambda r: sorted({b for x in r for b in x}))
        view = view.merge(marked.rename("marked"), left_on="ledger_id", right_index=True, how="left")
    bk = pq.read_table(snapshot / "bookies.parquet").to_pandas()
    batches = [view.iloc[i:i + 10_000] for i in range(0, len(view), 10_000)]
    since = int(manifest["time_ms"]) - RECENT_DAYS * jobs.DAY_MS
    locations = dict(zip(bk["bookie_id"], bk["location"]))
    members = (list(bk.loc[bk["state"] == "writable", "bookie_id"]), list(bk.loc[bk["state"] == "readonly", "bookie_id"]))
    gone = frozenset(bk.loc[bk["state"] == "gone", "bookie_id"])
    current = dict(manifest.get("placement", {}))
    target = {**current, **what_if}
    location = {r.bookie_id: {"rack": r.rack, "zone": r.zone, "region": r.region} for r in bk.itertuples()}
    fns = {"capacity": jobs.capacity_partition(since),
           "placement": jobs.placement_partition(current, target, locations, members),
           "repair": jobs.repair_partition(target, locations, members),
           "risk": jobs.risk_partition(location, ("rack", "zone", "region"), gone)}
    rows = pd.concat(jobs.fused_partition(fns)(iter(batches)))  # one pass, as the Spark job does
    cap = rows[rows["part"] == "capacity"].groupby("bookie_id")[["used_bytes", "recent_bytes"]].sum()
    ver = rows[rows["part"] == "placement"]
    counts = ver.groupby(["current", "what_if"]).size()
    plan = rows[rows["part"] == "repair"]
    risk = rows[rows["part"] == "risk"].groupby(["kind", "name", "outcome", "namespace"])[
        ["ledgers", "lost_bytes", "heal_bytes"]].sum()
    kl = rows[rows["part"] == "kloss"].groupby(["kind", "name"])[["ledgers", "lost_bytes", "bytes"]].sum()
    singles = {n: (r.ledgers, r.lost_bytes, r.bytes) for (k, n), r in kl.iterrows() if k == "bookie"}
    corr = {tuple(n.split("|", 1)): (r.ledgers, r.lost_bytes, r.bytes) for (k, n), r in kl.iterrows()
            if k == "bookie_pair"}
    live = sorted(bk.loc[bk["state"] != "gone", "bookie_id"])
    pairs = dict(whatif.worst_pairs(singles, corr, K3_CANDIDATES, live))
    tri = pd.concat(list(jobs.triple_partition(list(pairs), gone)(iter(batches))))
    k3 = whatif.worst_triples(pairs, singles, {tuple(r.name.split("|")): (r.ledgers, r.lost_bytes, r.below)
                                               for r in tri.groupby("name", as_index=False).sum().itertuples()}, live, 3)
    return {"bookies": len(cap), "verdicts": {f"{c}|{w}": int(v) for (c, w), v in counts.items()},
            "swaps": int(plan["fixable"].sum()),
            "risk_rows": len(risk), "k3": [list(ids) for ids, _v in k3]}


def _baseline_child(snapshot: Path, what_if: dict[str, str], out: Path) -> None:
    """Run :func:`baseline` in a child process (its memory measured and capped by the parent)."""
    import json

    out.write_text(json.dumps(baseline(snapshot, what_if)))


def run_baseline(snapshot: Path, what_if: dict[str, str], cap_gb: float) -> tuple[float, PeakRss, dict | None]:
    """The baseline in a fresh process (spawned: nothing inherited from Spark): seconds, its memory, the
    result (None when it went over ``cap_gb`` and was killed: ``mem.capped``).

    Raises:
        RuntimeError: the baseline process failed (its traceback is on stderr)."""
    import json
    import multiprocessing

    res = snapshot.parent / "baseline.json"
    res.unlink(missing_ok=True)
    ctx = multiprocessing.get_context("spawn")
    t = time.perf_counter()
    p = ctx.Process(target=_baseline_child, args=(snapshot, what_if, res))
    p.start()
    with PeakRss(tree=False, pid=p.pid, cap_bytes=int(cap_gb * 2**30)) as mem:
        p.join()
    secs = time.perf_counter() - t
    if p.exitcode != 0 and not mem.capped:
        raise RuntimeError(f"the baseline process failed (exit code {p.exitcode}); see its traceback above")
    return secs, mem, json.loads(res.read_text()) if res.exists() and not mem.capped else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k ledgers instead of 1M")
    ap.add_argument("--ledgers", type=int, default=None)
    ap.add_argument("--bookies", type=int, default=1000)
    ap.add_argument("--racks", type=int, default=40)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--snapshot", type=Path, default=None,
                    help="an existing snapshot (e.g. a 10M one made once with `autorecovery export --synthetic`); "
                         "kept, not generated")
    ap.add_argument("--only", choices=("both", "spark", "baseline"), default="both")
    ap.add_argument("--baseline-cap-gb", type=float, default=10.0,
                    help="kill the baseline process when its RSS passes this (GB; the machine is shared)")
    a = ap.parse_args()
    n = a.ledgers or (100_000 if a.quick else 1_000_000)
    base = Path(tempfile.mkdtemp(prefix="bench-reports-"))
    snap = a.snapshot or base / "snap"
    try:
        if a.snapshot is None:
            t = time.perf_counter()
            generate(snap, ledgers=n, bookies=a.bookies, racks=a.racks)
            print(f"set-up: synthetic snapshot of {n} ledgers, {a.bookies} bookies, {a.racks} racks in "
                  f"{time.perf_counter() - t:.1f}s ({sum(f.stat().st_size for f in snap.iterdir()) / 1e6:.0f} MB)")
        else:
            import json

            n = int(json.loads((snap / "manifest.json").read_text())["counts"]["ledgers"])
            print(f"snapshot {snap}: {n} ledgers ({sum(f.stat().st_size for f in snap.iterdir()) / 1e6:.0f} MB)")
        what_if = {"minNumRacksPerWriteQuorum": "3"}
        print(f"load average before: {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} cores", flush=True)
        summary = spark_s = None
        if a.only in ("both", "spark"):
            from autorecovery.reports.build import run

            with PeakRss(tree=True) as mem:
                t = time.perf_counter()
                summary = run(snap, base / "out", "all", master=a.master, what_if=what_if)
                spark_s = time.perf_counter() - t
            print(f"spark {a.master}:      {spark_s:7.1f} s, peak memory {mem.peak / 2**20:6,.0f} MB, every process "
                  f"({mem.breakdown()}); load average now {os.getloadavg()[0]:.1f}", flush=True)
        if a.only in ("both", "baseline"):
            base_s, bmem, got = run_baseline(snap, what_if, a.baseline_cap_gb)
            if got is None:
                print(f"single-process pandas: killed at {bmem.peak / 2**20:6,.0f} MB (over the "
                      f"{a.baseline_cap_gb:g} GB cap) after {base_s:.1f} s")
            else:
                print(f"single-process pandas: {base_s:7.1f} s, peak memory {bmem.peak / 2**20:6,.0f} MB; "
                      f"load average now {os.getloadavg()[0]:.1f}")
                if summary is not None:
                    assert got["swaps"] == summary["placement"]["repair"]["swaps"], (got, summary["placement"])
                    assert got["k3"] == [r["bookies"] for r in summary["what_if_bookies"]["k3"]], got["k3"]
            if got is not None and spark_s is not None:
                print(f"ratio baseline/spark = {base_s / spark_s:.2f}x; both found {got['swaps']} BP-54 swaps "
                      f"and the same worst 3 bookies")
        if spark_s is not None:
            print(f"target: spark under 120 s for 1M ledgers: "
                  f"{'PASS' if spark_s < 120 else 'FAIL'}" if n == 1_000_000 else "")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    main()
