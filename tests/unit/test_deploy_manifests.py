"""Kubernetes and systemd deployment files (issue 14): the manifests validate against Kubernetes'
schemas (kubernetes-validate), reference an image built from our Dockerfile and carry a
PodDisruptionBudget, probes and a ServiceMonitor; the bookie container has its journal and ledgers
volumes and no pod-level securityContext changes it (the sidecar's user is set on its own container);
the PrometheusRule holds exactly the rules of deploy/prometheus/rules.yml; the systemd unit passes `systemd-analyze verify`,
scores "OK" or better in `systemd-analyze security --offline`, and its user is created by a
sysusers.d file."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s" / "autorecovery-sidecar.yaml"
PROMETHEUS_RULE = ROOT / "deploy" / "k8s" / "prometheusrule.yaml"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
#: prometheus-operator's kinds: CRDs, no schema in kubernetes-validate (checked by their own tests)
CRD_KINDS = {"ServiceMonitor", "PrometheusRule", "PodMonitor"}
UNIT = ROOT / "deploy" / "systemd" / "autorecovery.service"
SYSUSERS = ROOT / "deploy" / "systemd" / "autorecovery.sysusers.conf"
DROPIN = ROOT / "deploy" / "systemd" / "bookie-maintenance.conf"


def docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(K8S.read_text()) if d]


def validate_all(documents: list[dict]) -> int:
    """Validate every document that is not a prometheus-operator CRD against Kubernetes 1.33's schema
    (strict: an unknown field fails); returns how many were validated."""
    import kubernetes_validate

    checked = 0
    for d in documents:
        if d["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(d, "1.33", strict=True)
        checked += 1
    return checked


def test_k8s_manifests_validate_against_the_kubernetes_schema():
    assert validate_all(docs()) == 4


def test_the_bookie_keeps_its_user_and_has_journal_and_ledgers_volumes():
    sts = next(d for d in docs() if d["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    assert "securityContext" not in pod, "a pod-level securityContext would change the user's bookie"
    bookie = next(c for c in pod["containers"] if c["name"] == "bookie")
    sidecar = next(c for c in pod["containers"] if c["name"] == "autorecovery")
    assert "securityContext" not in bookie
    claims = {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    assert claims == {"journal", "ledgers"}
    mounts = {m["name"]: m["mountPath"] for m in bookie["volumeMounts"]}
    assert set(mounts) == claims | {"hooks"}, "its disks, and the preStop hooks' meeting point"
    env = {e["name"]: e.get("value") for e in bookie["env"]}
    assert env["BK_journalDirectories"] == mounts["journal"] and env["BK_ledgerDirectories"] == mounts["ledgers"]
    # both containers use one bookie id: the sidecar votes for the bookie next to it
    assert env["BK_bookieId"] == next(e["value"] for e in sidecar["env"] if e["name"] == "BK_bookieId")
    sc = sidecar["securityContext"]
    assert sc["runAsUser"] == 10001 and sc["runAsNonRoot"] is True, "the Dockerfile's bookkeeper user"
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]


def test_prometheusrule_holds_exactly_the_rules_of_rules_yml(tmp_path):
    pr = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert pr["apiVersion"] == "monitoring.coreos.com/v1" and pr["kind"] == "PrometheusRule"
    assert pr["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"], \
        "deploy/k8s/prometheusrule.yaml differs from deploy/prometheus/rules.yml: paste rules.yml's groups under spec"
    # and promtool (Debian's prometheus package, `make zookeeper`) accepts them as they stand there
    (tmp_path / "r.yml").write_text(yaml.safe_dump({"groups": pr["spec"]["groups"]}))
    r = subprocess.run(["promtool", "check", "rules", str(tmp_path / "r.yml")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "SUCCESS: 7 rules found" in r.stdout, r.stdout + r.stderr


def test_servicemonitor_sets_the_labels_the_rules_need():
    sm = next(d for d in docs() if d["kind"] == "ServiceMonitor")
    relabel = {r["targetLabel"]: r["replacement"] for r in sm["spec"]["endpoints"][0]["relabelings"]}
    assert relabel["job"] == "autorecovery" and relabel["cluster"]
    assert 'up{job=~"autorecovery|recovery"}' in RULES.read_text()


def test_k8s_sidecar_has_probes_pdb_servicemonitor_and_our_image():
    by_kind = {d["kind"]: d for d in docs()}
    assert {"ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget", "ServiceMonitor"} <= set(by_kind)
    pod = by_kind["StatefulSet"]["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "autorecovery")
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "pip install" not in K8S.read_text(), "there is no such package on PyPI: the image is built here"
    assert re.search(r"built from this repository's Dockerfile", K8S.read_text())
    port = next(p["containerPort"] for p in sidecar["ports"] if p["name"] == "http")
    conf = by_kind["ConfigMap"]["data"]["bk_server.conf"]
    assert f"httpServerPort={port}" in conf
    assert pod["terminationGracePeriodSeconds"] > int(re.search(r"shutdownTimeoutSeconds=(\d+)", conf).group(1))
    assert by_kind["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    sm = by_kind["ServiceMonitor"]["spec"]
    assert sm["selector"]["matchLabels"] == by_kind["Service"]["metadata"]["labels"]
    assert sm["endpoints"][0]["port"] in {p["name"] for p in by_kind["Service"]["spec"]["ports"]}


@pytest.fixture
def systemd_root(tmp_path: Path) -> Path:
    if shutil.which("systemd-analyze") is None:  # pragma: no cover - present on our machines (Debian systemd)
        pytest.skip("systemd-analyze is not installed")
    root = tmp_path / "root"
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc/systemd/system/autorecovery.service")
    exe = root / "opt/autorecovery/venv/bin/autorecovery"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    return root


def test_systemd_unit_verifies_cleanly(systemd_root: Path):
    r = subprocess.run(["systemd-analyze", "verify", f"--root={systemd_root}",
                        "/etc/systemd/system/autorecovery.service"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


def test_systemd_unit_hardening_score_and_user(systemd_root: Path):
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", str(UNIT)], capture_output=True, text=True,
                       timeout=60)
    m = re.search(r"Overall exposure level for autorecovery.service: ([\d.]+) (\w+)", r.stdout)
    assert m, r.stdout[-2000:] + r.stderr
    assert float(m.group(1)) <= 2.0, f"exposure {m.group(1)} {m.group(2)}"
    unit = UNIT.read_text()
    user = re.search(r"^User=(\S+)", unit, re.M).group(1)
    assert re.search(rf"^u {user} ", SYSUSERS.read_text(), re.M), "the unit's user is created by sysusers.d"


def test_k8s_prestop_hooks_open_the_window_from_the_sidecar_and_hold_the_bookie():
    by_kind = {d["kind"]: d for d in docs()}
    pod = by_kind["StatefulSet"]["spec"]["template"]["spec"]
    bookie = next(c for c in pod["containers"] if c["name"] == "bookie")
    sidecar = next(c for c in pod["containers"] if c["name"] == "autorecovery")
    side = " ".join(sidecar["lifecycle"]["preStop"]["exec"]["command"])
    m = re.search(r"autorecovery shell oktostop -c (\S+) -bookieid \"\$BK_bookieId\" --for (\d+) --wait (\d+) "
                  r"--open-window; echo \$\? > /hooks/prestop-done", side)
    assert m, side
    assert m.group(1) == "/etc/autorecovery/bk_server.conf"
    wait_s = int(m.group(3))
    hold = " ".join(bookie["lifecycle"]["preStop"]["exec"]["command"])
    hold_s = int(re.search(r"seq (\d+)", hold).group(1))
    assert "/hooks/prestop-done" in hold and hold_s > wait_s + 10, "the bookie waits out the sidecar's hook"
    for c in (bookie, sidecar):
        assert {"name": "hooks", "mountPath": "/hooks"} in c["volumeMounts"]
    assert any(v["name"] == "hooks" and "emptyDir" in v for v in pod["volumes"])
    conf = by_kind["ConfigMap"]["data"]["bk_server.conf"]
    grace = pod["terminationGracePeriodSeconds"]
    assert grace > hold_s + int(re.search(r"shutdownTimeoutSeconds=(\d+)", conf).group(1))
    assert "lostBookieRecoveryDelay=0" in conf, "planned stops are covered by windows: crashes heal at once"


def test_systemd_bookie_dropin_verifies_and_skips_crashes(systemd_root: Path):
    text = DROPIN.read_text()
    stop = re.search(r"^ExecStop=(.*)$", text, re.M).group(1)
    assert stop.startswith("-") and 'test -n "$MAINPID" || exit 0' in stop
    assert re.search(r"oktostop -c \S+ -bookieid \"\$BOOKIE_ID\" --for \d+ --wait (\d+) --open-window", stop)
    wait_s = int(re.search(r"--wait (\d+)", stop).group(1))
    assert int(re.search(r"^TimeoutStopSec=(\d+)", text, re.M).group(1)) > wait_s + 10
    unit = systemd_root / "etc/systemd/system/bookkeeper.service"
    java = systemd_root / "usr/bin/bookkeeper"
    java.parent.mkdir(parents=True, exist_ok=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    unit.write_text("[Unit]\nDescription=BookKeeper bookie\n[Service]\nExecStart=/usr/bin/bookkeeper bookie\n"
                    "[Install]\nWantedBy=multi-user.target\n")
    d = systemd_root / "etc/systemd/system/bookkeeper.service.d"
    d.mkdir()
    shutil.copy(DROPIN, d / "bookie-maintenance.conf")
    for sh in ("bin/sh", "usr/bin/sh"):
        p = systemd_root / sh
        if not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("#!/bin/sh\n")
            p.chmod(0o755)
    r = subprocess.run(["systemd-analyze", "verify", f"--root={systemd_root}",
                        "/etc/systemd/system/bookkeeper.service"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr
