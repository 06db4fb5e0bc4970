"""The generated Grafana dashboard against a live scrape (issue 28): a real Prometheus (Debian's package)
scrapes two live daemons through the committed scrape config (whose ``cluster`` label the dashboard's
variables read); every panel query, with the template variables substituted as Grafana does, returns
data during a heal, and the ETA panel is empty while nothing is copying (AutoRecovery disabled with a
backlog) and empty or 0 once the backlog is gone."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from autorecovery.deploy import dashboard
from autorecovery.testing.zk_server import free_port
from test_shell_support import ok, shell, start_daemon, wait_until, write_ledgers, zk_session

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PROM_CONF = ROOT / "deploy" / "prometheus" / "prometheus.yml"
ETA = "ETA at the current heal rate"
BACKLOG = "Bytes left to copy"
THROUGHPUT = "Heal throughput"


def api(port: int, path: str, **params) -> object:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(params, doseq=True)
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return doc["data"]


def label_values(port: int, label: str, match: str) -> list[str]:
    """Grafana's ``label_values(match, label)`` for Prometheus: the series API's label values."""
    return sorted(api(port, f"label/{label}/values", **{"match[]": match}))


def variable_query(var: dict) -> tuple[str, str]:
    """(metric selector, label) of a ``label_values(<selector>, <label>)`` variable query."""
    body = var["query"].removeprefix("label_values(").removesuffix(")")
    selector, label = body.rsplit(",", 1)
    return selector.strip(), label.strip()


def values(result: list) -> list[float]:
    return [float(r["value"][1]) for r in result]


def now(port: int) -> float:
    """Prometheus's clock (``time()``), s."""
    return float(api(port, "query", query="time()")["result"][1])


def range_values(port: int, expr: str, start: float, end: float) -> list[float]:
    """Every value of every series of ``expr`` over [start, end] at a 1 s step (a panel's range query)."""
    res = api(port, "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step="1")["result"]
    return [float(v) for series in res for _, v in series["values"]]


def start_prometheus(tmp_path: Path, ports: list[int]) -> tuple[subprocess.Popen, int, object]:
    """Prometheus scraping the daemons every second with the committed scrape job (its target labels kept)."""
    conf = yaml.safe_load(PROM_CONF.read_text())
    conf["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    conf.pop("rule_files", None)
    (job,) = conf["scrape_configs"]
    (group,) = job["static_configs"]
    group["targets"] = [f"127.0.0.1:{p}" for p in ports]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(conf))
    port = free_port()
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - held while the process/object lives, closed when it stops
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return prom, port, log


def test_every_panel_query_returns_data_during_a_heal_and_eta_is_empty_when_idle(cluster_factory, tmp_path):
    cluster = cluster_factory(bookies=4, racks=2)
    # one ledger at a time per daemon: ledgers sharing a daemon's throttle all finish together at the end
    # of the heal, and the copy-rate series (observed per completed copy) would rise only then
    ports = [start_daemon(cluster, i, replicationRateByBytes=str(128 * 1024),
                          replicationWorkerConcurrentLedgers="1")[0] for i in (0, 1)]
    dash = json.loads((ROOT / dashboard.OUTPUT).read_text())
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    prom, port, log = start_prometheus(tmp_path, ports)
    try:
        def up_both() -> bool:
            try:
                return len(api(port, "query", query="up == 1")["result"]) == 2
            except OSError:
                return False

        wait_until(up_both, 60, 0.2, "Prometheus scraping both daemons")
        # the variables, resolved as Grafana does: the committed scrape config's cluster label, and
        # both daemons of that cluster
        selector, label = variable_query(variables["cluster"])
        (group,) = yaml.safe_load(PROM_CONF.read_text())["scrape_configs"][0]["static_configs"]
        group_cluster = group["labels"]["cluster"]
        assert label_values(port, label, selector) == [group_cluster]
        selector, label = variable_query(variables["instance"])
        selector = selector.replace("$cluster", group_cluster)
        assert label_values(port, label, selector) == sorted(f"127.0.0.1:{p}" for p in ports)
        # instance = All (the variable's default): its allValue
        subst = {"$cluster": group_cluster, "$instance": variables["instance"]["allValue"]}

        def expr_of(t: dict) -> str:
            e = t["expr"]
            for k, v in subst.items():
                e = e.replace(k, v)
            assert "$" not in e, e
            return e

        queries = {(p["title"], t["refId"]): expr_of(t) for p in dash["panels"] for t in p["targets"]}

        def q(key: tuple[str, str]) -> list:
            return api(port, "query", query=queries[key])["result"]

        # idle with a backlog: AutoRecovery disabled, a bookie lost and its ledgers marked (what the
        # auditor does once enabled); nothing copies, so there is no ETA (the old panel showed the
        # backlog in seconds: backlog / clamp_min(rate, 1))
        # enough to copy that the heal spans several scrapes at the throttle (about 9 ledgers of 270 KiB
        # at 2 × 128 KiB/s): with 6 ledgers the heal could end within two scrapes on a loaded machine,
        # leaving no evaluation where both the backlog and the copy rate were above 0 (CI, 2465397)
        ledgers = asyncio.run(write_ledgers(cluster, 12, 100, E=3, WQ=2, AQ=2, size=4096))
        victim = 3
        vid = cluster.bookie_id(victim)
        hit = [lid for lid, ens in ledgers.items() if vid in ens]
        assert hit
        assert ok(shell(cluster, "autorecovery", "-disable")) == "Disabling autorecovery\n"
        cluster.kill_bookie(victim, signal.SIGTERM)

        async def mark() -> None:
            async with zk_session(cluster) as (_zk, _paths, urm):
                for lid in hit:
                    await urm.mark_underreplicated(lid, [vid])

        asyncio.run(mark())
        wait_until(lambda: sum(values(q((BACKLOG, "A")))) > 0, 60, 0.2, "the backlog to show while disabled")
        idle_from = now(port)
        wait_until(lambda: now(port) >= idle_from + 3, 30, 0.2, "three more scrapes of the idle state")
        idle_to = now(port)
        assert min(range_values(port, queries[(BACKLOG, "A")], idle_from, idle_to)) > 0
        assert range_values(port, queries[(ETA, "A")], idle_from, idle_to) == [], "an ETA while nothing copies"
        assert set(range_values(port, queries[(THROUGHPUT, "A")], idle_from, idle_to)) == {0.0}

        # the heal, evaluated as Grafana draws the panels (range queries at a 1 s step over its span):
        # every panel query returns data, throughput and ETA above 0 while copying
        heal_from = now(port)
        assert ok(shell(cluster, "autorecovery", "-enable")) == "Enabling autorecovery\n"
        wait_until(lambda: values(q((BACKLOG, "A"))) == [0.0], 180, 0.5, "the backlog to return to 0")
        heal_to = now(port)
        assert heal_to - heal_from >= 4, f"the heal took {heal_to - heal_from:.1f} s: too short to show an ETA"
        got = {key: range_values(port, expr, heal_from, heal_to) for key, expr in queries.items()}
        assert not [k for k, v in got.items() if not v], f"no data during the heal: {[k for k, v in got.items() if not v]}"
        assert max(got[(THROUGHPUT, "A")]) > 0 and max(got[(THROUGHPUT, "B")]) > 0
        assert max(got[(ETA, "A")]) > 0 and max(got[(BACKLOG, "A")]) > 0
        # once healed: the ETA is 0 (no backlog over a recent rate) or empty
        assert all(v == 0 for v in values(q((ETA, "A")))), q((ETA, "A"))
    finally:
        prom.terminate()
        prom.wait(30)
        log.close()
