"""ok-to-stop and planned restarts that cost nothing, on a local cluster of our reference bookies with a
daemon beside every bookie (real ZooKeeper, real processes): a rolling restart of every bookie behind
``shell oktostop --open-window`` copies nothing and leaves no marker, a crash in the middle (no window)
heals at once with ``lostBookieRecoveryDelay=0``, and a "no" names the ledger that blocks."""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest

from autorecovery.testing.local_cluster import LocalCluster
from test_http import Http
from test_shell_support import arun, shell, start_daemon, wait_unregistered, wait_until, write_ledgers, zk_session

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("oktostop"), bookies=4, racks=1).up()
    try:
        ports = [start_daemon(c, i, httpAdminMutationsEnabled="true" if i == 0 else "false")[0] for i in c.bookies]
        yield c, ports
    finally:
        c.down()


def bytes_copied(ports: list[int]) -> float:
    """NUM_BYTES_WRITTEN of every worker (the sum of the OpStats' _sum series over the daemons)."""
    total = 0.0
    for p in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{p}/metrics", timeout=10) as r:
            text = r.read().decode()
        for m in re.finditer(r"^replication_worker_NUM_BYTES_WRITTEN_sum(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.M):
            total += float(m.group(1))
    return total


def marked(c: LocalCluster) -> set[int]:
    async def go():
        async with zk_session(c) as (_zk, _p, urm):
            return await urm.list_marked_ids()
    return arun(go())


def maint(c: LocalCluster) -> dict:
    r = shell(c, "maintenance", "list", "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def window_of(c: LocalCluster, b: str) -> dict | None:
    return next((w for w in maint(c)["windows"] if w["target"] == b), None)


def planned_restart(c: LocalCluster, i: int) -> tuple[float, float]:
    """The hook's line, a graceful stop, a start, and the wait for the window to close by itself;
    returns (s the oktostop answer took, s from the bookie's start returning to the window's close)."""
    b = c.bookie_id(i)
    t0 = time.monotonic()
    r = shell(c, "oktostop", "-bookieid", b, "--for", "300")
    answer_s = time.monotonic() - t0
    assert r.exit_code == 0 and f"ok to stop {b}" in r.stdout, (r.stdout, r.stderr)
    r = shell(c, "oktostop", "-bookieid", b, "--for", "300", "--wait", "30", "--open-window")
    assert r.exit_code == 0 and f"Maintenance window on bookie {b} for 300 s" in r.stdout, (r.stdout, r.stderr)
    assert "no auditor has loaded it" not in r.stdout
    c.stop_bookie(i)
    wait_unregistered(c, b)
    wait_until(lambda: (window_of(c, b) or {}).get("down_since_ms"), 30, 0.2, f"the auditor to see {b} down")
    c.start_bookie(i)
    t1 = time.monotonic()
    ended = lambda: [e for e in maint(c)["ended"] if e["target"] == b and e["end_reason"].startswith("auto-closed")]  # noqa: E731
    wait_until(lambda: window_of(c, b) is None and ended(), 60, 0.2, f"the window on {b} to close by itself")
    return answer_s, time.monotonic() - t1


def test_rolling_restart_of_every_bookie_costs_nothing_and_a_crash_heals(env):
    c, ports = env
    ledgers = arun(write_ledgers(c, 8, 20, E=3, WQ=2, AQ=2, size=512))
    assert len(ledgers) == 8 and not marked(c)
    copied0 = bytes_copied(ports)
    order = sorted(c.bookies)
    timings = []
    for n, i in enumerate(order):
        timings.append(planned_restart(c, i))
        assert bytes_copied(ports) == copied0, f"a planned restart of {c.bookie_id(i)} copied bytes"
        assert not marked(c), f"a planned restart of {c.bookie_id(i)} left markers"
        if n == 1:
            # a crash in the middle: no window, lostBookieRecoveryDelay=0 -> marked and healed at once
            k = order[2]
            crashed = c.kill_bookie(k)
            wait_unregistered(c, crashed)
            victims = {lid for lid, ens in ledgers.items() if crashed in ens}
            assert victims
            wait_until(lambda: bytes_copied(ports) > copied0, 60, 0.2, "the crash to be healed (bytes copied)")  # noqa: B023 - run before the loop rebinds it
            wait_until(lambda: not marked(c), 90, 0.2, "every marker of the crash to be healed")
            copied0 = bytes_copied(ports)
            c.start_bookie(k)
    print(f"\noktostop answers {[round(a, 2) for a, _ in timings]} s; window auto-closed "
          f"{[round(b, 2) for _, b in timings]} s after each bookie's start returned")
    r = shell(c, "maintenance", "list", "--json")
    assert json.loads(r.stdout)["windows"] == [] and not marked(c)


def test_oktostop_says_no_naming_the_ledger_when_a_partner_is_down(env):
    c, ports = env
    ens = arun(write_ledgers(c, 1, 5, E=2, WQ=2, AQ=2))
    (lid, (x, y)), = ens.items()
    xi = next(i for i in c.bookies if c.bookie_id(i) == x)
    r = shell(c, "maintenance", "start", "--bookie", x, "--ttl", "10m", "--reason", "disk swap")
    assert r.exit_code == 0, r.output
    c.stop_bookie(xi)  # planned, in a window: not healed, so it stays down
    try:
        wait_unregistered(c, x)
        r = shell(c, "oktostop", "-bookieid", y, "--for", "600")
        assert r.exit_code == 3, (r.stdout, r.stderr)
        assert f"NOT ok to stop {y}" in r.stdout and str(lid) in r.stdout and x in r.stdout
        assert "no maintenance window would be opened for 600 s" in r.stdout
        doc = json.loads(shell(c, "oktostop", "-bookieid", y, "--json").stdout)
        assert doc["ok"] is False and lid in doc["blocking_ledgers"] and doc["blocking_ledger_count"] >= 1
        # the hook waits a bounded time, opens nothing, exits 3
        r = shell(c, "oktostop", "-bookieid", y, "--for", "60", "--wait", "1", "--open-window")
        assert r.exit_code == 3 and window_of(c, y) is None, r.stdout
        http = Http(ports[0])
        code, body = http.get(f"/api/v1/autorecovery/ok_to_stop?bookie={y}&for=600")
        assert code == 409 and json.loads(body)["window_would_open"] is False, body
        code, body = http.put("/api/v1/autorecovery/ok_to_stop", {"bookie": y, "for": "60", "wait": 0})
        assert code == 409 and window_of(c, y) is None, body
    finally:
        c.start_bookie(xi)
        assert shell(c, "maintenance", "stop", "--bookie", x).exit_code == 0


def test_bad_input_one_line_and_mutations_behind_the_switch(env):
    c, ports = env
    r = shell(c, "oktostop", "-bookieid", "10.9.9.9:3181")
    assert r.exit_code == 2 and r.stderr.strip().count("\n") == 0 and "unknown bookie id '10.9.9.9:3181'" in r.stderr
    r = shell(c, "oktostop", "-bookieid", "nocolon")
    assert r.exit_code == 2 and "bad bookie id 'nocolon'" in r.stderr
    r = shell(c, "oktostop", "-bookieid", c.bookie_id(0), "--for", "soon")
    assert r.exit_code == 2 and "--for" in r.stderr and "soon" in r.stderr
    r = shell(c, "oktostop", "-bookieid", c.bookie_id(0), "--open-window")
    assert r.exit_code == 2 and "--open-window needs --for" in r.stderr
    code, body = Http(ports[0]).get("/api/v1/autorecovery/ok_to_stop?bookie=10.9.9.9:3181")
    assert code == 400 and "unknown bookie id" in body
    code, body = Http(ports[0]).get(f"/api/v1/autorecovery/ok_to_stop?bookie={c.bookie_id(0)}&for=-5")
    assert code == 400 and "for" in body
    code, body = Http(ports[0]).get(f"/api/v1/autorecovery/ok_to_stop?bookie={c.bookie_id(0)}")
    assert code == 200 and json.loads(body)["ok"] is True, body
    # daemon 1 has the mutation switch off: the hook's PUT is refused and opens nothing
    code, body = Http(ports[1]).put("/api/v1/autorecovery/ok_to_stop", {"bookie": c.bookie_id(0), "for": "60"})
    assert code == 403 and window_of(c, c.bookie_id(0)) is None, body


def test_a_bookie_being_drained_counts_as_down(env):
    c, _ports = env
    (lid, (x, y)), = arun(write_ledgers(c, 1, 3, E=2, WQ=2, AQ=2)).items()
    assert shell(c, "oktostop", "-bookieid", y).exit_code == 0

    async def drain_record(create: bool) -> None:
        async with zk_session(c) as (zk, p, _urm):
            if create:
                await zk.create(f"{p.underreplication}/drain", json.dumps({"bookie_id": x, "state": "running"}).encode(),
                                makepath=True)
            else:
                await zk.delete(f"{p.underreplication}/drain")

    arun(drain_record(True))
    try:
        r = shell(c, "oktostop", "-bookieid", y, "--json")
        doc = json.loads(r.stdout)
        assert r.exit_code == 3 and lid in doc["blocking_ledgers"] and x in doc["counted_down"], r.stdout
    finally:
        arun(drain_record(False))
