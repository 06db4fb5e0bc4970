"""Issue 15: gRPC TLS and mTLS between our client/daemon and the reference bookie, with real
certificates (a test CA made with ``cryptography``), real in-process bookies and a real ZooKeeper.

* mTLS works end to end: a daemon configured with upstream's TLS keys (PEM) heals the ledgers of a
  stopped bookie, copying between TLS bookies that require client certificates;
* a plaintext client, a client without a certificate, one with a certificate of another CA and one
  that does not trust the bookie's CA are refused with ``BookieUnavailableError`` saying
  ``TLS handshake failed`` (plaintext: unavailable);
* ``autorecovery bookie --tls-*`` flag errors are usage errors naming the flag.
"""

from __future__ import annotations

import asyncio
import io

import pytest
from click.testing import CliRunner

from autorecovery.bookie.server import BookieConfig, BookieServer
from autorecovery.cli.bookie import bookie_command
from autorecovery.config.load import load_settings
from autorecovery.daemon import Daemon
from autorecovery.errors import BookieUnavailableError, ConfigError
from autorecovery.ledger.digest import pack_entry
from autorecovery.rpc.transport import BookieClient
from autorecovery.config.tls import TLS_CONTEXT_FACTORY, BookieTls, ServerTls
from autorecovery.aio import wait_for
from tls_certs import client_tls, init_test_cluster, make_ca, mtls_daemon, read_back, wait_healed, write_ledger

pytestmark = pytest.mark.integration

MK = b"master-key"


@pytest.fixture
def pki(tmp_path):
    """Our CA with a bookie (IP SAN 127.0.0.1) and a client certificate, and a second, foreign CA."""
    ca = make_ca(tmp_path / "pki", "ours")
    other = make_ca(tmp_path / "pki", "other")
    return {"ca": ca, "bookie": ca.issue("bookie"), "client": ca.issue("client"), "other": other,
            "rogue": other.issue("rogue")}


@pytest.fixture
async def cluster(zk_server):
    """A fresh chroot formatted as ``cluster init`` does (LAYOUT, INSTANCEID, ...)."""
    return await init_test_cluster(zk_server.connect_string)


@pytest.fixture
async def tls_bookies(cluster, tmp_path, pki):
    started: list[BookieServer] = []

    async def start(name: str) -> BookieServer:
        tls = ServerTls(cert_path=pki["bookie"].cert, key_path=pki["bookie"].key, trust_path=pki["ca"].path,
                        client_auth=True)
        srv = BookieServer(BookieConfig(zk=cluster, data_dir=tmp_path / name, port=0, tls=tls))
        await srv.start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        await srv.stop()


def _client_tls(pki, **kw) -> BookieTls:
    return client_tls(pki["client"].cert, pki["client"].key, pki["ca"].path, **kw)


async def test_mtls_client_works_and_wrong_peers_are_refused(tls_bookies, pki):
    b = await tls_bookies("b1")
    good = BookieClient(timeout_s=5, tls=_client_tls(pki))
    try:
        await good.add_entry(b.bookie_id, 7, 0, MK, pack_entry(7, 0, -1, 5, b"hello"))
        got = await good.read_entry(b.bookie_id, 7, 0)
        assert got.entry_id == 0 and got.body.endswith(b"hello")
    finally:
        await good.close()

    async def refused(tls: BookieTls | None) -> BookieUnavailableError:
        c = BookieClient(timeout_s=3, tls=tls)
        try:
            with pytest.raises(BookieUnavailableError) as err:
                await c.read_entry(b.bookie_id, 7, 0)
            assert b.bookie_id in str(err.value)
            return err.value
        finally:
            await c.close()

    plain = await refused(None)
    assert "UNAVAILABLE" in str(plain)
    for tls in (_client_tls(pki, cert_path=pki["rogue"].cert, key_path=pki["rogue"].key),  # foreign CA
                _client_tls(pki, client_auth=False, cert_path=None, key_path=None),  # no certificate
                _client_tls(pki, trust_path=pki["other"].path)):  # does not trust the bookie's CA
        err = await refused(tls)
        assert "TLS handshake failed" in str(err), str(err)


async def test_client_refuses_a_bookie_certificate_without_its_ip(cluster, tmp_path, pki):
    """Hostname verification (tlsHostnameVerificationEnabled=true): the bookie id 127.0.0.1:port must be
    named by the certificate; one for 127.0.0.9 only is refused."""
    wrong = pki["ca"].issue("wrong-ip", ips=("127.0.0.9",), dns=("bookie.example",))
    srv = BookieServer(BookieConfig(zk=cluster, data_dir=tmp_path / "w", port=0,
                                    tls=ServerTls(wrong.cert, wrong.key, pki["ca"].path, client_auth=True)))
    await srv.start()
    c = BookieClient(timeout_s=3, tls=_client_tls(pki))
    try:
        with pytest.raises(BookieUnavailableError, match="TLS handshake failed"):
            await c.read_lac(srv.bookie_id, 1)
    finally:
        await c.close()
        await srv.stop()


async def test_daemon_heals_a_stopped_bookie_over_mtls(cluster, tls_bookies, pki):
    bookies = [await tls_bookies(f"b{i}") for i in range(3)]
    tls = _client_tls(pki)
    lid, ensemble = await write_ledger(cluster, tls, quorums=(2, 2, 2), entries=20)
    victim = next(b for b in bookies if b.bookie_id == ensemble[0])
    await victim.stop()

    d = mtls_daemon(cluster, pki["client"].cert, pki["client"].key, pki["ca"].path,
                    tlsKeyStoreType="PEM", tlsTrustStoreType="PEM")
    await d.start()
    try:
        await wait_healed(cluster, lid, victim.bookie_id, 60)
    finally:
        await d.stop()
    assert await read_back(cluster, tls, lid, 20) == [b"entry-%d" % e for e in range(20)]


def test_settings_refuse_jks_and_unreadable_pem(tmp_path, pki):
    base = {"zkServers": "zk1:2181", "tlsProviderFactoryClass": TLS_CONTEXT_FACTORY}
    with pytest.raises(ConfigError, match="tlsTrustStoreType=JKS is not supported"):
        load_settings(None, env={}, overrides={**base, "tlsTrustStoreType": "JKS", "tlsTrustStore": "/x.jks"})
    with pytest.raises(ConfigError, match=r"tlsKeyStore: .*holds no PEM private key"):
        load_settings(None, env={}, overrides={**base, "tlsClientAuthentication": "true",
                                               "tlsCertificatePath": pki["client"].cert,
                                               "tlsKeyStore": pki["client"].cert})
    with pytest.raises(ConfigError, match="tlsClientAuthentication=true needs tlsCertificatePath"):
        load_settings(None, env={}, overrides={**base, "tlsClientAuthentication": "true",
                                               "tlsKeyStore": pki["client"].key})
    (tmp_path / "ks.jks").write_bytes(b"\xfe\xed\xfe\xed binary")
    with pytest.raises(ConfigError, match=r"tlsTrustStore: .* is not a PEM file"):
        load_settings(None, env={}, overrides={**base, "tlsTrustStore": str(tmp_path / "ks.jks")})
    with pytest.raises(ConfigError, match=r"clientAuthProviderFactoryClass=.*authentication plugin"):
        load_settings(None, env={}, overrides={
            **base, "clientAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLClientProviderFactory"})


def test_bookie_tls_flags_are_checked(tmp_path, pki):
    common = ["--zk", "127.0.0.1:1", "--data-dir", str(tmp_path / "d")]
    res = CliRunner().invoke(bookie_command, [*common, "--tls-cert", pki["bookie"].cert])
    assert res.exit_code == 2 and "TLS needs both --tls-cert and --tls-key" in res.output
    res = CliRunner().invoke(bookie_command, [*common, "--tls-cert", pki["bookie"].cert, "--tls-key",
                                              pki["bookie"].key, "--tls-client-auth"])
    assert res.exit_code == 2 and "--tls-client-auth needs --tls-trust-store" in res.output
    res = CliRunner().invoke(bookie_command, [*common, "--tls-cert", pki["bookie"].cert, "--tls-key",
                                              pki["bookie"].cert])
    assert res.exit_code == 2 and "--tls-key" in res.output and "no PEM private key" in res.output


# -- the admin HTTP server: HTTPS, bearer token, client certificates ----------------------------------------
def _https(port: int, method: str, path: str, ca: str, *, token: str | None = None, body: bytes | None = None,
           cert: tuple[str, str] | None = None) -> tuple[int, str, dict]:
    import http.client
    import ssl

    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(*cert)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=20)
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace"), dict(resp.getheaders())
    finally:
        conn.close()


async def _https_daemon(cluster, tmp_path, pki, **extra) -> tuple[Daemon, str]:
    token = "s3cret-Token-42"
    (tmp_path / "token").write_text(token + "\n")
    srv = pki["ca"].issue("http")
    settings = load_settings(None, env={}, overrides={
        "zkServers": cluster, "bookieId": "127.0.0.1:2", "httpServerPort": "0", "zkTimeout": "4000",
        "httpAdminMutationsEnabled": "true", "httpServerTlsEnable": "true",
        "httpServerCertificatePath": srv.cert, "httpServerKeyPath": srv.key,
        "httpAdminTokenFile": str(tmp_path / "token"), **extra})
    assert token not in repr(settings)
    d = Daemon(settings, out=io.StringIO())
    await d.start()
    assert await wait_for(lambda: d.readiness()[0], 20), d.readiness()
    return d, token


async def test_https_admin_answers_with_the_test_ca_and_mutations_need_the_token(cluster, tmp_path, pki):
    d, token = await _https_daemon(cluster, tmp_path, pki)
    port = d.http_port
    ca = pki["ca"].path
    path = "/api/v1/autorecovery/lost_bookie_recovery_delay"
    try:
        async def delay_seeded() -> bool:  # the elected auditor seeds the znode
            return (await asyncio.to_thread(_https, port, "GET", path, ca))[0] == 200

        assert await wait_for(delay_seeded, 20, interval_s=0.1)
        code, body, _ = await asyncio.to_thread(_https, port, "GET", path, ca)
        assert code == 200 and "lostBookieRecoveryDelay value" in body, (code, body)
        for tok in (None, "wrong", token + "x", ""):
            code, body, headers = await asyncio.to_thread(_https, port, "PUT", path, ca, token=tok,
                                                          body=b'{"delay_seconds": 7}')
            assert code == 401, (tok, code, body)
            assert token not in body and "Bearer" in headers.get("WWW-Authenticate", "")
        code, body, _ = await asyncio.to_thread(_https, port, "PUT", path, ca, token=token,
                                                body=b'{"delay_seconds": 7}')
        assert code == 200, body
        code, body, _ = await asyncio.to_thread(_https, port, "GET", path, ca)
        assert "7" in body
        # a body over the limit is refused before any handler; no traceback in any answer
        code, body, _ = await asyncio.to_thread(_https, port, "PUT", path, ca, token=token,
                                                body=b"{" + b" " * (128 * 1024) + b"}")
        assert code == 413 and "Traceback" not in body
        # plain HTTP on the HTTPS port gets no API answer
        import urllib.error
        import urllib.request

        def plain() -> int:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code
            except (urllib.error.URLError, ConnectionError, OSError):
                return -1

        assert await asyncio.to_thread(plain) in (-1, 400)
    finally:
        await d.stop()


async def test_https_admin_with_client_certificates(cluster, tmp_path, pki):
    d, _token = await _https_daemon(cluster, tmp_path, pki, httpServerClientCaPath=pki["ca"].path)
    port = d.http_port
    ca = pki["ca"].path
    try:
        code, _body, _ = await asyncio.to_thread(_https, port, "GET", "/heartbeat", ca,
                                                 cert=(pki["client"].cert, pki["client"].key))
        assert code == 200
        import ssl

        for cert in (None, (pki["rogue"].cert, pki["rogue"].key)):
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                await asyncio.to_thread(_https, port, "GET", "/heartbeat", ca, cert=cert)
    finally:
        await d.stop()


def test_mutations_on_a_public_bind_need_authentication(tmp_path, pki):
    base = {"zkServers": "zk1:2181", "httpAdminMutationsEnabled": "true", "httpServerAddress": "0.0.0.0"}
    with pytest.raises(ConfigError, match="needs authentication: set httpAdminTokenFile"):
        load_settings(None, env={}, overrides=base)
    (tmp_path / "token").write_text("t\n")
    assert load_settings(None, env={}, overrides={**base, "httpAdminTokenFile": str(tmp_path / "token")}).http.token
    with pytest.raises(ConfigError, match="httpServerTlsEnable=true needs httpServerKeyPath"):
        load_settings(None, env={}, overrides={**base, "httpServerTlsEnable": "true",
                                               "httpServerCertificatePath": pki["client"].cert})
    with pytest.raises(ConfigError, match="httpServerKeyStorePath is set: JKS") as err:
        load_settings(None, env={}, overrides={"zkServers": "zk1:2181", "httpServerKeyStorePath": "/x.jks",
                                               "httpServerKeyStorePassword": "hunter2"})
    assert "hunter2" not in str(err.value)


async def test_bookie_process_serves_mtls_from_its_flags(cluster, tmp_path, pki):
    """``autorecovery bookie --tls-cert --tls-key --tls-trust-store --tls-client-auth`` as a real process:
    an mTLS client stores and reads an entry; a plaintext client is refused."""
    from autorecovery.testing.bookie_proc import BookieProcess

    p = BookieProcess(["--zk", cluster, "--data-dir", str(tmp_path / "pd"), "--port", "0", "--log-format", "json",
                       "--tls-cert", pki["bookie"].cert, "--tls-key", pki["bookie"].key,
                       "--tls-trust-store", pki["ca"].path, "--tls-client-auth"], tmp_path / "bookie.log")
    try:
        bookie_id = await p.await_ready()
        good = BookieClient(timeout_s=5, tls=_client_tls(pki))
        plain = BookieClient(timeout_s=3)
        try:
            await good.add_entry(bookie_id, 3, 0, MK, pack_entry(3, 0, -1, 2, b"hi"))
            assert (await good.read_entry(bookie_id, 3, 0)).body.endswith(b"hi")
            with pytest.raises(BookieUnavailableError):
                await plain.read_entry(bookie_id, 3, 0)
        finally:
            await good.close()
            await plain.close()
    finally:
        p.stop()
        await p.await_exit(30)
