"""Test harness shared by the tests, the benchmarks and the demo: a private ZooKeeper, a local
cluster of bookie and daemon processes, a stock Java BookKeeper cluster, chaos faults, a TCP proxy.

Outside ``.importlinter``'s floors: it may import the edges, ``workload`` and the PURE core, and only
``cli`` (local cluster, demo), ``tests/`` and ``bench/`` import it; nothing on the daemon's path does.
"""
