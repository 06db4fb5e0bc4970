"""The reference bookie: SQLite entry store, gRPC service, cookie, ZooKeeper registration (EDGE).

Run one with ``autorecovery bookie ...`` or ``python -m autorecovery.bookie ...``.
"""
