"""Issue 12: nothing blocks the event loop. The topology script of ScriptBasedMapping runs in a worker
thread before the policy hears of a new bookie; the policy's own lookups hit the cache."""

from __future__ import annotations

import io
import threading

import pytest

from autorecovery.config.load import load_settings
from autorecovery.daemon import Daemon
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import init_cluster
from autorecovery.zk.paths import Paths

pytestmark = pytest.mark.integration


async def test_topology_script_runs_off_the_event_loop(zk_connect, tmp_path):
    zk = await ZkClient(zk_connect).start()
    paths = Paths("/ledgers")
    await init_cluster(zk, paths)
    script = tmp_path / "topo.sh"
    script.write_text("#!/bin/sh\nfor h in \"$@\"; do echo /rack-$h; done\n")
    script.chmod(0o755)
    settings = load_settings(None, env={}, overrides={
        "zkServers": zk_connect, "bookieId": "127.0.0.1:3181", "httpServerEnabled": "false",
        "ensemblePlacementPolicy": "rackaware", "reppDnsResolverClass": "org.apache.bookkeeper.net.ScriptBasedMapping",
        "networkTopologyScriptFileName": str(script), "lostBookieRecoveryDelay": "0"})
    d = Daemon(settings, out=io.StringIO())
    await d.start()
    try:
        resolver = d.placement.resolver
        real = resolver._runner
        calls: list[bool] = []

        def recording(argv, timeout_s):
            calls.append(threading.current_thread() is threading.main_thread())
            return real(argv, timeout_s)

        resolver._runner = recording
        await zk.create(paths.available_bookie("10.1.2.3:3181"), b"", ephemeral=True, makepath=True)
        # (asking location_of() before the policy knows the bookie would itself resolve it, on the loop)
        assert await wait_for(lambda: "10.1.2.3:3181" in d.policy.topology, 15)
        assert calls and not any(calls), calls  # the script ran, and never on the event loop's thread
        assert d.policy.location_of("10.1.2.3:3181") == "/rack-10.1.2.3" and len(calls) == 1  # cached
    finally:
        await d.stop()
        await zk.stop()
