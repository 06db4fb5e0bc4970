"""Kubernetes and systemd deployment files (issue 14): the manifests validate against Kubernetes'
schemas (kubernetes-validate), reference an image built from our Dockerfile and carry a
PodDisruptionBudget, probes and a ServiceMonitor; the systemd unit passes `systemd-analyze verify`,
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
UNIT = ROOT / "deploy" / "systemd" / "autorecovery.service"
SYSUSERS = ROOT / "deploy" / "systemd" / "autorecovery.sysusers.conf"


def docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(K8S.read_text()) if d]


def test_k8s_manifests_validate_against_the_kubernetes_schema():
    import kubernetes_validate

    checked = 0
    for d in docs():
        if d["kind"] == "ServiceMonitor":  # a CRD: no schema in kubernetes-validate; checked below
            continue
        kubernetes_validate.validate(d, "1.33", strict=True)
        checked += 1
    assert checked == 4


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
    assert pod["securityContext"]["runAsUser"] == 10001, "the Dockerfile's bookkeeper user"
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
