"""The stock chaos campaign's supervisor: upstream's AutoRecoveryMain shuts itself down when its ZooKeeper
session expires (its session-state listener calls ``shutdown(ExitCode.ZK_EXPIRED)``) and leaves the restart
to systemd or a pod's restart policy. Without a supervisor a partition of its node from ZooKeeper left it
down for the rest of a campaign, and every later fault timed out waiting for it (``daemons [5] not
running``). Here, on a real stock cluster: the partition past ``zkTimeout`` makes it exit by itself, the
supervisor step (:meth:`StockChaosCluster.restart_expired_autorecoveries`) starts it again and it votes in
the Auditor election again; a SIGKILLed one (a fault of the campaign, or a crash) is not restarted by it;
a start that fails (ZooKeeper unreachable) does not keep the next one from working."""

from __future__ import annotations

import signal

import pytest

from autorecovery.testing.chaos.faults import proxies_faulted
from autorecovery.testing.chaos.stock import StockChaosCluster
from autorecovery.testing.tcp_proxy import TcpProxy
from autorecovery.testing.waits import wait_until

pytestmark = pytest.mark.integration

ZK_TIMEOUT_MS = 3000


@pytest.mark.timeout(300)
def test_autorecoverymain_exits_on_session_expiry_and_the_supervisor_restarts_it(tmp_path):
    cluster = StockChaosCluster(tmp_path / "stock", bookies=4, racks=2, zk_members=1, java_nodes=(3,))
    proxy: TcpProxy | None = None
    try:
        cluster.start_zookeeper()
        cluster.format()
        cluster.start_bookies()
        host, port = cluster.zk_connect.split(",")[0].rsplit(":", 1)
        proxy = TcpProxy((host, int(port))).start()
        cluster.start_daemon(3, {"zkServers": proxy.address, "zkTimeout": str(ZK_TIMEOUT_MS)})
        ar = cluster.autorecoveries[3]
        assert cluster.daemon_alive(3) and cluster.restart_expired_autorecoveries() == []
        # blackholed past its session timeout: the session expires; once healed it learns so and exits
        with proxies_faulted([proxy], TcpProxy.blackhole):
            wait_until(lambda: not cluster.java.election_votes() or ar.node_id not in cluster.java.election_votes(),
                       30, "AutoRecoveryMain's vote gone with its expired session")
        wait_until(lambda: not ar.process.alive, 60, "AutoRecoveryMain exited by itself on its session's expiry")
        assert ar.process.proc is not None and ar.process.proc.returncode >= 0  # not a signal (4.17.2: 0, not ZK_EXPIRED)
        assert cluster.restart_expired_autorecoveries() == [3]
        again = cluster.autorecoveries[3]
        assert again is not ar and cluster.daemon_alive(3)
        wait_until(lambda: again.node_id in cluster.java.election_votes(), 60, "the restarted one voting")
        assert cluster.restart_expired_autorecoveries() == []  # its new life logged no expiry
        # a kill is a fault's (or a crash): the supervisor leaves it to the campaign
        cluster.stop_daemon(3, signal.SIGKILL)
        wait_until(lambda: not cluster.daemon_alive(3), 30, "AutoRecoveryMain killed")
        assert cluster.restart_expired_autorecoveries() == [] and not cluster.daemon_alive(3)
        # a start while ZooKeeper is unreachable fails (AutoRecoveryMain exits at start-up: why the fault lane
        # never restarts it into a blackhole); the next start still works (it raised ValueError, the previous
        # process already gone from the Java cluster's list, so a failed restart left it down for good)
        wait_until(lambda: again.node_id not in cluster.java.election_votes(), 30, "the killed one's vote gone")
        with proxies_faulted([proxy], TcpProxy.blackhole), pytest.raises(RuntimeError, match="did not start"):
            cluster.start_daemon(3, None, 60.0)
        cluster.start_daemon(3, None, 60.0)
        assert cluster.daemon_alive(3) and cluster.restart_expired_autorecoveries() == []
    finally:
        cluster.down()
        if proxy is not None:
            proxy.close()
