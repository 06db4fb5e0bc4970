"""Our daemons in place of upstream's AutoRecoveryMain on a stock Apache BookKeeper 4.17 cluster (issue 24):
real Java bookies, ledgers written by upstream's Java client, one bookie killed; our auditor marks, our
workers heal over upstream's bookie protocol, and upstream's own shell and client judge the result."""

from __future__ import annotations

import asyncio
import re
import socket
import time

import pytest

from interop_support import PW, healed, markers, metadata, no_errors, our_daemons, our_shell, wait_until

pytestmark = pytest.mark.integration

async def entry_lists_unsupported(bookie: str, lid: int) -> None:
    from autorecovery.errors import BookieError
    from autorecovery.rpc.upstream_client import UpstreamBookieClient

    client = UpstreamBookieClient(timeout_s=2)
    try:
        for limit_s in (10.0, 0.5):
            t0 = time.monotonic()
            with pytest.raises(BookieError) as ei:
                await client.get_list_of_entries(bookie, lid)
            assert ei.value.status == "EUNSUPPORTED" and "DbLedgerStorage" in str(ei.value)
            assert time.monotonic() - t0 < limit_s
        assert (await client.get_bookie_info(bookie)).free_disk_space > 0  # the connection still serves
    finally:
        await client.close()


def test_our_daemons_heal_a_stock_cluster_after_a_bookie_is_killed(java_cluster):
    c = java_cluster(bookies=4, racks=2)
    crc = c.writer(ledgers=6, entries=300, entry_size=1024, ensemble=3, wq=2, aq=2, digest="CRC32C", password=PW)
    mac = c.writer(ledgers=4, entries=300, entry_size=1024, ensemble=3, wq=3, aq=2, digest="MAC", password=PW)
    crc_ids = [lg["ledger"] for lg in crc["ledgers"]]
    mac_ids = [lg["ledger"] for lg in mac["ledgers"]]
    victim_i = 1
    victim = c.bookie_ids[victim_i]
    affected = [lid for lid in crc_ids + mac_ids if victim in metadata(c, lid).all_bookies()]
    assert len(affected) >= 5, "the victim should hold copies of most ledgers"
    daemons = our_daemons(c, range(4))
    try:
        c.bookies[victim_i].kill()
        daemons.pop(victim_i).kill()  # the host is gone: its daemon too
        wait_until(lambda: healed(c, affected, victim), 120, "our daemons to heal every affected ledger")
        # upstream's DbLedgerStorage never answers GET_LIST_OF_ENTRIES_OF_LEDGER: found out once, then said at once
        asyncio.run(entry_lists_unsupported(c.bookie_ids[0], affected[0]))
        for lid in affected:
            md = metadata(c, lid)
            assert victim not in md.all_bookies()
            # rack-aware replacement: every ensemble still spans both racks
            racks = c.rack_mapping()
            assert {racks[b] for b in md.last_ensemble} == {"/rack-a", "/rack-b"}, (lid, md.last_ensemble)
        # upstream's shell and client are the judges, with the dead bookie still down
        ur = c.shell("listunderreplicated")
        assert ur.returncode == 0 and "Under replicated ledger count: 0" in ur.stdout, ur.stdout + ur.stderr
        for ids, digest in ((crc_ids, "CRC32C"), (mac_ids, "MAC")):
            r = c.reader(ids, password=PW, digest=digest)
            assert r["ok"], r
            assert [(lg["entries_read"], lg["bad_entries"], lg["errors"]) for lg in r["ledgers"]] == \
                [(300, 0, [])] * len(ids)
        no_errors(daemons)
    finally:
        for d in daemons.values():
            d.stop()


def test_open_ledger_is_fenced_after_the_grace_period_and_upstream_shell_reads_our_state(java_cluster):
    c = java_cluster(bookies=4, racks=2)
    ow = c.open_writer(open_ledgers=1, ledgers=1, entries=60, entry_size=512, ensemble=3, wq=2, aq=2, window=1,
                       password=PW)
    (lg,) = ow.result["ledgers"]
    lid, last = lg["ledger"], lg["last_acked"]
    assert last == 59
    ow.sigstop()  # the writer hangs with its ledger open
    ensemble = metadata(c, lid).last_ensemble
    victim = ensemble[0]
    victim_i = c.bookie_ids.index(victim)
    daemons = our_daemons(c, range(4), openLedgerRereplicationGracePeriod="20000")
    try:
        c.bookies[victim_i].kill()
        daemons.pop(victim_i).kill()
        wait_until(lambda: lid in markers(c), 30, f"our auditor to mark ledger {lid}")
        # what upstream's shell says of our state while the worker waits out the grace period
        ours = {c.bookie_ids[i] for i in daemons}
        who = c.shell("whoisauditor")
        m = re.search(r"Auditor: (\S+)", who.stdout)
        assert m and m.group(1) in ours, who.stdout + who.stderr
        ur = c.shell("listunderreplicated")
        assert ur.returncode == 0 and re.search(rf"\b{lid}\b", ur.stdout), ur.stdout
        delay = c.shell("lostbookierecoverydelay", "-get")
        assert "LostBookieRecoveryDelay value in ZK: 0" in delay.stdout, delay.stdout + delay.stderr
        # our worker holds the ledger's lock while it waits; its data names this host, as upstream's does
        wait_until(lambda: c.kz.exists(f"{c.ledgers_root}/underreplication/locks/urL{lid:010d}"), 20,
                   f"one of our workers to lock ledger {lid}")
        q = c.shell("queryautorecoverystatus")
        worker = re.search(rf"LedgerId:{lid}\s+BookieId:(\S+)", q.stdout)
        assert worker and worker.group(1) == socket.gethostname(), q.stdout

        wait_until(lambda: healed(c, [lid], victim), 60, f"ledger {lid} fenced, closed and re-replicated")
        md = metadata(c, lid)
        assert md.state.name == "CLOSED" and md.last_entry_id == last, md
        r = c.reader([lid], password=PW)
        assert r["ok"], r
        (got,) = r["ledgers"]
        assert got["closed"] and got["last_entry_id"] == last and got["entries_read"] == last + 1, got
        no_errors(daemons)
    finally:
        ow.kill()
        for d in daemons.values():
            d.stop()


def test_rolling_migration_one_auditor_across_both_and_upstream_agrees_with_our_placement(java_cluster):
    """Upstream AutoRecoveryMain and our daemons in one cluster (issue 24 c, e): one Auditor at a time across
    both; killing either side's Auditor hands the role to the other side; either side's markers are healed;
    upstream's own placement check then finds every ledger we repaired adhering."""
    c = java_cluster(bookies=6, racks=2)  # rack-a: 0 2 4, rack-b: 1 3 5
    w = c.writer(ledgers=8, entries=200, entry_size=1024, ensemble=3, wq=3, aq=2, digest="CRC32C", password=PW)
    ids = [lg["ledger"] for lg in w["ledgers"]]
    upstream = c.start_autorecovery(0, auditorPeriodicCheckInterval=0, auditorPeriodicBookieCheckInterval=0)
    daemons = our_daemons(c, [1, 2, 3])
    ours = {c.bookie_ids[i] for i in daemons}
    try:
        assert c.auditor() == c.bookie_ids[0], c.election_votes()  # upstream voted first: one Auditor
        # a ready daemon has an Auditor elected, not necessarily its own vote cast yet (a loaded CI run saw
        # one of three missing at this point): wait for every vote, with a deadline
        wait_until(lambda: set(c.election_votes()) == ours | {c.bookie_ids[0]}, 30,
                   "upstream's vote and each of our daemons' in the Auditor election")
        assert c.auditor() == c.bookie_ids[0], c.election_votes()

        # upstream's Auditor marks; both sides' workers heal
        v1 = c.bookie_ids[5]
        c.bookies[5].kill()
        wait_until(lambda: healed(c, ids, v1), 120, "the ledgers of bookie 5 healed under upstream's Auditor")

        # upstream's Auditor dies: one of ours takes over and marks; ours heal
        upstream.kill()
        wait_until(lambda: c.auditor() in ours, 30, "one of our daemons to become the Auditor")
        who = c.shell("whoisauditor")
        assert re.search(r"Auditor: (\S+)", who.stdout).group(1) in ours, who.stdout
        later = c.start_autorecovery(4, auditorPeriodicCheckInterval=0, auditorPeriodicBookieCheckInterval=0,
                                     auditorPeriodicPlacementPolicyCheckInterval=1)
        assert c.auditor() in ours  # a newcomer never takes the role from a live Auditor
        v2 = c.bookie_ids[1]
        c.bookies[1].kill()
        daemons.pop(1).kill()
        wait_until(lambda: healed(c, ids, v2), 120, "the ledgers of bookie 1 healed under our Auditor")
        racks = c.rack_mapping()
        for lid in ids:
            assert {racks[b] for b in metadata(c, lid).last_ensemble} == {"/rack-a", "/rack-b"}, lid

        # our Auditor is killed (the other daemon of ours, voting before upstream's, stopped first):
        # upstream's AutoRecoveryMain is the Auditor again and runs its placement check
        ours_auditor = next(i for i in daemons if c.bookie_ids[i] == c.auditor())
        for i in [i for i in daemons if i != ours_auditor]:
            daemons[i].stop()
        daemons[ours_auditor].kill()
        wait_until(lambda: c.auditor() == c.bookie_ids[4], 30, "upstream's AutoRecoveryMain to become the Auditor")
        done = re.compile(r"Completed placementPolicyCheck.*numOfLedgersNotAdheringToPlacementPolicy (\d+)")
        log = later.process.log_path
        text = wait_until(lambda: (lambda t: t if done.search(t) else None)(
            log.read_text(errors="replace") if log.exists() else ""), 60,
            "upstream's placement policy check to complete")
        assert done.search(text).group(1) == "0", done.search(text).group(0)
        r = c.reader(ids, password=PW)
        assert r["ok"] and all(lg["entries_read"] == 200 for lg in r["ledgers"]), r
        no_errors(daemons)
    finally:
        for d in daemons.values():
            d.stop()


def test_our_shell_recover_and_decommission_copy_off_stock_bookies(java_cluster):
    """Our shell's recover copies over upstream's protocol (no daemon involved); its decommissionbookie
    drives upstream's AutoRecoveryMain (the Auditor it triggers and waits for)."""
    c = java_cluster(bookies=5, racks=2)
    w = c.writer(ledgers=6, entries=150, entry_size=1024, ensemble=3, wq=2, aq=2, digest="CRC32", password=PW)
    ids = [lg["ledger"] for lg in w["ledgers"]]
    gone, retired = c.bookie_ids[4], c.bookie_ids[3]
    c.bookies[4].kill()
    c.bookies[4].wait_unregistered(30)
    res = our_shell(c, "recover", gone, "-f")
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(gone not in metadata(c, lid).all_bookies() for lid in ids)
    c.bookies[3].stop()
    c.bookies[3].wait_unregistered(30)
    # decommission triggers an audit and waits: upstream's AutoRecoveryMain is the Auditor and heals here
    c.start_autorecovery(0)
    res = our_shell(c, "decommissionbookie", "-bookieid", retired, "--timeout", "120")
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(retired not in metadata(c, lid).all_bookies() for lid in ids)
    assert not c.kz.exists(f"{c.ledgers_root}/cookies/{retired}")  # decommission deletes the cookie
    r = c.reader(ids, password=PW, digest="CRC32")
    assert r["ok"] and [lg["entries_read"] for lg in r["ledgers"]] == [150] * len(ids), r


async def test_a_stock_bookie_that_wants_authentication_is_refused_loudly(java_cluster, tmp_path):
    """A bookie with an authentication plugin answers EUA until the client authenticates; we cannot, so
    we refuse it by name (BookieRefusedError, not retriable) instead of retrying or sending data. The
    stock bookies beside it answer entry lists and LACs as upstream encodes them."""
    from autorecovery.errors import BookieRefusedError, is_retriable
    from autorecovery.rpc.convert import advertised_protocols
    from autorecovery.rpc.transport import BookieClient
    from autorecovery.testing.upstream_java import JavaBookie
    from autorecovery.testing.zk_server import free_port

    c = java_cluster(bookies=3, racks=1, ledger_storage="sorted")  # DbLedgerStorage cannot list entries
    w = c.writer(ledgers=1, entries=100, entry_size=64, ensemble=3, wq=2, aq=2, digest="CRC32C", password=PW,
                 window=1)  # one add in flight: each entry carries the LAC of the one before
    lid = w["ledgers"][0]["ledger"]
    ensemble = metadata(c, lid).last_ensemble
    jaas = tmp_path / "jaas.conf"
    jaas.write_text('Bookie {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n'
                    '  user_admin="not-for-us";\n};\n')
    b = JavaBookie(tmp_path / "sasl-bookie", "127.0.0.9", free_port("127.0.0.9"), c.metadata_uri, c.kz,
                   conf={"bookieAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLBookieAuthProviderFactory"},
                   jvm_opts=[f"-Djava.security.auth.login.config={jaas}"])
    try:
        b.start(wait=True, timeout_s=60)

        async def resolve(bookie_id: str):
            stat = c.kz.exists(f"{c.ledgers_root}/available/{bookie_id}")
            return advertised_protocols(c.kz.get(f"{c.ledgers_root}/available/{bookie_id}")[0]) if stat else None

        client = BookieClient(timeout_s=5, resolve=resolve)
        try:
            for call in (lambda: client.get_bookie_info(b.bookie_id),
                         lambda: client.read_entry(b.bookie_id, 1, 0),
                         lambda: client.add_entry_batches(b.bookie_id, 1, b"k" * 20,  # v2 adds: refused first
                                                          [[(0, (1).to_bytes(8, "big") + bytes(32))]])):
                with pytest.raises(BookieRefusedError) as ei:
                    await call()
                assert b.bookie_id in str(ei.value) and "authentication" in str(ei.value)
                assert not is_retriable(ei.value)
            # the healthy stock bookies beside it are still served: GET_LIST_OF_ENTRIES_OF_LEDGER (upstream's
            # availability encoding) lists exactly the striped entries, READ_LAC the last piggybacked LAC
            assert (await client.get_bookie_info(c.bookie_ids[0])).total_disk_space > 0
            for idx, bookie in enumerate(ensemble):
                ranges = await client.get_list_of_entries(bookie, lid)
                got = [e for a, z in ranges for e in range(a, z + 1)]
                assert got == [e for e in range(100) if (idx - e) % 3 < 2], (bookie, ranges)
                assert await client.read_lac(bookie, lid) >= 97  # the LAC its last entry carried
        finally:
            await client.close()
    finally:
        b.kill()


async def test_our_auditor_checks_on_stock_bookies_never_false_mark(java_cluster):
    """Our Auditor's periodic ledger check (reads, digests of every type) and replicas check (entry lists)
    on Java bookies: healthy Java-written ledgers are never marked. On DbLedgerStorage bookies, which never
    answer entry lists, the replicas check says it could not ask instead of counting copies as missing."""
    from autorecovery import metrics
    from autorecovery.roles.auditor import Auditor
    from autorecovery.config.sections import AuditorSettings
    from autorecovery.rpc.transport import BookieClient
    from autorecovery.zk.bookies import registered_protocols
    from autorecovery.zk.bridge import ZkClient
    from autorecovery.zk.paths import Paths
    from autorecovery.zk.underreplication import UnderreplicationManager

    c = java_cluster(bookies=3, racks=1)  # DbLedgerStorage, the stock bk_server.conf's
    ids = []
    for digest in ("CRC32C", "CRC32", "MAC", "DUMMY"):
        w = c.writer(ledgers=1, entries=120, entry_size=256, ensemble=3, wq=2, aq=2, digest=digest, password=PW)
        ids += [lg["ledger"] for lg in w["ledgers"]]
    props = c.daemon_properties()
    zk = await ZkClient(props["zkServers"], session_timeout_ms=6000).start()
    paths = Paths(props["zkLedgersRootPath"])
    bookies = BookieClient(timeout_s=3, resolve=lambda b: registered_protocols(zk, paths, b))
    a = Auditor(zk, paths, AuditorSettings(auditor_periodic_check_interval=0, auditor_periodic_bookie_check_interval=0,
                                           auditor_ledger_verification_percentage=100),
                None, bookies, bookie_id="auditor:1", registry=metrics.MetricsRegistry())
    await a.start()
    try:
        urm = UnderreplicationManager(zk, paths)
        res = await a.run_check("check_all_ledgers")
        assert res["failed"] == 0, res
        res = await a.run_check("replicas_check")
        assert not res["no_replica"] + res["less_than_aq"] + res["less_than_wq"], res
        assert res["checked"] == len(ids) and res["not_asked"] == 3 * len(ids) and res["unanswered"] == 0, res
        assert [lid for lid in ids if await urm.get_marker(lid) is not None] == []
    finally:
        await a.stop()
        await bookies.close()
        await zk.stop()


async def test_our_v2_adds_are_stored_by_a_stock_bookie_and_refused_once_it_is_fenced(java_cluster):
    """The copy's adds reach a stock bookie in upstream's v2 encoding (autorecovery.rpc.upstream_v2, no
    protobuf parse on the bookie): a Java bookie stores them (read back in v3, byte for byte), refuses a
    plain add once the ledger is fenced on it (EFENCED) and still takes a recovery add."""
    from autorecovery.errors import LedgerFencedError
    from autorecovery.ledger.digest import master_key
    from autorecovery.rpc.upstream_client import UpstreamBookieClient

    c = java_cluster(bookies=3, racks=1)
    w = c.writer(ledgers=1, entries=40, entry_size=512, ensemble=2, wq=2, aq=2, digest="CRC32C", password=PW)
    lid = w["ledgers"][0]["ledger"]
    ensemble = metadata(c, lid).last_ensemble
    spare = next(b for b in c.bookie_ids if b not in ensemble)  # holds nothing of the ledger yet
    mk = master_key(PW.encode())
    client = UpstreamBookieClient(timeout_s=10)
    try:
        got = [(r.entry_id, r.body) async for r in client.read_entries(ensemble[0], lid, 0, 39)]
        assert [e for e, _ in got] == list(range(40))
        assert await client.add_entries(spare, lid, mk, got[:30]) == (30, sum(len(b) for _, b in got[:30]))
        assert client._v2[spare].answered == 30  # every add went in v2, on its own connection
        for eid, body in got[:30]:
            assert (await client.read_entry(spare, lid, eid)).body == body
        await client.read_entry(spare, lid, 0, fence=True, master_key=mk)  # fenced there (a v3 read)
        with pytest.raises(LedgerFencedError) as ei:
            await client.add_entries(spare, lid, mk, got[30:31], recovery=False)
        assert ei.value.failed_entry_id == 30 and spare in str(ei.value)
        assert (await client.add_entries(spare, lid, mk, got[30:], recovery=True))[0] == 10
        assert (await client.read_entry(spare, lid, 39)).body == got[39][1]
    finally:
        await client.close()
