"""docker-compose.yml (issue 14): valid under the compose-spec schema, shaped as operators need
(healthchecks, depends_on conditions, restart policies, shared environment through anchors), and
working: its services replayed as local processes (autorecovery.testing.compose_replay) form a cluster
that survives the loss of a rack with every entry intact."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from autorecovery.testing.compose_replay import ComposeReplay
from test_shell_support import read_all, start_daemon, wait_until, write_ledgers, zk_session

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"  # compose-spec/compose-spec schema/compose-spec.json


def doc() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_file_is_valid_under_the_compose_spec_schema():
    jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(doc())


def test_compose_services_have_health_dependencies_and_restart_policies():
    services = doc()["services"]
    bookies = sorted(n for n in services if n.startswith("bookie-"))
    daemons = sorted(n for n in services if n.startswith("autorecovery-"))
    assert len(bookies) == 6 and len(daemons) == 6, "one autorecovery daemon next to each of 6 bookies"
    assert services["init"]["depends_on"] == {"zk": {"condition": "service_healthy"}}
    assert "--if-absent" in services["init"]["command"], "the init step must be idempotent"
    for b in bookies:
        s = services[b]
        assert s["depends_on"] == {"init": {"condition": "service_completed_successfully"}}
        assert s["restart"] == "unless-stopped" and s["healthcheck"]["test"]
    env_keys = None
    for d in daemons:
        s = services[d]
        n = d.split("-")[1]
        assert s["depends_on"] == {f"bookie-{n}": {"condition": "service_healthy"}}
        assert "/readyz" in " ".join(s["healthcheck"]["test"])
        assert s["restart"] == "unless-stopped"
        assert s["environment"]["BK_bookieId"] == f"bookie-{n}:3181"
        keys = set(s["environment"]) - {"BK_bookieId"}
        env_keys = env_keys or keys
        assert keys == env_keys and "BK_metadataServiceUri" in keys, f"{d} lost the shared environment"
    racks = subprocess.run([str(ROOT / "deploy/compose/racks.sh"), *bookies], capture_output=True, text=True,
                           check=True).stdout.split()
    assert racks == ["/rack1", "/rack2", "/rack3", "/rack1", "/rack2", "/rack3"]


def test_dockerignore_keeps_the_venv_and_git_out_of_the_image():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".venv", ".git", "tests"} <= ignored
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.count("FROM ") == 2, "multi-stage"
    assert "\nUSER bookkeeper" in dockerfile, "runs as a non-root user"


def dockerfile_stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined), one list per ``FROM`` stage."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stages: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def healthcheck_argv() -> list[str]:
    """The exec-form command of the final stage's HEALTHCHECK."""
    (hc,) = [i for i in dockerfile_stages()[-1] if i.startswith("HEALTHCHECK ")]
    return json.loads(hc[hc.index(" CMD ") + 5:])


def test_dockerfile_installs_the_locked_dependencies_before_the_source_and_has_a_healthcheck():
    build, final = dockerfile_stages()
    first = {key: next((n for n, i in enumerate(final) if key in i), None) for key in (
        "COPY requirements/runtime.txt", "--require-hashes -r", "COPY --from=build", "--no-deps", "HEALTHCHECK ")}
    assert None not in first.values(), first
    # the dependency layer depends on the lock only: a source change does not rebuild it
    assert first["COPY requirements/runtime.txt"] < first["--require-hashes -r"] < first["COPY --from=build"] \
        < first["--no-deps"], final
    assert not [i for i in final[:first["COPY --from=build"]] if i.startswith(("COPY", "ADD")) and "requirements/" not in i]
    assert any("--no-deps" in i for i in build if i.startswith("RUN pip wheel")), "the source stage builds our wheel only"
    assert not [i for i in build + final if "grpcio-tools" in i]
    assert "grpcio-tools" not in (ROOT / "requirements" / "runtime.txt").read_text(), "a dev dependency"
    argv = healthcheck_argv()
    assert argv[0] == "python" and "/healthz" in argv[-1], argv  # no curl in python:3.11-slim
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert "requirements" not in ignored and "requirements/runtime.txt" not in ignored


def test_dockerfile_healthcheck_passes_against_a_live_daemon_and_fails_without_one(cluster_factory):
    cluster = cluster_factory(bookies=1)
    port, _ = start_daemon(cluster, 0)
    argv = [sys.executable, *healthcheck_argv()[1:]]
    env = {"BK_httpServerPort": str(port), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    cluster.stop_daemon(0)
    down = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert down.returncode != 0 and "Connection refused" in down.stderr, down.stderr


async def queue_empty(cluster_like) -> bool:
    async with zk_session(cluster_like) as (zk, paths, urm):
        return not await urm.list_marked_ids() and not await zk.get_children(paths.ur_locks)


class _Where:
    """The bits of LocalCluster that the shared helpers use (zk_connect)."""

    def __init__(self, zk_connect: str) -> None:
        self.zk_connect = zk_connect


def test_replayed_compose_cluster_heals_a_rack_loss(zk_server, tmp_path):
    chroot = f"/compose{tmp_path.name[-8:]}"
    zk = f"{zk_server.connect_string}{chroot}"
    replay = ComposeReplay(COMPOSE, tmp_path, zk)
    assert sorted(replay.services) == sorted(["init"] + [f"bookie-{i}" for i in range(1, 7)]
                                             + [f"autorecovery-{i}" for i in range(1, 7)])
    try:
        from kazoo.client import KazooClient

        kz = KazooClient(zk_server.connect_string)
        kz.start(10)
        kz.ensure_path(chroot)
        kz.stop()
        kz.close()
        replay.up()
        for n in replay.order():
            if n != "init":
                replay.wait(n, "service_healthy", 60)
        # the init step is idempotent: running it again on a formatted cluster succeeds
        again = subprocess.run(replay.services["init"].argv, env=replay._env(replay.services["init"]),
                               capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and "already exists" in again.stdout, again.stdout + again.stderr
        where = _Where(zk)
        # the test's client places at random (not rack-aware): WQ = 3 keeps a copy of every entry
        # outside any one rack of two bookies
        ledgers = asyncio.run(write_ledgers(where, 9, 40, E=3, WQ=3, AQ=2, size=512))
        rack1 = {f"{replay.services[f'bookie-{i}'].address}:3181" for i in (1, 4)}
        assert any(set(ens) & rack1 for ens in ledgers.values()), "some ledger has a copy on the rack to lose"
        # rack /rack1 (bookie-1, bookie-4 and their daemons) is shut down
        for n in ("autorecovery-1", "autorecovery-4", "bookie-1", "bookie-4"):
            assert replay.stop(n) == 0, replay.tail(n)
        # the operator skips the 30 s lostBookieRecoveryDelay of the compose config
        trig = subprocess.run([sys.executable, "-m", "autorecovery", "shell", "--zk", zk, "triggeraudit"],
                              capture_output=True, text=True, timeout=60)
        assert trig.returncode == 0, trig.stderr
        wait_until(lambda: asyncio.run(queue_empty(where)) and asyncio.run(no_ledger_on(where, ledgers, {
            f"{replay.services['bookie-1'].address}:3181", f"{replay.services['bookie-4'].address}:3181"})),
            120, 0.5, "the rack's ledgers re-replicated")
        for lid in ledgers:
            assert len(asyncio.run(read_all(where, lid))) == 40, f"ledger {lid}"
    finally:
        replay.down()


async def no_ledger_on(where, ledgers, gone: set[str]) -> bool:
    from autorecovery.zk.ledgers import LedgerStore

    async with zk_session(where) as (zk, paths, _urm):
        store = LedgerStore(zk, paths)
        for lid in ledgers:
            md, _ = await store.read(lid)
            if md.all_bookies() & gone:
                return False
    return True
