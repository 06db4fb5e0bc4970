"""Keys accepted with no effect, and security keys refused when they ask for something (PURE):
:data:`NO_EFFECT_GROUPS` (each upstream key a shared ``bk_server.conf`` carries that does nothing here,
with its reason; ``config check`` lists every one that is set), :data:`UNIMPLEMENTED_SECURITY_KEYS` and
:data:`REFUSED_WHEN_ASKED`. Names resolve from :mod:`autorecovery.config.keys`.
"""

from __future__ import annotations

#: Upstream keys a shared ``bk_server.conf`` (or Pulsar's ``bookkeeper.conf``) usually carries that are
#: **accepted for compatibility and have no effect here**, grouped by the reason. A key here is not
#: reported as unknown; ``config check`` lists every one that is set, with its reason, so nothing is
#: accepted silently. docs/operators.md carries this table (``autorecovery config keys --no-effect
#: --markdown``); tests/unit/config/test_keys_read.py proves every other key of :data:`KEYS` is read.
NO_EFFECT_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("bookie storage, journal, compaction and disk: the bookie process's own data path; this daemon stores "
     "no entries (the reference bookie takes its few settings as `autorecovery bookie` flags)", (
        "journalDirectory", "journalDirectories", "ledgerDirectories", "indexDirectories", "ledgerStorageClass",
        "entryLogSizeLimit", "logSizeLimit", "entryLogFilePreallocationEnabled", "minorCompactionThreshold",
        "minorCompactionInterval", "majorCompactionThreshold", "majorCompactionInterval",
        "compactionRateByEntries", "compactionRateByBytes", "gcWaitTime", "gcOverreplicatedLedgerWaitTime",
        "verifyMetadataOnGC", "isForceGCAllowWhenNoSpace", "journalAdaptiveGroupWrites",
        "journalMaxGroupWaitMSec", "journalBufferedWritesThreshold", "journalSyncData", "journalWriteData",
        "journalFormatVersionToWrite", "journalMaxSizeMB", "journalMaxBackups", "journalPreAllocSizeMB",
        "journalWriteBufferSizeKB", "journalRemoveFromPageCache", "flushInterval", "flushEntrylogBytes",
        "readOnlyModeEnabled", "forceReadOnlyBookie", "diskUsageThreshold", "diskUsageWarnThreshold",
        "diskUsageLwmThreshold", "diskCheckInterval", "ledgerDirsMonitorIntervalMs",
        "fileInfoCacheInitialCapacity", "openFileLimit", "pageSize", "pageLimit", "skipListSizeLimit",
        "skipListArenaChunkSize", "skipListArenaMaxAllocSize", "sortedLedgerStorageEnabled",
        "dbStorage_writeCacheMaxSizeMb", "dbStorage_readAheadCacheMaxSizeMb", "dbStorage_readAheadCacheBatchSize",
        "dbStorage_rocksDB_blockCacheSize", "dbStorage_rocksDB_writeBufferSizeMB", "dbStorage_rocksDB_sstSizeInMB",
        "dbStorage_rocksDB_blockSize", "dbStorage_rocksDB_bloomFilterBitsPerKey", "dbStorage_rocksDB_numLevels",
        "dbStorage_rocksDB_numFilesInLevel0", "dbStorage_rocksDB_maxSizeInLevel1MB",
        # the rest of upstream 4.17.2's stock bk_server.conf (its active and commented lines)
        "gcEntryLogMetadataCacheEnabled", "gcEntryLogMetadataCachePath", "gcOverreplicatedLedgerMaxConcurrentRequests",
        "allowMultipleDirsUnderSameDiskPartition", "allowStorageExpansion", "compactionMaxOutstandingRequests",
        "compactionRate", "forceAllowCompaction", "isThrottleByBytes", "majorCompactionMaxTimeMillis",
        "minorCompactionMaxTimeMillis", "useTargetEntryLogSizeForGc", "useTransactionalCompaction",
        "entryLocationCompactionInterval", "entryLogPerLedgerEnabled", "entryLogPerLedgerCounterLimitsMultFactor",
        "entrylogMapAccessExpiryTimeInSeconds", "maximumNumberOfActiveEntryLogs", "fileInfoMaxIdleTime",
        "readBufferSizeBytes", "writeBufferSizeBytes", "journalAlignmentSize", "journalBufferedEntriesThreshold",
        "journalChannelProvider", "journalFlushWhenQueueEmpty", "journalMaxMemorySizeMb", "journalQueueSize",
        "minUsableSizeForEntryLogCreation", "minUsableSizeForHighPriorityWrites", "minUsableSizeForIndexFileCreation",
        "readOnlyModeOnAnyDiskFullEnabled", "persistBookieStatusEnabled", "numOfMemtableFlushThreads",
        "defaultRocksdbConf", "entryLocationRocksdbConf", "ledgerMetadataRocksdbConf",
        "dbStorage_readAheadCacheBatchBytesSize", "dbStorage_rocksDB_checksum_type", "dbStorage_rocksDB_format_version",
        "dbStorage_rocksDB_logPath", "dbStorage_directIOEntryLoggerMaxFdCacheTimeSeconds",
        "dbStorage_directIOEntryLoggerReadBufferSizeMB", "dbStorage_directIOEntryLoggerTotalReadBufferSizeMB",
        "dbStorage_directIOEntryLoggerTotalWriteBufferSizeMB",
    )),
    ("bookie request serving: threads, queues, timers, sockets and self-checks of the bookie's Netty server; "
     "this daemon serves no bookie protocol", (
        "numAddWorkerThreads", "numReadWorkerThreads", "numHighPriorityWorkerThreads",
        "numJournalCallbackThreads", "maxPendingReadRequestsPerThread", "maxPendingAddRequestsPerThread",
        "maxAddsInProgressLimit", "maxReadsInProgressLimit", "serverTcpNoDelay", "serverNumIOThreads",
        "listeningInterface", "allowLoopback", "allowEphemeralPorts", "enableLocalTransport",
        "disableServerSocketBind", "extraServerComponents", "storageserver.grpc.port",
        "ignoreExtraServerComponentsStartupFailures", "numLongPollWorkerThreads", "readWorkerThreadsThrottlingEnabled",
        "requestTimerNumTicks", "requestTimerTickDurationMs", "serverSockKeepalive", "serverTcpLinger",
        "enableBusyWait", "enableTaskExecutionStats", "sanityCheckMetricsEnabled",
    )),
    ("Java runtime internals: Netty buffers, allocators and channels, JVM metrics, shaded (relocated) class "
     "names, the Vert.x HTTP server class; there is no JVM here (our client speaks gRPC, our HTTP server is "
     "aiohttp), so there is nothing for them to tune", (
        "nettyMaxFrameSizeBytes", "byteBufAllocatorSizeMax", "closeChannelOnResponseTimeout", "httpServerClass",
        "byteBufAllocatorSizeInitial", "byteBufAllocatorSizeMin", "allocatorPoolingPolicy",
        "allocatorPoolingConcurrency", "allocatorOutOfMemoryPolicy", "allocatorLeakDetectionPolicy",
        "exposeDefaultJVMMetrics", "allowShadedLedgerManagerFactoryClass", "shadedLedgerManagerFactoryClassPrefix",
    )),
    ("wire protocol choice of the Java client: towards stock bookies the daemon sends a copy's adds and range "
     "reads in upstream's v2 encoding and everything else in v3, whatever this says (docs/operators.md, \"Copies into "
     "stock bookies cost them less\")", ("useV2WireProtocol",)),
    ("bookie-only switch: runs AutoRecovery inside the bookie JVM; this daemon is AutoRecovery, started on "
     "its own", ("autoRecoveryDaemonEnabled",)),
    ("DistributedLog / stream-storage settings of the same file; not used by AutoRecovery", (
        "dlog.bkcEnsembleSize", "dlog.bkcWriteQuorumSize", "dlog.bkcAckQuorumSize",
        "storage.range.store.dirs", "storage.serve.readonly.tables", "storage.cluster.controller.schedule.interval.ms",
    )),
    ("ZooKeeper client tuning of the Java client: our client (kazoo) reconnects with its own backoff "
     "(0.1 s doubling to 1 s, so a session rejoins quickly) and bounds outstanding operations with "
     "auditorMaxNumberOfConcurrentOpenLedgerOperations instead of a request rate", (
        "zkRetryBackoffStartMs", "zkRetryBackoffMaxMs", "zkRequestRateLimit",
    )),
    ("metadata driver selection of the Java client: only the ZooKeeper driver exists here and the "
     "metadataServiceUri scheme (zk+hierarchical://) selects it", ("metadataServiceDriverClass", "clientRole")),
    ("bookie id resolution of the Java client: bookie ids here are host:port and are dialled as such",
     ("bookieAddressResolverEnabled",)),
    ("batch reads while copying: our worker already reads each fragment as one gRPC stream, so there is "
     "no separate batch-read mode to turn on", ("recoveryBatchReadEnabled",)),
    ("TLS engine details of the Java client (OpenSSL or JDK engine, Java cipher-suite and protocol names): "
     "gRPC uses its bundled BoringSSL with TLS 1.2/1.3 and its own cipher list", (
        "tlsProvider", "tlsEnabledCipherSuites", "tlsEnabledProtocols",
    )),
    ("ZooKeeper client socket class of the Java client (TLS needs ClientCnxnSocketNetty there): our "
     "client (kazoo) has one socket implementation, which speaks TLS when zookeeper.client.secure=true",
     ("zookeeper.clientCnxnSocket",)),
    ("password of a PEM trust store: CA certificates carry no password (a JKS/PKCS12 trust store is "
     "refused)", ("zookeeper.ssl.trustStore.password", "zookeeper.ssl.trustStore.passwordPath")),
    ("password of a JKS/PKCS12 trust store: only PEM trust stores are read here and they carry no password "
     "(tlsTrustStoreType=JKS or PKCS12 is refused)", ("tlsTrustStorePasswordPath",)),
    ("outputs of the Codahale stats provider (CSV, Graphite, JMX, SLF4J): only the Prometheus provider exists "
     "here (statsProviderClass=...CodahaleMetricsProvider is refused)", (
        "codahaleStatsPrefix", "codahaleStatsOutputFrequencySeconds", "codahaleStatsGraphiteEndpoint",
        "codahaleStatsCSVEndpoint", "codahaleStatsSlf4jEndpoint", "codahaleStatsJmxEndpoint",
    )),
    ("digest type autodetection: the auditor and the worker always take the digest type and password from "
     "the metadata of a ledger that stores them, as upstream's administrative open does whatever this says; "
     "digestType and passwd serve the ledgers that store none", ("enableDigestTypeAutodetection",)),
    ("read order of upstream's client (sticky reads, reordering by bookie health, failure tracking for that "
     "order): our reader asks each entry's write set live bookies first and the worker copies a fragment as "
     "one stream from one source bookie, so there is no per-entry read order to switch (Pulsar's "
     "bookkeeperEnableStickyReads and bookkeeperClientReorderReadSequenceEnabled are the same keys)", (
        "stickyReadSEnabled", "reorderReadSequenceEnabled", "enableBookieFailureTracking",
        "bookkeeperEnableStickyReads", "bookkeeperClientReorderReadSequenceEnabled",
        "ensembleRandomReadReordering", "readReorderThresholdPendingRequests", "bookieFailureHistoryExpirationMSec",
    )),
    ("ensemble-change rules of upstream's client add path: our client adds entries only while recovering a "
     "ledger and replaces an unreachable bookie at once (upstream's default, delayEnsembleChange=false); "
     "there is no feature provider, so no feature can turn ensemble changes off",
     ("delayEnsembleChange", "disableEnsembleChangeFeatureName")),
    ("the local node of upstream's client placement (whether to prefer its rack, and whether to resolve it "
     "by host name or by IP): the daemon's placement policy has no local node; it places a replacement "
     "bookie by the ledger's ensemble, never near the AutoRecovery host",
     ("useHostnameResolveLocalNodePlacementPolicy", "ignoreLocalNodeInPlacementPolicy")),
    ("Prometheus latency rollover: our OpStats quantiles come from a sliding window of the latest 1024 "
     "values per series, not from a window rotated every N seconds", ("prometheusStatsLatencyRolloverSeconds",)),
)

#: Key → the reason it has no effect here (built from :data:`NO_EFFECT_GROUPS`).
NO_EFFECT_KEYS: dict[str, str] = {name: reason for reason, names in NO_EFFECT_GROUPS for name in names}

#: The names of :data:`NO_EFFECT_KEYS` (older name, kept for callers).
IGNORED_UPSTREAM_KEYS: frozenset[str] = frozenset(NO_EFFECT_KEYS)


#: Upstream security keys not implemented here (issue 15): the authentication plugins (SASL,
#: ``BookieAuthZFactory`` and custom providers) and the certificate roles ``BookieAuthZFactory`` authorizes
#: (``authorizedRoles``) have no equivalent in the gRPC protocol of this implementation; TLS and mTLS
#: (``tlsProviderFactoryClass``...) are implemented. A config that *asks* for
#: one (a non-empty class name) must not start: running without the security the operator asked for would
#: be worse than not running. A value that asks for nothing (empty, false, 0, none) is accepted.
UNIMPLEMENTED_SECURITY_KEYS: frozenset[str] = frozenset({
    "clientAuthProviderFactoryClass", "bookieAuthProviderFactoryClass", "authorizedRoles",
})

#: Keys of :data:`NO_EFFECT_KEYS` whose default has no effect but whose other value asks for something
#: this implementation does not do: a value :func:`asks_for_security` counts as asking is refused with
#: this reason (running with less than the operator asked for is worse than not running).
REFUSED_WHEN_ASKED: dict[str, str] = {}


#: Why an :data:`UNIMPLEMENTED_SECURITY_KEYS` key that asks for nothing is accepted with no effect.
UNIMPLEMENTED_SECURITY_REASON = ("empty (or false, 0, none) asks for nothing; any other value asks for an "
                                 "authentication plugin or certificate roles this implementation does not "
                                 "provide and is refused (issue 15; docs/security.md)")


def no_effect_reason(name: str) -> str:
    """Why ``name``, accepted by the loader, has no effect here (``config check`` prints it).

    Raises:
        KeyError: ``name`` is not accepted with no effect.
    """
    if name in UNIMPLEMENTED_SECURITY_KEYS:
        return UNIMPLEMENTED_SECURITY_REASON
    return NO_EFFECT_KEYS[name]


def asks_for_security(raw: str) -> bool:
    """True when ``raw`` (the value of an :data:`UNIMPLEMENTED_SECURITY_KEYS` key) enables something.

    Empty, ``false``, ``0``, ``no``, ``off`` and ``none`` (any case) ask for nothing; every other
    value (``true``, a provider factory class name, ``OpenSSL``) does.
    """
    return raw.strip().lower() not in {"", "false", "0", "no", "off", "none"}
