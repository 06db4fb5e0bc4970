"""The ledger client (EDGE, floor ``zk : rpc : client : bookie``): create, write, close, open,
recover (fencing) and read ledgers, with ensemble changes and read fallback.

May import its sibling edges (``zk`` for metadata, ``rpc`` for the bookies), the process services and
the PURE core (``ledger``, ``placement``); never ``roles``, ``admin``, ``daemon`` or ``cli``
(``.importlinter``).
"""

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.client.handle import LedgerHandle
from autorecovery.client.reader import ReadHandle

__all__ = ["BookKeeper", "LedgerHandle", "ReadHandle"]
