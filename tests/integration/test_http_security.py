"""Issue 25, the admin HTTP port against a live daemon process (real ZooKeeper, real sockets):

* the ledger password is never answered unless an authenticated admin asks ``?withPassword=true``;
* roles: a read token for GETs, the admin token for mutations and secrets; a non-UTF-8
  ``Authorization`` header is a 401, not a 500;
* every mutation (and refusal) writes one ``audit`` line (who, what, from where, result; never the
  token) and counts in ``autorecovery_admin_requests_total``;
* the admin token and the HTTPS certificate are re-read under the running daemon
  (``tlsCertFilesRefreshDurationSeconds``); a broken rotation keeps the old credential with a WARNING
  naming the key;
* bad inputs answer 4xx naming the field (a deeply nested body on the maintenance endpoint was a 500);
* ``expire_session`` is served only with ``httpDebugEndpointsEnabled=true``.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from http_support import PASSWORD, call, daemon, formatted_cluster, log_events, served_subject
from tls_certs import make_ca

from autorecovery.testing.waits import wait_until as wait

pytestmark = pytest.mark.integration

ADMIN, READ = "admin-Token-25", "read-Token-25"
PW_B64 = base64.b64encode(PASSWORD).decode()


@pytest.fixture(scope="module")
def zk(zk_server):
    return formatted_cluster(zk_server.connect_string)


@pytest.fixture
def tokens(tmp_path):
    (tmp_path / "admin.token").write_text(ADMIN + "\n")
    (tmp_path / "read.token").write_text(READ + "\n")
    return {"httpAdminTokenFile": str(tmp_path / "admin.token"), "httpReadTokenFile": str(tmp_path / "read.token")}


def test_default_port_never_answers_the_password(zk, tmp_path):
    connect, lid = zk
    d = daemon(tmp_path, connect, httpAdminMutationsEnabled="true")
    try:
        path = f"/api/v1/ledger/metadata?ledger_id={lid}"
        code, body, _ = call(d.http_port, "GET", path)
        assert code == 200, body
        md = json.loads(body)[str(lid)]
        assert md["password"] == "OMITTED" and md["digestType"] == "MAC"
        assert PW_B64 not in body and PASSWORD.decode() not in body
        # no credential configured: nobody is authenticated, so nobody gets the secret
        code, body, _ = call(d.http_port, "GET", path + "&withPassword=true")
        assert code == 403 and "withPassword" in body and PW_B64 not in body
        assert PW_B64 not in d.tail(10**7) and PASSWORD.decode() not in d.tail(10**7)
    finally:
        d.stop()


def test_roles_tokens_audit_and_metric(zk, tmp_path, tokens):
    connect, lid = zk
    audit_file = tmp_path / "audit.log"
    d = daemon(tmp_path, connect, httpAdminMutationsEnabled="true", httpAuditLogFile=str(audit_file), **tokens)
    port = d.http_port
    status = "/api/v1/autorecovery/status"
    meta = f"/api/v1/ledger/metadata?ledger_id={lid}"
    try:
        # every GET needs a token once httpReadTokenFile is set
        code, _, headers = call(port, "GET", status)
        assert code == 401 and "Bearer" in headers.get("WWW-Authenticate", "")
        assert call(port, "GET", status, token=READ)[0] == 200
        assert call(port, "GET", status, token=ADMIN)[0] == 200
        assert call(port, "GET", status, token="nope")[0] == 401
        # a non-UTF-8 Authorization header is a wrong credential, not a server error
        code, body, _ = call(port, "GET", status, token=b"\xff\xfe\x80")
        assert code == 401 and "Authorization" in body
        code, body, _ = call(port, "PUT", status + "?enabled=true", token=b"\xc3\x28")
        assert code == 401
        # mutations and secrets need the admin role
        code, body, _ = call(port, "PUT", status + "?enabled=false", token=READ)
        assert code == 403 and "read-only" in body
        code, body, _ = call(port, "GET", meta + "&withPassword=true", token=READ)
        assert code == 403 and PW_B64 not in body
        code, body, _ = call(port, "GET", meta + "&withPassword=true")
        assert code == 401 and PW_B64 not in body
        code, body, _ = call(port, "GET", meta + "&withPassword=true", token=ADMIN)
        assert code == 200 and json.loads(body)[str(lid)]["password"] == PW_B64
        code, body, _ = call(port, "GET", meta, token=ADMIN)
        assert json.loads(body)[str(lid)]["password"] == "OMITTED"
        code, body, _ = call(port, "PUT", status + "?enabled=false", token=ADMIN)
        assert code == 200 and json.loads(body) == {"enabled": False}
        assert call(port, "PUT", status + "?enabled=true", token=ADMIN)[0] == 200

        # one audit line per mutation / secret read / refusal: who, what, where from, result; no token
        audits = wait(lambda: [a for a in log_events(d, "audit") if a.get("status") == 200
                               and a.get("method") == "PUT"], 10, "the audit lines")
        a = audits[0]
        assert a["who"] == "token:admin" and a["role"] == "admin" and a["path"] == status
        assert a["params"] == {"enabled": "false"} and a["remote"] == "127.0.0.1" and a["result"] == "ok"
        secret = [x for x in log_events(d, "audit") if x.get("params", {}).get("withPassword")]
        assert {(x["who"], x["status"]) for x in secret} >= {("token:read", 403), ("anonymous", 401),
                                                              ("token:admin", 200)}
        log = d.tail(10**7)
        assert ADMIN not in log and READ not in log and PW_B64 not in log
        # httpAuditLogFile: the same audit lines, JSON, nothing else
        in_file = [json.loads(ln) for ln in audit_file.read_text().splitlines()]
        assert in_file and all(x["event"] == "audit" for x in in_file)
        assert {(x["who"], x["status"]) for x in in_file} == {(x["who"], x["status"]) for x in log_events(d, "audit")}
        assert ADMIN not in audit_file.read_text() and READ not in audit_file.read_text()
        code, text, _ = call(port, "GET", "/metrics", token=READ)
        assert code == 200
        assert ('autorecovery_admin_requests_total{action="PUT /api/v1/autorecovery/status",result="ok"} 2.0'
                in text), [ln for ln in text.splitlines() if "admin_requests" in ln]
        assert 'action="PUT /api/v1/autorecovery/status",result="denied"} 2.0' in text
        assert "# HELP autorecovery_admin_requests_total " in text
    finally:
        d.stop()


def _replace(path, text: str) -> None:
    """Rotate a file the way certificate managers do: write aside, rename over."""
    tmp = f"{path}.new"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def test_token_and_certificate_rotate_under_the_live_daemon(zk, tmp_path):
    connect, _lid = zk
    ca = make_ca(tmp_path / "pki", "ours")
    one, two = ca.issue("http-one"), ca.issue("http-two")
    cert, key = tmp_path / "http.pem", tmp_path / "http-key.pem"
    cert.write_text(Path(one.cert).read_text())
    key.write_text(Path(one.key).read_text())
    token_file = tmp_path / "admin.token"
    token_file.write_text("first-Token\n")
    d = daemon(tmp_path, connect, httpAdminMutationsEnabled="true", httpAdminTokenFile=str(token_file),
               httpServerTlsEnable="true", httpServerCertificatePath=str(cert), httpServerKeyPath=str(key),
               tlsCertFilesRefreshDurationSeconds="1")
    port, trust = d.http_port, ca.path
    path = "/api/v1/autorecovery/status?enabled=true"
    pid = d.proc.pid
    try:
        assert served_subject(port, trust) == "http-one"
        assert call(port, "PUT", path, token="first-Token", ca=trust)[0] == 200
        # rotate the admin token: the old one is refused, the new one accepted, same process
        _replace(token_file, "second-Token\n")
        wait(lambda: call(port, "PUT", path, token="first-Token", ca=trust)[0] == 401, 15, "the old token refused")
        assert call(port, "PUT", path, token="second-Token", ca=trust)[0] == 200
        # a broken rotation (empty file) keeps the last good token and says so, naming the key
        _replace(token_file, "")
        wait(lambda: any(e.get("level") == "warning" and e.get("key") == "httpAdminTokenFile"
                         for e in log_events(d, "httpAdminTokenFile not reloaded; the previous token stays valid")),
             15, "the WARNING naming httpAdminTokenFile")
        assert call(port, "PUT", path, token="second-Token", ca=trust)[0] == 200
        # rotate the certificate and key: new handshakes get the new certificate
        _replace(cert, Path(two.cert).read_text())
        _replace(key, Path(two.key).read_text())
        wait(lambda: served_subject(port, trust) == "http-two", 15, "the new certificate served")
        assert call(port, "GET", "/heartbeat", ca=trust)[0] == 200
        # a certificate file that is not PEM keeps the current one, with a WARNING
        _replace(cert, "not a certificate\n")
        wait(lambda: log_events(d, "admin HTTPS certificate not reloaded; the previous one is still served"),
             15, "the WARNING about the certificate")
        assert served_subject(port, trust) == "http-two"
        assert d.alive and d.proc.pid == pid
    finally:
        d.stop()


BAD_INPUTS = [
    # (method, path, body, expected status, text naming the field)
    ("PUT", "/api/v1/autorecovery/maintenance", b"[" * 5000 + b"]" * 5000, 400, "nests deeper"),
    ("PUT", "/api/v1/autorecovery/maintenance", b'{"action": "start", "action": "stop"}', 400, "'action' appears twice"),
    ("PUT", "/api/v1/autorecovery/maintenance", b'{"action": "stop", "rack": "/r", "colour": 1}', 400, "unknown field 'colour'"),
    ("PUT", "/api/v1/autorecovery/maintenance", b'{"action": "stop", "rack": "/r", "override": "yes"}', 400, "override"),
    ("PUT", "/api/v1/autorecovery/maintenance", b"\xff\xfe{}", 400, "UTF-8"),
    ("PUT", "/api/v1/autorecovery/lost_bookie_recovery_delay", b'{"delay_seconds": NaN}', 400, "field 'delay_seconds': NaN"),
    ("PUT", "/api/v1/autorecovery/lost_bookie_recovery_delay", b'{"delay_seconds": [1]}', 400, "delay_seconds"),
    ("PUT", "/api/v1/autorecovery/lost_bookie_recovery_delay", b'{"delay_seconds": 1e999}', 400, "delay_seconds"),
    ("PUT", "/api/v1/autorecovery/lost_bookie_recovery_delay", b'{"delay_seconds": "9' + b"9" * 5000 + b'"}', 400,
     "lostBookieRecoveryDelay"),
    ("PUT", "/api/v1/autorecovery/decommission", b'{"bookie_src": "127.0.0.1:3181", "timeout_s": "x"}', 400, "timeout_s"),
    ("PUT", "/api/v1/autorecovery/bookie", b'{"bookie_src": ["127.0.0.1:1"], "force": 1}', 400, "force"),
    ("PUT", "/api/v1/autorecovery/status?enabled=maybe", None, 400, "enabled"),
    ("GET", "/api/v1/bookie/list_bookies?type=all", None, 400, "type"),
    ("GET", "/api/v1/bookie/list_bookies?print_hostnames=2", None, 400, "print_hostnames"),
    ("GET", "/api/v1/ledger/metadata?ledger_id=NaN", None, 400, "ledger id"),
    ("GET", "/api/v1/ledger/metadata?ledger_id=" + "9" * 5000, None, 400, "ledger id"),
    ("GET", "/api/v1/ledger/metadata?ledger_id=1&format=xml", None, 400, "format"),
    ("GET", "/api/v1/autorecovery/list_under_replicated_ledger?missingreplica=%ff%fe", None, 400, "missing replica"),
]


def test_bad_inputs_are_4xx_naming_the_field_and_expire_session_needs_the_debug_key(zk, tmp_path):
    connect, _lid = zk
    d = daemon(tmp_path, connect, httpAdminMutationsEnabled="true")
    try:
        for method, path, body, status, words in BAD_INPUTS:
            code, text, _ = call(d.http_port, method, path, body=body)
            assert code == status and words in text, (path, body and body[:60], code, text)
            assert "\n" not in text.strip() and len(text) < 1000 and "Traceback" not in text
        # the drill endpoint is not served without httpDebugEndpointsEnabled
        code, text, _ = call(d.http_port, "PUT", "/api/v1/autorecovery/expire_session")
        assert code == 404, text
        assert d.alive and call(d.http_port, "GET", "/healthz")[0] == 200
        assert not d.lines("error", "critical")
    finally:
        d.stop()
    d = daemon(tmp_path, connect, name="ar-debug", httpAdminMutationsEnabled="true", httpDebugEndpointsEnabled="true")
    try:
        code, text, _ = call(d.http_port, "PUT", "/api/v1/autorecovery/expire_session")
        assert code == 200 and "expired" in text
    finally:
        d.stop()


def test_client_certificate_roles(zk, tmp_path):
    connect, lid = zk
    ca = make_ca(tmp_path / "pki", "ours")
    srv, admin, viewer = ca.issue("http"), ca.issue("ops-admin"), ca.issue("viewer")
    d = daemon(tmp_path, connect, httpAdminMutationsEnabled="true", httpServerTlsEnable="true",
               httpServerCertificatePath=srv.cert, httpServerKeyPath=srv.key, httpServerClientCaPath=ca.path,
               httpAdminCertificateSubjects="ops-admin;CN=someone,O=else")
    port, path = d.http_port, "/api/v1/autorecovery/status"
    as_admin, as_viewer = (admin.cert, admin.key), (viewer.cert, viewer.key)
    try:
        assert call(port, "GET", path, ca=ca.path, cert=as_viewer)[0] == 200
        code, body, _ = call(port, "PUT", path + "?enabled=true", ca=ca.path, cert=as_viewer)
        assert code == 403 and "cert:CN=viewer is read-only" in body
        code, body, _ = call(port, "GET", f"/api/v1/ledger/metadata?ledger_id={lid}&withPassword=true", ca=ca.path,
                             cert=as_viewer)
        assert code == 403 and PW_B64 not in body
        assert call(port, "PUT", path + "?enabled=true", ca=ca.path, cert=as_admin)[0] == 200
        code, body, _ = call(port, "GET", f"/api/v1/ledger/metadata?ledger_id={lid}&withPassword=true", ca=ca.path,
                             cert=as_admin)
        assert code == 200 and json.loads(body)[str(lid)]["password"] == PW_B64
        whos = wait(lambda: {(a["who"], a["status"]) for a in log_events(d, "audit")} >= {
            ("cert:CN=viewer", 403), ("cert:CN=ops-admin", 200)}, 10, "the audit lines of both certificates")
        assert whos
    finally:
        d.stop()


def test_shell_mutations_write_an_audit_line(zk):
    import getpass

    from test_shell_support import cli

    connect, _lid = zk

    def audits(res) -> list[dict]:
        return [doc for doc in (json.loads(ln) for ln in res.stderr.splitlines() if ln.startswith("{"))
                if doc.get("event") == "audit"]

    try:
        res = cli("shell", "--zk", connect, "autorecovery", "-disable")
        assert res.exit_code == 0, res.stderr
        [a] = audits(res)
        assert a["who"] == f"os:{getpass.getuser()}" and a["via"] == "shell" and a["action"] == "autorecovery"
        assert a["params"] == {"disable": "True"} and a["result"] == "ok" and a["zk"] == connect
        res = cli("shell", "--zk", connect, "autorecovery")  # a read: no audit line
        assert res.exit_code == 0 and "disabled" in res.stdout.lower() and not audits(res)
        res = cli("shell", "--zk", connect, "ledgermetadata", "-l", "12345", "-restorefromfile", "/nonexistent/md")
        assert res.exit_code == 1 and [(x["action"], x["result"]) for x in audits(res)] == [("ledgermetadata", "failed")]
    finally:
        assert cli("shell", "--zk", connect, "autorecovery", "-enable").exit_code == 0
