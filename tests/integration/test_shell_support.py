"""Helpers shared by the shell / HTTP / daemon / decommission integration tests (no tests here).

Everything waits on conditions with deadlines; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

from click.testing import CliRunner

from autorecovery.cli.main import main
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.testing import waits
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

P = Paths("/ledgers")

#: Daemon settings that make a test cluster react in seconds instead of minutes.
FAST = {
    "lostBookieRecoveryDelay": "0",
    "openLedgerRereplicationGracePeriod": "1000",
    "rwRereplicateBackoffMs": "200",
    "lockReleaseOfFailedLedgerGracePeriod": "2000",
    "zkTimeout": "4000",
    "auditorPeriodicCheckInterval": "0",
    "auditorPeriodicBookieCheckInterval": "0",
    "getBookieInfoIntervalSeconds": "1",
    "getBookieInfoRetryIntervalSeconds": "1",
    "httpServerPort": "0",
    "shutdownTimeoutSeconds": "15",
}

READY_RE = re.compile(r"AUTORECOVERY_READY bookie_id=(\S+) http=([\d.]+):(\d+)")


def arun(coro):
    return asyncio.run(coro)


def wait_until(pred, timeout_s: float, interval_s: float = 0.05, what: str = "condition") -> None:
    """:func:`autorecovery.testing.waits.wait_until` with this module's positional ``interval_s``."""
    waits.wait_until(pred, timeout_s, what, interval_s=interval_s)


def start_daemon(cluster: LocalCluster, i: int, **props: str) -> tuple[int, str]:
    """Start daemon ``i`` with FAST settings (+ ``props``); returns (http port, log text offset)."""
    log = cluster.base / f"autorecovery-{i}.log"
    offset = log.stat().st_size if log.exists() else 0
    cluster.start_daemon(i, {**FAST, **props})
    text = log.read_text(errors="replace")[offset:]
    m = READY_RE.search(text)
    assert m, text[-2000:]
    return int(m.group(3)), str(offset)


def daemon_log(cluster: LocalCluster, i: int) -> str:
    return (cluster.base / f"autorecovery-{i}.log").read_text(errors="replace")


def cli(*args: str, input: str | None = None, env: dict | None = None):
    """Run ``autorecovery <args>`` in-process; returns click's Result (``exit_code``, ``stdout``, ``stderr``)."""
    return CliRunner().invoke(main, list(args), input=input, env=env or {}, catch_exceptions=False)


def shell(cluster: LocalCluster, *args: str, input: str | None = None, root: str | None = None):
    loc = ["--zk", cluster.zk_connect]
    if root:
        loc += ["--ledgers-root", root]
    return cli("shell", *loc, *args, input=input)


@contextlib.asynccontextmanager
async def zk_session(cluster: LocalCluster, root: str = "/ledgers"):
    zk = await ZkClient(cluster.zk_connect).start()
    paths = Paths(root)
    urm = UnderreplicationManager(zk, paths)
    await urm.init()
    try:
        yield zk, paths, urm
    finally:
        await urm.close()
        await zk.stop()


async def write_ledgers(cluster: LocalCluster, n: int, entries: int, E: int = 3, WQ: int = 2, AQ: int = 2,
                        size: int = 256, close: bool = True) -> dict[int, tuple[str, ...]]:
    """Write ``n`` ledgers; returns ledger id → first ensemble."""
    bk = await BookKeeper.connect(cluster.zk_connect, P.root)
    out = {}
    try:
        for _ in range(n):
            lh = await bk.create_ledger(E, WQ, AQ)
            for e in range(entries):
                await lh.add_entry(bytes([e % 251]) * size)
            if close:
                await lh.close()
            out[lh.ledger_id] = tuple(lh.metadata.segments[0].ensemble)
    finally:
        await bk.close()
    return out


async def read_all(cluster: LocalCluster, ledger_id: int, only_from: set[str] | None = None) -> list[bytes]:
    """Payloads of every entry (through the client's read path)."""
    bk = await BookKeeper.connect(cluster.zk_connect, P.root)
    try:
        h = await bk.open_ledger(ledger_id)
        if h.last_add_confirmed < 0:
            return []
        return [e.payload for e in await h.read_entries(0, h.last_add_confirmed)]
    finally:
        await bk.close()


async def metadata(cluster: LocalCluster, ledger_id: int) -> LedgerMetadata:
    zk = await ZkClient(cluster.zk_connect).start()
    try:
        md, _ = await LedgerStore(zk, P).read(ledger_id)
        return md
    finally:
        await zk.stop()


async def create_metadata_ledger(cluster: LocalCluster, ensemble: list[str], wq: int, aq: int) -> int:
    """A closed, empty ledger that exists only in metadata (upstream tests' fake ledgers)."""
    zk = await ZkClient(cluster.zk_connect).start()
    try:
        store = LedgerStore(zk, P)
        lid = await store.new_ledger_id()
        md = LedgerMetadata(ensemble_size=len(ensemble), write_quorum=wq, ack_quorum=aq,
                            segments=(Segment(0, tuple(ensemble)),), state=LedgerState.CLOSED,
                            last_entry_id=-1, length=0, digest_type=DigestType.CRC32C, password=b"pw")
        await store.create(lid, md)
        return lid
    finally:
        await zk.stop()


async def snapshot(cluster: LocalCluster, root: str = "/ledgers",
                   skip: tuple[str, ...] = ("available", "idgen", "auditorelection", "checkallledgersctime",
                                            "placementpolicycheckctime", "replicascheckctime", "history")) -> dict:
    """Every znode under ``root`` (except ``skip`` names) → (data, version). The skipped ones are written
    by the daemons on their own schedule (registrations, votes, check times, the Auditor's published
    state and heal episodes under ``underreplication/history``), not by the command under test."""
    zk = await ZkClient(cluster.zk_connect).start()
    out: dict[str, tuple[bytes, int]] = {}

    async def walk(path: str) -> None:
        try:
            data, stat = await zk.get(path)
            kids = await zk.get_children(path)
        except NoNodeError:
            return
        out[path] = (data, stat.version)
        for k in kids:
            if k not in skip:
                await walk(f"{path}/{k}")

    try:
        await walk(root)
    finally:
        await zk.stop()
    return out


def bookie_index(cluster: LocalCluster, bookie_id: str) -> int:
    return next(i for i in cluster.bookies if cluster.bookie_id(i) == bookie_id)


def data_dir(cluster: LocalCluster, bookie_id: str) -> Path:
    return Path(cluster.bookies[bookie_index(cluster, bookie_id)].data_dir)


def wait_unregistered(cluster: LocalCluster, bookie_id: str, timeout_s: float = 30.0) -> None:
    """Wait until a killed bookie's registration znodes are gone (its session expired)."""
    async def registered() -> bool:
        zk = await ZkClient(cluster.zk_connect).start()
        try:
            return (await zk.exists(P.available_bookie(bookie_id)) is not None
                    or await zk.exists(P.readonly_bookie(bookie_id)) is not None)
        finally:
            await zk.stop()

    wait_until(lambda: not arun(registered()), timeout_s, 0.2, f"{bookie_id} to leave available/")


@contextlib.contextmanager
def cluster_with_daemon(base: Path, bookies: int = 4, racks: int = 2):
    """A started local cluster with daemon 0 running (the shell tests' module fixture); always torn down."""
    c = LocalCluster(base, bookies=bookies, racks=racks).up()
    try:
        start_daemon(c, 0)
        yield c
    finally:
        c.down()


def ok(res, code=0) -> str:
    """``res.stdout`` after asserting the exit code (the output is in the failure message)."""
    assert res.exit_code == code, f"exit {res.exit_code}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    return res.stdout
