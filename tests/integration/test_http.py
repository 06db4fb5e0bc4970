"""Every HTTP endpoint of the daemon against a real cluster (upstream paths and bodies; ours for
/healthz, /readyz, /progress), and the mutations switch."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from autorecovery.testing.local_cluster import LocalCluster
from test_shell_support import (
    arun,
    metadata,
    read_all,
    start_daemon,
    wait_unregistered,
    wait_until,
    write_ledgers,
    zk_session,
)

pytestmark = pytest.mark.integration


class Http:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def call(self, method: str, path: str, body=None, raw: bytes | None = None) -> tuple[int, str]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path):
        return self.call("GET", path)

    def put(self, path, body=None, raw=None):
        return self.call("PUT", path, body, raw)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("http"), bookies=4, racks=2).up()
    try:
        port_rw, _ = start_daemon(c, 0, httpAdminMutationsEnabled="true")
        port_ro, _ = start_daemon(c, 1)
        yield c, Http(port_rw), Http(port_ro)
    finally:
        c.down()


def test_healthz_readyz_metrics(env):
    c, rw, _ro = env
    code, body = rw.get("/healthz")
    assert code == 200 and json.loads(body)["status"] == "alive"
    code, body = rw.get("/readyz")
    doc = json.loads(body)
    assert code == 200 and doc["ready"] is True and doc["zookeeper"] == "CONNECTED"
    assert doc["roles"]["worker"] and doc["roles"]["election"] and doc["roles"]["bookie_info_reader"]
    code, text = rw.get("/metrics")
    assert code == 200
    assert "# TYPE autorecovery_bookie_free_disk_bytes gauge" in text
    assert f'autorecovery_placement_weight{{bookie_id="{c.bookie_id(2)}"}}' in text
    # upstream names, no _total suffix on upstream counters
    assert "# TYPE replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED counter\n" in text
    assert "\nreplication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED " in text
    # exactly one of the two daemons is the auditor, and says so
    elected = [t for t in (text, _ro.get("/metrics")[1]) if "\nautorecovery_auditor_elected 1.0\n" in t]
    others = [t for t in (text, _ro.get("/metrics")[1]) if "\nautorecovery_auditor_elected 0.0\n" in t]
    assert len(elected) == 1 and len(others) == 1
    assert "\nauditor_NUM_LEDGERS_CHECKED " in elected[0]
    assert "NUM_LEDGERS_CHECKED_total" not in text


def test_status_get_put_and_mutation_switch(env):
    _c, rw, ro = env
    assert rw.get("/api/v1/autorecovery/status") == (200, '{"enabled": true}')
    code, body = ro.put("/api/v1/autorecovery/status?enabled=false")
    assert code == 403 and "httpAdminMutationsEnabled" in body
    assert rw.get("/api/v1/autorecovery/status") == (200, '{"enabled": true}')
    try:
        assert rw.put("/api/v1/autorecovery/status?enabled=false") == (200, '{"enabled": false}')
        assert ro.get("/api/v1/autorecovery/status") == (200, '{"enabled": false}')
        assert rw.put("/api/v1/autorecovery/status?enabled=false") == (200, '{"enabled": false}')  # idempotent
    finally:
        assert rw.put("/api/v1/autorecovery/status?enabled=true") == (200, '{"enabled": true}')
    code, body = rw.put("/api/v1/autorecovery/status")
    assert code == 400 and "Param 'enabled' not found" in body


def test_who_is_auditor(env):
    c, rw, ro = env
    code, body = rw.get("/api/v1/autorecovery/who_is_auditor")
    assert (code, body) == (200, f"Auditor: {c.bookie_id(0)}")  # upstream >= 4.12: "Auditor: " + BookieId
    assert ro.get("/api/v1/autorecovery/who_is_auditor") == (code, body)


def test_heartbeat(env):
    _c, rw, ro = env
    assert rw.get("/heartbeat") == (200, "OK\n")  # upstream HeartbeatService
    assert ro.get("/heartbeat") == (200, "OK\n")


def test_list_bookies(env):
    c, rw, _ro = env
    ids = sorted(c.bookie_ids())
    code, body = rw.get("/api/v1/bookie/list_bookies")
    assert code == 200 and json.loads(body) == {b: None for b in ids}
    assert json.loads(rw.get("/api/v1/bookie/list_bookies?type=rw")[1]) == {b: None for b in ids}
    doc = json.loads(rw.get("/api/v1/bookie/list_bookies?type=rw&print_hostnames=true")[1])
    assert doc == {b: b.rsplit(":", 1)[0] for b in ids}
    assert rw.get("/api/v1/bookie/list_bookies?type=ro") == (200, "{}")


def test_server_config(env):
    _c, rw, ro = env
    code, body = rw.get("/api/v1/config/server_config")
    doc = json.loads(body)
    assert code == 200 and all(isinstance(v, str) for v in doc.values())
    assert doc["lostBookieRecoveryDelay"] == "0" and doc["httpAdminMutationsEnabled"] == "true"
    assert json.loads(ro.get("/api/v1/config/server_config")[1]).get("httpAdminMutationsEnabled") != "true"
    code, body = rw.put("/api/v1/config/server_config", {"lostBookieRecoveryDelay": "5"})
    assert code == 405 and "restart" in body
    assert json.loads(rw.get("/api/v1/config/server_config")[1])["lostBookieRecoveryDelay"] == "0"


def test_lost_bookie_recovery_delay_and_trigger_audit(env):
    _c, rw, ro = env
    assert rw.get("/api/v1/autorecovery/lost_bookie_recovery_delay") == (200, "lostBookieRecoveryDelay value: 0")
    try:
        assert rw.put("/api/v1/autorecovery/lost_bookie_recovery_delay", {"delay_seconds": 3}) == \
            (200, "Success set lostBookieRecoveryDelay to 3")
        assert ro.get("/api/v1/autorecovery/lost_bookie_recovery_delay") == (200, "lostBookieRecoveryDelay value: 3")
    finally:
        rw.put("/api/v1/autorecovery/lost_bookie_recovery_delay", {"delay_seconds": 0})
    code, body = rw.put("/api/v1/autorecovery/lost_bookie_recovery_delay", {"wrong": 1})
    assert code == 400 and "not contains lostBookieRecoveryDelay" in body
    code, body = rw.put("/api/v1/autorecovery/lost_bookie_recovery_delay", raw=b"{not json")
    assert code == 400 and "not JSON" in body
    assert rw.put("/api/v1/autorecovery/trigger_audit") == (200, "Success trigger audit.")
    assert ro.put("/api/v1/autorecovery/trigger_audit")[0] == 403


def test_list_under_replicated_ledger(env):
    c, rw, _ro = env
    assert rw.get("/api/v1/autorecovery/list_under_replicated_ledger") == (404, "No under replicated ledgers found")
    a, b = c.bookie_id(2), c.bookie_id(3)
    rw.put("/api/v1/autorecovery/status?enabled=false")

    async def mark(on: bool):
        async with zk_session(c) as (_zk, _paths, urm):
            if on:
                await urm.mark_underreplicated(700001, [a])
                await urm.mark_underreplicated(700002, [a, b])
            else:
                for lid in (700001, 700002):
                    urm.held[lid] = -1
                    await urm.mark_replicated(lid)

    arun(mark(True))
    try:
        assert rw.get("/api/v1/autorecovery/list_under_replicated_ledger") == (200, "[700001, 700002]")
        code, body = rw.get("/api/v1/autorecovery/list_under_replicated_ledger?printmissingreplica")
        assert code == 200 and json.loads(body) == {"700001": [a], "700002": [a, b]}
        assert rw.get(f"/api/v1/autorecovery/list_under_replicated_ledger?missingreplica={b}") == (200, "[700002]")
        assert rw.get(f"/api/v1/autorecovery/list_under_replicated_ledger?excludingmissingreplica={b}") == \
            (200, "[700001]")
        code, body = rw.get("/api/v1/autorecovery/list_under_replicated_ledger?missingreplica=bad")
        assert code == 400 and "bad missing replica" in body
    finally:
        arun(mark(False))
        rw.put("/api/v1/autorecovery/status?enabled=true")


def test_list_bookie_info_and_cluster_info(env):
    c, rw, _ro = env
    code, body = rw.get("/api/v1/bookie/list_bookie_info")
    doc = json.loads(body)
    assert code == 200 and set(doc) == set(c.bookie_ids()) | {"ClusterInfo: "}
    for b in c.bookie_ids():
        assert doc[b].startswith(": {Free: ") and ", Total: " in doc[b] and doc[b].endswith("},")
    assert doc["ClusterInfo: "].startswith("{Free: ")
    code, body = rw.get("/api/v1/bookie/cluster_info")
    info = json.loads(body)
    assert code == 200 and info["auditorElected"] is True and info["writableBookiesCount"] == 4


def test_ledger_metadata(env):
    c, rw, _ro = env
    lid, ens = next(iter(arun(write_ledgers(c, 1, 3, 2, 2, 2)).items()))
    code, body = rw.get(f"/api/v1/ledger/metadata?ledger_id={lid}")
    doc = json.loads(body)
    assert code == 200 and list(doc) == [str(lid)]  # upstream: {"<ledgerId>": <LedgerMetadata as Jackson JSON>}
    md = doc[str(lid)]
    assert md["allEnsembles"] == {"0": [{"id": b} for b in ens]}
    assert md["ledgerId"] == lid and md["lastEntryId"] == 2 and md["closed"] is True and md["state"] == "CLOSED"
    assert (md["ensembleSize"], md["writeQuorumSize"], md["ackQuorumSize"]) == (2, 2, 2)
    assert md["digestType"] in ("CRC32", "MAC", "CRC32C", "DUMMY") and isinstance(md["password"], str)
    assert md["metadataFormatVersion"] == 3 and md["customMetadata"] == {}
    ours = json.loads(rw.get(f"/api/v1/ledger/metadata?ledger_id={lid}&format=autorecovery")[1])
    assert ours["ensembles"] == {"0": list(ens)} and ours["ledgerId"] == lid
    assert rw.get("/api/v1/ledger/metadata?ledger_id=987654")[0] == 404
    assert rw.get("/api/v1/ledger/metadata?ledger_id=abc")[0] == 400
    assert rw.get("/api/v1/ledger/metadata")[0] == 400


def test_progress_and_recover_job(env):
    c, rw, ro = env
    code, body = rw.get("/api/v1/autorecovery/progress")
    doc = json.loads(body)
    assert code == 200 and set(doc) == {"cluster", "worker", "jobs", "maintenance", "by_topic"}
    assert {"tenants", "namespaces", "topics", "ledgers", "truncated"} <= set(doc["by_topic"])
    assert doc["maintenance"]["windows"] == [] and "error" not in doc["maintenance"]
    assert {"ledgers_remaining", "bytes_remaining", "rate_bytes_per_s", "eta_s", "blocked", "ledgers_blocked",
            "blocked_summary", "stalled_s"} <= set(doc["cluster"])
    assert {"ledgers_in_progress", "bytes_remaining", "rate_bytes_per_s", "ledgers_done", "bytes_copied"} \
        <= set(doc["worker"])
    src = c.bookie_id(3)
    written = arun(write_ledgers(c, 2, 10, 3, 3, 2))
    before = {lid: arun(read_all(c, lid)) for lid in written}
    assert ro.put("/api/v1/autorecovery/bookie", {"bookie_src": [src]})[0] == 403
    code, body = rw.put("/api/v1/autorecovery/bookie", {"bookie_src": ["nonsense"]})
    assert code == 400 and "bad bookie_src 'nonsense'" in body
    # issue 15: a running (registered) source is refused unless forced, and its cookie is never deleted
    code, body = rw.put("/api/v1/autorecovery/bookie", {"bookie_src": [src]})
    assert code == 409 and f"bookie {src} is still running" in body and '"force": true' in body
    code, body = rw.put("/api/v1/autorecovery/bookie", {"bookie_src": [src], "force": True, "delete_cookie": True})
    assert code == 409 and "cookie is never deleted" in body
    code, body = rw.put("/api/v1/autorecovery/bookie", {"bookie_src": [src], "force": "yes"})
    assert code == 400 and "bad force 'yes'" in body
    code, body = rw.put("/api/v1/autorecovery/bookie", {"bookie_src": [src], "delete_cookie": False, "force": True})
    assert code == 200 and body.startswith("Success send recovery request command.")

    def job_state():
        jobs = json.loads(rw.get("/api/v1/autorecovery/progress")[1])["jobs"]
        return jobs[-1] if jobs else None

    wait_until(lambda: job_state() and job_state()["state"] != "running", 60, 0.2, "recover job")
    job = job_state()
    assert job["kind"] == "recover" and job["state"] == "done", job
    assert job["result"]["ok"] is True
    for lid in written:
        assert src not in arun(metadata(c, lid)).all_bookies()
        assert arun(read_all(c, lid)) == before[lid]


def test_decommission(env):
    c, rw, ro = env
    victim = c.bookie_id(3)
    code, body = rw.put("/api/v1/autorecovery/decommission", {"bookie_src": victim})
    assert code == 409 and "is not shutdown yet" in body
    assert ro.put("/api/v1/autorecovery/decommission", {"bookie_src": victim})[0] == 403
    assert rw.put("/api/v1/autorecovery/decommission", {})[0] == 400
    written = arun(write_ledgers(c, 2, 10, 3, 3, 2))
    c.kill_bookie(3)
    wait_unregistered(c, victim)
    answer = {}

    def accepted() -> bool:  # the daemon's own watcher sees the bookie leave a moment after our session does
        answer["r"] = rw.put("/api/v1/autorecovery/decommission", {"bookie_src": victim, "timeout_s": 60})
        return not (answer["r"][0] == 409 and "is not shutdown yet" in answer["r"][1])

    wait_until(accepted, 15, 0.1, "the daemon to see the killed bookie unregistered")
    code, body = answer["r"]
    assert code == 200 and body.startswith(f"Success send decommission Bookie command {victim}"), body

    def job():
        jobs = [j for j in json.loads(rw.get("/api/v1/autorecovery/progress")[1])["jobs"] if j["kind"] == "decommission"]
        return jobs[-1] if jobs else None

    wait_until(lambda: job() and job()["state"] != "running", 90, 0.2, "decommission job")
    assert job()["state"] == "done", job()
    assert job()["result"]["cookie_deleted"] is True
    for lid in written:
        assert victim not in arun(metadata(c, lid)).all_bookies()


def test_readyz_names_a_bookie_speaking_no_protocol_of_ours(env):
    # issue 9: a bookie advertising a protocol we do not speak cannot be checked here: say so, do not guess
    from autorecovery.testing.stock_bookie import StockBookie

    c, rw, _ro = env
    stock = StockBookie()
    try:
        async def register():
            async with zk_session(c) as (zk, paths, _urm):
                await zk.create(paths.available_bookie(stock.bookie_id), stock.registration())

        arun(register())
        wait_until(lambda: rw.get("/readyz")[0] == 503, 10, 0.05, "readyz 503")
        doc = json.loads(rw.get("/readyz")[1])
        assert doc["ready"] is False
        assert doc["foreign_bookies"] == {stock.bookie_id: ["thrift-rpc"]}
        assert any(stock.bookie_id in r and "thrift-rpc" in r for r in doc["reasons"]), doc["reasons"]
    finally:
        async def unregister():
            async with zk_session(c) as (zk, paths, _urm):
                await zk.delete(paths.available_bookie(stock.bookie_id))

        arun(unregister())
        stock.close()
    wait_until(lambda: rw.get("/readyz")[0] == 200, 10, 0.05, "readyz 200 again")


def test_request_bodies_are_validated_up_front(env):
    """Issue 15 regressions: NaN/"abc"/negative timeout_s, non-string bookie_src and 100k-deep JSON were
    accepted (a never-ending job) or gave 500; each is now a 400 naming the field, and no job is started."""
    c, rw, _ro = env
    victim = c.bookie_id(2)

    def jobs():
        return len(json.loads(rw.get("/api/v1/autorecovery/progress")[1])["jobs"])

    before = jobs()
    for timeout in (float("nan"), float("inf"), "abc", -1, True):
        code, body = rw.put("/api/v1/autorecovery/decommission", {"bookie_src": victim, "timeout_s": timeout})
        assert code == 400 and "timeout_s" in body, (timeout, code, body)
    for src in (123, {"a": 1}, [], [1]):
        code, body = rw.put("/api/v1/autorecovery/decommission", {"bookie_src": src or 5})
        assert code == 400 and "bookie_src" in body, (src, code, body)
        if src:
            code, body = rw.put("/api/v1/autorecovery/bookie", {"bookie_src": src})
            assert code == 400 and "bookie_src" in body, (src, code, body)
    code, body = rw.put("/api/v1/autorecovery/decommission", raw=b"[" * 30_000 + b"]" * 30_000)
    assert code == 400 and "not JSON" in body and "Traceback" not in body
    # over the 64 KiB body limit (MAX_REQUEST_BYTES): refused before any handler reads it
    code, body = rw.put("/api/v1/autorecovery/decommission", raw=b"[" * 100_000 + b"]" * 100_000)
    assert code == 413 and "Traceback" not in body
    code, body = rw.put("/api/v1/autorecovery/decommission", raw=b'{"bookie_src": ' + b"9" * 5000 + b"}")
    assert code == 400 and "not JSON" in body
    assert jobs() == before
    assert rw.get("/healthz")[0] == 200  # still serving


def test_loopback_admin_port_refuses_foreign_host_header(env):
    """Issue 15 regression (DNS rebinding): a loopback-bound admin port answers only loopback Host names."""
    import http.client

    _c, rw, _ro = env
    port = int(rw.base.rsplit(":", 1)[1])

    def get(host: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", "/api/v1/autorecovery/status", headers={"Host": host})
            r = conn.getresponse()
            return r.status, r.read().decode()
        finally:
            conn.close()

    for good in (f"127.0.0.1:{port}", "localhost", f"localhost:{port}", f"[::1]:{port}"):
        assert get(good)[0] == 200, good
    for evil in ("evil.example", f"evil.example:{port}", "10.0.0.1", ""):
        code, body = get(evil)
        assert code == 403 and "bound to loopback" in body, (evil, code, body)
