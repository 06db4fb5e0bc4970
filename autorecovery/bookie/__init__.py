"""The reference bookie (EDGE, floor ``zk : rpc : client : bookie``): entry bodies in append-only
entry logs, a SQLite index with group commit, the gRPC service (adds, reads, fencing, PullEntries)
behind a receive gate and admission limits, the cookie, and its ZooKeeper registration.

May import its sibling edges (``rpc`` for the protocol conversions, TLS and the peer client PullEntries
reads with; ``zk`` for registration), the process services (``config``, ``metrics``, ``logs``) and
the PURE core; never ``roles``, ``admin``, ``daemon`` or ``cli`` (``.importlinter``; the one
exception is ``bookie.__main__``, which starts the ``autorecovery bookie`` command). Run one with
``autorecovery bookie ...`` or ``python -m autorecovery.bookie ...``.
"""
