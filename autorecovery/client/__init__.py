"""The ledger client (``autorecovery.client``): create, write, close, open, recover and read ledgers."""

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.client.handle import LedgerHandle
from autorecovery.client.reader import ReadHandle

__all__ = ["BookKeeper", "LedgerHandle", "ReadHandle"]
