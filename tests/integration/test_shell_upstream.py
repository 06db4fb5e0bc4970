"""Upstream ``bookkeeper shell`` spellings and output formats (issue 10: a drop-in for an existing
BookKeeper operator), each run for real against a local cluster (ZooKeeper + 4 bookie processes in
2 racks + one autorecovery daemon).

Upstream reference: BookieShell 4.17 (commons-cli ``BasicParser``: every option works with one or two
dashes), ``tools/cli/commands/**`` and ``CommandHelpers.getBookieSocketAddrStringRepresentation``.
"""

from __future__ import annotations

import base64
import json
import re

import pytest

from autorecovery.admin import ops
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledgers import LedgerStore
from test_shell_support import P, arun, cli, cluster_with_daemon, ok, shell, snapshot, write_ledgers, zk_session

pytestmark = pytest.mark.integration

BOOKIE_LINE = re.compile(r"^BookieID:(\S+), IP:(\S+), Port:(\d+), Hostname:(\S+)$")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with cluster_with_daemon(tmp_path_factory.mktemp("shell-upstream"), racks=2) as c:
        yield c


def expected_line(bookie_id: str) -> str:
    ip, port, name = arun(ops.bookie_addresses([bookie_id]))[bookie_id]
    return f"BookieID:{bookie_id}, IP:{ip}, Port:{port}, Hostname:{name}"


# -- autorecovery -e/-d ---------------------------------------------------------------------------------
def test_autorecovery_short_long_and_single_dash_forms(cluster):
    try:
        assert ok(shell(cluster, "autorecovery", "-d")) == "Disabling autorecovery\n"
        assert ok(shell(cluster, "autorecovery")) == "Autorecovery is disabled.\n"
        assert ok(shell(cluster, "autorecovery", "--disable")) == "Autorecovery already disabled. Doing nothing\n"
        assert ok(shell(cluster, "autorecovery", "-e")) == "Enabling autorecovery\n"
        assert ok(shell(cluster, "autorecovery", "--enable")) == "Autorecovery already enabled. Doing nothing\n"
        assert ok(shell(cluster, "autorecovery", "-disable")) == "Disabling autorecovery\n"
    finally:
        ok(shell(cluster, "autorecovery", "-enable"))
    assert ok(shell(cluster, "autorecovery")) == "Autorecovery is enabled.\n"
    res = shell(cluster, "autorecovery", "-e", "-d")
    assert res.exit_code == 2 and "only one of -e/--enable, -d/--disable and -s/--status" in res.stderr


# -- lostbookierecoverydelay -g/-s, --set not swallowed by the config option ----------------------------
def test_lostbookierecoverydelay_get_set_forms(cluster):
    try:
        assert ok(shell(cluster, "lostbookierecoverydelay", "-s", "5")) == \
            "Successfully set LostBookieRecoveryDelay value in ZK: 5\n"
        assert ok(shell(cluster, "lostbookierecoverydelay", "-g")) == "LostBookieRecoveryDelay value in ZK: 5\n"
        # --set is upstream's setter here, not our -D/--define config option
        assert ok(shell(cluster, "lostbookierecoverydelay", "--set", "6")) == \
            "Successfully set LostBookieRecoveryDelay value in ZK: 6\n"
        assert ok(shell(cluster, "lostbookierecoverydelay", "--get")) == "LostBookieRecoveryDelay value in ZK: 6\n"
        # config keys still reach the command through -D / --define next to --set
        assert ok(shell(cluster, "lostbookierecoverydelay", "--set", "7", "-D", "zkTimeout=5000",
                        "--define", "zkTimeout=6000")) == "Successfully set LostBookieRecoveryDelay value in ZK: 7\n"
        assert ok(shell(cluster, "lostbookierecoverydelay", "-get")) == "LostBookieRecoveryDelay value in ZK: 7\n"
    finally:
        ok(shell(cluster, "lostbookierecoverydelay", "-set", "0"))
    assert ok(shell(cluster, "lostbookierecoverydelay", "-g")) == "LostBookieRecoveryDelay value in ZK: 0\n"
    res = shell(cluster, "lostbookierecoverydelay", "-g", "-s", "3")
    assert res.exit_code == 2 and "exactly one of -g/--get and -s/--set" in res.stderr
    res = shell(cluster, "lostbookierecoverydelay", "--set", "zkTimeout=5000")
    assert res.exit_code == 2 and "bad lostBookieRecoveryDelay 'zkTimeout=5000'" in res.stderr


def test_config_option_spellings_elsewhere(cluster):
    """``--set`` keeps working as the config option where it does not clash, ``--define`` everywhere."""
    for opt in ("-D", "--define", "--set"):
        res = shell(cluster, "whoisauditor", opt, "zkTimeout=abc")
        assert res.exit_code == 2 and "zkTimeout" in res.stderr, (opt, res.stderr)
        assert ok(shell(cluster, "whoisauditor", opt, "zkTimeout=5000")) == f"Auditor: {cluster.bookie_id(0)}\n"
    res = cli("shell", "--zk", cluster.zk_connect, "--set", "zkTimeout=abc", "lostbookierecoverydelay", "-g")
    assert res.exit_code == 2 and "zkTimeout" in res.stderr


# -- ledgermetadata -ledgerid / -dumptofile / -restorefromfile -----------------------------------------
async def _fake_ledger(cluster, ensemble) -> int:
    zk = await ZkClient(cluster.zk_connect).start()
    try:
        store = LedgerStore(zk, P)
        lid = await store.new_ledger_id()
        md = LedgerMetadata(ensemble_size=2, write_quorum=2, ack_quorum=2, segments=(Segment(0, tuple(ensemble)),),
                            state=LedgerState.CLOSED, last_entry_id=-1, length=0, digest_type=DigestType.HMAC,
                            password=b"pw", ctime=1700000000000, custom_metadata={"app": b"val"})
        await store.create(lid, md)
        return lid
    finally:
        await zk.stop()


async def _znode(cluster, lid):
    async with zk_session(cluster) as (zk, paths, _urm):
        data, _ = await zk.get(paths.ledger(lid))
        return bytes(data)


async def _delete(cluster, lid):
    async with zk_session(cluster) as (zk, paths, _urm):
        await LedgerStore(zk, paths).delete(lid)


def test_ledgermetadata_upstream_format_and_spellings(cluster):
    ens = [cluster.bookie_id(0), cluster.bookie_id(1)]
    lid = arun(_fake_ledger(cluster, ens))
    expected = (f"ledgerID: {lid}\n"
                "LedgerMetadata{formatVersion=3, ensembleSize=2, writeQuorumSize=2, ackQuorumSize=2, state=CLOSED, "
                "length=0, lastEntryId=-1, digestType=MAC, password=OMITTED, "
                f"ensembles={{0=[{ens[0]}, {ens[1]}]}}, "
                f"customMetadata={{app=base64:{base64.b64encode(b'val').decode()}}}}}\n")
    try:
        for spelling in ("-ledgerid", "--ledgerid", "-l"):
            assert ok(shell(cluster, "ledgermetadata", spelling, str(lid))) == expected, spelling
        # issue 25: the password only when asked for (upstream's toString form)
        pw = f"password=base64:{base64.b64encode(b'pw').decode()}, "
        for flag in ("--with-password", "-withpassword"):
            assert ok(shell(cluster, "ledgermetadata", "-l", str(lid), flag)) == \
                expected.replace("password=OMITTED, ", pw), flag
        doc = json.loads(ok(shell(cluster, "ledgermetadata", "-l", str(lid), "--json")))
        assert doc["ctime"] == 1700000000000 and doc["digestType"] == "HMAC"
        res = shell(cluster, "ledgermetadata")
        assert res.exit_code == 2 and "Must specify a ledger id" in res.stderr
    finally:
        arun(_delete(cluster, lid))


def test_ledgermetadata_dump_and_restore(cluster, tmp_path):
    lid, _ens = next(iter(arun(write_ledgers(cluster, 1, 3, 3, 2, 2)).items()))
    dump = tmp_path / "md.bin"
    original = arun(_znode(cluster, lid))
    before = ok(shell(cluster, "ledgermetadata", "-ledgerid", str(lid)))
    assert ok(shell(cluster, "ledgermetadata", "-ledgerid", str(lid), "-dumptofile", str(dump))) == ""
    assert dump.read_bytes() == original
    arun(_delete(cluster, lid))
    assert shell(cluster, "ledgermetadata", "-l", str(lid)).exit_code == 1
    assert ok(shell(cluster, "ledgermetadata", "-ledgerid", str(lid), "-restorefromfile", str(dump))) == ""
    assert ok(shell(cluster, "ledgermetadata", "-l", str(lid))) == before
    res = shell(cluster, "ledgermetadata", "-l", str(lid), "--restorefromfile", str(dump))
    assert res.exit_code == 1 and f"ledger {lid} already exists" in res.stderr and "-update" in res.stderr
    out = ok(shell(cluster, "ledgermetadata", "-l", str(lid), "-restorefromfile", str(dump), "-update"))
    assert out == f"successsfully updated ledger metadata {lid}\n"
    assert ok(shell(cluster, "ledgermetadata", "-l", str(lid))) == before
    res = shell(cluster, "ledgermetadata", "-l", str(lid), "-dumptofile", str(dump), "-restorefromfile", str(dump))
    assert res.exit_code == 2 and "Only one of --dumptofile and --restorefromfile" in res.stderr
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not metadata at all")
    res = shell(cluster, "ledgermetadata", "-l", "424242", "-restorefromfile", str(junk))
    assert res.exit_code == 2 and str(junk) in res.stderr


# -- listbookies -rw/-ro/-a/-h ----------------------------------------------------------------------------
def test_listbookies_upstream_lines(cluster):
    ids = sorted(cluster.bookie_ids())
    lines = [expected_line(b) for b in ids]
    out = ok(shell(cluster, "listbookies")).splitlines()
    assert out == ["ReadWrite Bookies :", *lines, "All Bookies :", *lines]
    for line in lines:
        m = BOOKIE_LINE.match(line)
        host, port = m.group(1).rsplit(":", 1)
        assert m.group(2) == host and m.group(3) == port
    assert ok(shell(cluster, "listbookies", "-rw")).splitlines() == ["ReadWrite Bookies :", *lines]
    assert ok(shell(cluster, "listbookies", "--readwrite", "-h")).splitlines() == ["ReadWrite Bookies :", *lines]
    assert ok(shell(cluster, "listbookies", "-a", "--hostnames")).splitlines() == ["All Bookies :", *lines]
    res = shell(cluster, "listbookies", "-ro")
    assert res.exit_code == 0 and res.stdout == "No bookie exists!\n"  # upstream exits 0 here too
    assert "Usage:" in ok(shell(cluster, "listbookies", "--help"))
    racks = ok(shell(cluster, "listbookies", "-a", "--racks")).splitlines()
    assert racks[1:] == [f"{expected_line(b)}\track={cluster.rack_of(cluster.bookie_ids().index(b))}"
                         f"\tstate=writable" for b in ids]


def test_bookieinfo_upstream_lines(cluster):
    out = ok(shell(cluster, "bookieinfo")).splitlines()
    assert out[0] == "Free disk space info:"
    for b, line in zip(sorted(cluster.bookie_ids()), out[1:5], strict=True):
        assert line.startswith(f"{expected_line(b)}: \tFree: ") and "\tTotal: " in line, line
    assert out[5].startswith("Total free disk space in the cluster:\t")
    assert out[6].startswith("Total disk capacity in the cluster:\t")


def test_clusterinfo_upstream_header_and_json(cluster):
    out = ok(shell(cluster, "clusterinfo"))
    header, _, body = out.partition("\n")
    assert header == "--------- Cluster Info ---------"
    assert body.startswith('{\n  "auditorElected" : true,\n  "auditorId" : ')
    info = json.loads(body)
    assert list(info) == ["auditorElected", "auditorId", "clusterUnderReplicated", "ledgerReplicationEnabled",
                          "totalBookiesCount", "writableBookiesCount", "readonlyBookiesCount",
                          "unavailableBookiesCount"]
    assert info["auditorId"] == cluster.bookie_id(0) and info["writableBookiesCount"] == 4
    assert json.loads(ok(shell(cluster, "clusterinfo", "--json"))) == info


# -- whatisinstanceid: the Apache Pulsar Helm chart's init container waits on its exit code --------------------
def test_whatisinstanceid_prints_the_instance_id_and_fails_on_an_unformatted_root(cluster):
    async def instance_id() -> str:
        async with zk_session(cluster) as (zk, paths, _urm):
            data, _ = await zk.get(paths.instance_id)
            return data.decode().strip()

    expected = arun(instance_id())
    assert expected
    out = ok(shell(cluster, "whatisinstanceid"))
    uri = f"zk+hierarchical://{cluster.zk_connect.replace(',', ';')}/ledgers"
    assert out == f"Metadata Service Uri: {uri} InstanceId: {expected}\n"
    res = shell(cluster, "whatisinstanceid", root="/never-formatted")
    assert res.exit_code == 1 and res.stdout == ""
    # one line naming the missing znode (the shell's open checks <root>/LAYOUT before INSTANCEID)
    assert res.stderr.count("\n") == 1 and "/never-formatted/" in res.stderr and "not formatted" in res.stderr, \
        res.stderr


# -- recover -q / --replicationRate / single-dash forms -----------------------------------------------------
def test_recover_query_and_upstream_options(cluster):
    src = cluster.bookie_id(2)
    written = arun(write_ledgers(cluster, 6, 4, 3, 2, 2))
    before = arun(snapshot(cluster))
    for flag in ("-q", "--query", "-query"):
        res = shell(cluster, "recover", flag, src)
        out = ok(res)
        assert "NOTE: Bookies in inspection list are marked with '*'." in res.stderr
        for lid, ens in written.items():
            if src not in ens:
                assert f"ledger {lid} : " not in out
                continue
            marks = "".join(f"{b}{'*' if b == src else ' '} " for b in ens)
            assert f"ledger {lid} : CLOSED\n0:\t{marks}\nsummary: [0=1, ]\n\n" in out
    assert arun(snapshot(cluster)) == before, "recover -q wrote to ZooKeeper"
    for args in (["-dr", "--replicationRate", "5000000"], ["-dryrun", "-replicationRate", "5000000", "-sk"],
                 ["--dryrun", "-rate", "5000000", "-skipOpenLedgers", "-sku", "-force"]):
        out = ok(shell(cluster, "recover", src, *args))
        assert out.startswith(f"Recovery plan for {src} (dry run: nothing is changed)\n"), args
    assert arun(snapshot(cluster)) == before
    res = shell(cluster, "recover", src, "10.0.0.1:3181", "-q")
    assert res.exit_code == 0 and "The provided bookie dest 10.0.0.1:3181 will be ignored!" in res.stderr


# -- help, and the configuration file on every command -----------------------------------------------------
def test_help_command(cluster):
    out = ok(cli("shell", "help"))
    assert "Commands:" in out and "listunderreplicated" in out and "lostbookierecoverydelay" in out
    out = ok(cli("shell", "help", "lostbookierecoverydelay"))
    assert "-s, -set, --set" in out and "-g, -get, --get" in out
    res = cli("shell", "help", "nosuchcommand")
    assert res.exit_code == 2 and "Unknown command nosuchcommand" in res.stderr


def test_conf_spellings_and_listunderreplicated_c(cluster, tmp_path):
    conf = tmp_path / "bk_server.conf"
    conf.write_text(f"zkServers={cluster.zk_connect}\nzkLedgersRootPath=/ledgers\n")
    for spelling in ("-c", "-conf", "--conf"):
        assert ok(cli("shell", "whoisauditor", spelling, str(conf))) == f"Auditor: {cluster.bookie_id(0)}\n"
        assert ok(cli("shell", spelling, str(conf), "whoisauditor")) == f"Auditor: {cluster.bookie_id(0)}\n"
    for spelling in ("-conf", "--conf"):
        assert ok(cli("shell", "listunderreplicated", spelling, str(conf))) == "Under replicated ledger count: 0\n"
    assert ok(cli("shell", "-c", str(conf), "listunderreplicated", "-c")) == "Under replicated ledger count: 0\n"
    # upstream: -c is --onlydisplayledgercount for this command; a file after it is refused clearly
    res = cli("shell", "listunderreplicated", "-c", str(conf))
    assert res.exit_code == 2 and "--onlydisplayledgercount" in res.stderr and "--conf" in res.stderr
