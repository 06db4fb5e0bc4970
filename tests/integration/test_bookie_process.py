"""The bookie as a real process (``python -m autorecovery.bookie``): signals, crashes, cookies."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from autorecovery.errors import BookieError
from autorecovery.ledger.digest import pack_entry
from autorecovery.rpc.transport import BookieClient
from autorecovery.testing.bookie_proc import BookieProcess, format_test_cluster
from autorecovery.testing.zk_server import free_port
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for

pytestmark = pytest.mark.integration

# ``zk_server`` is the session-wide ZooKeeper of tests/conftest.py; each test formats its own chroot.

MK = b"mk"


@pytest.fixture
async def cluster(zk_server):
    return await format_test_cluster(zk_server.connect_string)


@pytest.fixture
def spawn(cluster, tmp_path):
    procs: list[BookieProcess] = []

    def start(data_dir: Path, port: int, *extra: str) -> BookieProcess:
        args = ["--zk", cluster, "--port", str(port), "--data-dir", str(data_dir), "--shutdown-grace-ms", "1000",
                *extra]
        p = BookieProcess(args, tmp_path / f"bookie-{len(procs)}.log")
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()


def entry(lid: int, eid: int) -> bytes:
    return pack_entry(lid, eid, eid - 1, 0, f"entry {lid}/{eid}".encode())


async def test_sigterm_exits_zero_and_deregisters(spawn, cluster, tmp_path) -> None:
    port = free_port()
    p = spawn(tmp_path / "d", port)
    bookie_id = await p.await_ready()
    assert bookie_id == f"127.0.0.1:{port}"
    zk = await ZkClient(cluster).start()
    try:
        assert await zk.exists(f"/ledgers/available/{bookie_id}")
        assert await zk.exists(f"/ledgers/cookies/{bookie_id}")
        assert (tmp_path / "d" / "current" / "VERSION").read_text().startswith("5\n")
        p.terminate()
        assert await p.await_exit() == 0
        # deleted by the bookie itself, not by session expiry: gone as soon as it exits
        assert await zk.exists(f"/ledgers/available/{bookie_id}") is None
        assert await zk.exists(f"/ledgers/cookies/{bookie_id}")  # the cookie stays
    finally:
        await zk.stop()
    logs = [json.loads(line) for line in p.log_text().splitlines() if line.startswith("{")]
    assert any(rec.get("event") == "bookie stopped" for rec in logs)  # structured JSON on stderr


async def test_wiped_data_dir_refuses_to_start(spawn, tmp_path) -> None:
    port = free_port()
    data = tmp_path / "d"
    p = spawn(data, port)
    bookie_id = await p.await_ready()
    p.terminate()
    assert await p.await_exit() == 0
    shutil.rmtree(data)  # the disk was replaced
    p2 = spawn(data, port)
    rc = await p2.await_exit(30)
    assert rc != 0 and p2.bookie_id is None
    errors = [json.loads(line) for line in p2.log_text().splitlines() if '"bookie failed to start"' in line]
    assert errors, p2.log_tail()
    msg = errors[0]["error"]
    assert errors[0]["error_type"] == "CookieError"
    assert bookie_id in msg and str(data) in msg and "wiped" in msg


async def test_kill9_loses_no_acknowledged_add(spawn, tmp_path) -> None:
    port = free_port()
    data = tmp_path / "d"
    p = spawn(data, port)
    bookie_id = await p.await_ready()
    client = BookieClient(timeout_s=5.0)
    acked: dict[tuple[int, int], bytes] = {}
    try:
        # a first batch, all acknowledged
        await asyncio.gather(*(client.add_entry(bookie_id, 1, e, MK, entry(1, e)) for e in range(200)))
        acked.update({(1, e): entry(1, e) for e in range(200)})
        n, _ = await client.add_entries(bookie_id, 2, MK, [(e, entry(2, e)) for e in range(300)])
        assert n == 300
        acked.update({(2, e): entry(2, e) for e in range(300)})

        # then a flood of adds still in flight when the process is killed
        async def add(lid: int, e: int) -> None:
            try:
                await client.add_entry(bookie_id, lid, e, MK, entry(lid, e))
            except BookieError:
                return
            acked[(lid, e)] = entry(lid, e)

        flood = [asyncio.create_task(add(3, e)) for e in range(2000)]
        assert await wait_for(lambda: sum(1 for k in acked if k[0] == 3) >= 100, 20.0)
        p.kill()
        await asyncio.gather(*flood)
        assert await p.await_exit() == -9
        flooded = sum(1 for k in acked if k[0] == 3)
        assert 100 <= flooded < 2000, flooded  # killed with adds in flight

        # restart on the same data dir and port. The dead process' session (10 s timeout) still holds
        # available/<id>; the bookie sees its writer is a dead pid of this boot and takes over at once
        # (upstream would wait for the session to expire: the 8 s deadline below would then fail).
        p2 = spawn(data, port)
        assert await p2.await_ready(8.0) == bookie_id
        assert "deleting the registration left by a dead previous incarnation" in p2.log_text()
        for (lid, e), b in acked.items():
            r = await client.read_entry(bookie_id, lid, e)
            assert r.body == b, f"acknowledged entry {lid}/{e} lost or changed"
        assert await client.get_list_of_entries(bookie_id, 1) == [(0, 199)]
        assert await client.get_list_of_entries(bookie_id, 2) == [(0, 299)]
    finally:
        await client.close()


def test_dead_predecessor_detection() -> None:
    import subprocess

    from autorecovery.bookie.server import PROP_PID, registration_properties, written_by_dead_process
    from autorecovery.rpc.convert import encode_service_info

    child = subprocess.Popen(["sleep", "30"])
    data = encode_service_info("h", 1, {**registration_properties(), PROP_PID: str(child.pid)})
    try:
        assert not written_by_dead_process(data)  # alive: wait for its session instead
    finally:
        child.kill()
        child.wait()
    assert written_by_dead_process(data)  # dead pid of this boot and pid namespace
    assert not written_by_dead_process(encode_service_info("h", 1, registration_properties()))  # ourselves
    other_boot = {**registration_properties(), PROP_PID: str(child.pid), "autorecovery.bootId": "x"}
    assert not written_by_dead_process(encode_service_info("h", 1, other_boot))
    assert not written_by_dead_process(encode_service_info("h", 1))  # upstream data: no properties
