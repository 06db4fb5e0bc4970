"""Issue 25: bookie TLS files renewed without a restart (``tlsCertFilesRefreshDurationSeconds``; the
bookie's ``--tls-cert-files-refresh-seconds``), with real certificates (``cryptography``), real bookie
processes, a real daemon and a real ZooKeeper.

* A new version of the files is taken only whole; a partial certificate or a certificate renamed
  before its key keeps the old credentials with one WARNING naming the flag and the path; 0 = never.
* A client whose channel was opened before its files were rotated, and whose bookie now serves a
  certificate of the new CA, reopens the channel with the new files on the failed handshake.
* The CA is replaced (new CA, new bookie and client certificates renamed over the old files) under a
  live daemon and live bookie processes: a partial file first changes nothing (one warning in the
  bookie's log); then a client with only the old CA is refused, a long-lived client reads from a bookie
  started after the rotation, and the daemon heals a stopped bookie's ledger onto it by PullEntries
  between the rotated mTLS bookies.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from autorecovery.bookie.server import BookieConfig, BookieServer
from autorecovery.errors import BookieUnavailableError
from autorecovery.ledger.digest import pack_entry
from autorecovery.config.tls import BookieTls, ServerTls
from autorecovery.rpc.tls_reload import CERT, KEY, TRUST, PemFile, PemFiles
from autorecovery.rpc.transport import BookieClient
from autorecovery.testing.bookie_proc import BookieProcess
from autorecovery.testing.zk_server import free_port
from autorecovery.aio import wait_for
from tls_certs import (bookie_tls_flags, client_tls, init_test_cluster, make_ca, mtls_daemon, read_back,
                       wait_healed, write_ledger)

pytestmark = pytest.mark.integration

MK = b"master-key"


def _put(dst: str, data: bytes) -> None:
    """Write ``data`` next to ``dst`` and rename it over ``dst`` (how certificate managers rotate)."""
    tmp = dst + ".new"
    Path(tmp).write_bytes(data)
    os.replace(tmp, dst)


class Live:
    """The files one end is configured with (fixed paths), and how to rotate them."""

    def __init__(self, directory: Path, name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = str(directory / f"{name}-ca.pem")
        self.cert = str(directory / f"{name}.pem")
        self.key = str(directory / f"{name}-key.pem")

    def install(self, ca, issued) -> None:
        """Trust store first, then key, then certificate, each renamed over the old one."""
        _put(self.ca, Path(ca.path).read_bytes())
        _put(self.key, Path(issued.key).read_bytes())
        _put(self.cert, Path(issued.cert).read_bytes())

    def client_tls(self, refresh_s: float = 0) -> BookieTls:
        return client_tls(self.cert, self.key, self.ca, refresh_s=refresh_s)

    def server_tls(self, refresh_s: float = 0) -> ServerTls:
        return ServerTls(cert_path=self.cert, key_path=self.key, trust_path=self.ca, client_auth=True,
                         refresh_s=refresh_s)


@pytest.fixture
def pki(tmp_path):
    """Two CAs (the old and its replacement), each with a bookie (IP SAN 127.0.0.1) and a client
    certificate."""
    one = make_ca(tmp_path / "pki", "one")
    two = make_ca(tmp_path / "pki", "two")
    return {"ca1": one, "bookie1": one.issue("bookie1"), "client1": one.issue("client1"),
            "ca2": two, "bookie2": two.issue("bookie2"), "client2": two.issue("client2")}


@pytest.fixture
async def cluster(zk_server):
    return await init_test_cluster(zk_server.connect_string)


def test_a_new_version_is_taken_whole_or_not_at_all_with_one_warning(tmp_path, pki):
    live = Live(tmp_path / "live", "bookie")
    live.install(pki["ca1"], pki["bookie1"])
    now = [0.0]
    files = PemFiles([PemFile("--tls-key", live.key, KEY), PemFile("--tls-cert", live.cert, CERT),
                      PemFile("--tls-trust-store", live.ca, TRUST)], 5, clock=lambda: now[0])
    first = dict(files.data)
    new_cert = Path(pki["bookie2"].cert).read_bytes()
    partial = new_cert[: len(new_cert) // 2]
    _put(live.cert, partial)  # a rotation cut short
    with capture_logs() as logs:
        assert not files.refresh()  # within the period: the files are not even looked at
        for t in (6.0, 12.0, 18.0):
            now[0] = t
            assert not files.refresh()
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert len(warned) == 1, logs
    assert warned[0]["key"] == "--tls-cert" and warned[0]["path"] == live.cert
    assert partial.splitlines()[1].decode() not in json.dumps(warned[0], default=str)  # never the content
    assert files.data == first and files.generation == 0

    _put(live.cert, new_cert)  # the new certificate is whole, its key not renamed yet
    now[0] = 24.0
    with capture_logs() as logs:
        assert not files.refresh()
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert len(warned) == 1 and warned[0]["key"] == "--tls-key" and warned[0]["path"] == live.key
    assert files.data == first

    _put(live.key, Path(pki["bookie2"].key).read_bytes())
    _put(live.ca, Path(pki["ca2"].path).read_bytes())
    now[0] = 30.0
    assert files.refresh() and files.generation == 1
    assert files.data[CERT] == new_cert and files.data[TRUST] == Path(pki["ca2"].path).read_bytes()

    never = PemFiles([PemFile("tlsTrustStore", live.ca, TRUST)], 0)  # upstream's 0 = never
    _put(live.ca, Path(pki["ca1"].path).read_bytes())
    assert not never.refresh(force=True) and never.data[TRUST] == Path(pki["ca2"].path).read_bytes()


async def test_a_failed_handshake_after_a_rotation_reopens_the_channel_with_the_new_files(cluster, tmp_path, pki):
    """The bookie restarts on the same port with a certificate of the new CA; our client's channel was
    opened with the old trust store and its files were rotated since: the next call fails its handshake,
    the client looks at its files at once (the hour-long period notwithstanding) and succeeds on a new
    channel."""
    server_files = Live(tmp_path / "srv", "bookie")
    server_files.install(pki["ca1"], pki["bookie1"])
    client_files = Live(tmp_path / "cli", "client")
    client_files.install(pki["ca1"], pki["client1"])
    port = free_port()
    config = BookieConfig(zk=cluster, data_dir=tmp_path / "b", port=port, tls=server_files.server_tls())
    srv = await BookieServer(config).start()
    c = BookieClient(timeout_s=5, tls=client_files.client_tls(refresh_s=3600))
    try:
        await c.add_entry(srv.bookie_id, 3, 0, MK, pack_entry(3, 0, -1, 2, b"hi"))
        await srv.stop()
        server_files.install(pki["ca2"], pki["bookie2"])
        client_files.install(pki["ca2"], pki["client2"])
        srv = await BookieServer(config).start()
        with capture_logs() as logs:
            assert (await c.read_entry(srv.bookie_id, 3, 0)).body.endswith(b"hi")
        assert [e["generation"] for e in logs if e["event"].startswith("TLS files changed")] == [1], logs
        assert not [e for e in logs if e["event"] == "TLS handshake failed"], logs  # retried, not reported
    finally:
        await c.close()
        await srv.stop()


def _bookie(cluster: str, tmp_path: Path, name: str, files: Live) -> BookieProcess:
    return BookieProcess(["--zk", cluster, "--data-dir", str(tmp_path / name), "--port", "0", "--log-format", "json",
                          *bookie_tls_flags(files.cert, files.key, files.ca), "--tls-cert-files-refresh-seconds", "1"],
                         tmp_path / f"{name}.log")


def _events(p: BookieProcess, event: str) -> list[dict]:
    out = []
    for line in p.log_path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and str(rec.get("event", "")).startswith(event):
            out.append(rec)
    return out


async def _refused(bookie_id: str, tls: BookieTls) -> bool:
    c = BookieClient(timeout_s=3, tls=tls)  # a new client: a new connection, a new handshake
    try:
        await c.features(bookie_id)
        return False
    except BookieUnavailableError as exc:
        return "TLS handshake failed" in str(exc)
    finally:
        await c.close()


async def test_ca_replaced_under_a_live_daemon_and_live_bookies(cluster, tmp_path, pki):
    bookie_files = Live(tmp_path / "bookie-live", "bookie")
    bookie_files.install(pki["ca1"], pki["bookie1"])
    daemon_files = Live(tmp_path / "daemon-live", "client")
    daemon_files.install(pki["ca1"], pki["client1"])
    old_only = client_tls(pki["client1"].cert, pki["client1"].key, pki["ca1"].path)
    procs = [_bookie(cluster, tmp_path, f"b{i}", bookie_files) for i in range(3)]
    d = None
    reader = BookieClient(timeout_s=5, tls=daemon_files.client_tls(refresh_s=1))
    try:
        ids = [await p.await_ready() for p in procs]
        lid, _ensemble = await write_ledger(cluster, old_only, quorums=(3, 3, 2), entries=20)
        assert (await reader.read_entry(ids[1], lid, 0)).body.endswith(b"entry-0")

        d = mtls_daemon(cluster, daemon_files.cert, daemon_files.key, daemon_files.ca,
                        tlsCertFilesRefreshDurationSeconds="1")
        assert d.settings.tls.refresh_s == 1
        await d.start()

        # a partial bookie certificate: every bookie keeps serving the old one, and says so once
        good = Path(bookie_files.cert).read_bytes()
        _put(bookie_files.cert, good[: len(good) // 2])

        async def warned_and_still_serving() -> bool:
            assert not await _refused(ids[0], old_only)
            return bool(_events(procs[0], "TLS files not reloaded"))

        assert await wait_for(warned_and_still_serving, 30, interval_s=0.2)
        assert not await _refused(ids[0], old_only)
        warned = _events(procs[0], "TLS files not reloaded")
        assert len(warned) == 1 and warned[0]["key"] == "--tls-cert" and warned[0]["path"] == bookie_files.cert
        assert warned[0]["level"] == "warning"

        # the CA replaced: bookies and daemon get the new CA, bookie and client certificates
        bookie_files.install(pki["ca2"], pki["bookie2"])
        daemon_files.install(pki["ca2"], pki["client2"])
        for bid in ids:  # each bookie takes them at its next handshake after the period
            assert await wait_for(lambda bid=bid: _refused(bid, old_only), 30, interval_s=0.2), bid

        # a bookie started after the rotation is the only place the stopped bookie's copies can go
        procs.append(_bookie(cluster, tmp_path, "b3", bookie_files))
        ids.append(await procs[3].await_ready())
        victim = procs[0]
        victim.stop()
        await victim.await_exit(30)
        md = await wait_healed(cluster, lid, ids[0], 90)
        assert ids[3] in md.all_bookies()
        assert d.worker.copier.pulls > 0, "the heal did not go by PullEntries between the rotated bookies"
        # the long-lived client reads from the new bookie with the rotated files, without a restart
        assert (await reader.read_entry(ids[3], lid, 19)).body.endswith(b"entry-19")
        assert await read_back(cluster, daemon_files.client_tls(), lid, 20) == [b"entry-%d" % e for e in range(20)]
    finally:
        await reader.close()
        if d is not None:
            await d.stop()
        for p in procs:
            p.stop()
        for p in procs:
            await p.await_exit(30)
    shutil.rmtree(tmp_path / "pki", ignore_errors=True)
