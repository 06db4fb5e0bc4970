"""The configuration keys autorecovery reads: one table, upstream names first (PURE).

Every key a ``bk_server.conf`` may carry for AutoRecovery is listed once in :data:`KEYS` with its type,
unit, default, a one-line doc and where it comes from:

* ``upstream`` — Apache BookKeeper's ``ServerConfiguration`` / ``ClientConfiguration`` /
  ``AbstractConfiguration`` key, same name, same unit, same default unless ``upstream_default`` says
  otherwise (the docs explain each such difference);
* ``ours`` — a key autorecovery adds, named in the same style.

:data:`PULSAR_ALIASES` maps Pulsar ``broker.conf`` names (``bookkeeperClient...``) onto the upstream
keys, and :data:`NO_EFFECT_KEYS` lists the upstream keys that a shared ``bk_server.conf`` usually
contains but that have no effect on AutoRecovery, each with its reason (they are accepted and listed
by ``config check`` instead of being reported as unknown).

Parsing one raw string value is :meth:`Key.parse`; it raises :class:`~autorecovery.errors.ConfigError`
naming the key and the value. No I/O here: :mod:`autorecovery.config.load` reads files and the
environment.

The typed settings sections (``AuditorSettings``, ``WorkerSettings``, ``PlacementConfig``) derive from
:class:`Section`: each maps table keys to its fields and is built from the values the loader parsed
once (:meth:`Section.from_values`); :meth:`Section.from_properties` (tests, tools) parses raw strings
with the same :meth:`Key.parse` and fills the table's defaults, so there is one parser and one default
per key.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autorecovery.errors import ConfigError

UPSTREAM = "upstream"
OURS = "ours"

_TRUE = {"true", "yes", "on", "1", "y", "t"}
_FALSE = {"false", "no", "off", "0", "n", "f"}

#: Bounds shared by the number keys of :data:`KEYS` (every ``int`` and ``float`` key has both).
#: Java's ``int``: upstream reads most of these keys with ``getInt``, so a larger value never worked there.
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
#: A period: at most a year, in the key's unit (upstream reads periods as ``int`` or ``long``; a
#: longer period is a typo, and bounding it keeps every timer and ``float`` conversion finite).
YEAR_S = 365 * 24 * 3600
YEAR_MS = YEAR_S * 1000
PORT_MAX = 65535
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_MAX_DIGITS = 30  # more significant digits than this is out of every key's range, whatever its sign
_QUOTE_MAX = 40


@dataclass(frozen=True)
class Key:
    """One configuration key.

    Attributes:
        name: the exact key (case-sensitive, as upstream: ``auditorAcquireConcurrentOpenLedgerOperationsTimeOutMSec``).
        type: ``int``, ``float``, ``bool`` or ``str``.
        default: the value used when the key is not set (already typed; None = unset).
        unit: ``ms``, ``s``, ``bytes``, ``bytes/s``, ``%``, ``count``, ``tasks/s`` or ``""``.
        doc: one line for ``config check`` and docs/operators.md.
        origin: :data:`UPSTREAM` or :data:`OURS`.
        group: ``metadata``, ``daemon``, ``http``, ``tls``, ``stats``, ``logging``, ``auditor``, ``worker``, ``placement``,
            ``bookieinfo``.
        min_value / max_value: inclusive bounds for numbers (None = unbounded).
        choices: allowed values for strings (lower-cased comparison), None = any.
        upstream_default: upstream's default when ours differs (documented), else None.
        secret: the value is a credential: ``config check`` prints ``******`` instead of it and no
            error message quotes it.
    """

    name: str
    type: str
    default: Any
    unit: str
    doc: str
    origin: str = UPSTREAM
    group: str = ""
    min_value: float | None = None
    max_value: float | None = None
    choices: tuple[str, ...] | None = None
    upstream_default: Any = None
    secret: bool = False

    def parse(self, raw: str) -> Any:
        """Turn the raw property string into a typed value.

        Booleans accept true/false, yes/no, on/off, 1/0 (any case), as Commons Configuration does.
        Integers are decimal (an optional sign; ``_`` separators are not allowed, as in Java).

        Raises:
            ConfigError: ``bad value for <key>: <value!r> (expected ...)``.
        """
        text = raw.strip()
        try:
            if self.type == "bool":
                low = text.lower()
                if low in _TRUE:
                    return True
                if low in _FALSE:
                    return False
                raise ValueError("expected true or false")
            if self.type == "int":
                if not text or "_" in text:
                    raise ValueError("expected an integer")
                if _INT_TEXT.fullmatch(text) and len(text.lstrip("+-").lstrip("0")) > _MAX_DIGITS:
                    raise OverflowError  # far outside every key's range: not even converted
                value: Any = int(text, 10)
            elif self.type == "float":
                if not text or "_" in text:
                    raise ValueError("expected a number")
                value = float(text)
                if value != value:  # NaN
                    raise ValueError(f"expected a finite number, {self.allowed()}")
                if value in (math.inf, -math.inf):  # "inf", or a literal beyond the double range ("1e400")
                    raise OverflowError
            else:
                value = text
                if self.choices is not None and text.lower() not in self.choices:
                    raise ValueError("expected one of " + ", ".join(self.choices))
                return value
        except OverflowError:
            raise ConfigError(f"bad value for {self.name}: {_quote(raw)} (out of range: {self.allowed()})") from None
        except ValueError as exc:
            raise ConfigError(f"bad value for {self.name}: {_quote(raw)} ({_describe(self, exc)})") from None
        if (self.min_value is not None and value < self.min_value) or (
                self.max_value is not None and value > self.max_value):
            raise ConfigError(f"bad value for {self.name}: {_quote(raw)} (out of range: {self.allowed()})")
        return value

    def allowed(self) -> str:
        """The allowed range of a number key as text: ``allowed 0..65535``, ``allowed 1..31536000 s``."""
        low = "-inf" if self.min_value is None else _num(self.min_value)
        high = "inf" if self.max_value is None else _num(self.max_value)
        return f"allowed {low}..{high}{_unit(self)}"

    def render(self, value: Any) -> str:
        """The property-file form of a typed value (``true``/``false`` for booleans)."""
        if value is None:
            return ""
        if self.type == "bool":
            return "true" if value else "false"
        if self.type == "float" and float(value).is_integer():
            return str(value)
        return str(value)


def _quote(raw: str) -> str:
    """``raw`` quoted for an error line; a long value is cut (a 400-digit number stays one short line)."""
    if len(raw) <= _QUOTE_MAX:
        return repr(raw)
    return repr(raw[:_QUOTE_MAX]) + f"... ({len(raw)} characters)"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _unit(key: Key) -> str:
    return f" {key.unit}" if key.unit and key.unit not in ("count", "") else ""


def _describe(key: Key, exc: ValueError) -> str:
    msg = str(exc)
    if msg.startswith("expected ") and "allowed" in msg:
        return msg
    if msg.startswith("expected"):
        return msg + (f", in {key.unit}" if key.unit and key.unit != "count" and key.type != "bool" else "")
    return {"int": "expected an integer", "float": "expected a number"}.get(key.type, msg)


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
    _k("replicationStreamWindowBytes", "int", 16 * 1024 * 1024, "bytes", "worker",
       "body bytes queued per target between a copy stream's read and its write (memory bound; at least "
       "one entry, at most max(rereplicationEntryBatchSize, 256) entries)", origin=OURS, min_value=1, max_value=1024**3),
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

#: Pulsar ``broker.conf`` names → upstream key (same meaning, same unit). The two policy switches are
#: handled by :func:`pulsar_policy` instead.
PULSAR_ALIASES: dict[str, str] = {
    "bookkeeperMetadataServiceUri": "metadataServiceUri",
    # broker.conf's metadata store (``zk:h1:2181,h2:2181`` or ``metadata-store:zk:...``; the ``zk:`` prefix
    # is stripped in config.load) and its deprecated predecessor
    "metadataStoreUrl": "zkServers",
    "zookeeperServers": "zkServers",
    "bookkeeperClientMinNumRacksPerWriteQuorum": "minNumRacksPerWriteQuorum",
    "bookkeeperClientEnforceMinNumRacksPerWriteQuorum": "enforceMinNumRacksPerWriteQuorum",
    "bookkeeperDiskWeightBasedPlacementEnabled": "diskWeightBasedPlacementEnabled",
    "bookkeeperClientGetBookieInfoIntervalSeconds": "getBookieInfoIntervalSeconds",
    "bookkeeperClientGetBookieInfoRetryIntervalSeconds": "getBookieInfoRetryIntervalSeconds",
}

#: Pulsar's boolean policy switches (``bookkeeperClientRegionawarePolicyEnabled`` wins, as in Pulsar's
#: BookKeeperClientFactoryImpl; both false → the default policy).
#: Our own older names → the upstream key that replaced them (same meaning). In one source the upstream
#: name wins, with a warning when the two differ; a later source (env over file, flag over env) wins
#: whichever name it uses.
OUR_ALIASES: dict[str, str] = {
    "httpServerAddress": "httpServerHost",
}

PULSAR_POLICY_SWITCHES = ("bookkeeperClientRackawarePolicyEnabled", "bookkeeperClientRegionawarePolicyEnabled")

#: Pulsar passes ``bookkeeper_<key>=v`` through to the BookKeeper client as ``<key>=v``; so do we.
PULSAR_PASSTHROUGH_PREFIX = "bookkeeper_"

RACKAWARE_CLASS = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
REGIONAWARE_CLASS = "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy"
DEFAULT_POLICY_CLASS = "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy"

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
    ("digest type and password for opening ledgers: the auditor and the worker take both from each ledger's "
     "metadata (upstream's enableDigestTypeAutodetection=true, its default), i.e. what the ledger was "
     "written with", ("digestType", "passwd", "enableDigestTypeAutodetection")),
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
    ("false (upstream's default) is accepted and changes nothing; true asks that an add be acknowledged only "
     "once the acked bookies span minNumRacksPerWriteQuorum fault domains, which our client's recovery adds "
     "do not check, so true is refused", ("enforceMinNumFaultDomainsForWrite",)),
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
REFUSED_WHEN_ASKED: dict[str, str] = {
    "enforceMinNumFaultDomainsForWrite": "our client's recovery adds do not wait for the acked bookies to span "
                                         "minNumRacksPerWriteQuorum fault domains; remove the key or set it false",
}


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


def known(name: str) -> bool:
    """True for a key of the table (not an alias, not an ignored bookie key)."""
    return name in KEY_BY_NAME


def classified(name: str) -> bool:
    """True for every name the loader does not call unknown: a key of the table, one of its aliases
    (Pulsar's, ours), a key accepted with no effect, or an unimplemented security key (refused when it
    asks for something)."""
    return (name in KEY_BY_NAME or name in PULSAR_ALIASES or name in OUR_ALIASES or name in PULSAR_POLICY_SWITCHES
            or name in NO_EFFECT_KEYS or name in UNIMPLEMENTED_SECURITY_KEYS)


def suggest(name: str, extra: tuple[str, ...] = ()) -> str | None:
    """The closest known key to a misspelled ``name`` ("did you mean"), or None.

    A case-insensitive exact match wins (``zktimeout`` → ``zkTimeout``); otherwise difflib's closest
    name with a similarity of at least 0.8.
    """
    names = (list(KEY_BY_NAME) + list(PULSAR_ALIASES) + list(OUR_ALIASES) + list(PULSAR_POLICY_SWITCHES)
             + list(NO_EFFECT_KEYS) + sorted(UNIMPLEMENTED_SECURITY_KEYS) + list(extra))
    low = name.lower()
    for n in names:
        if n.lower() == low:
            return n
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
    if close:
        return close[0]
    close = difflib.get_close_matches(low, [n.lower() for n in names], n=1, cutoff=0.8)
    if close:
        return next(n for n in names if n.lower() == close[0])
    return None


def pulsar_policy(rackaware: bool | None, regionaware: bool | None) -> str | None:
    """The ``ensemblePlacementPolicy`` class Pulsar's two switches select (None when neither is set)."""
    if rackaware is None and regionaware is None:
        return None
    if regionaware:
        return REGIONAWARE_CLASS
    if rackaware:
        return RACKAWARE_CLASS
    return DEFAULT_POLICY_CLASS


def keys_in_group(group: str) -> tuple[Key, ...]:
    return tuple(k for k in KEYS if k.group == group)


# -- typed sections ---------------------------------------------------------------------------------
def typed_value(key: Key, value: Any) -> Any:
    """``value`` as the typed value of ``key``: a string goes through :meth:`Key.parse`; an already
    typed value (``True``, ``2``, ``0.5``, as tests and tools pass them) is checked the same way
    (type, bounds, choices).

    Raises:
        ConfigError: ``bad value for <key>: <value!r> (...)``.
    """
    if isinstance(value, str):
        return key.parse(value)
    if key.type == "bool" and isinstance(value, bool):
        return value
    if key.type in ("int", "float") and isinstance(value, (int, float)) and not isinstance(value, bool):
        if key.type == "int" and isinstance(value, float):
            if not value.is_integer():
                raise ConfigError(f"bad value for {key.name}: {value!r} (expected an integer)")
            value = int(value)
        return key.parse(str(value))
    expected = {"bool": "true or false", "int": "an integer", "float": "a number"}.get(key.type, "a string")
    raise ConfigError(f"bad value for {key.name}: {value!r} (expected {expected})")


def typed_values(props: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """Typed value of every key of ``names``: parsed from ``props`` when set there, else the table's
    default.

    Raises:
        ConfigError: naming every key with a bad value (``; ``-separated), or a name that is not in
            :data:`KEYS`.
    """
    out: dict[str, Any] = {}
    errors: list[str] = []
    for name in names:
        key = KEY_BY_NAME.get(name)
        if key is None:
            raise ConfigError(f"{name} is not a configuration key of autorecovery")
        if name not in props:
            out[name] = key.default
            continue
        try:
            out[name] = typed_value(key, props[name])
        except ConfigError as exc:
            errors.append(str(exc))
    if errors:
        raise ConfigError("; ".join(errors))
    return out


class Section:
    """Base of the typed settings dataclasses built from the key table.

    Subclasses (frozen dataclasses) set, as plain class attributes:

    * ``KEY_FIELDS``: table key → field name (every key must be in :data:`KEYS`);
    * ``CONVERT``: table key → function from the typed value to the field value (e.g. ``;``-separated
      regions → tuple); keys without one are stored as parsed;
    * ``STRICT``: True when :meth:`from_properties` refuses keys that are not the section's
      (PlacementConfig), False when it ignores them (a whole ``bk_server.conf`` may be passed).

    Field defaults must equal ``CONVERT(table default)`` (tests/unit/config/test_settings_tree.py).
    """

    KEY_FIELDS: Mapping[str, str] = {}
    CONVERT: Mapping[str, Callable[[Any], Any]] = {}
    STRICT = False
    SECTION = ""  # name used in messages (default: the class name)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Any:
        """The section from typed values by key name (what the loader parsed); keys missing from
        ``values`` keep the field default.

        Raises:
            ConfigError: a converter or the dataclass's own checks refuse a value (naming the key).
        """
        kw: dict[str, Any] = {}
        for key, fname in cls.KEY_FIELDS.items():
            if key in values:
                conv = cls.CONVERT.get(key)
                kw[fname] = conv(values[key]) if conv is not None else values[key]
        return cls(**kw)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None) -> Any:
        """The section from raw ``bk_server.conf`` strings (or typed values) by upstream key name,
        parsed by :meth:`Key.parse`; unset keys take the table's default.

        Raises:
            ConfigError: naming every key with a bad value; with ``STRICT``, a key that is not the
                section's (``unknown <section> config key 'x'``).
        """
        props = dict(props or {})
        if cls.STRICT:
            for name in props:
                if name not in cls.KEY_FIELDS:
                    raise ConfigError(f"unknown {cls.SECTION or cls.__name__} config key {name!r}")
        mine = {k: v for k, v in props.items() if k in cls.KEY_FIELDS}
        return cls.from_values(typed_values(mine, cls.KEY_FIELDS))

    @classmethod
    def key_map(cls) -> dict[str, str]:
        """config key → field name."""
        return dict(cls.KEY_FIELDS)
