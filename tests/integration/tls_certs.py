"""Test certificates (issue 15): a CA and server/client certificates made with ``cryptography``.

``make_ca(dir, name)`` writes ``<name>-ca.pem`` and returns a :class:`Ca`; ``ca.issue(name, ips=...)``
writes ``<name>.pem`` (certificate) and ``<name>-key.pem`` (unencrypted PKCS#8 key) signed by it, with
IP SANs (bookie ids are ``127.0.0.x:port``) and DNS SANs. EC P-256 keys: fast to generate.

The mTLS heal set-up the TLS tests share (``test_tls.py``, ``test_tls_reload.py``, ``test_bookie_pull.py``)
is here too: :func:`client_tls` (a client's mTLS settings), :func:`bookie_tls_flags` (an ``autorecovery
bookie`` process's), :func:`init_test_cluster`, :func:`write_ledger`, :func:`mtls_daemon` (a daemon with
upstream's TLS keys), :func:`wait_healed` and :func:`read_back`.
"""

from __future__ import annotations

import datetime as dt
import io
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.config.load import load_settings
from autorecovery.daemon import Daemon
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.config.tls import TLS_CONTEXT_FACTORY, BookieTls
from autorecovery.testing.bookie_proc import format_test_cluster
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import LedgerStore, init_cluster
from autorecovery.zk.paths import Paths


@dataclass(frozen=True)
class Issued:
    """Paths of one issued certificate and its key."""

    cert: str
    key: str


@dataclass
class Ca:
    """A test certificate authority; ``path`` is its PEM certificate (the trust store)."""

    dir: Path
    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    path: str

    def issue(self, name: str, *, ips: tuple[str, ...] = ("127.0.0.1",), dns: tuple[str, ...] = ("localhost",),
              client: bool = True, server: bool = True) -> Issued:
        """Write ``<name>.pem`` and ``<name>-key.pem`` signed by this CA; returns their paths."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        sans += [x509.DNSName(d) for d in dns]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        cert_path = self.dir / f"{name}.pem"
        key_path = self.dir / f"{name}-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return Issued(str(cert_path), str(key_path))


def make_ca(directory: Path, name: str = "test") -> Ca:
    """A self-signed CA written to ``<directory>/<name>-ca.pem``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}-ca.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Ca(directory, name, key, cert, str(path))


# -- the mTLS heal set-up ------------------------------------------------------------------------------


def client_tls(cert: str, key: str, trust: str, **kw: object) -> BookieTls:
    """A client's mTLS settings: present ``cert``/``key`` (PEM paths), trust the CA in ``trust``;
    ``kw`` overrides any :class:`BookieTls` field (``refresh_s``, ``client_auth``, ...)."""
    args: dict = dict(enabled=True, client_auth=True, cert_path=cert, key_path=key, trust_path=trust)
    args.update(kw)
    return BookieTls(**args)


def bookie_tls_flags(cert: str, key: str, trust: str) -> list[str]:
    """The flags of an ``autorecovery bookie`` process that serves TLS and requires client certificates."""
    return ["--tls-cert", cert, "--tls-key", key, "--tls-trust-store", trust, "--tls-client-auth"]


async def init_test_cluster(zk_connect: str) -> str:
    """A fresh chroot formatted as ``cluster init`` does (LAYOUT, INSTANCEID, ...); its connect string."""
    connect = await format_test_cluster(zk_connect)
    zk = await ZkClient(connect).start()
    try:
        await init_cluster(zk, Paths("/ledgers"))
    finally:
        await zk.stop()
    return connect


async def write_ledger(cluster: str, tls: BookieTls, *, quorums: tuple[int, int, int] = (2, 2, 2),
                       entries: int = 20) -> tuple[int, list[str]]:
    """Create a ledger of ``quorums`` (E, WQ, AQ) over mTLS, add ``entries`` entries ``b"entry-<n>"``
    and close it; returns ``(ledger id, the first segment's ensemble)``."""
    bk = await BookKeeper.connect(cluster, tls=tls)
    try:
        lh = await bk.create_ledger(*quorums)
        for e in range(entries):
            await lh.add_entry(b"entry-%d" % e)
        await lh.close()
        return lh.ledger_id, list(lh.metadata.segments[0].ensemble)
    finally:
        await bk.close()


def mtls_daemon(cluster: str, cert: str, key: str, trust: str, **overrides: str) -> Daemon:
    """A daemon (not started) on ``cluster`` with the tests' fast timings, no HTTP, and upstream's TLS
    keys set for mTLS with ``cert``/``key`` (PEM) and the CA in ``trust``; ``overrides`` add or replace
    config keys."""
    from test_shell_support import FAST

    settings = load_settings(None, env={}, overrides={
        **FAST, "zkServers": cluster, "bookieId": "127.0.0.1:1", "httpServerEnabled": "false",
        "tlsProviderFactoryClass": TLS_CONTEXT_FACTORY, "tlsClientAuthentication": "true",
        "tlsKeyStore": key, "tlsCertificatePath": cert, "tlsTrustStore": trust, **overrides})
    assert settings.tls.enabled and settings.tls.client_auth
    return Daemon(settings, out=io.StringIO())


async def wait_healed(cluster: str, ledger_id: int, gone: str, timeout_s: float = 60) -> LedgerMetadata:
    """Wait until no segment of the ledger's metadata names bookie ``gone`` (the daemon replaced it);
    returns that metadata. Fails the test after ``timeout_s`` seconds."""
    zk = await ZkClient(cluster).start()
    try:
        store = LedgerStore(zk, Paths("/ledgers"))

        async def healed() -> bool:
            md, _ = await store.read(ledger_id)
            return gone not in md.all_bookies()

        assert await wait_for(healed, timeout_s, interval_s=0.2), "the daemon never replaced the stopped bookie"
        md, _ = await store.read(ledger_id)
        return md
    finally:
        await zk.stop()


async def read_back(cluster: str, tls: BookieTls, ledger_id: int, entries: int) -> list[bytes]:
    """The payloads of the ledger's entries ``0..entries-1``, read over mTLS."""
    bk = await BookKeeper.connect(cluster, tls=tls)
    try:
        h = await bk.open_ledger(ledger_id)
        return [e.payload for e in await h.read_entries(0, entries - 1)]
    finally:
        await bk.close()
