"""Issue 16: the operator surface of maintenance windows (shell and HTTP), and the drill aid that
expires a daemon's ZooKeeper session, against a real cluster and daemon processes."""

from __future__ import annotations

import json
import re

import pytest

from autorecovery.testing.local_cluster import LocalCluster
from test_http import Http
from test_shell_support import daemon_log, shell, start_daemon, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("maint"), bookies=3, racks=1).up()
    try:
        port, _ = start_daemon(c, 0, httpAdminMutationsEnabled="true", httpDebugEndpointsEnabled="true")
        yield c, Http(port)
    finally:
        c.down()


def test_shell_start_list_stop_and_bad_input(env):
    c, _http = env
    b = c.bookie_id(1)
    r = shell(c, "maintenance", "start", "--bookie", b, "--ttl", "2h", "--reason", "kernel upgrade")
    assert r.exit_code == 0, r.output
    assert re.search(rf"Maintenance window on bookie {re.escape(b)} until \d+ \(in 7\d{{3}} s\): kernel upgrade", r.output)
    r = shell(c, "maintenance", "list")
    assert r.exit_code == 0 and f"bookie {b}: 7" in r.output and "kernel upgrade" in r.output
    doc = json.loads(shell(c, "maintenance", "list", "--json").output)
    assert [w["target"] for w in doc["windows"]] == [b]
    r = shell(c, "maintenance", "stop", "--bookie", b)
    assert r.exit_code == 0 and "lostBookieRecoveryDelay applies from now" in r.output
    r = shell(c, "maintenance", "stop", "--bookie", b)
    assert r.exit_code == 1 and "No maintenance window" in r.output
    for args, needle in ((["--bookie", b, "--ttl", "soon", "--reason", "x"], "bad duration 'soon'"),
                         (["--rack", "rack1", "--ttl", "1h", "--reason", "x"], "rack 'rack1' must be a network location"),
                         (["--bookie", b, "--rack", "/r", "--ttl", "1h", "--reason", "x"], "exactly one"),
                         (["--bookie", b, "--ttl", "1h", "--reason", " "], "needs a --reason")):
        r = shell(c, "maintenance", "start", *args)
        assert r.exit_code == 2 and needle in r.stderr, (args, r.output, r.stderr)


def test_http_maintenance_behind_the_switch(env):
    _c, http = env
    code, body = http.put("/api/v1/autorecovery/maintenance",
                          {"action": "start", "rack": "/rack1", "ttl": "30m", "reason": "switch swap"})
    assert code == 200 and json.loads(body)["target"] == "/rack1", body
    code, body = http.get("/api/v1/autorecovery/maintenance")
    assert code == 200 and json.loads(body)["windows"][0]["reason"] == "switch swap"
    code, body = http.put("/api/v1/autorecovery/maintenance", {"action": "stop", "rack": "/rack1"})
    assert code == 200 and json.loads(body) == {"stopped": True}
    code, body = http.put("/api/v1/autorecovery/maintenance", {"action": "pause", "rack": "/rack1"})
    assert code == 400 and "'action'" in body
    code, body = http.put("/api/v1/autorecovery/maintenance", {"action": "start", "rack": ["/r"], "ttl": "1h",
                                                               "reason": "x"})
    assert code == 400 and "'rack' must be a string" in body


def test_expire_session_drill_the_daemon_rejoins(env):
    c, http = env
    before = daemon_log(c, 0).count("ZooKeeper session expired; restarting the worker")
    code, body = http.put("/api/v1/autorecovery/expire_session")
    assert code == 200, body
    wait_until(lambda: daemon_log(c, 0).count("ZooKeeper session expired; restarting the worker") > before, 30,
               0.1, "the daemon to see its session expire")
    wait_until(lambda: http.get("/readyz")[0] == 200, 30, 0.1, "ready again on a new session")
    wait_until(lambda: "Auditor:" in http.get("/api/v1/autorecovery/who_is_auditor")[1], 30, 0.1, "re-elected")


def test_progress_shows_windows_and_what_the_auditor_holds(env):
    c, http = env
    code, _ = http.put("/api/v1/autorecovery/maintenance",
                       {"action": "start", "bookie": c.bookie_id(2), "ttl": "10m", "reason": "disk swap"})
    assert code == 200
    try:
        doc = json.loads(http.get("/api/v1/autorecovery/progress")[1])
        assert [w["target"] for w in doc["maintenance"]["windows"]] == [c.bookie_id(2)]
        assert "held" in doc["maintenance"]
    finally:
        http.put("/api/v1/autorecovery/maintenance", {"action": "stop", "bookie": c.bookie_id(2)})
