"""In-memory bookie → ledger index, kept current incrementally, in columns (PURE).

Upstream ``BookieLedgerIndexer`` rebuilds ``bookie → ledgers`` from *every* ledger's metadata on every
audit: O(ledgers) ZooKeeper reads per bookie loss (thousands of outstanding reads killed sessions,
bookkeeper#2802). Better than upstream: this index is built once when the auditor is elected and then
updated ledger by ledger from ZooKeeper watches (:class:`autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`),
so the ledgers of a lost bookie are known with **no metadata reads**; a slow full reconcile
(``reconcile``) checks it against ZooKeeper.

:data:`BookieLedgerIndex` is :class:`autorecovery.audit.compact_index.CompactLedgerIndex`: sorted
``array`` columns, one record heap and per-bookie id arrays, under 100 B per ledger at 10M ledgers
(docs/scaling.md). :class:`autorecovery.audit.record_index.RecordLedgerIndex`, a ``bytes`` record per
ledger in a dict (about 290-390 B per ledger), gives the same answers and stays as the baseline the
equivalence test and ``bench/audit.py`` measure the compact one against; the record codec (the packed
record, the fast znode decode) is that module's and both use it.

Precise marking, also better than upstream (which marks every ledger whose ensembles list the lost
bookie): :func:`holds_entries` (the rule is :func:`autorecovery.ledger.striping.segment_holds_entries`)
says whether a bookie index of a segment stores any entry. A CLOSED ledger's segment whose entry range
puts nothing on that index (an empty segment, or fewer entries than E−WQ+1 with E > WQ) is not marked;
the last segment of a ledger that is not CLOSED always counts.
"""

from __future__ import annotations

from autorecovery.audit.compact_index import CompactLedgerIndex

#: The auditor's index (see the module docstring).
BookieLedgerIndex = CompactLedgerIndex

__all__ = ["BookieLedgerIndex", "CompactLedgerIndex"]
