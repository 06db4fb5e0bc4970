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
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return prom, port, log


def test_every_panel_query_returns_data_during_a_heal_and_eta_is_empty_when_idle(cluster_factory, tmp_path):
    cluster = cluster_factory(bookies=4, racks=2)
    ports = [start_daemon(cluster, i, replicationRateByBytes=str(256 * 1024))[0] for i in (0, 1)]
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
        assert label_values(port, label, selector) == [group_cluster := "compose"]
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
        ledgers = asyncio.run(write_ledgers(cluster, 6, 100, E=3, WQ=2, AQ=2, size=4096))
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
        # three more scrapes of the idle state, each with no ETA
        t0 = float(q((BACKLOG, "A"))[0]["value"][0])
        wait_until(lambda: float(q((BACKLOG, "A"))[0]["value"][0]) >= t0 + 3, 30, 0.2, "three more scrapes")
        for ts in (t0, t0 + 1.5, t0 + 3):
            assert api(port, "query", query=queries[(ETA, "A")], time=ts)["result"] == [], f"ETA while idle at {ts}"
        assert values(q((THROUGHPUT, "A"))) == [0.0]

        # the heal: every panel query returns data at some point, and throughput is > 0
        assert ok(shell(cluster, "autorecovery", "-enable")) == "Enabling autorecovery\n"
        seen: set[tuple[str, str]] = set()
        peak: dict[tuple[str, str], float] = {}
        done = {"backlog zero": False}

        def heal_observed() -> bool:
            for key in queries:
                res = q(key)
                if res:
                    seen.add(key)
                    peak[key] = max([peak.get(key, 0.0), *values(res)])
            backlog = values(q((BACKLOG, "A")))
            done["backlog zero"] = bool(backlog) and backlog[0] == 0
            return done["backlog zero"] and seen == set(queries)

        try:
            wait_until(heal_observed, 180, 0.5, "the heal to finish with every panel query returning data")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; no data from {sorted(set(queries) - seen)}; "
                                 f"backlog zero: {done['backlog zero']}") from exc
        assert peak[(THROUGHPUT, "A")] > 0 and peak[(ETA, "A")] > 0
        # once healed: the ETA is 0 (no backlog over a recent rate) or empty
        assert all(v == 0 for v in values(q((ETA, "A")))), q((ETA, "A"))
    finally:
        prom.terminate()
        prom.wait(30)
        log.close()
