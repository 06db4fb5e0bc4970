"""Where the Spark report's time goes: CPU seconds of every process and Spark's own stage metrics.

Runs ``autorecovery.reports.build.run(snapshot, out, "all")`` (the bench's Spark side: the what-if
``minNumRacksPerWriteQuorum=3``, the worst 1, 2, 3 bookies) in a fresh child process on ``--master``
(``local[2]``), with Spark's UI on a free port so that, before the session stops, its REST API gives each
stage's ``executorRunTime`` and ``executorCpuTime`` (JVM threads) and task count. Meanwhile the child's
process tree is sampled every 0.2 s (psutil): CPU seconds (user + system) of the driver's Python, the JVM
and the Python workers (``pyspark.daemon`` and its forks; each pid's last reading, so a worker that exits
between samples loses at most 0.2 s). On a shared machine compare these CPU seconds, not wall time.

    nice -n 19 .venv/bin/python bench/reports_profile.py --snapshot /tmp/s1m
    nice -n 19 .venv/bin/python bench/reports_profile.py --snapshot /tmp/s1m --conf spark.sql.shuffle.partitions=4

Prints the per-step progress lines (``spark +N s: step``), the stages (slowest first), the number of
Spark jobs, then one line: ``cpu seconds: driver python X, jvm Y, python workers Z, total T; wall W s;
load L``. Not a test.

``--parts`` measures the per-ledger Python alone, without Spark, in this process: the snapshot read as
``bench/reports.py``'s baseline reads it, then each part of the fused pass alone (capacity, placement,
repair, risk; the ledger views built once, as ``jobs.Prepared`` does) and the whole fused pass,
``--repeat`` times; prints the CPU seconds (``time.process_time``) and microseconds per ledger of each,
best of the repeats (the machine may be shared: CPU time, not wall time)::

    nice -n 19 .venv/bin/python bench/reports_profile.py --snapshot /tmp/s20k --parts
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil


def _child(snapshot: Path, out: Path, master: str, conf: dict[str, str], res: Path) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from autorecovery.reports import build
    from autorecovery.reports.spark_io import shuffle_partitions, spark_session

    t = time.perf_counter()
    manifest = json.loads((snapshot / "manifest.json").read_text())
    spark = spark_session(master, conf={"spark.ui.enabled": "true", "spark.ui.port": "0", **conf},
                          log_path=out / "spark.log")
    if "spark.sql.shuffle.partitions" not in conf:
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(manifest)))
    try:
        summary = build.run(snapshot, out, "all", spark=spark, what_if={"minNumRacksPerWriteQuorum": "3"},
                            progress=lambda s: print(f"    spark +{time.perf_counter() - t:6.1f} s: {s}", flush=True))
        secs = time.perf_counter() - t
        base = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"
        stages = json.loads(urllib.request.urlopen(f"{base}/stages", timeout=600).read())
        jobs_ = json.loads(urllib.request.urlopen(f"{base}/jobs", timeout=600).read())
    finally:
        spark.stop()
    res.write_text(json.dumps({"secs": secs, "stages": stages, "jobs": jobs_,
                               "swaps": summary["placement"]["repair"]["swaps"],
                               "k3": [r["bookies"] for r in summary["what_if_bookies"]["k3"]]}))


class CpuTree:
    """Samples the CPU seconds (user + system) of ``pid`` and its descendants, by kind."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.last: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process(self.pid)
        while not self._stop.is_set():
            try:
                procs = [me, *me.children(recursive=True)]
            except psutil.Error:
                return
            for p in procs:
                try:
                    c = p.cpu_times()
                    kind = ("driver python" if p.pid == self.pid else "jvm" if "java" in p.name()
                            else "python workers")
                    self.last[p.pid] = (kind, c.user + c.system)
                except psutil.Error:
                    pass
            self._stop.wait(0.2)

    def by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind, s in self.last.values():
            out[kind] = out.get(kind, 0.0) + s
        return out

    def __enter__(self) -> CpuTree:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def parts_cpu(snapshot: Path, repeat: int) -> None:
    """``--parts``: CPU seconds of each part of the fused pass and of the whole pass, per ledger."""
    from reports import fused_parts, load_view  # bench/reports.py

    from autorecovery.reports import jobs

    manifest, view, bk = load_view(snapshot)
    n = len(view)
    batches = [view.iloc[i:i + 10_000] for i in range(0, len(view), 10_000)]
    fns = fused_parts(manifest, bk, {"minNumRacksPerWriteQuorum": "3"})
    best: dict[str, float] = {}

    def timed(name: str, fn) -> None:
        t = time.process_time()
        fn()
        best[name] = min(best.get(name, float("inf")), time.process_time() - t)

    for _ in range(repeat):
        prepared: list = []
        timed("ledger views", lambda: prepared.extend(jobs.Prepared(b) for b in batches))  # noqa: B023 - run before the loop rebinds it
        for name, fn in fns.items():
            if hasattr(fn, "make"):
                def fold(fn=fn) -> None:
                    step, finish = fn.make()
                    for p in prepared:  # noqa: B023 - run before the loop rebinds it
                        step(p)
                    list(finish())
                timed(name, fold)
            else:
                for p in prepared:
                    getattr(p, "adherence", {}).clear()  # alone: no answer shared with another part
                timed(name, lambda fn=fn: [o for p in prepared for o in fn(iter([p]))])  # noqa: B023 - run before the loop rebinds it
        timed("fused pass (views, every part, typed rows)", lambda: list(jobs.fused_partition(fns)(iter(batches))))
    print(f"{n:,} ledgers; CPU seconds, best of {repeat}:")
    for name, secs in best.items():
        print(f"  {name:<44} {secs:7.2f} s {secs / n * 1e6:8.1f} us/ledger")
    print(f"load average now {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snapshot", type=Path, required=True)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--conf", action="append", default=[], help="key=value, a Spark setting")
    ap.add_argument("--parts", action="store_true", help="the per-ledger Python alone, no Spark (CPU per part)")
    ap.add_argument("--repeat", type=int, default=3, help="with --parts: runs, the best one is printed")
    a = ap.parse_args()
    if a.parts:
        parts_cpu(a.snapshot, a.repeat)
        return
    conf = dict(c.split("=", 1) for c in a.conf)
    tmp = Path(tempfile.mkdtemp(prefix="reports-profile-"))
    res = tmp / "result.json"
    out = tmp / "out"
    out.mkdir()
    p = multiprocessing.get_context("spawn").Process(target=_child, args=(a.snapshot, out, a.master, conf, res))
    t = time.perf_counter()
    p.start()
    assert p.pid is not None
    with CpuTree(p.pid) as cpu:
        p.join()
    wall = time.perf_counter() - t
    if p.exitcode != 0 or not res.exists():
        print(f"failed: exit code {p.exitcode}; Spark's log kept: {out / 'spark.log'}")
        sys.exit(1)
    got = json.loads(res.read_text())
    shutil.rmtree(tmp, ignore_errors=True)
    desc = {j["jobId"]: j.get("description") or j["name"] for j in got["jobs"]}
    stage_job = {s: j["jobId"] for j in got["jobs"] for s in j.get("stageIds", [])}
    print(f"{'stage':>5} {'job':>4} {'tasks':>5} {'run s':>7} {'jvm cpu s':>9}  name")
    for s in sorted(got["stages"], key=lambda s: -s.get("executorRunTime", 0)):
        if s.get("status") != "COMPLETE":
            continue
        print(f"{s['stageId']:>5} {stage_job.get(s['stageId'], -1):>4} {s['numTasks']:>5} "
              f"{s['executorRunTime'] / 1000:7.1f} {s['executorCpuTime'] / 1e9:9.1f}  "
              f"{s['name'][:60]} | {str(desc.get(stage_job.get(s['stageId'])))[:40]}")
    print(f"spark jobs: {len(got['jobs'])}, stages run: {sum(1 for s in got['stages'] if s.get('status') == 'COMPLETE')}")
    run_s = sum(s.get("executorRunTime", 0) for s in got["stages"]) / 1000
    jvm_s = sum(s.get("executorCpuTime", 0) for s in got["stages"]) / 1e9
    k = cpu.by_kind()
    print(f"stages: executorRunTime {run_s:.1f} s, executorCpuTime {jvm_s:.1f} s; findings: {got['swaps']} swaps, "
          f"k3 {got['k3']}")
    print("cpu seconds: " + ", ".join(f"{n} {v:.1f}" for n, v in sorted(k.items()))
          + f", total {sum(k.values()):.1f}; wall {wall:.1f} s (run {got['secs']:.1f} s); load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
