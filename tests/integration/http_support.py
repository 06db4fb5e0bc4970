"""Helpers of the admin HTTP security and fuzz tests (issue 25): a formatted ZooKeeper chroot, a daemon
process on it (no bookies needed) and a raw HTTP/HTTPS call that can send any header bytes."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import ssl
from pathlib import Path

from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment
from autorecovery.testing.bookie_proc import format_test_cluster
from autorecovery.testing.daemon_proc import DaemonProcess
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledgers import LedgerStore, init_cluster
from autorecovery.zk.paths import Paths

#: the password of the ledger :func:`formatted_cluster` creates
PASSWORD = b"pw-Secret-25"

FAST = {"zkTimeout": "4000", "httpServerPort": "0", "lostBookieRecoveryDelay": "0",
        "auditorPeriodicCheckInterval": "0", "auditorPeriodicBookieCheckInterval": "0",
        "shutdownTimeoutSeconds": "10", "logFormat": "json"}


def formatted_cluster(zk_hosts: str) -> tuple[str, int]:
    """A fresh chroot formatted as ``cluster init`` does, holding one closed HMAC ledger whose password
    is :data:`PASSWORD`; returns (connect string, ledger id)."""

    async def go() -> tuple[str, int]:
        connect = await format_test_cluster(zk_hosts)
        zk = await ZkClient(connect).start()
        try:
            paths = Paths("/ledgers")
            await init_cluster(zk, paths)
            store = LedgerStore(zk, paths)
            lid = await store.new_ledger_id()
            await store.create(lid, LedgerMetadata(
                ensemble_size=2, write_quorum=2, ack_quorum=2, segments=(Segment(0, ("127.0.0.1:1", "127.0.0.1:2")),),
                state=LedgerState.CLOSED, digest_type=DigestType.HMAC, password=PASSWORD, ctime=1))
            return connect, lid
        finally:
            await zk.stop()

    return asyncio.run(go())


def daemon(workdir: Path, zk: str, name: str = "ar", **props: str) -> DaemonProcess:
    """A started daemon process on ``zk`` (FAST settings + ``props``)."""
    return DaemonProcess(workdir, name, {**FAST, "zkServers": zk, "bookieId": "127.0.0.1:9", **props}).start(60)


def call(port: int, method: str, path: str, *, token: str | bytes | None = None, body: bytes | None = None,
         headers: dict[str, str | bytes] | None = None, ca: str | None = None,
         cert: tuple[str, str] | None = None, timeout_s: float = 20.0) -> tuple[int, str, dict[str, str]]:
    """One request on a new connection; (status, body text, headers). ``token`` becomes
    ``Authorization: Bearer <token>`` (bytes are sent as they are); ``ca`` = HTTPS trusting it."""
    if ca:
        ctx = ssl.create_default_context(cafile=ca)
        if cert:
            ctx.load_cert_chain(*cert)
        conn: http.client.HTTPConnection = http.client.HTTPSConnection("127.0.0.1", port, context=ctx,
                                                                       timeout=timeout_s)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        hdrs: dict[str, str | bytes] = dict(headers or {})
        if token is not None:
            hdrs["Authorization"] = (b"Bearer " + token) if isinstance(token, bytes) else f"Bearer {token}"
        if body is not None:
            hdrs["Content-Length"] = str(len(body))
            hdrs.setdefault("Content-Type", "application/json")
        for k, v in hdrs.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace"), dict(resp.getheaders())
    finally:
        conn.close()


def served_subject(port: int, ca: str) -> str:
    """The CN of the certificate the HTTPS server presents on a new handshake."""
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        cert = tls.getpeercert() or {}
    return dict(x[0] for x in cert.get("subject", ()))["commonName"]


def log_events(d: DaemonProcess, event: str) -> list[dict]:
    """The daemon's JSON log lines whose event is ``event``."""
    out = []
    for ln in d.tail(10**8).splitlines():
        if ln.startswith("{"):
            try:
                doc = json.loads(ln)
            except ValueError:
                continue
            if doc.get("event") == event:
                out.append(doc)
    return out
