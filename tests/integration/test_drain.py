"""Live drain (BP-56) on a real cluster of our reference bookies with a running daemon: the drained
bookie keeps serving reads while each closed segment is copied to a placement-chosen replacement and
only then swapped into the metadata; at every change each named member holds its share (never below
WQ); an open ledger is moved once its writer closes it; bad input and blockers get one line naming them.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from autorecovery.admin import drain as dr
from autorecovery.admin import ops
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.config.load import load_settings
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.ledger.striping import index_stores
from autorecovery.rpc.transport import BookieClient
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledgers import LedgerStore
from test_http import Http
from test_shell_support import P, arun, cluster_with_daemon, daemon_log, ok, shell, start_daemon, write_ledgers

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with cluster_with_daemon(tmp_path_factory.mktemp("drain"), bookies=4, racks=1) as c:
        yield c


def settings(cluster):
    return load_settings(None, env={}, overrides={"zkServers": cluster.zk_connect})


async def holders_ok(client: BookieClient, lid: int, md: LedgerMetadata) -> int:
    """Read every entry of every segment from each member that should store it; returns the fewest
    members holding any entry (asserted >= WQ by the caller)."""
    fewest = md.write_quorum
    for i, seg in enumerate(md.segments):
        last = md.segment_end(i)
        for e in range(seg.first_entry_id, last + 1):
            have = 0
            for j, b in enumerate(seg.ensemble):
                if index_stores(j, e, md.ensemble_size, md.write_quorum):
                    r = await client.read_entry(b, lid, e)
                    assert r.entry_id == e, (lid, e, b)
                    have += 1
            fewest = min(fewest, have)
    return fewest


def test_bad_input_and_blockers_are_one_line_naming_them(cluster):
    res = shell(cluster, "drain", "-bookieid", "garbage")
    assert res.exit_code == 2 and "bad bookie id 'garbage'" in res.stderr
    res = shell(cluster, "drain", "-bookieid", "10.9.9.9:3181")
    assert res.exit_code != 0 and "no such bookie" in res.stderr and "10.9.9.9:3181" in res.stderr
    victim = cluster.bookie_id(2)
    # an E4 ledger on 4 bookies: draining any of them leaves no spare, so the drain is refused
    wide = arun(write_ledgers(cluster, 1, 5, 4, 2, 2))
    (wide_id,) = wide
    try:
        out = shell(cluster, "drain", "-bookieid", victim, "--dry-run")
        assert out.exit_code == 1 and f"ledger {wide_id}: BLOCKED" in out.stdout, out.stdout
        res = shell(cluster, "drain", "-bookieid", victim)
        assert res.exit_code == 1 and "refused" in res.stderr and f"ledger {wide_id}" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    finally:
        async def drop():
            zk = await ZkClient(cluster.zk_connect).start()
            try:
                await LedgerStore(zk, P).delete(wide_id)
            finally:
                await zk.stop()
        arun(drop())

    async def other_running():
        zk = await ZkClient(cluster.zk_connect).start()
        rec = f"{P.underreplication}/drain"
        try:
            await zk.create(rec, json.dumps({"bookie_id": cluster.bookie_id(1), "state": "running",
                                             "by": "elsewhere"}).encode(), makepath=True)
            await zk.create(f"{P.underreplication}/drainowner", b"elsewhere", ephemeral=True)
            res = await asyncio.to_thread(shell, cluster, "drain", "-bookieid", victim)
            st = await asyncio.to_thread(shell, cluster, "drain", "--status")
            await zk.delete(rec)
            return res, st
        finally:
            await zk.stop()
    res, st = arun(other_running())
    assert res.exit_code == 1 and f"a drain of {cluster.bookie_id(1)} is running" in res.stderr
    assert json.loads(st.stdout)["owner_alive"] is True


def test_live_drain_under_reads_never_below_wq_and_leaves_nothing_on_the_bookie(cluster):
    written = arun(write_ledgers(cluster, 6, 40, 3, 2, 2, size=512))
    counts = {b: sum(b in ens for ens in written.values()) for b in (cluster.bookie_id(i) for i in cluster.bookies)}
    victim = max(counts, key=lambda b: counts[b])
    on_victim = [lid for lid, ens in written.items() if victim in ens]
    assert on_victim
    plan_out = ok(shell(cluster, "drain", "-bookieid", victim, "--dry-run"))
    assert f"{len(on_victim)} ledger(s)" in plan_out and "ETA" in plan_out and "bytes" in plan_out

    async def scenario():
        bk = await BookKeeper.connect(cluster.zk_connect, P.root)
        client = BookieClient(timeout_s=5)
        checked: list[tuple[int, int]] = []
        reads = [0]
        try:
            payloads = {}
            for lid in written:
                h = await bk.open_ledger(lid)
                payloads[lid] = [e.payload for e in await h.read_entries(0, h.last_add_confirmed)]
            # an open ledger on the victim: the drain waits for its writer
            while True:
                lh = await bk.create_ledger(3, 2, 2)
                if victim in lh.metadata.last_ensemble:
                    break
                await lh.close()
            for e in range(20):
                await lh.add_entry(bytes([e]) * 300)
            stop = asyncio.Event()

            async def reader():
                rb = await BookKeeper.connect(cluster.zk_connect, P.root)
                try:
                    while not stop.is_set():
                        for lid in written:
                            h = await rb.open_ledger(lid)
                            got = [e.payload for e in await h.read_entries(0, h.last_add_confirmed)]
                            assert got == payloads[lid], f"ledger {lid} read back wrong during the drain"
                            reads[0] += 1
                finally:
                    await rb.close()

            async def at_change(lid: int, before: LedgerMetadata, after: LedgerMetadata):
                assert victim in before.all_bookies()
                md, _ = await LedgerStore(bk.zk, P).read(lid)
                assert md == after  # the CAS wrote exactly this
                # every member the new metadata names holds its share: never below WQ
                checked.append((lid, await holders_ok(client, lid, after)))

            waiting = asyncio.Event()

            def progress(p):
                if p.phase == "waiting for open ledgers":
                    waiting.set()

            reading = asyncio.create_task(reader())
            async with ops.open_admin(settings(cluster)) as ctx:
                job = asyncio.create_task(dr.drain_bookie(ctx, victim, poll_s=0.2, timeout_s=120,
                                                          on_progress=progress, on_move=at_change))
                await asyncio.wait_for(waiting.wait(), 90)  # closed ones moved; the open one waits
                doc = await dr.status(ctx)
                assert doc["state"] == "running" and lh.ledger_id in doc["waiting_open"]
                await lh.close()  # the writer rolls the ledger
                report = await asyncio.wait_for(job, 90)
            stop.set()
            await reading
            return report, checked, reads[0], payloads, lh.ledger_id
        finally:
            await client.close()
            await bk.close()

    report, checked, reads, _payloads, open_id = arun(scenario())
    assert report.done and report.segments_moved >= len(on_victim) + 1 and report.bytes_copied > 0
    assert reads > 0  # the ledgers were read while the drain ran
    assert checked and all(fewest >= 2 for _lid, fewest in checked), checked
    assert len(checked) == report.segments_moved

    async def final():
        zk = await ZkClient(cluster.zk_connect).start()
        try:
            store = LedgerStore(zk, P)
            for lid in [*written, open_id]:
                md, _ = await store.read(lid)
                assert victim not in md.all_bookies(), (lid, md.segments)
            avail = await zk.get_children(P.available)
            assert victim in avail  # it kept running (and serving) throughout
        finally:
            await zk.stop()
    arun(final())
    history = ok(shell(cluster, "history"))
    n_moved = len(set(on_victim) | {open_id})
    assert any(f"drain        {victim}: {n_moved}/{n_moved} ledgers" in ln for ln in history.splitlines()), history
    status = json.loads(ok(shell(cluster, "drain", "--status")))
    assert status["state"] == "done" and status["bookie_id"] == victim and status["segments_left"] == 0
    assert "can be stopped and decommissioned with nothing to copy" in ok(
        shell(cluster, "drain", "-bookieid", victim, "--dry-run"))


def test_http_drain_dry_run_start_and_refusals(cluster):
    port, _ = start_daemon(cluster, 1, httpAdminMutationsEnabled="true")
    http = Http(port)
    arun(write_ledgers(cluster, 3, 20, 3, 2, 2, size=256))
    plans = {}
    for i in cluster.bookies:
        code, body = http.get(f"/api/v1/autorecovery/drain?bookie={cluster.bookie_id(i)}&dry_run=true")
        assert code == 200, body
        plans[cluster.bookie_id(i)] = json.loads(body)
    victim = max(plans, key=lambda b: plans[b]["segments"])
    assert plans[victim]["segments"] > 0 and plans[victim]["bookie_id"] == victim and plans[victim]["eta_s"] is not None
    code, body = http.put("/api/v1/autorecovery/drain", {"bookie": "nope"})
    assert code == 400 and "bad bookie id 'nope'" in body
    code, body = http.put("/api/v1/autorecovery/drain", {"bookie": victim, "extra": 1})
    assert code == 400 and "extra" in body
    before_ms = int(time.time() * 1000)
    code, body = http.put("/api/v1/autorecovery/drain", {"bookie": victim})
    assert code == 200 and "started" in body, body

    def state():
        c, b = http.get("/api/v1/autorecovery/drain")
        return json.loads(b) if c == 200 else {}
    from test_shell_support import wait_until
    def finished():
        doc = state()
        return doc.get("bookie_id") == victim and doc.get("started_ms", 0) >= before_ms and doc.get("state") == "done"
    wait_until(finished, 60, what="the HTTP drain to finish")
    assert state()["segments_moved"] == plans[victim]["segments"]
    code, body = http.call("DELETE", "/api/v1/autorecovery/drain")
    assert code == 409, (code, body)
    assert "no drain is running" in body
    audit = [ln for ln in daemon_log(cluster, 1).splitlines() if '"audit"' in ln or "audit " in ln]
    assert any("/api/v1/autorecovery/drain" in ln and "PUT" in ln for ln in audit), audit[-5:]
    assert any("/api/v1/autorecovery/drain" in ln and "DELETE" in ln for ln in audit), audit[-5:]
