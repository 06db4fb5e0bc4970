"""ZooKeeper edge (EDGE, floor ``zk : rpc : client : bookie``): the kazoo ↔ asyncio bridge (the only
kazoo importer), ledger metadata with CAS loops, the bookie watcher and registration, the
under-replication markers and locks, the election, maintenance flags, topology sources.

May import its sibling edge ``rpc`` (endpoint protocols), the services and the PURE core (``ledger``,
``audit``, ``placement``); never ``roles``, ``admin``, ``daemon`` or ``cli`` (``.importlinter``).
"""
