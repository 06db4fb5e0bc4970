"""Monitoring as shipped (issue 14): the alert rules pass promtool's checks and unit tests (series of
two clusters: each alert fires for the broken cluster only), every rule aggregates by (cluster), the
Alertmanager example passes amtool's check and routes each severity where it says, every metric the
rules and the Grafana dashboard name is exported by a live daemon, and a real Prometheus (Debian's
package) scraping two live daemons sees the under-replication backlog rise after a bookie is killed
and return to 0 once healed."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.testing.zk_server import free_port
from test_shell_support import start_daemon, wait_until, write_ledgers

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "autorecovery.json"

PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "rate", "increase", "irate", "absent", "clamp_min",
                "clamp_max", "by", "without", "on", "ignoring", "and", "or", "unless", "group_left",
                "group_right", "bool", "offset", "max_over_time", "min_over_time", "avg_over_time", "humanize",
                "topk", "bottomk", "histogram_quantile", "time", "vector", "scalar", "label_replace"}


#: series Prometheus makes itself for every target (not exported by a daemon)
SYNTHETIC = {"up"}


def metric_names(expr: str) -> set[str]:
    """Metric names an expression reads (label matchers, ranges, strings and functions removed)."""
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {n for n in names if n not in PROMQL_WORDS | SYNTHETIC and not re.fullmatch(r"\d+[smhd]?", n)}


def shipped_expressions() -> list[str]:
    rules = yaml.safe_load((PROM / "rules.yml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    dash = json.loads(DASHBOARD.read_text())
    exprs += [t["expr"] for p in dash["panels"] for t in p["targets"]]
    return exprs


def test_promtool_checks_and_unit_tests_the_rules():
    for args in (["check", "rules", "rules.yml"], ["test", "rules", "rules_test.yml"],
                 ["check", "config", "prometheus.yml"]):
        r = subprocess.run(["promtool", *args], cwd=PROM, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"promtool {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    assert "SUCCESS" in subprocess.run(["promtool", "test", "rules", "rules_test.yml"], cwd=PROM,
                                       capture_output=True, text=True).stdout


def test_every_rule_aggregates_by_cluster():
    rules = [r for g in yaml.safe_load((PROM / "rules.yml").read_text())["groups"] for r in g["rules"]]
    assert len(rules) == 7
    for r in rules:
        expr = " ".join(r["expr"].split())
        # every aggregation keeps the cluster label, and every vector match is on it
        aggs = re.findall(r"\b(sum|max|min|count|avg)\s*(by\s*\(([^)]*)\))?\s*\(", expr)
        assert aggs, f"{r['alert']}: no aggregation"
        for op, by, labels in aggs:
            assert by and "cluster" in [x.strip() for x in labels.split(",")], f"{r['alert']}: {op} without by (cluster)"
        for labels in re.findall(r"\bon\s*\(([^)]*)\)", expr):
            assert "cluster" in [x.strip() for x in labels.split(",")], f"{r['alert']}: on ({labels}) without cluster"
        assert "{{ $labels.cluster }}" in r["annotations"]["summary"], r["alert"]
    # the test file proves it with two clusters for every alert
    tests = yaml.safe_load((PROM / "rules_test.yml").read_text())["tests"]
    for t in tests:
        clusters = {re.search(r'cluster="([^"]+)"', s["series"]).group(1) for s in t["input_series"]}
        assert len(clusters) >= 2, t["alert_rule_test"][0]["alertname"]
    assert tests[0]["alert_rule_test"][0]["alertname"] == "AutoRecoveryNoAuditor"
    covered = {a["alertname"] for t in tests for a in t["alert_rule_test"] if a["exp_alerts"]}
    assert covered == {r["alert"] for r in rules}


def test_alertmanager_example_checks_and_routes_by_severity():
    conf = PROM / "alertmanager.yml"
    r = subprocess.run(["amtool", "check-config", str(conf)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    doc = yaml.safe_load(conf.read_text())
    assert doc["route"]["group_by"][0] == "cluster"
    severities = {lab["labels"]["severity"] for g in yaml.safe_load((PROM / "rules.yml").read_text())["groups"]
                  for lab in g["rules"]}
    assert severities == {"critical", "warning"}
    routed = {}
    for sev in sorted(severities):
        r = subprocess.run(["amtool", "config", "routes", "test", f"--config.file={conf}", f"severity={sev}",
                            "cluster=east", "alertname=AutoRecoveryNoAuditor"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        routed[sev] = r.stdout.strip()
    assert routed == {"critical": "bookkeeper-pager", "warning": "bookkeeper-chat"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("prom"), bookies=4, racks=2).up()
    yield c
    c.down()


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def exported(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def prom_query(port: int, q: str):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def test_prometheus_scrapes_live_daemons_and_the_backlog_returns_to_zero(cluster, tmp_path):
    ports = [start_daemon(cluster, i, replicationRateByBytes=str(256 * 1024))[0] for i in (0, 1)]
    # every metric the rules and the dashboard read is exported (auditor-only gauges by the auditor,
    # 0 elsewhere: the union over both daemons must name them all)
    seen = exported(scrape(ports[0])) | exported(scrape(ports[1]))
    wanted = set().union(*(metric_names(e) for e in shipped_expressions()))
    missing = sorted(n for n in wanted if n not in seen)
    assert not missing, f"metrics named by rules/dashboard but not exported: {missing}"
    # every family has # HELP (promtool's lint; its "_total" suffix advice is not taken: upstream's
    # counter names are kept as upstream's dashboards read them)
    for p in ports:
        text = scrape(p)
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                              timeout=60)
        assert "no help text" not in lint.stdout + lint.stderr, lint.stdout + lint.stderr
        assert text.count("# HELP ") == text.count("# TYPE ") > 20
    # a real Prometheus with our rules, scraping both daemons every second
    conf = yaml.safe_load((PROM / "prometheus.yml").read_text())
    conf["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    conf["rule_files"] = [str(PROM / "rules.yml")]
    conf["scrape_configs"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{p}" for p in ports],
                                                     "labels": {"cluster": "local"}}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(conf))
    port = free_port()
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - held while the process/object lives, closed when it stops
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def up_both() -> bool:
            try:
                return len([r for r in prom_query(port, "up == 1")]) == 2
            except OSError:
                return False

        wait_until(up_both, 60, 0.2, "Prometheus scraping both daemons")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=10) as r:
            groups = json.loads(r.read())["data"]["groups"]
        assert {g["name"] for g in groups} == {"autorecovery"}
        assert prom_query(port, "sum(autorecovery_auditor_elected)")[0]["value"][1] == "1"
        # the NoAuditor expression itself, on live series: empty (the local cluster has its auditor)
        no_auditor = next(r for g in groups for r in g["rules"] if r["name"] == "AutoRecoveryNoAuditor")
        assert prom_query(port, no_auditor["query"]) == []
        assert prom_query(port, 'count by (cluster) (up{job=~"autorecovery|recovery"})')[0]["metric"] == {"cluster": "local"}
        ledgers = asyncio.run(write_ledgers(cluster, 6, 100, E=3, WQ=2, AQ=2, size=4096))
        victim = 3
        assert any(cluster.bookie_id(victim) in ens for ens in ledgers.values())
        cluster.kill_bookie(victim, signal.SIGTERM)
        levels: list[float] = []

        def backlog() -> float:
            res = prom_query(port, "max(autorecovery_underreplicated_ledgers)")
            v = float(res[0]["value"][1]) if res else float("nan")
            levels.append(v)
            return v

        wait_until(lambda: backlog() > 0, 60, 0.2, "the backlog to show in Prometheus")
        wait_until(lambda: backlog() == 0, 120, 0.5, "the backlog to return to 0 in Prometheus")
        assert max(levels) >= 1
    finally:
        prom.terminate()
        prom.wait(30)
        log.close()
        cluster.start_bookie(victim)
