"""The parts of the under-replication manager (:class:`autorecovery.zk.underreplication.UnderreplicationManager`,
upstream ``ZkLedgerUnderreplicationManager``): the znodes' formats (:mod:`.formats`), the marker index
(:mod:`.index`), marking (:mod:`.marking`), replication locks (:mod:`.locks`) and the switches
(:mod:`.switches`). Nothing is re-exported here: each name is taken from the module that defines it.
"""
