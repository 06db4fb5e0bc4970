"""What a ledger handle, a read handle and ledger recovery need of the client (EDGE).

:class:`ClientContext` is a structural type: ``client.bookkeeper.BookKeeper`` has these attributes, and
``handle``, ``reader`` and ``recovery`` are typed against this narrow view instead of the client class, so
they do not import the module that imports them (no import cycle; issue 30).
"""

from __future__ import annotations

from typing import Protocol

from autorecovery.client.batcher import AddBatcher
from autorecovery.placement.policy import PlacementPolicy
from autorecovery.rpc.transport import BookieClient
from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.ledgers import LedgerStore


class ClientContext(Protocol):
    """The client's collaborators a handle uses.

    Attributes:
        ledgers: ledger metadata in ZooKeeper (read, compare-and-set update).
        bookies: the bookie transport (reads, fencing reads).
        adds: the add batcher over ``bookies`` (writes).
        policy: the placement policy that picks a replacement bookie on an ensemble change.
        watcher: the available bookies, or None before ``start`` (then every replica counts as live).
        bookies_timeout_s: the bookie request timeout, seconds.
    """

    @property
    def ledgers(self) -> LedgerStore: ...

    @property
    def bookies(self) -> BookieClient: ...

    @property
    def adds(self) -> AddBatcher: ...

    @property
    def policy(self) -> PlacementPolicy: ...

    @property
    def watcher(self) -> BookieWatcher | None: ...

    @property
    def bookies_timeout_s(self) -> float: ...
