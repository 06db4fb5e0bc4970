"""Our image as the Apache Pulsar Helm chart's recovery component (deploy/helm/pulsar-values-autorecovery.yaml
and pulsar-autorecovery-shim.yaml): the chart's own container command line, run by sh in a directory
holding the shim's scripts as bin/, with the environment the chart's ConfigMap gives the container
plus the override's configData, starts a real daemon against a real ZooKeeper that reads that
environment (its HTTP port is the chart's httpServerPort value), is elected auditor, and stops
cleanly on SIGTERM. The chart's files are not used: its command and ConfigMap are literals here."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from autorecovery.testing.zk_server import free_port
from test_shell_support import wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
OVERRIDE = ROOT / "deploy" / "helm" / "pulsar-values-autorecovery.yaml"
SHIM = ROOT / "deploy" / "helm" / "pulsar-autorecovery-shim.yaml"

# templates/autorecovery-statefulset.yaml of charts/pulsar 4.7.0, rendered (TLS off): the container's
# command is ["sh", "-c"] with this argument
CHART_ARGS = ('bin/apply-config-from-env.py conf/bookkeeper.conf;\n\n'
              'OPTS="${OPTS} -Dlog4j2.formatMsgNoLookups=true" exec bin/bookkeeper autorecovery\n')
# the recovery ConfigMap's data with the chart's default values (release "pulsar"); the metadata store is
# pointed at the test's ZooKeeper and the HTTP port at a free one
CHART_CONFIGMAP = {
    "zkServers": "", "zkLedgersRootPath": "",
    "metadataServiceUri": "zk+hierarchical://pulsar-zookeeper:2181/ledgers",
    "zkTimeout": "30000", "httpServerEnabled": "true", "httpServerPort": "8000", "useHostNameAsBookieID": "true",
    "BOOKIE_MEM": "-Xms64m -Xmx128m\n", "PULSAR_PREFIX_useV2WireProtocol": "true",
}


def override() -> dict:
    return yaml.safe_load(OVERRIDE.read_text())


def shim() -> dict:
    return yaml.safe_load(SHIM.read_text())


def test_override_wires_the_shim_and_the_env_convention():
    import kubernetes_validate

    kubernetes_validate.validate(shim(), "1.33", strict=True)
    ar = override()["autorecovery"]
    assert ar["configData"]["AUTORECOVERY_ENV_KEYS"] == "plain"
    assert ar["configData"]["httpServerHost"] == "0.0.0.0"
    assert ar["waitBookkeeperTimeout"] == 0, "the chart's init container calls a shell command we do not have"
    vol = next(v for v in ar["extraVolumes"] if v["name"] == "autorecovery-pulsar-shim")
    assert vol["configMap"]["name"] == shim()["metadata"]["name"] and vol["configMap"]["defaultMode"] == 0o755
    mount = next(m for m in ar["extraVolumeMounts"] if m["name"] == vol["name"])
    workdir = re.findall(r"^WORKDIR (\S+)", (ROOT / "Dockerfile").read_text(), re.M)[-1]
    assert mount["mountPath"] == f"{workdir}/bin", "the chart calls bin/... from the image's working directory"
    assert set(shim()["data"]) == {"apply-config-from-env.py", "bookkeeper"}
    # every configData key is one the daemon reads (or the switch itself)
    from autorecovery.config import keys as K

    for key in ar["configData"]:
        assert key == "AUTORECOVERY_ENV_KEYS" or K.known(key), key


def test_the_charts_command_starts_an_elected_daemon(cluster_factory, tmp_path):
    cluster = cluster_factory(bookies=1)
    workdir = tmp_path / "work"
    (workdir / "bin").mkdir(parents=True)
    for name, text in shim()["data"].items():
        (workdir / "bin" / name).write_text(text)
        (workdir / "bin" / name).chmod(0o755)
    port = free_port()
    env = {
        **CHART_CONFIGMAP,
        **{k: str(v) for k, v in override()["autorecovery"]["configData"].items()},
        "metadataServiceUri": f"zk+hierarchical://{cluster.zk_connect.replace(',', ';')}/ledgers",
        "httpServerPort": str(port),
        "httpServerHost": "127.0.0.1",
        # the image's /etc/autorecovery/bk_server.conf is the repository's deploy/bk_server.conf
        "AUTORECOVERY_CONF": str(ROOT / "deploy" / "bk_server.conf"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp_path),
    }
    log = open(tmp_path / "daemon.log", "wb")
    proc = subprocess.Popen(["sh", "-c", CHART_ARGS], cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        def elected() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                assert proc.poll() is None, (tmp_path / "daemon.log").read_text(errors="replace")[-3000:]
                return False
            return re.search(r"^autorecovery_auditor_elected(\{[^}]*\})? 1(\.0)?$", text, re.M) is not None

        wait_until(elected, 60, 0.2, "the daemon started by the chart's command to be elected auditor")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            assert r.status == 200
        # it is the daemon itself (sh exec'd into it): SIGTERM is its graceful stop
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(40) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()
    # the chart's empty zkServers/zkLedgersRootPath mean "not set": no warning about them
    text = (tmp_path / "daemon.log").read_text(errors="replace")
    assert not re.search(r"(zkServers|zkLedgersRootPath)=\S* is ignored", text), text[-2000:]
