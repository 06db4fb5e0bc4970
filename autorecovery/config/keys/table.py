"""The key table (PURE): :data:`KEYS`, every key autorecovery reads, upstream names first, in documentation
order (``autorecovery config keys --markdown`` prints it), and :data:`LIBRARY_PLACEMENT_KEYS`, the
placement-library keys a ``bk_server.conf`` cannot set. Names resolve from :mod:`autorecovery.config.keys`.
"""

from __future__ import annotations

from typing import Any

from autorecovery.config.keys.model import INT_MAX, INT_MIN, OURS, PORT_MAX, YEAR_MS, YEAR_S, Key


def _k(name: str, type_: str, default: Any, unit: str, group: str, doc: str, **kw: Any) -> Key:
    return Key(name=name, type=type_, default=default, unit=unit, doc=doc, group=group, **kw)


#: Every key autorecovery understands, upstream names first. Order = documentation order.
KEYS: tuple[Key, ...] = (
    # -- metadata store / identity -----------------------------------------------------------------
    _k("metadataServiceUri", "str", None, "", "metadata",
       "metadata store, e.g. zk+hierarchical://h1:2181;h2:2181/ledgers; wins over zkServers/zkLedgersRootPath"),
    _k("zkServers", "str", None, "", "metadata", "ZooKeeper connect string h1:2181,h2:2181 (when no metadataServiceUri)"),
    _k("zkLedgersRootPath", "str", "/ledgers", "", "metadata", "ledgers root znode (when no metadataServiceUri)"),
    _k("zkTimeout", "int", 10000, "ms", "metadata", "ZooKeeper session timeout", min_value=1, max_value=INT_MAX),
    _k("ledgerManagerFactoryClass", "str", None, "", "metadata",
       "ledger manager factory class (or hierarchical/longhierarchical); must match the cluster's LAYOUT"),
    _k("ledgerManagerType", "str", None, "", "metadata",
       "pre-4.2 ledger manager type name (hierarchical, longhierarchical); must match the cluster's LAYOUT"),
    _k("zkEnableSecurity", "bool", False, "", "metadata",
       "create every znode with ZooKeeper's CREATOR_ALL_ACL (only our authenticated identity may read or change "
       "it) instead of OPEN_ACL_UNSAFE; needs zkDigestAuth or zkDigestAuthFile"),
    _k("zkDigestAuth", "str", None, "", "metadata",
       "ZooKeeper digest identity user:password sent on every session (a secret: never printed)",
       origin=OURS, secret=True),
    _k("zkDigestAuthFile", "str", None, "", "metadata",
       "file whose first line is the zkDigestAuth user:password (keeps the secret out of the config file)",
       origin=OURS),
    _k("zkSaslMechanism", "str", None, "", "metadata",
       "authenticate every ZooKeeper session with SASL: DIGEST-MD5 only (the server's JAAS Server section "
       "holds the user); GSSAPI/Kerberos is refused; unset = no SASL", origin=OURS),
    _k("zkSaslUsername", "str", None, "", "metadata", "with zkSaslMechanism: the SASL user name", origin=OURS),
    _k("zkSaslPasswordFile", "str", None, "", "metadata",
       "with zkSaslMechanism: file whose first line is the SASL password (a secret: never printed)", origin=OURS),
    _k("zookeeper.client.secure", "bool", False, "", "metadata",
       "ZooKeeper's client property: talk TLS to ZooKeeper (its secureClientPort); unset/false = plaintext"),
    _k("zookeeper.ssl.keyStore.location", "str", None, "", "metadata",
       "with zookeeper.client.secure: one PEM file holding our certificate chain and unencrypted private key "
       "(ZooKeeper's PEM key store), presented when the server asks (ssl.clientAuth); unset = no certificate"),
    _k("zookeeper.ssl.keyStore.type", "str", None, "", "metadata",
       "format of zookeeper.ssl.keyStore.location: PEM only (JKS, PKCS12 and BCFKS are refused)",
       choices=("pem", "jks", "pkcs12", "bcfks")),
    _k("zookeeper.ssl.keyStore.password", "str", None, "", "metadata",
       "password of an encrypted key store: refused when set (the PEM key must be unencrypted)", secret=True),
    _k("zookeeper.ssl.keyStore.passwordPath", "str", None, "", "metadata",
       "file holding the key store password: refused when set (the PEM key must be unencrypted)"),
    _k("zookeeper.ssl.trustStore.location", "str", None, "", "metadata",
       "with zookeeper.client.secure: PEM CA certificates that sign the ZooKeeper servers' certificates; "
       "unset = the system's default roots"),
    _k("zookeeper.ssl.trustStore.type", "str", None, "", "metadata",
       "format of zookeeper.ssl.trustStore.location: PEM only (JKS, PKCS12 and BCFKS are refused)",
       choices=("pem", "jks", "pkcs12", "bcfks")),
    _k("zookeeper.ssl.hostnameVerification", "bool", True, "", "metadata",
       "with zookeeper.client.secure: the server's certificate must name the host of the connect string "
       "(an IP SAN for 10.0.0.1:2281); false still checks the CA"),
    _k("bookieId", "str", None, "", "metadata",
       "this node's id in the auditor election; default <advertisedAddress or host IP>:<bookiePort>"),
    _k("bookiePort", "int", 3181, "", "metadata", "port part of the default bookie id", min_value=0, max_value=PORT_MAX),
    _k("advertisedAddress", "str", None, "", "metadata", "host part of the default bookie id"),
    _k("useHostNameAsBookieID", "bool", False, "", "metadata", "default bookie id uses the host name, not the IP"),
    _k("useShortHostName", "bool", False, "", "metadata",
       "with useHostNameAsBookieID: the default bookie id uses the short host name (up to the first dot)"),
    # -- daemon ---------------------------------------------------------------------------------
    _k("bookieDeathWatchInterval", "int", 1000, "ms", "daemon",
       "how often the daemon checks that its roles are still running", min_value=1, max_value=YEAR_MS),
    _k("shutdownTimeoutSeconds", "float", 20.0, "s", "daemon",
       "SIGTERM/SIGINT: bound on the graceful stop (drain copies, release locks, delete the vote)",
       origin=OURS, min_value=0.1, max_value=YEAR_S),
    _k("permittedStartupUsers", "str", None, "", "daemon",
       "comma-separated user names allowed to run the daemon: `autorecovery run` as any other user refuses to "
       "start naming it (exit 2); unset or empty = any user (upstream checks it when the bookie process starts)"),
    _k("sessionRejoinEnabled", "bool", True, "", "daemon",
       "on ZooKeeper session expiry stop every role, make a new session and rejoin (upstream exits)", origin=OURS),
    _k("localBookieLossDetectionEnabled", "bool", True, "", "daemon",
       "when this node's bookie (bookieId, an address of this host) process dies and the host stays up (its "
       "port refuses connections from here 3 times in a row and, where /proc shows it, its process is gone), "
       "delete the registration it left, so the loss is seen at once instead of at its ZooKeeper session "
       "expiry (zkTimeout); only a registration seen while the bookie answered is deleted; a bookie that "
       "still runs (a graceful stop) is left alone; off by itself when bookieId is not on this host "
       "(upstream waits for the expiry)", origin=OURS),
    # -- HTTP ---------------------------------------------------------------------------------------
    _k("httpServerEnabled", "bool", True, "", "http",
       "serve /metrics, /healthz, /readyz and /api/v1/... on httpServerPort", upstream_default=False),
    _k("httpServerPort", "int", 8080, "", "http", "HTTP port (0 = pick a free port)", min_value=0, max_value=PORT_MAX),
    _k("httpServerHost", "str", "127.0.0.1", "", "http",
       "address the HTTP server binds; 0.0.0.0 for every interface (our older name httpServerAddress is an alias)",
       upstream_default="0.0.0.0"),
    _k("httpAdminMutationsEnabled", "bool", False, "", "http",
       "allow the mutating admin endpoints (PUT status/bookie/trigger_audit/lost_bookie_recovery_delay/decommission)",
       origin=OURS),
    _k("httpServerTlsEnable", "bool", False, "", "http",
       "serve HTTPS with httpServerCertificatePath/httpServerKeyPath (PEM; upstream's JKS "
       "httpServerKeyStorePath is refused)"),
    _k("httpServerCertificatePath", "str", None, "", "http",
       "with httpServerTlsEnable: PEM certificate chain of the HTTPS server", origin=OURS),
    _k("httpServerKeyPath", "str", None, "", "http",
       "with httpServerTlsEnable: unencrypted PEM private key of the HTTPS server", origin=OURS),
    _k("httpServerClientCaPath", "str", None, "", "http",
       "with httpServerTlsEnable: PEM CA certificates; every HTTPS client must present a certificate they "
       "sign (mTLS)", origin=OURS),
    _k("httpAdminTokenFile", "str", None, "", "http",
       "file whose first line is the admin bearer token (Authorization: Bearer <token>): every PUT/POST/DELETE "
       "and ?withPassword=true need it (or an admin client certificate); required with mutations on a "
       "non-loopback bind unless httpServerClientCaPath is set; re-read when it changes "
       "(tlsCertFilesRefreshDurationSeconds)", origin=OURS),
    _k("httpReadTokenFile", "str", None, "", "http",
       "file whose first line is the read-only bearer token: when set every GET needs it or the admin token "
       "(401 otherwise); re-read when it changes (tlsCertFilesRefreshDurationSeconds)", origin=OURS),
    _k("httpAdminCertificateSubjects", "str", "", "", "http",
       "with httpServerClientCaPath: semicolon-separated client certificate CNs or whole subjects (CN=ops,O=acme, "
       "attributes in certificate order) that get the admin role; other client certificates are read-only; "
       "empty = every client certificate the CA signs is admin",
       origin=OURS),
    _k("httpAuditLogFile", "str", None, "", "http",
       "also append every audit line (admin HTTP mutations, secret reads and refusals) to this file as JSON "
       "lines; unset = the daemon's log only", origin=OURS),
    _k("httpDebugEndpointsEnabled", "bool", False, "", "http",
       "serve the drill/test endpoint PUT /api/v1/autorecovery/expire_session (expires this daemon's "
       "ZooKeeper session); off in production", origin=OURS),
    _k("httpServerKeyStorePath", "str", None, "", "http",
       "upstream's JKS key store of the HTTPS server: refused when set (use httpServerCertificatePath and "
       "httpServerKeyPath)"),
    _k("httpServerKeyStorePassword", "str", None, "", "http",
       "password of the JKS key store: refused when set (PEM keys here are unencrypted)", secret=True),
    _k("httpServerTrustStorePath", "str", None, "", "http",
       "upstream's JKS trust store of the HTTPS server: refused when set (use httpServerClientCaPath)"),
    _k("httpServerTrustStorePassword", "str", None, "", "http",
       "password of the JKS trust store: refused when set", secret=True),
    # -- TLS to bookies (upstream TLSContextFactory, PEM only) -----------------------------------------
    _k("tlsProviderFactoryClass", "str", None, "", "tls",
       "org.apache.bookkeeper.tls.TLSContextFactory: talk TLS to every bookie; unset = plaintext; any other "
       "class is refused"),
    _k("tlsClientAuthentication", "bool", False, "", "tls",
       "with TLS: present our certificate (tlsCertificatePath + tlsKeyStore) to the bookies (mTLS)"),
    _k("tlsKeyStoreType", "str", "PEM", "", "tls",
       "format of tlsKeyStore: PEM only (JKS and PKCS12 are refused when TLS is on)",
       choices=("pem", "jks", "pkcs12"), upstream_default="JKS"),
    _k("tlsKeyStore", "str", None, "", "tls",
       "with tlsKeyStoreType=PEM: our unencrypted PEM private key"),
    _k("tlsKeyStorePasswordPath", "str", None, "", "tls",
       "password file of an encrypted key: refused when TLS is on (gRPC needs an unencrypted PEM key)"),
    _k("tlsCertificatePath", "str", None, "", "tls", "our PEM certificate chain (with tlsClientAuthentication)"),
    _k("tlsTrustStoreType", "str", "PEM", "", "tls",
       "format of tlsTrustStore: PEM only (JKS and PKCS12 are refused when TLS is on)",
       choices=("pem", "jks", "pkcs12"), upstream_default="JKS"),
    _k("tlsTrustStore", "str", None, "", "tls",
       "PEM CA certificates that sign the bookies' certificates; unset = gRPC's default roots"),
    _k("tlsHostnameVerificationEnabled", "bool", True, "", "tls",
       "the bookie's certificate must name the host of its bookie id (an IP SAN for 127.0.0.1:3181); gRPC "
       "always checks this, so false is refused", upstream_default=False),
    _k("tlsCertFilesRefreshDurationSeconds", "int", 0, "s", "tls",
       "re-read changed certificate, key and trust store files this often: the bookie TLS files "
       "(tlsCertificatePath, tlsKeyStore, tlsTrustStore; new bookie connections use them) and the admin HTTP "
       "server's files (httpServerCertificatePath, httpServerKeyPath, httpServerClientCaPath, "
       "httpAdminTokenFile, httpReadTokenFile); a broken or partial file keeps the previous ones; 0 = never",
       min_value=0, max_value=YEAR_S),
    # -- stats (upstream PrometheusMetricsProvider) -----------------------------------------------------
    _k("enableStatistics", "bool", True, "", "stats",
       "false: no stats provider, so no prometheusStatsHttpPort listener (/metrics on httpServerPort stays)"),
    _k("statsProviderClass", "str", None, "", "stats",
       "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider (what upstream's shipped bk_server.conf "
       "sets) serves /metrics on prometheusStatsHttpAddress:prometheusStatsHttpPort; NullStatsProvider: no "
       "listener (also when unset: upstream's default is NullStatsProvider); any other provider is refused"),
    _k("prometheusStatsHttpEnable", "bool", True, "", "stats", "false: the Prometheus provider opens no listener"),
    _k("prometheusStatsHttpAddress", "str", "0.0.0.0", "", "stats",
       "address of the Prometheus /metrics listener (every interface, as upstream)"),
    _k("prometheusStatsHttpPort", "int", 8000, "", "stats",
       "port of the Prometheus /metrics listener; setting it (or the address) turns the listener on when "
       "statsProviderClass is unset", min_value=0, max_value=PORT_MAX),
    # -- logging --------------------------------------------------------------------------------------
    _k("logLevel", "str", "INFO", "", "logging", "DEBUG, INFO, WARNING or ERROR", origin=OURS,
       choices=("debug", "info", "warning", "warn", "error")),
    _k("logFormat", "str", "auto", "", "logging",
       "auto (JSON lines unless stderr is a TTY), json or console", origin=OURS, choices=("auto", "json", "console")),
    # -- auditor ------------------------------------------------------------------------------------
    _k("auditorPeriodicCheckInterval", "int", 604800, "s", "auditor", "checkAllLedgers period; 0 disables",
       min_value=0, max_value=YEAR_S),
    _k("auditorPeriodicBookieCheckInterval", "int", 86400, "s", "auditor",
       "metadata-only bookie audit period; 0 = once at start", min_value=0, max_value=YEAR_S),
    _k("auditorPeriodicPlacementPolicyCheckInterval", "int", 0, "s", "auditor",
       "placement policy check period; 0 disables", min_value=0, max_value=YEAR_S),
    _k("auditorReplicasCheckInterval", "int", 0, "s", "auditor", "replicas check period; 0 disables",
       min_value=0, max_value=YEAR_S),
    _k("auditorLedgerVerificationPercentage", "int", 0, "%", "auditor",
       "share of each fragment's entries read by the ledger checker; 0 = first and last only", min_value=0, max_value=100),
    _k("lostBookieRecoveryDelay", "int", 0, "s", "auditor",
       "delay before auditing one lost bookie (only lost bookies that some ledger's ensemble lists count); seeds "
       "the znode only when it does not exist",
       min_value=0, max_value=YEAR_S),
    _k("underreplicatedLedgerRecoveryGracePeriod", "int", 0, "s", "auditor",
       "placement check reports markers older than this; 0 disables", min_value=0, max_value=YEAR_S),
    _k("repairedPlacementPolicyNotAdheringBookieEnabled", "bool", False, "", "auditor",
       "BP-54: mark non-adhering ledgers and move data to fix placement"),
    _k("auditorReplicasCheckMarkUnderReplicated", "bool", False, "", "auditor",
       "replicas check also marks ledgers with an entry below WQ copies (upstream only reports)",
       origin=OURS),
    _k("auditorLedgerIndexReconcileInterval", "int", 21600, "s", "auditor",
       "full check of the incremental bookie->ledger index against ZooKeeper; 0 disables", origin=OURS,
       min_value=0, max_value=YEAR_S),
    _k("autorecoveryDownOutSubtreeLimit", "str", "none", "", "auditor",
       "rack-loss guard: when every bookie (at least two) of a failure domain at this level is lost at once, "
       "hold their audit (no best-effort copies into the surviving domains) unless a fragment drops below AQ; "
       "none (upstream behaviour), rack, zone or region", origin=OURS,
       choices=("none", "rack", "zone", "region")),
    _k("auditorLedgerIndexCheckInterval", "int", 60, "s", "auditor",
       "cheap consistency check of the index (count + digest of ledger ids vs the tree, no metadata "
       "reads); drift is healed and exported as autorecovery_auditor_index_drift_ledgers; 0 disables",
       origin=OURS, min_value=0, max_value=YEAR_S),
    _k("auditorTopicMetricsMaxNamespaces", "int", 20, "count", "auditor",
       "Pulsar namespaces with a series of their own in autorecovery_underreplicated_ledgers_by_namespace and "
       "autorecovery_unrecoverable_ledgers_by_namespace (most marked ledgers first); the rest are summed in "
       "namespace=other; 0 exports only other", origin=OURS, min_value=0, max_value=1000),
    _k("auditorMaxNumberOfConcurrentOpenLedgerOperations", "int", 500, "count", "auditor",
       "bound on concurrent ledger opens in checkAllLedgers; also the daemon's bound on outstanding ZooKeeper "
       "operations (ours: one bound, not two)", min_value=1, max_value=INT_MAX),
    _k("auditorAcquireConcurrentOpenLedgerOperationsTimeOutMSec", "int", 120000, "ms", "auditor",
       "wait for that bound", min_value=0, max_value=YEAR_MS),
    _k("inFlightReadEntryNumInLedgerChecker", "int", -1, "count", "auditor",
       "concurrent entry reads of the ledger checker; -1 unlimited", min_value=-1, max_value=INT_MAX),
    _k("storeSystemTimeAsLedgerUnderreplicatedMarkTime", "bool", True, "", "auditor",
       "write ctime (ms) into under-replication markers"),
    # -- worker ----------------------------------------------------------------------------------
    _k("openLedgerRereplicationGracePeriod", "int", 30000, "ms", "worker",
       "wait before fencing an open ledger whose last fragment is under-replicated", min_value=0, max_value=YEAR_MS),
    _k("lockReleaseOfFailedLedgerGracePeriod", "int", 300000, "ms", "worker",
       "cap of the exponential lock-release backoff after a failed ledger", min_value=0, max_value=YEAR_MS),
    _k("rwRereplicateBackoffMs", "int", 5000, "ms", "worker", "pause after an unsuccessful replication attempt",
       min_value=0, max_value=YEAR_MS),
    _k("rereplicationEntryBatchSize", "int", 10, "count", "worker", "entries copied per batch",
       min_value=1, max_value=INT_MAX),
    _k("replicationRateByBytes", "int", -1, "bytes/s", "worker", "copy throttle; -1 off", min_value=-1, max_value=INT_MAX),
    _k("zkReplicationTaskRateLimit", "float", 0.0, "tasks/s", "worker",
       "rate limit of ledger acquisitions from ZooKeeper; 0 off", min_value=0, max_value=1_000_000),
    # the worker keys that are ours (declared in roles/worker_settings.py before issue 12)
    _k("replicationWorkerConcurrentLedgers", "int", 4, "count", "worker",
       "ledgers one worker re-replicates at the same time (upstream: 1)", origin=OURS, min_value=1, max_value=1024),
    _k("replicationMaxStreamsPerSourceBookie", "int", 4, "count", "worker",
       "copy streams reading from one bookie, cluster-wide (ZooKeeper slots); <= 0 unlimited", origin=OURS,
       min_value=INT_MIN, max_value=1024),
    _k("replicationMaxStreamsPerTargetBookie", "int", 4, "count", "worker",
       "copy streams writing to one bookie, cluster-wide (ZooKeeper slots); <= 0 unlimited", origin=OURS,
       min_value=INT_MIN, max_value=1024),
    _k("adaptiveThrottleEnabled", "bool", True, "", "worker",
       "the adaptive copy throttle: each bookie a copy reads from or writes to gets a byte rate limit that is "
       "halved while its latency to the copy is over replicationLatencyBudgetFactor x its idle baseline and "
       "grows back (then is lifted) while it is within; replicationRateByBytes and the stream caps still apply",
       origin=OURS),
    _k("replicationLatencyBudgetFactor", "float", 2.0, "x", "worker",
       "the adaptive throttle's latency budget: a bookie whose median request latency to a copy is over this "
       "multiple of its idle baseline (the lowest interval median seen) is slowed down; must be > 1",
       origin=OURS, min_value=1, max_value=1000),
    _k("replicationAdaptiveFloorBytesPerSec", "int", 1024 * 1024, "bytes/s", "worker",
       "the adaptive throttle never limits a bookie's copies below this rate (a heal always progresses)",
       origin=OURS, min_value=1, max_value=INT_MAX),
    _k("replicationStreamWindowBytes", "int", 16 * 1024 * 1024, "bytes", "worker",
       "body bytes queued per target between a copy stream's read and its write (memory bound; at least "
       "one entry, at most max(rereplicationEntryBatchSize, 256) entries)", origin=OURS, min_value=1, max_value=1024**3),
    _k("digestType", "str", "CRC32", "", "worker",
       "digest of ledgers whose metadata stores no password (format v1, and v2 written before 4.2): the worker, "
       "the auditor's checker and recover/decommission verify and write their entries with it: CRC32, CRC32C, "
       "MAC (or HMAC) or DUMMY; ledgers whose metadata has one use their own (upstream getBookieRecoveryDigestType; "
       "bookieRecoveryDigestType is our alias)", choices=("crc32", "crc32c", "mac", "hmac", "dummy")),
    _k("passwd", "str", "", "", "worker",
       "password of ledgers whose metadata stores none (with digestType; the master key of their adds and "
       "fencing reads, the HMAC key); a secret: never printed (upstream getBookieRecoveryPasswd; "
       "bookieRecoveryPasswd is our alias)", secret=True),
    # -- placement ---------------------------------------------------------------------------------
    _k("ensemblePlacementPolicy", "str", "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy", "",
       "placement", "placement policy class (upstream class names map to ours)"),
    _k("reppDnsResolverClass", "str", None, "", "placement",
       "rack resolver class; default: Pulsar /bookies rack info if present, else static/default rack"),
    _k("networkTopologyScriptFileName", "str", None, "", "placement", "script for ScriptBasedMapping"),
    _k("networkTopologyScriptNumberArgs", "int", 100, "count", "placement", "max host names per script call",
       min_value=1, max_value=INT_MAX),
    _k("minNumRacksPerWriteQuorum", "int", 2, "count", "placement", "racks wanted per write set",
       min_value=1, max_value=INT_MAX),
    _k("enforceMinNumRacksPerWriteQuorum", "bool", False, "", "placement", "make minNumRacksPerWriteQuorum a hard rule"),
    _k("enforceMinNumFaultDomainsForWrite", "bool", False, "", "placement",
       "an add (our client's, so also the ledger recovery of an open ledger) is acknowledged only once its "
       "acked bookies span the policy's fault domains (upstream PendingAddOp with "
       "areAckedBookiesAdheringToPlacementPolicy); fragment copies write to one bookie each and ignore it, as "
       "upstream's LedgerFragmentReplicator"),
    _k("networkTopologyStabilizePeriodSeconds", "int", 0, "s", "placement", "delay removal of departed bookies",
       min_value=0, max_value=YEAR_S),
    _k("diskWeightBasedPlacementEnabled", "bool", False, "", "placement", "weight bookie choice by free disk space"),
    _k("bookieMaxMultipleForWeightBasedPlacement", "int", 3, "count", "placement",
       "cap of a bookie's weight as a multiple of the median; <= 0 no cap", min_value=INT_MIN, max_value=INT_MAX),
    _k("minNumZonesPerWriteQuorum", "int", 2, "count", "placement", "zone-aware: minimum zones per write set",
       min_value=0, max_value=INT_MAX),
    _k("desiredNumZonesPerWriteQuorum", "int", 3, "count", "placement", "zone-aware: desired zones per write set",
       min_value=1, max_value=INT_MAX),
    _k("enforceStrictZoneawarePlacement", "bool", True, "", "placement", "zone-aware strict mode"),
    _k("reppRegionsToWrite", "str", None, "", "placement", "region-aware: ;-separated regions"),
    _k("reppMinimumRegionsForDurability", "int", 2, "count", "placement", "region-aware durability",
       min_value=0, max_value=INT_MAX),
    _k("reppEnableDurabilityEnforcementInReplace", "bool", True, "", "placement", "durability also when replacing"),
    _k("reppEnableValidation", "bool", True, "", "placement", "region-aware final ensemble validation"),
    _k("reppDisableDurabilityFeatureName", "str", "repp_disable_durability_enforcement", "", "placement",
       "region-aware: feature that turns durability off"),
    _k("reppDisallowBookiePlacementInRegionFeatureName", "str", None, "", "placement",
       "region-aware: per-region feature that keeps a region out of placement"),
    _k("reppDisallowedRegions", "str", None, "", "placement",
       "region-aware: ;-separated regions where no new bookie is chosen (turns the per-region disallow feature on)",
       origin=OURS),
    _k("reppDisableDurability", "bool", False, "", "placement",
       "region-aware: start with the disable-durability feature on (one region suffices)", origin=OURS),
    # -- BookieInfoReader ------------------------------------------------------------------------
    _k("getBookieInfoIntervalSeconds", "int", 60, "s", "bookieinfo",
       "full GET_BOOKIE_INFO poll of every writable bookie; 0 = only when the bookie set changes",
       upstream_default=86400, min_value=0, max_value=YEAR_S),
    _k("getBookieInfoRetryIntervalSeconds", "int", 60, "s", "bookieinfo", "retry after a failed poll",
       min_value=0, max_value=YEAR_S),
    _k("getBookieInfoTimeoutSecs", "int", 5, "s", "bookieinfo", "timeout of one GET_BOOKIE_INFO request",
       min_value=1, max_value=YEAR_S),
)

#: Name → Key.
KEY_BY_NAME: dict[str, Key] = {k.name: k for k in KEYS}

#: Upstream policy keys that only the placement *library* reads: :meth:`PlacementConfig.from_properties
#: <autorecovery.placement.config.PlacementConfig.from_properties>` accepts them for tools and tests that
#: drive upstream's read-order and local-node logic (``reorder_read_sequence``, ``local_location``), but
#: the daemon calls neither, so in a ``bk_server.conf`` they have no effect (:data:`NO_EFFECT_GROUPS`)
#: and they are not in :data:`KEYS`.
LIBRARY_PLACEMENT_KEYS: tuple[Key, ...] = (
    _k("ignoreLocalNodeInPlacementPolicy", "bool", False, "", "placement", "do not resolve the local node"),
    _k("ensembleRandomReadReordering", "bool", False, "", "placement", "shuffle within read-order classes"),
    _k("readReorderThresholdPendingRequests", "int", 0, "count", "placement", "move least-loaded replica first",
       min_value=0, max_value=INT_MAX),
    _k("bookieFailureHistoryExpirationMSec", "int", 60000, "ms", "placement", "expiry of failure history",
       min_value=0, max_value=YEAR_MS),
)

#: Name → Key of :data:`LIBRARY_PLACEMENT_KEYS`.
LIBRARY_KEY_BY_NAME: dict[str, Key] = {k.name: k for k in LIBRARY_PLACEMENT_KEYS}
