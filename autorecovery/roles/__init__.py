"""Roles: loops that feed the pure decisions and carry out their commands (EDGE, floor ``roles``,
above the edges and below ``admin``).

``auditor.Auditor`` (with its ledger checker) runs on the elected node; the replication worker, its
copier and the bookie-info poller live beside it. May import the edges (``zk``, ``rpc``, ``client``),
the services and the PURE core (``audit``, ``plan``, ``placement``, ``ledger``); never ``admin``,
``daemon`` or ``cli`` (``.importlinter``), and it reaches bookies only through ``rpc``.
"""
