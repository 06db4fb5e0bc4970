"""The ledger tree as an incremental bookie -> ledgers index, kept current by ZooKeeper watches (EDGE).

The watcher is :class:`autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`; it is composed of
parts that each take what they use: the shared state (:mod:`.tree_state`), the persistent-watch mode
(:mod:`.persistent_watch`), the per-ledger-watch fallback (:mod:`.per_ledger_watches`) and the checks
against ZooKeeper (:mod:`.tree_checks`).
"""
