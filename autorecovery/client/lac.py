"""The one read of "the highest last add confirmed of the ledger's last ensemble".

Asks every bookie of the last segment's ensemble for its LAC concurrently (read-only, no fencing;
upstream ``ReadLastConfirmedOp.initiate``) and applies ONE error policy, upstream's:

* an answer counts, and its LAC is a candidate;
* ``ENOLEDGER`` / ``ENOENTRY`` counts as an answer of ``-1`` (the writer may have crashed before its first
  add reached that bookie);
* any other failure, or no answer within ``timeout_s``, leaves that bookie unknown;
* the result is the highest LAC answered, provided the known bookies cover every write quorum
  (:func:`autorecovery.ledger.lac_coverage.lac_read_covered`: no write quorum has ``AQ`` unknown
  bookies; ``E - AQ + 1`` known bookies when ``WQ == E``); otherwise :class:`LacUnknownError`.

Raising rather than answering ``-1`` or a low LAC is the safe side for every caller: the auditor's
checker would otherwise check too few entries, ``recover`` would copy too few, a reader would see
too few, and the reports would print a LAC that may lag an acknowledged add.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from autorecovery.errors import BookieError, ReadError
from autorecovery.ledger.lac_coverage import lac_read_covered
from autorecovery.ledger.metadata import LedgerMetadata

#: statuses that still count as an answer (upstream NoSuchEntryException / NoSuchLedgerExistsException)
_ANSWERED_EMPTY = frozenset({"ENOLEDGER", "ENOENTRY"})

log = structlog.get_logger("autorecovery.lac")


class LacUnknownError(ReadError):
    """Too few bookies of the last ensemble answered a LAC read for the answer to be safe.

    Attributes:
        ledger_id: the ledger.
        failed: ``{bookie: reason}`` for the bookies left unknown (status name or exception class).
    """

    def __init__(self, ledger_id: int, failed: dict[str, str]) -> None:
        self.ledger_id = ledger_id
        self.failed = dict(failed)
        desc = ", ".join(f"{b}: {r}" for b, r in sorted(failed.items()))
        super().__init__(f"ledger {ledger_id}: last add confirmed unknown, too few bookies of the "
                         f"last ensemble answered (failed {desc})")


async def read_last_add_confirmed(bookies: Any, ledger_id: int, md: LedgerMetadata,
                                  timeout_s: float = 5.0) -> int:
    """Highest LAC reported by the last ensemble, once its answers cover every write quorum.

    Args:
        bookies: a bookie client with ``async read_lac(bookie_id, ledger_id) -> int``.
        ledger_id: the ledger.
        md: its metadata (last segment's ensemble, write and ack quorum).
        timeout_s: bound on each bookie's answer, in seconds.

    Returns:
        The LAC (an entry id), ``-1`` when the covering bookies hold no entry yet.

    Raises:
        LacUnknownError: the known bookies do not cover every write quorum (module docstring).
    """
    ensemble = list(md.last_ensemble)

    async def one(b: str) -> int | str:
        try:
            return int(await asyncio.wait_for(bookies.read_lac(b, ledger_id), timeout_s))
        except BookieError as exc:
            if exc.status in _ANSWERED_EMPTY:
                return -1
            log.debug("LAC not read", bookie_id=b, ledger_id=ledger_id, error=str(exc))
            return exc.status
        except Exception as exc:  # noqa: BLE001 - any other failure leaves the bookie unknown
            log.debug("LAC not read", bookie_id=b, ledger_id=ledger_id, error=repr(exc))
            return type(exc).__name__

    answers = await asyncio.gather(*(one(b) for b in ensemble))
    known = [i for i, a in enumerate(answers) if isinstance(a, int)]
    if not lac_read_covered(len(ensemble), md.write_quorum, md.ack_quorum, known):
        raise LacUnknownError(ledger_id, {ensemble[i]: str(a) for i, a in enumerate(answers)
                                          if not isinstance(a, int)})
    return max([-1, *(a for a in answers if isinstance(a, int))])
