"""Whether a PullEntries source is a registered bookie of the cluster, remembered under a watch (EDGE).

Each PullEntries asks (:mod:`autorecovery.bookie.pull_handler`); asking ZooKeeper every time was one or
two ``exists`` round trips per pull, which for many small ledgers (one pull each) was a visible part of
the target bookie's and ZooKeeper's CPU per healed ledger (issue 29). A "registered" answer is kept
until the registration znode's watch fires (the bookie left, or went read-only/writable) and at most
:data:`KEEP_S` seconds (a session expiry drops watches without an event); "not registered" is never
kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.paths import Paths

#: Longest a "registered" answer is reused, s.
KEEP_S = 10.0


class RegisteredPeers:
    """``await peers.registered(bookie_id) -> bool``: writable or read-only registration exists.

    Args:
        zk: the bookie's client (None: nothing is registered). paths: the cluster's znode paths.
        clock: monotonic seconds.
    """

    def __init__(self, zk: ZkClient | None, paths: Paths, clock: Callable[[], float] = time.monotonic) -> None:
        self.zk, self.paths, self.clock = zk, paths, clock
        self._known: dict[str, float] = {}  # bookie id -> when the "registered" answer was read
        self.lookups = 0  # ZooKeeper look-ups made (tests)

    async def registered(self, bookie_id: str) -> bool:
        """Whether ``bookie_id`` is registered now (writable or read-only).

        Raises:
            ZooKeeperError: the look-up failed (nothing remembered)."""
        zk = self.zk
        if zk is None or "/" in bookie_id:
            return False
        seen = self._known.get(bookie_id)
        if seen is not None and self.clock() - seen < KEEP_S:
            return True
        self.lookups += 1

        def forget(_event) -> None:
            self._known.pop(bookie_id, None)

        t = self.clock()
        for path in (self.paths.available_bookie(bookie_id), self.paths.readonly_bookie(bookie_id)):
            if await zk.exists(path, watch=forget) is not None:
                self._known[bookie_id] = t
                return True
        return False
