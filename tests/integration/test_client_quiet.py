"""The client library prints nothing on a host program's console unless the program configures logging
(issue 16: a "rack info updated from /bookies" debug line used to reach stdout)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent("""
    import asyncio, logging, sys
    from autorecovery.client.bookkeeper import BookKeeper

    async def main():
        bk = await BookKeeper.connect(sys.argv[1], placement_properties={"minNumRacksPerWriteQuorum": "2"})
        try:
            await asyncio.wait_for(_updated(bk), 20)
        finally:
            await bk.close()

    async def _updated(bk):
        while bk.racks.updates < 1:  # the rack watcher read /bookies (and logged at debug)
            await asyncio.sleep(0.02)  # polling a condition, bounded by wait_for

    if len(sys.argv) > 2:
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    asyncio.run(main())
    print("done")
""")


def _prepare(zk_connect: str) -> None:
    from kazoo.client import KazooClient

    kz = KazooClient(zk_connect)
    kz.start(10)
    try:
        kz.ensure_path("/ledgers/available/readonly")
        # the client reads LAYOUT to lay ledger paths out (issue 10): a formatted cluster
        kz.create("/ledgers/LAYOUT", b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1")
        racks = {"default": {"127.0.0.10:3181": {"rack": "/rack1", "hostname": "127.0.0.10"}}}
        kz.create("/bookies", json.dumps(racks).encode())
    finally:
        kz.stop()
        kz.close()


def test_client_is_silent_without_logging_config_and_logs_when_configured(zk_connect, tmp_path):
    _prepare(zk_connect)
    quiet = subprocess.run([sys.executable, "-c", SCRIPT, zk_connect], capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == "done\n" and quiet.stderr == ""
    loud = subprocess.run([sys.executable, "-c", SCRIPT, zk_connect, "debug"], capture_output=True, text=True,
                          timeout=60)
    assert loud.returncode == 0, loud.stderr
    assert loud.stdout == "done\n"
    assert "rack info updated from /bookies" in loud.stderr  # routed through the host's logging set-up
