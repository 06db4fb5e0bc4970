"""Issue 10: ``zkEnableSecurity=true`` with digest auth on a real ZooKeeper, and upstream's Prometheus
listener (``prometheusStatsHttpPort``) on a real daemon.

``cluster init`` (the shell command), a reference bookie (registration + cookie), the daemon (votes,
the under-replication tree, ctime znodes, ``lostBookieRecoveryDelay``) and the auditor/worker calls of
the UnderreplicationManager (markers, locks, the disable znode), the worker's unrecoverable root and a
maintenance record run with a digest identity; every znode
they created is read back with kazoo's ``get_acls``: ``CREATOR_ALL_ACL`` resolved to that identity. An
unauthenticated client gets ``NoAuthError`` deleting a marker, a lock or the disable znode.
"""

from __future__ import annotations

import asyncio
import io
import urllib.request

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions, make_digest_acl_credential

from autorecovery.bookie.server import BookieConfig, BookieServer
from autorecovery.cli.main import main
from autorecovery.config.load import load_settings
from autorecovery.config.zk_auth import zk_security
from autorecovery.daemon import Daemon
from autorecovery.testing.zk_server import free_port
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.maintenance import MaintenanceStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

pytestmark = pytest.mark.integration

USER, PASSWORD = "autorecovery", "s3cret-pw"
FAST = {
    "lostBookieRecoveryDelay": "7",
    "zkTimeout": "6000",
    "auditorPeriodicCheckInterval": "3600",
    "auditorPeriodicBookieCheckInterval": "0",
    "httpServerEnabled": "false",
    "shutdownTimeoutSeconds": "10",
    "getBookieInfoIntervalSeconds": "1",
}


def _kazoo(connect: str, auth: bool) -> KazooClient:
    kz = KazooClient(connect, auth_data=[("digest", f"{USER}:{PASSWORD}")] if auth else None)
    kz.start(10)
    return kz


def _expected_acl() -> list[ACL]:
    return [ACL(Permissions.ALL, Id("digest", make_digest_acl_credential(USER, PASSWORD)))]


def test_secured_znodes_are_creator_all_and_closed_to_others(zk_connect, tmp_path):
    secret = tmp_path / "zk-digest"
    secret.write_text(f"{USER}:{PASSWORD}\n")
    secured = ["-D", "zkEnableSecurity=true", "-D", f"zkDigestAuthFile={secret}"]

    # cluster init, through the shell command an init container runs
    res = CliRunner().invoke(main, ["shell", "initnewcluster", "--zk", zk_connect, *secured], env={})
    assert res.exit_code == 0, res.output
    paths = Paths("/ledgers")

    settings = load_settings(None, env={}, overrides={
        **FAST, "zkServers": zk_connect, "bookieId": "127.0.0.1:3181", "zkEnableSecurity": "true",
        "zkDigestAuthFile": str(secret), "prometheusStatsHttpPort": str(free_port()),
        "prometheusStatsHttpAddress": "127.0.0.1"})
    assert settings.zk_security.enabled and settings.zk_security.user == USER
    assert PASSWORD not in repr(settings)
    created: list[str] = []

    async def flow() -> None:
        bookie = BookieServer(BookieConfig(zk=zk_connect, data_dir=tmp_path / "b1", port=0,
                                           zk_security=zk_security(True, digest_file=str(secret))))
        await bookie.start()
        out = io.StringIO()
        d = Daemon(settings, out=out)
        await d.start()
        assert f"http=off prometheus=127.0.0.1:{settings.stats.port}" in out.getvalue()
        zk = await ZkClient.from_settings(settings).start()
        try:
            # the daemon: vote, under-replication tree, lostBookieRecoveryDelay, checkAllLedgers ctime
            assert await wait_for(lambda: d.auditor is not None, 20), "auditor elected"
            assert await wait_for(lambda: zk.exists(paths.check_all_ledgers_ctime), 30), "checkAllLedgers ctime"
            votes = await zk.get_children(paths.auditor_election)
            assert votes
            # the auditor's and worker's UnderreplicationManager calls: marker, lock, disable
            urm = UnderreplicationManager(zk, paths, lock_owner="test-worker")
            await urm.init()
            await urm.disable()  # keeps the daemon's worker off the marker below
            lid = 0x1234_5678_9ABC
            await urm.mark_underreplicated(lid, [bookie.bookie_id])
            assert await urm.acquire(lid)
            await urm.set_lost_bookie_recovery_delay(9)
            window = await MaintenanceStore(zk, paths).start("bookie", bookie.bookie_id, 60_000, "acl test")
            assert await wait_for(lambda: zk.exists(paths.unrecoverable), 10), "worker's unrecoverable root"
            created.extend([
                "/ledgers", paths.layout, paths.instance_id, paths.available, paths.cookies,
                paths.available_bookie(bookie.bookie_id), paths.cookie(bookie.bookie_id),
                paths.underreplication, paths.ur_ledgers, paths.ur_locks, paths.auditor_election,
                f"{paths.auditor_election}/{votes[0]}", paths.check_all_ledgers_ctime,
                paths.lost_bookie_recovery_delay, paths.ur_disable, paths.ur_marker(lid),
                paths.ur_marker(lid).rsplit("/", 1)[0], paths.ur_lock(lid),
                paths.maintenance, f"{paths.maintenance}/{window.znode_name}", paths.unrecoverable,
            ])

            def check() -> None:
                authed, anon = _kazoo(zk_connect, True), _kazoo(zk_connect, False)
                try:
                    for path in created:
                        acl, _stat = authed.get_acls(path)
                        assert acl == _expected_acl(), f"{path}: {acl}"
                    for path in (paths.ur_marker(lid), paths.ur_lock(lid), paths.ur_disable):
                        with pytest.raises(NoAuthError):
                            anon.delete(path)
                        with pytest.raises(NoAuthError):
                            anon.get(path)
                    assert authed.exists(paths.ur_disable)  # still there
                finally:
                    for kz in (authed, anon):
                        kz.stop()
                        kz.close()

            await asyncio.to_thread(check)

            # upstream's Prometheus listener, next to the (here disabled) admin HTTP server
            assert d.http is None and d.prometheus_port == settings.stats.port

            def scrape() -> str:
                url = f"http://127.0.0.1:{d.prometheus_port}/metrics"
                with urllib.request.urlopen(url, timeout=5) as r:
                    return r.read().decode()

            text = await asyncio.to_thread(scrape)
            assert "autorecovery_auditor_elected 1" in text
            assert "autorecovery_enabled" in text
        finally:
            await zk.stop()
            await d.stop()
            await bookie.stop()

    asyncio.run(flow())


def test_security_without_identity_refuses_naming_both_keys(zk_connect):
    res = CliRunner().invoke(main, ["shell", "initnewcluster", "--zk", zk_connect, "-D", "zkEnableSecurity=true"],
                             env={})
    assert res.exit_code != 0
    assert "zkDigestAuth" in res.output and "zkDigestAuthFile" in res.output and "zkEnableSecurity" in res.output

    async def untouched() -> bool:
        zk = await ZkClient(zk_connect).start()
        try:
            return await zk.exists("/ledgers") is None
        finally:
            await zk.stop()

    assert asyncio.run(untouched())


def test_open_acl_by_default(zk_connect):
    res = CliRunner().invoke(main, ["shell", "initnewcluster", "--zk", zk_connect], env={})
    assert res.exit_code == 0, res.output
    kz = _kazoo(zk_connect, False)
    try:
        acl, _ = kz.get_acls("/ledgers/LAYOUT")
        assert acl == [ACL(Permissions.ALL, Id("world", "anyone"))]
        kz.delete("/ledgers/INSTANCEID")  # nothing stops an anonymous client: upstream's default
    finally:
        kz.stop()
        kz.close()


def test_prometheus_port_equal_to_admin_port_is_served_once(zk_connect):
    res = CliRunner().invoke(main, ["shell", "initnewcluster", "--zk", zk_connect], env={})
    assert res.exit_code == 0, res.output
    port = free_port()
    settings = load_settings(None, env={}, overrides={
        **FAST, "httpServerEnabled": "true", "zkServers": zk_connect, "bookieId": "127.0.0.1:3181",
        "httpServerPort": str(port), "prometheusStatsHttpPort": str(port)})
    # httpServerEnabled=true set explicitly: upstream's provider opens no listener of its own
    assert not settings.stats.prometheus_enabled
    settings = load_settings(None, env={}, overrides={
        **{k: v for k, v in FAST.items() if k != "httpServerEnabled"}, "zkServers": zk_connect,
        "bookieId": "127.0.0.1:3181", "httpServerPort": str(port), "prometheusStatsHttpPort": str(port)})
    assert settings.stats.prometheus_enabled and settings.http.enabled

    async def flow() -> str:
        out = io.StringIO()
        d = Daemon(settings, out=out)
        await d.start()  # would raise OSError (address in use) if both servers bound the port
        try:
            assert d.prometheus is None and d.http_port == port
            assert "prometheus=" not in out.getvalue()

            def scrape() -> str:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return r.read().decode()

            return await asyncio.to_thread(scrape)
        finally:
            await d.stop()

    assert "autorecovery_enabled" in asyncio.run(flow())
