"""Our Helm chart (deploy/helm/autorecovery), rendered by a real helm (`make helm` builds the pinned
version into .tools/): `helm lint` passes, every rendered document of both modes validates against
Kubernetes' schema (kubernetes-validate, as the plain manifests), the rendered bk_server.conf is one
our loader accepts, the sidecar mode leaves the bookie container as given, the PrometheusRule is
deploy/prometheus/rules.yml, and a bad mode is a one-line error naming the value."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from autorecovery.config.load import load_settings
from test_deploy_manifests import validate_all

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".tools" / "helm"
CHART = ROOT / "deploy" / "helm" / "autorecovery"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
ALL_ON = ["--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true"]


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    assert HELM.exists(), f"{HELM} is missing: run `make helm` (make test does)"
    r = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def render(*args: str) -> list[dict]:
    out = helm("template", "ar", str(CHART), *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kinds(documents: list[dict]) -> dict[str, dict]:
    return {d["kind"]: d for d in documents}


def test_helm_lint_passes():
    r = helm("lint", "--strict", str(CHART), *ALL_ON)
    assert "1 chart(s) linted, 0 chart(s) failed" in r.stdout


@pytest.mark.parametrize("mode, workload", [("deployment", "Deployment"), ("sidecar", "StatefulSet")])
def test_every_rendered_document_validates(mode, workload):
    docs = render("--set", f"mode={mode}", *ALL_ON)
    by = kinds(docs)
    assert set(by) == {"ConfigMap", "Service", workload, "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"}
    assert validate_all(docs) == 4
    # the daemon's container: probes, its own user, the conf mounted; never a pod-level securityContext
    pod = by[workload]["spec"]["template"]["spec"]
    assert "securityContext" not in pod
    daemon = next(c for c in pod["containers"] if c["name"] == "autorecovery")
    assert daemon["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert daemon["securityContext"]["runAsUser"] == 10001
    # the ServiceMonitor selects the Service and sets the labels the alert rules need
    sm = by["ServiceMonitor"]["spec"]
    assert sm["selector"]["matchLabels"].items() <= by["Service"]["metadata"]["labels"].items()
    relabel = {r["targetLabel"]: r["replacement"] for r in sm["endpoints"][0]["relabelings"]}
    assert relabel == {"job": "autorecovery", "cluster": "ar"}
    assert by["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= \
        pod_labels(by[workload]).items()


def pod_labels(workload: dict) -> dict:
    return workload["spec"]["template"]["metadata"]["labels"]


def test_optional_objects_are_off_by_default():
    assert set(kinds(render())) == {"ConfigMap", "Service", "Deployment", "PodDisruptionBudget"}
    assert "PodDisruptionBudget" not in kinds(render("--set", "podDisruptionBudget.enabled=false"))


def test_the_rendered_conf_is_one_the_daemon_accepts(tmp_path):
    conf = kinds(render("--set", "httpPort=9090"))["ConfigMap"]["data"]["bk_server.conf"]
    (tmp_path / "bk_server.conf").write_text(conf)
    s = load_settings(tmp_path / "bk_server.conf", env={})
    assert s.http.port == 9090 and s.http.address == "0.0.0.0"
    assert s.metadata_service_uri == "zk+hierarchical://zookeeper:2181/ledgers"
    deployment = kinds(render("--set", "httpPort=9090"))["Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] == 9090


def test_sidecar_mode_keeps_the_bookie_as_given_and_votes_with_its_id():
    by = kinds(render("--set", "mode=sidecar"))
    sts = by["StatefulSet"]
    pod = sts["spec"]["template"]["spec"]
    bookie = next(c for c in pod["containers"] if c["name"] == "bookie")
    given = yaml.safe_load((CHART / "values.yaml").read_text())["bookie"]["container"]
    assert set(bookie) == set(given) and "securityContext" not in bookie
    assert bookie["image"] == given["image"] and bookie["volumeMounts"] == given["volumeMounts"]
    assert {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]} == {"journal", "ledgers"}
    daemon = next(c for c in pod["containers"] if c["name"] == "autorecovery")
    ids = {c["name"]: next(e["value"] for e in c["env"] if e["name"] == "BK_bookieId") for c in (bookie, daemon)}
    assert ids == {"bookie": "$(POD_NAME).ar-bookie:3181", "autorecovery": "$(POD_NAME).ar-bookie:3181"}
    # the headless Service named in the id gives each pod its DNS name
    assert by["Service"]["metadata"]["name"] == sts["spec"]["serviceName"] == "ar-bookie"
    assert by["Service"]["spec"]["clusterIP"] == "None"


def test_the_prometheusrule_is_rules_yml():
    assert (CHART / "files" / "rules.yml").read_bytes() == RULES.read_bytes(), \
        "deploy/helm/autorecovery/files/rules.yml differs from deploy/prometheus/rules.yml: copy it"
    rule = kinds(render(*ALL_ON))["PrometheusRule"]
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def test_a_bad_mode_is_a_one_line_error_naming_it():
    r = helm("template", "ar", str(CHART), "--set", "mode=daemonset", check=False)
    assert r.returncode != 0
    assert "values: mode=daemonset is not one of deployment, sidecar" in r.stderr.splitlines()[0]
