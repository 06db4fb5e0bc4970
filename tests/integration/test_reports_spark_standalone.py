"""The report on a real Spark standalone cluster: a master and a worker started as processes on 127.0.0.1
from the installed pyspark (``spark-class`` with ``SPARK_HOME`` set to the pyspark package), the Python
environment shipped to the executors as a packed venv in ``spark.archives`` (reports/pyenv.py), the
summary equal to the ``local[*]`` one, and the executors running the shipped interpreter, not the
driver's ``sys.executable``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from test_reports_spark import make_snapshot

from autorecovery.reports import pyenv
from autorecovery.testing.zk_server import free_port

pytestmark = pytest.mark.integration


def report(snap: Path, out: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autorecovery", "report", "all", "--snapshot", str(snap),
                           "--out", str(out), "--what-if", "minNumRacksPerWriteQuorum=3", *extra],
                          env=env, capture_output=True, text=True, timeout=280)


def wait_workers(ui_port: int, n: int, procs: list[subprocess.Popen], deadline_s: float = 120.0) -> None:
    """Until the master's status page lists ``n`` ALIVE workers (an external JVM: polled with a deadline)."""
    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        for p in procs:
            assert p.poll() is None, f"{p.args[1]} exited with {p.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
                last = json.loads(r.read())
            if sum(1 for w in last.get("workers", []) if w.get("state") == "ALIVE") >= n:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"standalone cluster did not get {n} workers: {last}")


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process group we started, then SIGKILL what is left after 20 s."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("env") / "autorecovery-env.tar.gz"
    assert pyenv.main([str(out)]) == 0
    return out


def test_packed_environment_holds_the_package_and_its_requirements_not_the_checkout(packed):
    with tarfile.open(packed) as tar:
        names = set(tar.getnames())
        py = tar.getmember("bin/python")
    site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    assert py.issym() and Path(py.linkname).is_absolute()
    assert "pyvenv.cfg" in names
    for must in ("autorecovery/reports/jobs.py", "autorecovery/reports/templates/report.html.j2",
                 "pandas/__init__.py", "pyarrow/__init__.py", "numpy/__init__.py"):
        assert f"{site}/{must}" in names, must
    # no editable finder pointing back at this checkout, no jars, no test-only tools
    assert not [n for n in names if "__editable__" in n or "/pyspark/jars/" in n or n.startswith(f"{site}/mypy/")]


def test_standalone_cluster_with_a_shipped_venv_gives_the_local_report(packed, tmp_path):
    snap = tmp_path / "snap"
    make_snapshot(snap)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update({"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": pyenv.spark_home(), "SPARK_LOG_DIR": str(tmp_path)})
    local = report(snap, tmp_path / "local", env, "--master", "local[*]")
    assert local.returncode == 0, local.stderr[-3000:]
    spark_class = str(Path(pyenv.spark_home()) / "bin" / "spark-class")
    port, ui = free_port(), free_port()
    procs: list[subprocess.Popen] = []
    logs = contextlib.ExitStack()  # the children's log files, closed once they are stopped
    try:
        procs.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                       "--port", str(port), "--webui-port", str(ui)], env=env,
                                      stdout=logs.enter_context(open(tmp_path / "master.log", "w")),  # noqa: SIM115 - closed by logs
                                      stderr=subprocess.STDOUT,
                                      start_new_session=True))
        procs.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker",
                                       f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--cores", "2",
                                       "--memory", "1g", "--webui-port", str(free_port()),
                                       "--work-dir", str(tmp_path / "work")], env=env,
                                      stdout=logs.enter_context(open(tmp_path / "worker.log", "w")),  # noqa: SIM115 - closed by logs
                                      stderr=subprocess.STDOUT,
                                      start_new_session=True))
        wait_workers(ui, 1, procs)
        out = tmp_path / "cluster"
        r = report(snap, out, env, "--master", f"spark://127.0.0.1:{port}",
                   "--conf", f"spark.archives={packed}#environment",
                   "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2")
        assert r.returncode == 0, r.stderr[-3000:] + (out / "spark.log").read_text()[-3000:]
    finally:
        stop(procs)
        logs.close()
    assert all(p.returncode is not None for p in procs)
    # the executors ran the archive's interpreter, unpacked in their work directory, and imported the
    # package from it, not from this checkout nor through the driver's interpreter path
    env_doc = json.loads((out / "spark_env.json").read_text())
    assert env_doc["executors"], env_doc
    work = str((tmp_path / "work").resolve())
    for ex in env_doc["executors"]:
        assert ex["python"].startswith(work) and ex["python"].endswith("/environment/bin/python"), ex
        assert ex["python"] != sys.executable
        assert ex["autorecovery"].startswith(ex["prefix"]) and ex["prefix"].startswith(work), ex
    for name in ("risk_domains", "capacity_bookies", "capacity_rack", "placement_verdicts"):
        a = pd.read_csv(tmp_path / "local" / f"{name}.csv")
        b = pd.read_csv(out / f"{name}.csv")
        keys = list(a.columns[:2])
        pd.testing.assert_frame_equal(a.sort_values(keys).reset_index(drop=True),
                                      b.sort_values(keys).reset_index(drop=True), check_exact=False)
    sa = json.loads((tmp_path / "local" / "summary.json").read_text())
    sb = json.loads((out / "summary.json").read_text())
    for sx in (sa, sb):
        sx.pop("snapshot")  # the path of the snapshot read; the plan is seeded per segment, so all else is equal
    assert differing(sa, sb) == []


def differing(a, b, path: str = "") -> list[str]:
    """The dotted paths where two JSON documents differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(set(a) | set(b)) for p in differing(a.get(k), b.get(k), f"{path}.{k}")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]
