"""Ledgers as BookKeeper stores them (PURE, lowest floor): ledger ids ↔ znode paths and layouts,
metadata (segments, fragments, round-robin striping), format v3/v2 codecs, entry digests (CRC32C,
CRC32, HMAC, DUMMY) and master keys, byte for byte upstream's.

May import only ``errors`` and ``proto``'s generated messages (and by the contract the other PURE
packages); no asyncio, kazoo, grpc, sockets or sqlite3.
"""
