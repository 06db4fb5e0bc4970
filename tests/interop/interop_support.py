"""Helpers shared by the interop tests: our daemons and shell pointed at a stock Java cluster, and reads
of its metadata and marker tree through the fixture's kazoo client."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request

from autorecovery.testing.daemon_proc import DaemonProcess
from autorecovery.testing.upstream_cluster import JavaCluster
from autorecovery.testing.upstream_state import healed as _healed
from autorecovery.testing.upstream_state import ledger_metadata, marked_ledgers, start_our_daemons
from autorecovery.testing.waits import wait_until  # noqa: F401  (re-exported to the interop tests)

PW = "interop-pw"
RACKAWARE = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
FAST = {
    "lostBookieRecoveryDelay": "0",
    "openLedgerRereplicationGracePeriod": "1000",
    "rwRereplicateBackoffMs": "200",
    "lockReleaseOfFailedLedgerGracePeriod": "2000",
    "zkTimeout": "5000",
    "auditorPeriodicCheckInterval": "0",
    "auditorPeriodicBookieCheckInterval": "0",
    "getBookieInfoIntervalSeconds": "1",
    "getBookieInfoRetryIntervalSeconds": "1",
    "httpServerPort": "0",
    "shutdownTimeoutSeconds": "15",
    "ensemblePlacementPolicy": RACKAWARE,
}




def our_daemons(c: JavaCluster, nodes, **props: object) -> dict[int, DaemonProcess]:
    """Our daemon next to each Java bookie in ``nodes``, with the fast test settings, started and ready."""
    return start_our_daemons(c, nodes, {**FAST, **props})


metadata = ledger_metadata
markers = marked_ledgers


def healed(c: JavaCluster, ledgers, victim: str) -> bool:
    """No marker left and no ledger names ``victim``."""
    return _healed(c, ledgers, [victim])


def no_errors(daemons: dict[int, DaemonProcess]) -> None:
    for d in daemons.values():
        bad = d.lines("error", "critical")
        assert not bad, f"{d.name} logged ERROR: {bad[:3]}"


def our_shell(c: JavaCluster, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """Our admin shell (``python -m autorecovery shell``) pointed at the Java cluster."""
    props = c.daemon_properties()
    return subprocess.run([sys.executable, "-m", "autorecovery", "shell", "--zk", props["zkServers"],
                           "--ledgers-root", props["zkLedgersRootPath"], *args],
                          capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)


def metric_sum(daemons: dict[int, DaemonProcess], name: str) -> float:
    """The sum over ``daemons`` of every sample of the Prometheus metric ``name`` (any labels) that each
    daemon's ``/metrics`` shows now."""
    total = 0.0
    for d in daemons.values():
        with urllib.request.urlopen(f"http://127.0.0.1:{d.http_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        for m in re.finditer(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.e+]+)$", text, re.M):
            total += float(m.group(1))
    return total

