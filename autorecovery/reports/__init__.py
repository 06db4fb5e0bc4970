"""Offline capacity, placement and failure-domain reports on PySpark (issue 11): snapshot export,
synthetic snapshots, Spark jobs, HTML (floor ``daemon : reports : workload``, below ``cli``).

May import ``admin`` (its snapshot reads), the edges (``zk``), the services and the PURE core
(``placement``, ``ledger``); never ``cli`` (``.importlinter``). PySpark is an optional extra.
"""
