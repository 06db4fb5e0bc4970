"""Our image as the Apache Pulsar Helm chart's recovery component (deploy/helm/pulsar-values-autorecovery.yaml,
and the image's bin/ scripts from deploy/pulsar/bin/): the chart's own init-container and container
command lines, run by sh in a directory holding those scripts as bin/, with the environment the chart's
ConfigMap gives the container plus the override's configData: the init container's wait ends once the
cluster is formatted, and the container starts a real daemon against a real ZooKeeper that reads that
environment (its HTTP port is the chart's httpServerPort value), is elected auditor, and stops cleanly on
SIGTERM. The chart's files are not used: its commands and ConfigMap are literals here."""

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
BIN = ROOT / "deploy" / "pulsar" / "bin"

# templates/autorecovery-statefulset.yaml of charts/pulsar 4.7.0, rendered (TLS off): the container's
# command is ["sh", "-c"] with this argument
CHART_ARGS = ('bin/apply-config-from-env.py conf/bookkeeper.conf;\n\n'
              'OPTS="${OPTS} -Dlog4j2.formatMsgNoLookups=true" exec bin/bookkeeper autorecovery\n')
# templates/_autorecovery.tpl "pulsar.autorecovery.init.verify_cluster_id" (TLS off): the init container runs
# ["timeout", "<waitBookkeeperTimeout>", "sh", "-c"] with this argument
CHART_INIT_ARGS = ('bin/apply-config-from-env.py conf/bookkeeper.conf;\nexport BOOKIE_MEM="-Xmx128M";\n'
                   'until timeout 15 bin/bookkeeper shell whatisinstanceid; do\n  sleep 3;\ndone;\n')
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


def test_override_uses_the_charts_own_init_container_and_the_images_scripts():
    ar = override()["autorecovery"]
    assert ar["configData"]["AUTORECOVERY_ENV_KEYS"] == "plain"
    assert ar["configData"]["httpServerHost"] == "0.0.0.0"
    # the chart's init container (shell whatisinstanceid) runs unchanged, no volume is mounted over bin/
    assert "waitBookkeeperTimeout" not in ar and "extraVolumes" not in ar and "extraVolumeMounts" not in ar
    assert sorted(p.name for p in BIN.iterdir()) == ["apply-config-from-env.py", "bookkeeper"]
    assert all(os.access(p, os.X_OK) for p in BIN.iterdir())
    dockerfile = (ROOT / "Dockerfile").read_text()
    workdir = re.findall(r"^WORKDIR (\S+)", dockerfile, re.M)[-1]
    assert re.search(rf"^COPY --chmod=0755 deploy/pulsar/bin/ {re.escape(workdir)}/bin/$", dockerfile, re.M), \
        "the chart calls bin/... from the image's working directory"
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert not [i for i in ignored if i.strip() in ("deploy", "deploy/pulsar", "deploy/pulsar/bin")]
    # every configData key is one the daemon reads (or the switch itself)
    from autorecovery.config import keys as K

    for key in ar["configData"]:
        assert key == "AUTORECOVERY_ENV_KEYS" or K.known(key), key


def chart_workdir(tmp_path: Path) -> Path:
    """A working directory laid out as the image's: bin/ holds deploy/pulsar/bin's scripts."""
    workdir = tmp_path / "work"
    (workdir / "bin").mkdir(parents=True)
    for src in BIN.iterdir():
        (workdir / "bin" / src.name).write_bytes(src.read_bytes())
        (workdir / "bin" / src.name).chmod(0o755)
    return workdir


def chart_env(zk_connect: str, root: str, port: int, tmp_path: Path) -> dict[str, str]:
    """The environment the chart's ConfigMap (plus the override's configData) gives the pod's containers."""
    return {
        **CHART_CONFIGMAP,
        **{k: str(v) for k, v in override()["autorecovery"]["configData"].items()},
        "metadataServiceUri": f"zk+hierarchical://{zk_connect.replace(',', ';')}{root}",
        "httpServerPort": str(port),
        "httpServerHost": "127.0.0.1",
        # the image's /etc/autorecovery/bk_server.conf is the repository's deploy/bk_server.conf
        "AUTORECOVERY_CONF": str(ROOT / "deploy" / "bk_server.conf"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp_path),
    }


def test_the_charts_init_container_waits_for_a_formatted_cluster(cluster_factory, tmp_path):
    cluster = cluster_factory(bookies=1)
    workdir = chart_workdir(tmp_path)
    done = subprocess.run(["timeout", "60", "sh", "-c", CHART_INIT_ARGS], cwd=workdir, capture_output=True, text=True,
                          env=chart_env(cluster.zk_connect, "/ledgers", free_port(), tmp_path), timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.fullmatch(r"Metadata Service Uri: \S+ InstanceId: \S+\n", done.stdout), done.stdout
    # a root that is not formatted keeps it waiting until the chart's timeout (exit 124 of timeout)
    wait = subprocess.run(["timeout", "8", "sh", "-c", CHART_INIT_ARGS], cwd=workdir, capture_output=True, text=True,
                          env=chart_env(cluster.zk_connect, "/not-formatted", free_port(), tmp_path), timeout=60)
    assert wait.returncode == 124 and wait.stdout == "", (wait.returncode, wait.stdout, wait.stderr[-2000:])
    assert "/not-formatted/" in wait.stderr and "not formatted" in wait.stderr, wait.stderr[-2000:]


def test_the_charts_command_starts_an_elected_daemon(cluster_factory, tmp_path):
    cluster = cluster_factory(bookies=1)
    workdir = chart_workdir(tmp_path)
    port = free_port()
    env = chart_env(cluster.zk_connect, "/ledgers", port, tmp_path)
    log = open(tmp_path / "daemon.log", "wb")  # noqa: SIM115 - held while the process/object lives, closed when it stops
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
