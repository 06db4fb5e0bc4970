"""Benchmark: the offline reports on Spark local[2] against a single-process pandas/pyarrow run of the same
code, on synthetic snapshots (issue 27: 1M ledgers under 2 minutes on local[2]; 10M completes with the
driver's memory bounded; how the single-process baseline's time and memory grow from 1M to 10M).

Set-up (not timed): ``autorecovery export --synthetic`` writes the snapshot (1M ledgers, 1k bookies,
40 racks by default; ``--quick``: 100k ledgers), or ``--snapshot`` names one made before; give
``--snapshot`` twice or more (smallest first) for the growth from the first to the last.

Timed, each side in its own fresh process (spawned: nothing shared), from reading the snapshot to the
final tables, per snapshot:
* **spark**: ``autorecovery.reports.build.run(..., "all")`` on ``local[2]`` (capacity, placement with a
  what-if and the BP-54 repair plan, risk over racks, zones, regions and rack pairs, the worst loss of
  1, 2 and 3 bookies), session start included;
* **baseline**: pyarrow reads the tables, pandas groups segments per ledger, the very same fused
  partition function (``reports/jobs.py``: one pass, views built once per batch) runs over all ledgers,
  then the same k = 3 pass, with pandas roll-ups.

Memory: every process of a side is sampled every 50 ms (RSS): for Spark the driver's Python, the driver
JVM (executors are its threads on ``local[N]``; its heap cap ``-Xmx`` is printed) and the Python workers
(``pyspark.daemon`` and its forks), each part's own peak and the peak of their sum; for the baseline its
one process. Each side is capped so a 10M run cannot take the machine down: over ``--baseline-cap-gb``
(default 10) or ``--spark-cap-gb`` (default 8) of summed RSS, or (baseline) past ``--baseline-timeout``
seconds, the side's processes are killed and the run is reported as "did not finish within ..." (the bench goes on). Prints
seconds, the ratio baseline / spark, the load average (the machine may be shared), checks that both
sides find the same BP-54 swaps and the same worst three bookies, and with several snapshots the growth
of time and of every memory figure from the first to the last. Exit code 1 when a run failed, the
findings differ, or Spark did not finish (a baseline over its cap is a result: exit 0). Not a
test.

    .venv/bin/python bench/reports.py           # 1M ledgers
    .venv/bin/python bench/reports.py --quick   # 100k ledgers
    .venv/bin/python bench/reports.py --snapshot /tmp/s1m --snapshot /tmp/s10m            # growth 1M -> 10M
    .venv/bin/python bench/reports.py --snapshot /tmp/s10m --only spark
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd
import psutil
import pyarrow.parquet as pq

from autorecovery.reports import jobs
from autorecovery.reports.build import RECENT_DAYS
from autorecovery.reports.synthetic import generate

MB = 2**20


class PeakRss:
    """Samples, every 50 ms, the RSS (bytes) of process ``pid`` and, with ``tree``, of every descendant:
    the Spark driver JVM and its Python workers. ``peak`` is the peak of the sum; ``parts`` the peak of
    each kind (``root`` — named by ``root`` —, ``jvm``, ``python workers``) on its own; ``xmx`` the JVM's
    ``-Xmx`` option ("" when none). RSS counts pages shared by forked workers in each of them (an upper
    bound), so ``pss_peak`` is also kept: the peak of the processes' summed PSS (shared pages split among
    their sharers), sampled every 2 s as reading it costs more. With ``cap_bytes``, an RSS sum over the cap
    kills ``pid`` and every descendant (``capped`` is then True)."""

    def __init__(self, tree: bool, pid: int, cap_bytes: int = 0, root: str = "python driver") -> None:
        self.tree = tree
        self.pid = pid
        self.cap = cap_bytes
        self.root = root
        self.capped = False
        self.peak = 0
        self.parts: dict[str, int] = {}
        self.xmx = ""
        self.pss_peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            me = psutil.Process(self.pid)
        except psutil.Error:
            return
        tick = 0
        while not self._stop.is_set():
            try:
                now = {self.root: me.memory_info().rss}
                kids = me.children(recursive=True) if self.tree else []
            except psutil.Error:
                return
            if tick % 40 == 0:
                self.pss_peak = max(self.pss_peak, _pss([me, *kids]))
            tick += 1
            for c in kids:
                try:
                    kind = "jvm" if "java" in c.name() else "python workers"
                    now[kind] = now.get(kind, 0) + c.memory_info().rss
                    if kind == "jvm" and not self.xmx:  # the driver JVM's, not spark-submit's launcher's
                        cmd = c.cmdline()
                        if "org.apache.spark.launcher.Main" not in cmd:
                            self.xmx = next((a for a in cmd if a.startswith("-Xmx")), "no -Xmx")
                except psutil.Error:
                    pass
            self.peak = max(self.peak, sum(now.values()))
            for k, v in now.items():
                self.parts[k] = max(self.parts.get(k, 0), v)
            if self.cap and sum(now.values()) > self.cap and not self.capped:
                self.capped = True
                kill_tree(me)
                return
            self._stop.wait(0.05)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()

    def breakdown(self) -> str:
        """``python driver 210 MB, jvm 1,400 MB (-Xmx2g), python workers 600 MB`` (each part's own peak)."""
        return ", ".join(f"{k} {v / MB:,.0f} MB" + (f" ({self.xmx})" if k == "jvm" and self.xmx else "")
                         for k, v in self.parts.items())


def _pss(procs: list[psutil.Process]) -> int:
    """The summed PSS (bytes) of ``procs`` (those gone meanwhile count 0)."""
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error, AttributeError):
            total += p.memory_full_info().pss
    return total


def kill_tree(proc: psutil.Process) -> None:
    """Kill ``proc`` (a process this bench started) and its descendants, children first."""
    try:
        kids = proc.children(recursive=True)
    except psutil.Error:
        kids = []
    for p in [*reversed(kids), proc]:
        with contextlib.suppress(psutil.Error):
            p.kill()


def load_view(snapshot: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """``(manifest, view, bookies)``: pyarrow reads the tables, pandas groups segments per ledger (the rows
    the Spark job's ``ledger_view`` has: one per ledger, ``segs`` sorted, ``marked`` from the markers)."""
    manifest = json.loads((snapshot / "manifest.json").read_text())
    ledgers = pq.read_table(snapshot / "ledgers.parquet", columns=[
        "ledger_id", "state", "ensemble_size", "write_quorum", "ack_quorum", "last_entry_id", "length", "ctime",
        "managed_ledger"]).to_pandas()
    segs = pq.read_table(snapshot / "segments.parquet").to_pandas()
    segs["seg"] = [{"first_entry_id": f, "last_entry_id": la, "ensemble": e}
                   for f, la, e in zip(segs["first_entry_id"], segs["last_entry_id"], segs["ensemble"], strict=True)]
    grouped = segs.sort_values(["ledger_id", "first_entry_id"]).groupby("ledger_id")["seg"].apply(list)
    del segs
    view = ledgers.merge(grouped.rename("segs"), left_on="ledger_id", right_index=True)
    del ledgers, grouped
    markers = pq.read_table(snapshot / "markers.parquet").to_pandas()
    if len(markers):
        marked = markers.groupby("ledger_id")["replicas"].apply(lambda r: sorted({b for x in r for b in x}))
        view = view.merge(marked.rename("marked"), left_on="ledger_id", right_index=True, how="left")
    bk = pq.read_table(snapshot / "bookies.parquet").to_pandas()
    return manifest, view, bk


def fused_parts(manifest: dict, bk: pd.DataFrame, what_if: dict[str, str]) -> dict:
    """The partition functions of the Spark run's fused pass, built as ``build.run`` builds them."""
    since = int(manifest["time_ms"]) - RECENT_DAYS * jobs.DAY_MS
    locations = dict(zip(bk["bookie_id"], bk["location"], strict=True))
    members = (list(bk.loc[bk["state"] == "writable", "bookie_id"]), list(bk.loc[bk["state"] == "readonly", "bookie_id"]))
    gone = frozenset(bk.loc[bk["state"] == "gone", "bookie_id"])
    current = dict(manifest.get("placement", {}))
    target = {**current, **what_if}
    location = {r.bookie_id: {"rack": r.rack, "zone": r.zone, "region": r.region} for r in bk.itertuples()}
    return {"capacity": jobs.capacity_partition(since),
            "placement": jobs.placement_partition(current, target, locations, members),
            "repair": jobs.repair_partition(target, locations, members),
            "risk": jobs.risk_partition(location, ("rack", "zone", "region"), gone)}


def baseline(snapshot: Path, what_if: dict[str, str]) -> dict:
    """The same partition functions over the whole snapshot in this process, one partition of 10k-ledger
    batches, then the worst-triple pass (k = 3) as the Spark run does; pandas roll-ups."""
    from autorecovery.reports import whatif
    from autorecovery.reports.scenarios import K3_CANDIDATES

    manifest, view, bk = load_view(snapshot)
    batches = [view.iloc[i:i + 10_000] for i in range(0, len(view), 10_000)]
    gone = frozenset(bk.loc[bk["state"] == "gone", "bookie_id"])
    fns = fused_parts(manifest, bk, what_if)
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
    # as the Spark run: only the ledgers holding a member of a candidate pair go through the k = 3 pass
    cand = set().union(*pairs) if pairs else set()
    held = [b[b["segs"].map(lambda ss: any(x in cand for s in ss for x in s["ensemble"]))] for b in batches]
    frames = list(jobs.triple_partition(list(pairs), gone)(iter([h for h in held if len(h)])))
    tri = pd.concat(frames) if frames else pd.DataFrame(columns=["name", "ledgers", "lost_bytes", "below"])
    k3 = whatif.worst_triples(pairs, singles, {tuple(r.name.split("|")): (r.ledgers, r.lost_bytes, r.below)
                                               for r in tri.groupby("name", as_index=False).sum().itertuples()}, live, 3)
    return {"bookies": len(cap), "verdicts": {f"{c}|{w}": int(v) for (c, w), v in counts.items()},
            "swaps": int(plan["fixable"].sum()),
            "risk_rows": len(risk), "k3": [list(ids) for ids, _v in k3]}


def _baseline_child(snapshot: Path, what_if: dict[str, str], res: Path) -> None:
    """Run :func:`baseline` in this (child) process; write its seconds and findings to ``res``."""
    t = time.perf_counter()
    got = baseline(snapshot, what_if)
    res.write_text(json.dumps({**got, "secs": time.perf_counter() - t}))


def _spark_child(snapshot: Path, what_if: dict[str, str], master: str, out: Path, res: Path) -> None:
    """Run the reports on Spark from this (child) process, printing each step with its time; write the
    seconds and the findings the baseline must match to ``res``."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from autorecovery.reports.build import run

    t = time.perf_counter()
    summary = run(snapshot, out, "all", master=master, what_if=what_if,
                  progress=lambda s: print(f"    spark +{time.perf_counter() - t:6.1f} s: {s}", flush=True))
    res.write_text(json.dumps({"secs": time.perf_counter() - t, "swaps": summary["placement"]["repair"]["swaps"],
                               "k3": [r["bookies"] for r in summary["what_if_bookies"]["k3"]]}))


@dataclass
class Run:
    """One side on one snapshot: ``secs`` (the child's own time from reading the snapshot to the final
    tables; wall time until killed when it did not finish), its memory, ``got`` (None when it did not
    finish) and ``why`` (empty when it finished)."""

    side: str
    ledgers: int
    secs: float
    mem: PeakRss
    got: dict | None = None
    why: str = ""
    load: float = field(default_factory=lambda: os.getloadavg()[0])


def measure(side: str, target, args: tuple, ledgers: int, cap_gb: float, timeout: float | None) -> Run:
    """Run ``target(*args, res)`` in a fresh (spawned) process, its whole tree sampled and capped at
    ``cap_gb`` (summed RSS) and ``timeout`` seconds; never raises for the child's failure."""
    res = Path(tempfile.mkdtemp(prefix=f"bench-reports-{side}-")) / "result.json"
    p = multiprocessing.get_context("spawn").Process(target=target, args=(*args, res))
    t = time.perf_counter()
    p.start()
    assert p.pid is not None
    with PeakRss(tree=side == "spark", pid=p.pid, cap_bytes=int(cap_gb * 2**30),
                 root="python driver" if side == "spark" else "python") as mem:
        p.join(timeout)
        timed_out = p.is_alive()
        if timed_out:
            with contextlib.suppress(psutil.Error):
                kill_tree(psutil.Process(p.pid))
            p.join()
    wall = time.perf_counter() - t
    try:
        got = json.loads(res.read_text()) if p.exitcode == 0 and res.exists() else None
    finally:
        shutil.rmtree(res.parent, ignore_errors=True)
    if mem.capped:
        why = f"did not finish within the {cap_gb:g} GB cap (killed at {mem.peak / MB:,.0f} MB after {wall:.0f} s)"
    elif timed_out:
        why = f"did not finish within {timeout:g} s (killed; peak memory {mem.peak / MB:,.0f} MB)"
    elif got is None:
        why = f"failed: exit code {p.exitcode} after {wall:.0f} s (its error is above)"
    else:
        why = ""
    return Run(side, ledgers, got["secs"] if got else wall, mem, got, why)


def show(r: Run, master: str) -> None:
    name = f"spark {master}" if r.side == "spark" else "single-process pandas"
    head = f"{name:>22} on {r.ledgers:>10,} ledgers:"
    if r.why:
        print(f"{head} {r.why}; every process: {r.mem.breakdown()}", flush=True)
        return
    print(f"{head} {r.secs:7.1f} s, peak memory {r.mem.peak / MB:6,.0f} MB RSS ({r.mem.pss_peak / MB:,.0f} MB PSS), "
          f"every process ({r.mem.breakdown()}); load average now {r.load:.1f}", flush=True)


def compare(spark: Run, base: Run) -> bool:
    """Print the ratio and whether both sides' findings are equal (swaps, worst three bookies); False when
    they differ."""
    if spark.got is None or base.got is None:
        return True
    same = spark.got["swaps"] == base.got["swaps"] and spark.got["k3"] == base.got["k3"]
    print(f"{'':>22}    ratio baseline/spark = {base.secs / spark.secs:.2f}x; "
          + (f"both found {base.got['swaps']} BP-54 swaps and the same worst 3 bookies" if same else
             f"FINDINGS DIFFER: spark {spark.got['swaps']} swaps, k3 {spark.got['k3']}; "
             f"baseline {base.got['swaps']} swaps, k3 {base.got['k3']}"), flush=True)
    return same


def growth(runs: list[Run]) -> None:
    """Time and every memory figure of a side, first snapshot → last, with the factor."""
    a, b = runs[0], runs[-1]
    print(f"  {a.side}: {a.ledgers:,} -> {b.ledgers:,} ledgers ({b.ledgers / max(a.ledgers, 1):.1f}x)")
    if a.why or b.why:
        print(f"    time {a.secs:.1f} s -> " + (b.why if b.why else f"{b.secs:.1f} s")
              + (f" (first run: {a.why})" if a.why else ""))
    else:
        print(f"    time {a.secs:7.1f} s -> {b.secs:7.1f} s ({b.secs / a.secs:.1f}x)")
    for k in dict.fromkeys([*a.mem.parts, *b.mem.parts, "sum", "PSS sum"]):
        x, y = (r.mem.peak if k == "sum" else r.mem.pss_peak if k == "PSS sum" else r.mem.parts.get(k, 0)
                for r in (a, b))
        cut = " (at the kill)" if b.why else ""
        print(f"    peak {k + ' memory':<24} {x / MB:8,.0f} MB -> {y / MB:8,.0f} MB{cut}"
              + (f" ({y / x:.2f}x)" if x else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k ledgers instead of 1M")
    ap.add_argument("--ledgers", type=int, default=None)
    ap.add_argument("--bookies", type=int, default=1000)
    ap.add_argument("--racks", type=int, default=40)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--snapshot", type=Path, action="append", default=None,
                    help="an existing snapshot (made once with `autorecovery export --synthetic`), kept; "
                         "repeat (smallest first) to print the growth from the first to the last")
    ap.add_argument("--only", choices=("both", "spark", "baseline"), default="both")
    ap.add_argument("--baseline-cap-gb", type=float, default=10.0,
                    help="kill the baseline process when its RSS passes this (GB)")
    ap.add_argument("--spark-cap-gb", type=float, default=8.0,
                    help="kill Spark's processes (driver Python, JVM, workers) when their summed RSS passes this (GB)")
    ap.add_argument("--baseline-timeout", type=float, default=None,
                    help="kill a baseline run that takes longer (seconds; Spark's runs have no time limit)")
    a = ap.parse_args()
    n = a.ledgers or (100_000 if a.quick else 1_000_000)
    base = Path(tempfile.mkdtemp(prefix="bench-reports-"))
    snaps = a.snapshot or [base / "snap"]
    what_if = {"minNumRacksPerWriteQuorum": "3"}
    runs: dict[str, list[Run]] = {"spark": [], "baseline": []}
    bad = False
    try:
        if a.snapshot is None:
            t = time.perf_counter()
            generate(snaps[0], ledgers=n, bookies=a.bookies, racks=a.racks)
            print(f"set-up: synthetic snapshot of {n} ledgers, {a.bookies} bookies, {a.racks} racks in "
                  f"{time.perf_counter() - t:.1f}s ({sum(f.stat().st_size for f in snaps[0].iterdir()) / 1e6:.0f} MB)")
        sizes = []
        for s in snaps:
            sizes.append(int(json.loads((s / "manifest.json").read_text())["counts"]["ledgers"]))
            print(f"snapshot {s}: {sizes[-1]:,} ledgers ({sum(f.stat().st_size for f in s.iterdir()) / 1e6:.0f} MB)")
        print(f"load average before: {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} cores", flush=True)
        for i, (s, size) in enumerate(zip(snaps, sizes, strict=True)):
            if a.only in ("both", "spark"):
                runs["spark"].append(measure("spark", _spark_child, (s, what_if, a.master, base / f"out-{i}"),
                                             size, a.spark_cap_gb, None))
                shutil.rmtree(base / f"out-{i}", ignore_errors=True)
                show(runs["spark"][-1], a.master)
            if a.only in ("both", "baseline"):
                runs["baseline"].append(measure("baseline", _baseline_child, (s, what_if), size,
                                                a.baseline_cap_gb, a.baseline_timeout))
                show(runs["baseline"][-1], a.master)
            if a.only == "both" and not compare(runs["spark"][-1], runs["baseline"][-1]):
                bad = True
            sp = runs["spark"][-1] if runs["spark"] else None
            if sp is not None and size == 1_000_000:
                print(f"{'':>22}    target: spark under 120 s for 1M ledgers: "
                      f"{'PASS' if not sp.why and sp.secs < 120 else 'FAIL'}", flush=True)
        if len(snaps) > 1:
            print("growth, first snapshot -> last:")
            for side in ("spark", "baseline"):
                if runs[side]:
                    growth(runs[side])
        # a baseline over its cap or timeout is a finding; Spark not finishing or a failed run is not
        if bad or any(r.why for r in runs["spark"]) or any(r.why.startswith("failed") for r in runs["baseline"]):
            sys.exit(1)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
