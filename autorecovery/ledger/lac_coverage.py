"""Whether the answers to a last-add-confirmed read cover every write quorum (pure logic).

Source: upstream ``RoundRobinDistributionSchedule.RRQuorumCoverageSet.checkCovered`` (4.17.2), used by
``ReadLastConfirmedOp``: a bookie whose answer is OK, ``NoSuchEntry`` or ``NoSuchLedger`` is *known*;
one that failed otherwise, or has not answered, is *unknown*. The read is covered when no write quorum
``{i, i+1, ..., i+WQ-1} mod E`` holds ``AQ`` or more unknown bookies: an entry acknowledged by an ack
quorum then has at least one copy among the known bookies, so the highest LAC they report is not behind
any acknowledged add. With striping off (``WQ == E``) this is "at least ``E - AQ + 1`` known bookies".
"""

from __future__ import annotations

from collections.abc import Collection


def lac_read_covered(ensemble_size: int, write_quorum: int, ack_quorum: int, known: Collection[int]) -> bool:
    """True when the bookie indexes in ``known`` (0-based positions in the ensemble) cover every write quorum.

    Args:
        ensemble_size: E, bookies in the ensemble read from.
        write_quorum: WQ (1 <= WQ <= E).
        ack_quorum: AQ (1 <= AQ <= WQ).
        known: indexes of the bookies that answered OK / NoSuchEntry / NoSuchLedger.

    Raises:
        ValueError: sizes out of range, naming them.
    """
    if not 1 <= ack_quorum <= write_quorum <= ensemble_size:
        raise ValueError(f"bad quorum sizes E={ensemble_size} WQ={write_quorum} AQ={ack_quorum}")
    ks = set(known)
    for first in range(ensemble_size):
        unknown = sum(1 for j in range(write_quorum) if (first + j) % ensemble_size not in ks)
        if unknown >= ack_quorum:
            return False
    return True
