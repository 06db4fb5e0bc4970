"""digestType/passwd on a real cluster: a ledger whose metadata stores no password (format v1, as
upstream wrote before 4.2) whose entries were written CRC32C under a password. With upstream's defaults
(digestType=CRC32, passwd empty) the worker surfaces it as unrecoverable with a reason naming the keys
(nothing written, no crash); with digestType=CRC32C and the right passwd it heals and reads back with
every digest checked (upstream's administrative LedgerOpenOp: metadata without a password is opened
with the configured digest type and password)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.ledger import formats
from autorecovery.ledger.credentials import RecoveryCredentials
from autorecovery.ledger.metadata import DigestType
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.zk.ledgers import LedgerStore, read_layout
from autorecovery.zk.paths import Paths
from autorecovery.ledger.ids import ur_leaf_name
from test_shell_support import arun, daemon_log, start_daemon, wait_until

pytestmark = pytest.mark.integration

SECRET = b"written-with-this"
ENTRIES = 30


def _payload(e: int) -> bytes:
    return bytes([e % 251]) * 200 + e.to_bytes(4, "big")


async def _store(cluster):
    zk = await ZkClient(cluster.zk_connect).start()
    paths = Paths("/ledgers")
    return zk, LedgerStore(zk, paths.with_layout(await read_layout(zk, paths)))


async def _write_v1_ledger(cluster) -> tuple[int, tuple[str, ...]]:
    bk = await BookKeeper.connect(cluster.zk_connect, "/ledgers")
    try:
        lh = await bk.create_ledger(3, 2, 2, digest="CRC32C", password=SECRET)
        for e in range(ENTRIES):
            await lh.add_entry(_payload(e))
        await lh.close()
        lid = lh.ledger_id
    finally:
        await bk.close()
    zk, store = await _store(cluster)
    try:
        md, version = await store.read(lid)
        # what a pre-4.2 client wrote: format v1 stores neither the digest type nor the password
        old = replace(md, format_version=1, password=b"", has_password=False, digest_type=DigestType.CRC32,
                      store_ctime=False, ctime=0)
        await zk.set(store.paths.ledger(lid), formats.serialize_v1(old), version)
        back, _ = await store.read(lid)
        assert back.format_version == 1 and not back.has_password
        return lid, back.segments[0].ensemble
    finally:
        await zk.stop()


async def _ensemble_and_record(cluster, lid: int) -> tuple[set[str], dict | None, bytes]:
    zk, store = await _store(cluster)
    try:
        md, _ = await store.read(lid)
        raw, _ = await zk.get(store.paths.ledger(lid))
        try:
            data, _ = await zk.get(f"{store.paths.unrecoverable}/{ur_leaf_name(lid)}")
            record = json.loads(data.decode())
        except NoNodeError:
            record = None
        return md.all_bookies(), record, raw
    finally:
        await zk.stop()


async def _delete_record(cluster, lid: int) -> None:
    zk, store = await _store(cluster)
    try:
        await zk.delete(f"{store.paths.unrecoverable}/{ur_leaf_name(lid)}")
    finally:
        await zk.stop()


async def _read_back(cluster, lid: int, credentials: RecoveryCredentials) -> list[bytes]:
    bk = await BookKeeper.connect(cluster.zk_connect, "/ledgers")
    bk.credentials = credentials  # the client's digestType/passwd for a ledger without a stored password
    try:
        rh = await bk.open_ledger(lid)
        return [e.payload for e in await rh.read_entries(0, rh.last_add_confirmed)]
    finally:
        await bk.close()


def test_v1_ledger_heals_only_with_the_digest_and_password_it_was_written_with(cluster_factory):
    cluster = cluster_factory(bookies=4, racks=2)
    lid, ensemble = arun(_write_v1_ledger(cluster))
    victim_i = next(i for i in range(1, 4) if cluster.bookie_id(i) in ensemble)
    victim = cluster.bookie_id(victim_i)

    # upstream's defaults: digestType=CRC32, passwd empty
    start_daemon(cluster, 0)
    cluster.kill_bookie(victim_i)
    state: dict = {}

    def surfaced() -> bool:
        state["bookies"], state["record"], _ = arun(_ensemble_and_record(cluster, lid))
        return state["record"] is not None

    try:
        wait_until(surfaced, 90, 0.5, f"ledger {lid} surfaced as unrecoverable")
    except AssertionError:
        print(daemon_log(cluster, 0)[-6000:])
        raise
    reason = state["record"]["reason"]
    assert "the ledger's metadata stores no password (format v1)" in reason, reason
    assert "digestType=CRC32 " in reason and "set digestType and passwd" in reason, reason
    assert victim in state["bookies"]  # nothing was swapped in: no copy was written
    assert cluster.daemon_alive(0)  # reported, not a crash
    assert SECRET.decode() not in daemon_log(cluster, 0)

    # the keys it was written with: the worker heals it (after the record is deleted, as documented)
    cluster.stop_daemon(0)
    start_daemon(cluster, 0, digestType="CRC32C", passwd=SECRET.decode())
    arun(_delete_record(cluster, lid))

    def healed() -> bool:
        state["bookies"], state["record"], state["raw"] = arun(_ensemble_and_record(cluster, lid))
        return victim not in state["bookies"]

    wait_until(healed, 90, 0.5, f"ledger {lid} moved off {victim}")
    assert state["raw"].startswith(b"BookieMetadataFormatVersion\t1\n")  # rewritten in its own format
    payloads = arun(_read_back(cluster, lid, RecoveryCredentials(DigestType.CRC32C, SECRET)))
    assert payloads == [_payload(e) for e in range(ENTRIES)]  # every digest checked on the way
    log = daemon_log(cluster, 0)
    assert SECRET.decode() not in log  # the password is never logged
