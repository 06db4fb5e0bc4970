"""The command line (top floor, with ``deploy``): the click group ``autorecovery`` and its commands
(run the daemon, the upstream-compatible shell, a bookie, a local cluster, the workload, the demo,
reports, config keys).

May import every package below it (``daemon``, ``reports``, ``workload``, ``admin``, ``roles``, the
edges, the services, the PURE core) and ``testing`` for local clusters; nothing imports it but
``autorecovery.__main__`` and ``bookie.__main__`` (``.importlinter``).
"""
