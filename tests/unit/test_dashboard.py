"""The Grafana dashboard (deploy/grafana/dashboards/autorecovery.json) is the generator's output
(autorecovery/deploy/dashboard.py, `make dashboard`) and imports into any Grafana: a datasource input
and variable, every panel and query on ``${datasource}``, unique ids, and every metric selector scoped by
the ``cluster`` and ``instance`` variables. Issue 28."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autorecovery.deploy import dashboard

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / dashboard.OUTPUT
DS_VAR = {"type": "prometheus", "uid": "${datasource}"}
PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "rate", "increase", "irate", "clamp_min", "clamp_max",
                "and", "or", "unless", "bool", "offset", "label_values", "topk", "bottomk"}
# a selector (name and optional {matchers}), or a matcher block / range / string not attached to a name
TOKEN = re.compile(r'(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<sel>\{[^}]*\})?(?P<call>\s*\()?|\{[^}]*\}|\[[^\]]*\]|"[^"]*"')


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric name, matcher block) of every vector selector in ``expr`` ("" when it has none)."""
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    out = []
    for m in TOKEN.finditer(expr):
        name = m.group("name")
        if name and not m.group("call") and name not in PROMQL_WORDS:
            out.append((name, m.group("sel") or ""))
    return out


@pytest.fixture(scope="module")
def dash() -> dict:
    return json.loads(COMMITTED.read_text())


def test_committed_json_is_the_generators_output():
    assert COMMITTED.read_text() == dashboard.render(), "run `make dashboard` and commit the result"
    assert dashboard.main(["--check", "-o", str(COMMITTED)]) == 0


def test_the_check_flags_a_drifted_file(tmp_path, capsys):
    drifted = tmp_path / "autorecovery.json"
    drifted.write_text(dashboard.render().replace('"AutoRecovery"', '"Edited by hand"'))
    assert dashboard.main(["--check", "-o", str(drifted)]) == 1
    assert "make dashboard" in capsys.readouterr().err


def test_datasource_input_and_variables(dash):
    assert [(i["name"], i["type"], i["pluginId"]) for i in dash["__inputs"]] == [("DS_PROMETHEUS", "datasource", "prometheus")]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert len(variables) == len(dash["templating"]["list"]), "variable names must be unique"
    ds = variables["datasource"]
    assert (ds["type"], ds["query"], ds["current"]["value"]) == ("datasource", "prometheus", "${DS_PROMETHEUS}")
    cluster, instance = variables["cluster"], variables["instance"]
    for v in (cluster, instance):
        assert v["type"] == "query" and v["datasource"] == DS_VAR
        assert re.fullmatch(r"label_values\((autorecovery|auditor|replication_worker)_\w+(\{.*\})?, \w+\)", v["query"])
    assert cluster["query"].endswith(", cluster)") and not cluster.get("includeAll")
    assert instance["query"] == 'label_values(autorecovery_auditor_elected{cluster="$cluster"}, instance)'
    assert instance["includeAll"] and instance["multi"] and instance["allValue"] == ".*"


def test_ids_unique_and_every_panel_and_query_on_the_datasource_variable(dash):
    assert dash["uid"] == "autorecovery"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) == len(dashboard.PANELS)
    for p in dash["panels"]:
        assert p["datasource"] == DS_VAR, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert p["targets"] and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DS_VAR, (p["title"], t["refId"])

    # no datasource reference anywhere names a concrete datasource (the old file hard-coded uid "prometheus")
    def refs(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "datasource" and isinstance(v, dict):
                    yield v
                yield from refs(v)
        elif isinstance(node, list):
            for v in node:
                yield from refs(v)

    assert {json.dumps(r, sort_keys=True) for r in refs(dash)} == {json.dumps(DS_VAR, sort_keys=True)}


def test_every_selector_is_scoped_by_cluster_and_instance(dash):
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs
    for expr in exprs:
        sels = selectors(expr)
        assert sels, expr
        for name, sel in sels:
            assert 'cluster="$cluster"' in sel and 'instance=~"$instance"' in sel, f"{name} in {expr!r}"


def test_selector_parser():
    assert selectors('sum by (instance) (rate(a_b{x="1"}[1m])) / (max(c) > 0)') == [("a_b", '{x="1"}'), ("c", "")]


def test_heal_throughput_and_eta_read_successful_copies_only(dash):
    by_title = {p["title"]: p for p in dash["panels"]}
    written = [(p["title"], sel) for p in dash["panels"] for t in p["targets"]
               for name, sel in selectors(t["expr"]) if name.startswith("replication_worker_NUM_BYTES_WRITTEN")]
    assert {title for title, _ in written} == {"Heal throughput", "ETA at the current heal rate"}
    assert all('success="true"' in sel for _, sel in written), written
    (eta,) = by_title["ETA at the current heal rate"]["targets"]
    assert "clamp_min" not in eta["expr"] and eta["expr"].rstrip().endswith("> 0)"), eta["expr"]


def test_scoped_adds_matchers_once_and_keeps_existing_ones():
    assert dashboard.scoped("max(autorecovery_enabled)") == 'max(autorecovery_enabled{cluster="$cluster",instance=~"$instance"})'
    assert dashboard.scoped('rate(replication_worker_X_sum{success="true"}[1m])') == (
        'rate(replication_worker_X_sum{cluster="$cluster",instance=~"$instance",success="true"}[1m])')


def test_shipped_scrape_configs_put_the_cluster_label_the_variables_read():
    """The compose scrape job labels its targets, the Kubernetes ServiceMonitor relabels them: both set
    ``cluster``, the label of the dashboard's ``cluster`` variable."""
    import yaml

    prom = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    groups = [g for job in prom["scrape_configs"] for g in job["static_configs"]]
    assert groups and all(g.get("labels", {}).get("cluster") for g in groups), groups
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "autorecovery-sidecar.yaml").read_text()))
    (sm,) = [d for d in docs if d and d["kind"] == "ServiceMonitor"]
    for ep in sm["spec"]["endpoints"]:
        assert any(r.get("targetLabel") == "cluster" and r.get("replacement") for r in ep.get("relabelings", [])), ep
