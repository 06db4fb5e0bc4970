"""Bookie transports (EDGE, floor ``zk : rpc : client : bookie``): one bookie client the roles use,
with two implementations behind it chosen per bookie in one place: our gRPC protocol (reference
bookies) and upstream's v3 wire protocol (stock Apache BookKeeper bookies); protobuf ↔ ledger
conversions (PURE), TLS and its reload.

May import the services (``config``), the PURE core (``ledger``, ``errors``) and ``proto``; never
``roles``, ``admin``, ``daemon`` or ``cli`` (``.importlinter``).
"""
