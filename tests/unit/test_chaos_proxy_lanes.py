"""Two lanes fault one daemon's ZooKeeper proxies one after the other, never over each other: the hour on
the stock cluster had its auditor_kill9 on the witness wait 63 s for a session expiry that a zk_conn_cut of
the other lane undid (its restore ended the blackhole early). A real TcpProxy (its own listening socket,
no target needed: no client connects); the faults' holds are the faults themselves."""

from __future__ import annotations

import asyncio

from autorecovery.testing.chaos.faults import Injector
from autorecovery.testing.chaos.schedule import Fault
from autorecovery.testing.tcp_proxy import TcpProxy
from autorecovery.zk.paths import Paths


async def test_a_zk_conn_cut_waits_for_the_other_lanes_blackhole_of_the_same_daemon():
    proxy = TcpProxy(("127.0.0.1", 9)).start()
    try:
        inj = Injector(cluster=None, zk=None, paths=Paths("/ledgers"), proxies={0: [proxy]},  # type: ignore[arg-type]
                       daemon_session_s=0.4, on_bookie_lost=lambda b, t: None)
        blackholed: list[bool] = []

        async def watch() -> None:
            # sample the proxy's state while the blackhole (0.4 + 0.4 s) is held
            for _ in range(14):
                blackholed.append(proxy._blackhole)
                await asyncio.sleep(0.05)  # a sampling period, not a synchronisation

        heavy = asyncio.ensure_future(inj._partition_daemon_from_zk(Fault(1, "partition_daemon_from_zk", 0, 0.4)))
        await asyncio.sleep(0)  # let the blackhole start first, as the heavy lane's fault would
        light = asyncio.ensure_future(inj._zk_conn_cut(Fault(2, "zk_conn_cut", 0, 0.1)))
        await watch()
        await asyncio.gather(heavy, light)
        assert blackholed and all(blackholed), blackholed  # without the lock the cut's restore ends it at ~0.1 s
        assert not proxy._blackhole and not proxy._cut  # both restored at the end
    finally:
        proxy.close()
