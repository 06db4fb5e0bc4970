"""``autorecovery run`` as a process: a bk_server.conf with upstream keys (plus BK_ env and Pulsar
aliases) drives it; an unknown key refuses the start (exit 2) with "did you mean", as a bad value does
(exit 2 naming key and value); upstream's httpServerHost is the bind address;
SIGINT stops it cleanly; SIGTERM while copying releases locks and the vote, exits 0 within the bound
and leaves no half-written metadata."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from autorecovery.zk.bridge import NoNodeError
from autorecovery.aio import wait_for

from autorecovery.ledger.striping import entries_on_index
from autorecovery.rpc.transport import BookieClient
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.zk.election import sorted_votes
from test_shell_support import (
    FAST,
    READY_RE,
    arun,
    cli,
    metadata,
    read_all,
    wait_unregistered,
    wait_until,
    write_ledgers,
    zk_session,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("daemon"), bookies=4, racks=2).up()
    yield c
    c.down()


class Proc:
    """One ``python -m autorecovery run`` child with its output in a file."""

    def __init__(self, base: Path, name: str, args: list[str], env: dict | None = None) -> None:
        self.out = base / f"{name}.out"
        self.f = open(self.out, "wb")  # noqa: SIM115 - held while the process/object lives, closed when it stops
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("BK_")}
        full_env.update(env or {})
        self.p = subprocess.Popen([sys.executable, "-m", "autorecovery", "run", *args], stdout=self.f,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env,
                                  start_new_session=True)

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = 30.0) -> int:
        wait_until(lambda: READY_RE.search(self.text()) or self.p.poll() is not None, timeout_s, 0.05,
                   "AUTORECOVERY_READY")
        m = READY_RE.search(self.text())
        assert m, self.text()[-3000:]
        return int(m.group(3))

    def stop(self, sig=signal.SIGTERM, timeout_s: float = 30.0) -> tuple[int, float]:
        t0 = time.monotonic()
        self.p.send_signal(sig)
        code = self.p.wait(timeout_s)
        return code, time.monotonic() - t0

    def kill(self) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(10)
        self.f.close()


@pytest.fixture
def procs():
    made: list[Proc] = []
    yield made
    for p in made:
        p.kill()


def write_conf(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def get_json(port: int, path: str):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:  # /readyz answers 503 with a JSON body while not ready
        return json.loads(e.read())


async def votes_and_locks(cluster):
    async with zk_session(cluster) as (zk, paths, _urm):
        try:
            votes = sorted_votes(await zk.get_children(paths.auditor_election))
        except NoNodeError:  # no daemon ever voted on this cluster
            votes = []
        locks = await zk.get_children(paths.ur_locks)
        return votes, locks


def test_upstream_conf_env_and_sigint(cluster, procs, tmp_path):
    zk_hosts = cluster.zk_connect
    conf = write_conf(tmp_path / "bk_server.conf", {
        "metadataServiceUri": f"zk+hierarchical://{zk_hosts.replace(',', ';')}/ledgers",
        "zkTimeout": "6000",
        "bookieId": cluster.bookie_id(1),
        "auditorPeriodicCheckInterval": "0",
        "auditorPeriodicBookieCheckInterval": "0",
        "auditorPeriodicPlacementPolicyCheckInterval": "3600",
        "lostBookieRecoveryDelay": "0",
        "openLedgerRereplicationGracePeriod": "5000",
        "rereplicationEntryBatchSize": "20",
        "ensemblePlacementPolicy": "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy",
        "bookkeeperClientMinNumRacksPerWriteQuorum": "2",
        "journalDirectories": "/data/bk/journal",
        "auditorPeriodicCheckIntrval": "5",
        "httpServerEnabled": "true",
        "httpServerHost": "0.0.0.0",
    })
    # issue 28: the misspelt key would be read by nothing: a configuration error for check and run alike
    checked = cli("config", "check", "-c", str(conf), env={"BK_httpServerPort": "0"})
    assert checked.exit_code == 2, checked.stderr
    assert "did you mean auditorPeriodicCheckInterval?" in checked.stderr
    refused = subprocess.run([sys.executable, "-m", "autorecovery", "run", "-c", str(conf)], capture_output=True,
                             text=True, timeout=60, env={**{k: v for k, v in os.environ.items() if not k.startswith("BK_")},
                                                            "BK_httpServerPort": "0"})
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "unknown configuration key auditorPeriodicCheckIntrval in the config file" in refused.stderr
    assert "AUTORECOVERY_READY" not in refused.stdout

    conf.write_text(conf.read_text().replace("auditorPeriodicCheckIntrval=5\n", ""))
    checked = cli("config", "check", "-c", str(conf), env={"BK_httpServerPort": "0"})
    assert checked.exit_code == 0, checked.stderr
    assert "zkTimeout=6000  # file, upstream" in checked.stdout
    assert "httpServerPort=0  # env, upstream" in checked.stdout
    assert "minNumRacksPerWriteQuorum=2  # file (alias bookkeeperClientMinNumRacksPerWriteQuorum)" in checked.stdout
    assert "httpServerHost=0.0.0.0  # file, upstream" in checked.stdout

    p = Proc(tmp_path, "d1", ["-c", str(conf)], env={"BK_httpServerPort": "0", "BK_logFormat": "json"})
    procs.append(p)
    port = p.wait_ready()
    text = p.text()
    # upstream's bind key is honoured (it was an unknown key, and the daemon bound 127.0.0.1)
    assert f"AUTORECOVERY_READY bookie_id={cluster.bookie_id(1)} http=0.0.0.0:{port}" in text
    wait_until(lambda: get_json(port, "/readyz")["ready"], 20, 0.1, "readyz")
    assert get_json(port, "/healthz")["status"] == "alive"
    wait_until(lambda: arun(votes_and_locks(cluster))[0], 10, 0.1, "a vote")
    code, took = p.stop(signal.SIGINT)
    assert code == 0 and took < 20, p.text()[-2000:]
    votes, locks = arun(votes_and_locks(cluster))
    assert votes == [] and locks == []
    assert '"event": "autorecovery stopped"' in p.text()


def test_bad_value_exits_2(cluster, tmp_path):
    conf = write_conf(tmp_path / "bad.conf", {"zkServers": cluster.zk_connect, "rwRereplicateBackoffMs": "soon"})
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autorecovery", "run", "-c", str(conf)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "bad value for rwRereplicateBackoffMs: 'soon'" in proc.stderr
    assert "AUTORECOVERY_READY" not in proc.stdout
    assert time.monotonic() - t0 < 30


def test_wrong_ledgers_root_or_unknown_layout_is_refused(cluster, tmp_path):
    """Issue 9: ``run --ledgers-root /nope`` used to report ready, elect itself and index 0 ledgers. It
    must exit 1 naming the missing LAYOUT znode and create nothing under the wrong root; a LAYOUT naming
    a ledger manager we do not lay out paths for is refused the same way."""
    from kazoo.client import KazooClient

    def run(root: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autorecovery", "run", "--zk", cluster.zk_connect,
                               "--ledgers-root", root, "--http-port", "0"], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)

    proc = run("/nope")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "/nope/LAYOUT does not exist" in proc.stderr and "AUTORECOVERY_READY" not in proc.stdout
    kz = KazooClient(hosts=cluster.zk_connect)
    kz.start(timeout=30)
    try:
        assert kz.exists("/nope") is None  # no under-replication tree, no vote under the wrong root
        kz.create("/flat/LAYOUT", b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1", makepath=True)
        proc = run("/flat")
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "/flat/LAYOUT: ledger manager org.apache.bookkeeper.meta.FlatLedgerManagerFactory is not " \
               "supported" in proc.stderr
        assert kz.get_children("/flat") == ["LAYOUT"]
    finally:
        kz.stop()
        kz.close()


def test_sigterm_while_copying(cluster, procs, tmp_path):
    victim_i = 3
    victim = cluster.bookie_id(victim_i)
    written = arun(write_ledgers(cluster, 4, 100, 3, 3, 3, size=2000))
    affected = [lid for lid, ens in written.items() if victim in ens]
    assert affected
    props = {**FAST, "zkServers": cluster.zk_connect, "bookieId": cluster.bookie_id(0),
             "replicationRateByBytes": "60000", "shutdownTimeoutSeconds": "10", "logFormat": "json"}
    p = Proc(tmp_path, "copying", ["-c", str(write_conf(tmp_path / "slow.conf", props))])
    procs.append(p)
    p.wait_ready()
    cluster.kill_bookie(victim_i)
    wait_unregistered(cluster, victim)
    wait_until(lambda: arun(votes_and_locks(cluster))[1], 30, 0.05, "a worker lock (copy in progress)")
    before = {lid: arun(metadata(cluster, lid)) for lid in affected}
    code, took = p.stop(signal.SIGTERM)
    assert code == 0, p.text()[-3000:]
    assert took < 10 + 5, f"SIGTERM stop took {took:.1f}s"
    votes, locks = arun(votes_and_locks(cluster))
    assert locks == [] and votes == [], (votes, locks)

    # no half-written metadata: every segment still lists the victim, or its replacement holds every
    # entry of that index (the ensemble is swapped only after a complete copy)
    async def check_consistent() -> tuple[int, int, int]:
        bookies = BookieClient()
        swapped = kept = 0
        positions = sum(oseg.ensemble.count(victim) for old in before.values() for oseg in old.segments)
        try:
            for lid in affected:
                md = await metadata(cluster, lid)
                old = before[lid]
                assert md.ensemble_size == old.ensemble_size and len(md.segments) == len(old.segments)
                for i, (seg, oseg) in enumerate(zip(md.segments, old.segments, strict=True)):
                    assert len(set(seg.ensemble)) == len(seg.ensemble), seg
                    for idx, (b_new, b_old) in enumerate(zip(seg.ensemble, oseg.ensemble, strict=True)):
                        if b_new == b_old:
                            kept += b_old == victim
                            continue
                        assert b_old == victim, (lid, i, idx, b_old, b_new)  # only the lost bookie is replaced
                        swapped += 1
                        for e in entries_on_index(seg.first_entry_id, md.segment_end(i), idx,
                                                  md.ensemble_size, md.write_quorum):
                            await bookies.read_entry(b_new, lid, e)  # raises if the copy is incomplete
        finally:
            await bookies.close()
        return swapped, kept, positions

    swapped, kept, positions = arun(check_consistent())
    # every position of the victim is either still the victim or replaced by a complete copy
    assert positions > 0 and swapped + kept == positions, (swapped, kept, positions)
    payloads_ok = {lid: len(arun(read_all(cluster, lid))) == 100 for lid in written}
    assert all(payloads_ok.values())

    # a restarted daemon (unthrottled) finishes the job
    props2 = {**props, "replicationRateByBytes": "-1"}
    p2 = Proc(tmp_path, "resume", ["-c", str(write_conf(tmp_path / "fast.conf", props2))])
    procs.append(p2)
    p2.wait_ready()
    wait_until(lambda: all(victim not in arun(metadata(cluster, lid)).all_bookies() for lid in affected),
               60, 0.2, "re-replication after restart")
    assert p2.stop()[0] == 0


async def test_session_expiry_restarts_worker_and_rejoins(cluster):
    """Upstream exits on session expiry (#3799); the daemon stops the auditor, restarts the worker on
    the new session, votes again and is ready again."""
    import asyncio
    import io

    from kazoo.client import KazooClient

    from autorecovery.config.load import load_settings
    from autorecovery.daemon import Daemon

    settings = load_settings(None, env={}, overrides={
        **FAST, "zkServers": cluster.zk_connect, "bookieId": cluster.bookie_id(2), "zkTimeout": "4000",
        "httpServerEnabled": "false", "auditorMaxNumberOfConcurrentOpenLedgerOperations": "77"})
    out = io.StringIO()
    d = Daemon(settings, out=out)
    await d.start()
    try:
        assert out.getvalue().startswith(f"AUTORECOVERY_READY bookie_id={cluster.bookie_id(2)} http=off")
        assert d.zk.max_concurrent_ops == 77  # issue 13: the client's bound follows the auditor key

        async def until(pred, timeout_s, what):
            assert await wait_for(pred, timeout_s), f"timed out waiting for {what}"

        await until(lambda: d.readiness()[0], 10, "ready")
        old_worker, old_session = d.worker, d.zk.client_id[0]
        await until(lambda: d.auditor is not None, 10, "auditor elected")

        def expire():  # the classic trick: a second client with the same session id, then close it
            kz = KazooClient(hosts=cluster.zk_connect, client_id=d.zk.client_id)
            kz.start(10)
            kz.stop()
            kz.close()

        await asyncio.to_thread(expire)
        await until(lambda: d.zk.client_id and d.zk.client_id[0] != old_session, 30, "a new session")
        await until(lambda: d.worker is not None and d.worker is not old_worker and d.readiness()[0], 30,
                    "worker restarted and ready")
        await until(lambda: d.auditor is not None, 30, "re-elected on the new session")
        votes, _locks = await votes_and_locks_async(cluster)
        assert len(votes) == 1
    finally:
        await d.stop()
    votes, locks = await votes_and_locks_async(cluster)
    assert votes == [] and locks == []


async def votes_and_locks_async(cluster):
    async with zk_session(cluster) as (zk, paths, _urm):
        try:
            votes = sorted_votes(await zk.get_children(paths.auditor_election))
        except NoNodeError:  # no daemon ever voted on this cluster
            votes = []
        return votes, await zk.get_children(paths.ur_locks)


async def test_zookeeper_dropping_during_start_up_starts_again(cluster):
    """Issue 26 (chaos campaign: a 1 s cut of a starting daemon's ZooKeeper link ended the process with
    'autorecovery failed to start'): a retriable ZooKeeper error after the first connect tears down
    what was started and starts again (WARNING); any other start-up error still fails at once."""
    import io

    from structlog.testing import capture_logs

    from autorecovery.config.load import load_settings
    from autorecovery.daemon import Daemon
    from autorecovery.daemon_roles import default_worker_factory
    from autorecovery.errors import ConfigError, ZooKeeperError

    settings = load_settings(None, env={}, overrides={
        **FAST, "zkServers": cluster.zk_connect, "bookieId": cluster.bookie_id(3), "zkTimeout": "4000",
        "httpServerEnabled": "false"})
    calls: list[int] = []

    def flaky(*args):
        calls.append(1)
        if len(calls) == 1:  # ZooKeeper drops while the daemon is half started
            raise ZooKeeperError("ZooKeeper operation on /ledgers/underreplication failed: ConnectionLoss")
        return default_worker_factory(*args)

    out = io.StringIO()
    d = Daemon(settings, out=out, worker_factory=flaky)
    with capture_logs() as logs:
        await d.start_retrying(budget_s=30)
    try:
        assert out.getvalue().startswith(f"AUTORECOVERY_READY bookie_id={cluster.bookie_id(3)}")
        assert len(calls) == 2
        assert [e["log_level"] for e in logs if e["event"] == "ZooKeeper dropped during start-up; starting again"] \
            == ["warning"]
        assert await wait_for(lambda: d.readiness()[0], 10)
    finally:
        await d.stop()
    votes, locks = await votes_and_locks_async(cluster)
    assert votes == [] and locks == []

    def broken(*args):
        calls.append(1)
        raise ConfigError("workerBroken: not retried")

    calls.clear()
    d = Daemon(settings, out=io.StringIO(), worker_factory=broken)
    with pytest.raises(ConfigError, match="workerBroken"):
        await d.start_retrying(budget_s=30)
    assert len(calls) == 1
