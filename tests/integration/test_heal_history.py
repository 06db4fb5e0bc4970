"""Heal history and the cluster at a glance against a real local cluster (ZooKeeper, bookies, two
daemons): a killed bookie's heal is recorded as one episode with the right ledger count and bytes, shown
by ``shell history`` / ``shell overview`` / ``clusterinfo --overview`` and by ``GET /history`` and
``GET /overview`` of the daemon that is NOT the auditor; an auditor failover in the middle of a heal keeps
the episode (the new auditor continues and closes it); a hostile history record is reported naming its
znode and never stops the daemons."""

from __future__ import annotations

import json

import pytest

from autorecovery.testing.local_cluster import LocalCluster
from test_http import Http
from test_shell_support import P, arun, daemon_log, metadata, ok, shell, start_daemon, wait_until, write_ledgers, zk_session

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("history"), bookies=4, racks=2).up()
    try:
        start_daemon(c, 0)  # first candidate: the auditor
        port1, _ = start_daemon(c, 1)
        yield c, Http(port1)
    finally:
        c.down()


def episodes(c: LocalCluster) -> list[dict]:
    return json.loads(ok(shell(c, "history", "--json")))["episodes"]


def of(c: LocalCluster, bookie: str) -> list[dict]:
    return [e for e in episodes(c) if e["subject"] == bookie]


def expected(c: LocalCluster, ledgers: dict[int, tuple[str, ...]], bookie: str) -> tuple[int, int]:
    """Ledgers with ``bookie`` in their ensemble now, and the sum of their metadata length."""
    mds = [arun(metadata(c, lid)) for lid in ledgers]
    hit = [md for md in mds if any(bookie in s.ensemble for s in md.segments)]
    return len(hit), sum(md.length for md in hit)


def test_killed_bookie_heal_is_one_episode_shown_from_a_non_auditor(env):
    c, http1 = env
    ledgers = arun(write_ledgers(c, 30, 40, size=1024))
    lost = c.bookie_id(3)
    n, nbytes = expected(c, ledgers, lost)
    assert n >= 1 and nbytes > 0
    assert ok(shell(c, "whoisauditor")).strip() == f"Auditor: {c.bookie_id(0)}"
    c.kill_bookie(3)
    wait_until(lambda: [e["state"] for e in of(c, lost)] == ["healed"], 90, 0.2, "the episode to close healed")
    ep = of(c, lost)[0]
    assert (ep["kind"], ep["ledgers_marked"], ep["bytes_marked"]) == ("bookie-lost", n, nbytes)
    assert (ep["ledgers_healed"], ep["bytes_healed"], ep["ledgers_left"]) == (n, nbytes, 0)
    assert ep["duration_s"] is not None and ep["closed_ms"] >= ep["detected_ms"]
    assert ep["auditors"] == [c.bookie_id(0)]
    assert ep["workers"] or ep["copied_to"], ep  # who healed it
    assert set(ep["copied_to"]) <= {c.bookie_id(i) for i in range(3)}
    assert expected(c, ledgers, lost) == (0, 0)  # really healed: nothing names the lost bookie any more

    async def writes() -> tuple[int, int]:
        async with zk_session(c) as (zk, _paths, _urm):
            return (await zk.exists(f"{P.history}/{ep['name']}")).version, (await zk.exists(P.history)).version

    ep_writes, state_writes = arun(writes())
    print(f"MEASURED {n} ledgers healed in {ep['duration_s']} s: episode setData {ep_writes}, state setData "
          f"{state_writes}")
    assert ep_writes < n  # a write per progress step, not per ledger

    # the same episode over HTTP from daemon 1, which is not the auditor
    code, body = http1.get("/api/v1/autorecovery/history")
    assert code == 200, body
    assert next(e for e in json.loads(body)["episodes"] if e["name"] == ep["name"])["ledgers_healed"] == n
    code, body = http1.get("/api/v1/autorecovery/overview")
    assert code == 200, body
    doc = json.loads(body)
    assert doc["auditor"]["bookie_id"] == c.bookie_id(0)
    assert [d["bookie_id"] for d in doc["bookies"]["down"]] == [lost]
    assert doc["bookies"]["down"][0]["since_ms"] is not None
    assert doc["underreplicated"]["ledgers"] == 0 and doc["heal"]["source"] == "daemon"
    assert doc["heal"]["last_episode"]["name"] == ep["name"]
    assert set(doc["checks"]) == {"bookie_check", "check_all_ledgers", "placement_check", "replicas_check"}
    assert http1.get("/api/v1/autorecovery/history?limit=0")[0] == 400

    # the shell, from no daemon at all: the same figures, laid out for a person and as JSON
    text = ok(shell(c, "overview"))
    assert "health: HEALTH_WARN" in text and f"down: {lost} since" in text and ep["name"] in text
    same = json.loads(ok(shell(c, "clusterinfo", "--overview", "--json")))
    assert same["heal"]["last_episode"]["ledgers_marked"] == n and same["heal"]["source"] == "episodes"
    assert "healed in" in ok(shell(c, "history"))
    # one INFO line when the episode opened, one when it closed, with its figures
    log0 = daemon_log(c, 0)
    assert f"heal episode opened: bookie-lost {lost}: {n} ledgers, {nbytes} bytes marked" in log0
    assert f"heal episode closed: bookie-lost {lost}: {n} ledgers, {nbytes} bytes marked; healed after" in log0


def test_auditor_failover_in_the_middle_keeps_the_episode(env):
    c, http1 = env
    ledgers = arun(write_ledgers(c, 4, 20, size=1024))  # on bookies 0, 1, 2 (3 is down)
    lost = c.bookie_id(2)
    n, nbytes = expected(c, ledgers, lost)
    c.kill_bookie(2)  # two bookies left: ensembles of 3 cannot be healed until a bookie returns
    wait_until(lambda: [e["state"] for e in of(c, lost)] == ["open"], 60, 0.2, "the episode to open")
    ep = of(c, lost)[0]
    assert ep["ledgers_marked"] >= n  # the ledgers of the first test healed onto bookie 2 count too
    c.stop_daemon(0)  # the auditor goes away mid-heal
    wait_until(lambda: shell(c, "whoisauditor").stdout.strip() == f"Auditor: {c.bookie_id(1)}", 60, 0.2,
               "daemon 1 to become the auditor")
    c.restart_bookie(3)  # a target returns: the new auditor's node heals
    wait_until(lambda: [e["state"] for e in of(c, lost)] == ["healed"], 120, 0.2, "the episode to close")
    done = of(c, lost)[0]
    assert done["name"] == ep["name"]  # the same episode, continued, not a new one
    assert done["auditors"] == [c.bookie_id(0), c.bookie_id(1)]
    assert done["ledgers_healed"] == done["ledgers_marked"] == ep["ledgers_marked"]
    assert done["bytes_healed"] == done["bytes_marked"] >= nbytes
    # the new auditor exports the close and the newest episode's figures (read back from ZooKeeper)
    metrics = http1.get("/metrics")[1]
    assert 'autorecovery_heal_episodes_total{kind="bookie-lost",state="healed"} 1' in metrics
    last = [ln for ln in metrics.splitlines() if ln.startswith("autorecovery_heal_last_episode_ledgers ")]
    assert last and float(last[0].split()[1]) == done["ledgers_marked"]
    assert "autorecovery_heal_episodes_open 0" in metrics


def test_hostile_history_record_is_named_and_skipped(env):
    c, http1 = env

    async def plant() -> None:
        async with zk_session(c) as (zk, _paths, _urm):
            await zk.create(f"{P.history}/e-9999999999", b'{"v": 1, "kind": "nope"')

    async def plant_state() -> None:
        async with zk_session(c) as (zk, _paths, _urm):
            await zk.set(P.history, b"\x00{truncated")

    arun(plant())
    res = shell(c, "history", "--json")
    assert res.exit_code == 0
    assert "bad heal episode /ledgers/underreplication/history/e-9999999999: not JSON" in res.stderr
    assert json.loads(res.stdout)["episodes"]  # the good ones are still listed
    code, body = http1.get("/api/v1/autorecovery/overview")
    assert code == 200 and any("e-9999999999" in e for e in json.loads(body)["errors"])
    arun(plant_state())
    res = shell(c, "overview")
    assert res.exit_code == 0, res.output
    assert "error: bad history state /ledgers/underreplication/history: not JSON" in res.stdout
    assert c.daemon_alive(1) and http1.get("/readyz")[0] == 200  # the auditor (daemon 1) is unharmed

    async def remove() -> None:
        async with zk_session(c) as (zk, _paths, _urm):
            await zk.delete(f"{P.history}/e-9999999999")

    arun(remove())


def test_admin_recover_run_is_recorded_as_an_episode(env):
    c, http1 = env
    c.restart_bookie(2)  # four bookies again: a live bookie's data can be migrated off it
    src = c.bookie_id(3)
    ledgers = arun(write_ledgers(c, 3, 10, size=512))
    n, _ = expected(c, ledgers, src)
    assert n >= 1
    out = ok(shell(c, "recover", "-f", src))
    recovered = int(out.split("Recovered ")[1].split(" ")[0])
    assert recovered >= n
    rec = [e for e in episodes(c) if e["kind"] == "recover"]
    assert len(rec) == 1 and rec[0]["subject"] == src and rec[0]["state"] == "healed"
    assert rec[0]["ledgers_healed"] == rec[0]["ledgers_marked"] == recovered
    assert rec[0]["bytes_healed"] > 0 and rec[0]["workers"]
    code, body = http1.get("/api/v1/autorecovery/history?limit=1")
    assert code == 200 and [e["kind"] for e in json.loads(body)["episodes"]] == ["recover"]
