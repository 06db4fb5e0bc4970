"""The frozen settings tree the loader builds (:class:`Settings` and its sub-settings: ``.zk`` with its
security, ``.http``, ``.stats``, ``.bookie_info``); the role sections are in
:mod:`autorecovery.config.sections`. Built by :func:`autorecovery.config.load.load_settings`; every
name here also resolves from ``autorecovery.config.load``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autorecovery.config import keys as K
from autorecovery.config.sections import AuditorSettings, WorkerSettings
from autorecovery.config.tls import BookieTls
from autorecovery.placement.config import PlacementConfig


@dataclass(frozen=True)
class HttpSettings:
    """The daemon's HTTP server: ``enabled``, bind ``address``, ``port`` (0 = any free port), and whether
    the mutating admin endpoints are served (``mutations_enabled``).

    Issue 15 (all optional):
        tls: ``httpServerTlsEnable``: serve HTTPS with ``cert_path``/``key_path`` (PEM).
        client_ca_path: ``httpServerClientCaPath``: with TLS, require client certificates this CA signs.
        token: the bearer token of ``httpAdminTokenFile`` (first line) that every PUT/POST/DELETE must
            carry; None = no token check. Never part of ``repr`` and never logged.

    Issue 25 (all optional):
        read_token: ``httpReadTokenFile``'s first line (the read-only role); never in ``repr``.
        admin_subjects: ``httpAdminCertificateSubjects``: client certificate CNs or subjects of the admin role.
        debug_endpoints: ``httpDebugEndpointsEnabled``: serve ``expire_session``.
        audit_file: ``httpAuditLogFile``: also append the audit lines there (JSON lines).
    """

    enabled: bool
    address: str
    port: int
    mutations_enabled: bool
    tls: bool = False
    cert_path: str | None = None
    key_path: str | None = None
    client_ca_path: str | None = None
    token: str | None = field(default=None, repr=False)
    token_path: str | None = None
    read_token: str | None = field(default=None, repr=False)
    read_token_path: str | None = None
    admin_subjects: frozenset[str] = frozenset()
    debug_endpoints: bool = False
    audit_file: str | None = None


@dataclass(frozen=True)
class ZkTls:
    """TLS to ZooKeeper (``zookeeper.client.secure=true``; ZooKeeper's own client property names).

    Attributes:
        trust_path: ``zookeeper.ssl.trustStore.location``: PEM CA certificates that sign the servers'
            certificates; None = the system's default roots.
        keystore_path: ``zookeeper.ssl.keyStore.location``: one PEM file holding our certificate chain
            and our unencrypted private key (ZooKeeper's PEM key store layout), presented when the
            server asks for a client certificate; None = no client certificate.
        hostname_verification: ``zookeeper.ssl.hostnameVerification``: the server certificate must
            name the host of the connect string (DNS or IP SAN). The CA is checked either way.
    """

    trust_path: str | None = None
    keystore_path: str | None = None
    hostname_verification: bool = True


@dataclass(frozen=True)
class ZkSasl:
    """SASL authentication of every ZooKeeper session (``zkSaslMechanism``..., keys of ours: upstream
    reads a JAAS ``Client`` section instead).

    Attributes:
        mechanism: ``DIGEST-MD5`` (the only one supported).
        username: ``zkSaslUsername``.
        password: the first line of ``zkSaslPasswordFile``; never part of ``repr`` and never logged.
        password_file: the file it came from (for messages).
    """

    mechanism: str
    username: str
    password: str = field(repr=False)
    password_file: str = ""


@dataclass(frozen=True)
class ZkSecurity:
    """How we authenticate to ZooKeeper and which ACL our znodes get (upstream ``ZkUtils.getACLs``).

    Attributes:
        enabled: ``zkEnableSecurity``: every znode we create gets ``CREATOR_ALL_ACL`` (all permissions
            for the session's authenticated identity only); False = ``OPEN_ACL_UNSAFE`` (world:anyone).
        digest: ``user:password`` for ZooKeeper's ``digest`` scheme (``zkDigestAuth`` or the first
            line of ``zkDigestAuthFile``), sent on every (re)connect; None = no authentication.
            Never part of ``repr`` and never logged.
        source: the key the digest came from (``zkDigestAuth``/``zkDigestAuthFile``), for messages.
        sasl: SASL identity (``zkSaslMechanism``/``zkSaslUsername``/``zkSaslPasswordFile``); None = no
            SASL. With ``enabled`` the creator-all ACL names this identity (``sasl:<user>``).
        tls: TLS to ZooKeeper (``zookeeper.client.secure``); None = plaintext.
    """

    enabled: bool = False
    digest: str | None = field(default=None, repr=False)
    source: str = ""
    sasl: ZkSasl | None = None
    tls: ZkTls | None = None

    @property
    def user(self) -> str | None:
        """The user part of the digest identity, else the SASL user name (not secret), or None."""
        if self.digest:
            return self.digest.partition(":")[0]
        return self.sasl.username if self.sasl else None

    def describe(self) -> str:
        """One line for ``config check``: ACL, identity and transport, never a secret."""
        auth = "none"
        if self.digest:
            auth = f"digest user {self.user} ({self.source})"
        elif self.sasl:
            auth = f"sasl {self.sasl.mechanism} user {self.sasl.username}"
        tls = "off"
        if self.tls:
            tls = ("on (trust " + (self.tls.trust_path or "system roots")
                   + (f", certificate {self.tls.keystore_path}" if self.tls.keystore_path else "")
                   + ("" if self.tls.hostname_verification else ", no hostname verification") + ")")
        return f"acl={'CREATOR_ALL_ACL' if self.enabled else 'OPEN_ACL_UNSAFE'} auth={auth} tls={tls}"


@dataclass(frozen=True)
class ZkSettings:
    """The metadata store: what :meth:`autorecovery.zk.bridge.ZkClient.from_settings` connects with.

    Attributes:
        connect: ZooKeeper connect string ``h1:2181,h2:2181`` (from ``metadataServiceUri`` or
            ``zkServers``; "" when none is configured and ``require_metadata`` was off).
        root: ledgers root znode (``/ledgers``).
        timeout_ms: session timeout (``zkTimeout``, ms).
        security: identity and ACL choice (``zkEnableSecurity``, ``zkDigestAuth[File]``).
    """

    connect: str
    root: str = "/ledgers"
    timeout_ms: int = 10000
    security: ZkSecurity = field(default_factory=lambda: ZkSecurity())


@dataclass(frozen=True)
class StatsSettings:
    """The upstream ``PrometheusMetricsProvider`` listener (``/metrics`` only), served in addition to
    the admin HTTP server so that scrape jobs written for an upstream AutoRecovery keep working.

    Attributes:
        prometheus_enabled: serve the listener (see :func:`build_stats_settings` for the rule).
        address: ``prometheusStatsHttpAddress`` (upstream default ``0.0.0.0``).
        port: ``prometheusStatsHttpPort`` (upstream default 8000; 0 = any free port).
        reason: one line saying why the listener is on or off (``config check`` prints it).
    """

    prometheus_enabled: bool = False
    address: str = "0.0.0.0"
    port: int = 8000
    reason: str = ""


@dataclass(frozen=True)
class BookieInfoSettings:
    """BookieInfoReader timings in seconds (``interval_s`` 0 = poll only on bookie-set changes)."""

    interval_s: float
    retry_interval_s: float
    timeout_s: float


@dataclass(frozen=True)
class Settings:
    """The effective configuration, parsed once: a typed tree built from the key table.

    Attributes:
        zk: :class:`ZkSettings` (connect string, ledgers root, session timeout, security); the older
            flat names ``zk_servers``, ``ledgers_root``, ``zk_timeout_ms`` and ``zk_security`` are
            properties reading it.
        bookie_id: this node's id (election vote, ``decommissionbookie`` default).
        http, bookie_info: sub-settings.
        auditor: :class:`~autorecovery.config.sections.AuditorSettings` (what the daemon's Auditor runs with).
        worker: :class:`~autorecovery.config.sections.WorkerSettings` (the ReplicationWorker, ``recover``'s
            copy caps).
        placement: :class:`~autorecovery.placement.config.PlacementConfig` (the placement policy).
        log_level, log_format: logging (``auto``/``json``/``console``).
        shutdown_timeout_s: bound on the graceful stop.
        session_rejoin: rejoin after a session expiry instead of exiting.
        values: typed value of every key of the table (defaults filled in); the sections above are
            built from it.
        properties: raw string of every key that was set (canonical names, unknown ones included) —
            what ``server_config`` (upstream ``asJson``) shows; no code parses it again.
        sources: key → ``file``/``env``/``flag``/``default``/``derived`` (``(alias X)`` appended when
            the value came through a Pulsar alias).
        warnings: human-readable warnings (unknown keys, conflicts), already formatted.
        conf_path: the properties file, when one was read.
        ledger_manager: the ledger manager factory class the configuration names (the
            ``metadataServiceUri`` scheme, ``ledgerManagerFactoryClass`` or ``ledgerManagerType``), or
            None when it leaves the choice to ``LAYOUT``; checked against ``LAYOUT`` at start
            (:func:`autorecovery.ledger.layout.require_matches`). ledger_manager_key: which key named it.
        stats: the upstream Prometheus listener (``statsProviderClass``, ``prometheusStatsHttp*``).
        ignored: keys that were set but have no effect here (:data:`~autorecovery.config.keys.NO_EFFECT_KEYS`,
            and unimplemented security keys that ask for nothing; reason: ``keys.no_effect_reason``),
            in the order they were seen.
        tls: TLS to the bookies (``tlsProviderFactoryClass``, ``tlsClientAuthentication``, PEM files).
    """

    zk: ZkSettings
    bookie_id: str
    http: HttpSettings
    bookie_info: BookieInfoSettings
    auditor: AuditorSettings
    worker: WorkerSettings
    placement: PlacementConfig
    log_level: str
    log_format: str
    shutdown_timeout_s: float
    session_rejoin: bool
    values: Mapping[str, Any]
    properties: Mapping[str, str]
    sources: Mapping[str, str]
    warnings: tuple[str, ...] = ()
    conf_path: str | None = None
    metadata_service_uri: str = field(default="")
    ledger_manager: str | None = None
    ledger_manager_key: str = ""
    stats: StatsSettings = field(default_factory=StatsSettings)
    ignored: tuple[str, ...] = ()
    tls: BookieTls = field(default_factory=BookieTls)

    @property
    def zk_servers(self) -> str:
        """ZooKeeper connect string (``zk.connect``)."""
        return self.zk.connect

    @property
    def ledgers_root(self) -> str:
        """Ledgers root znode (``zk.root``)."""
        return self.zk.root

    @property
    def zk_timeout_ms(self) -> int:
        """Session timeout in ms (``zk.timeout_ms``)."""
        return self.zk.timeout_ms

    @property
    def zk_security(self) -> ZkSecurity:
        """ZooKeeper identity and ACL choice (``zk.security``)."""
        return self.zk.security

    def get(self, name: str) -> Any:
        """Typed value of a key of the table.

        Raises:
            KeyError: naming the key when it is not in the table.
        """
        if name not in self.values:
            raise KeyError(f"{name} is not a configuration key of autorecovery")
        return self.values[name]

    def effective_lines(self) -> list[str]:
        """``key=value  # source, origin`` for every key of the table, then any unknown keys that were
        set; what ``autorecovery config check`` prints."""
        out = []
        for key in K.KEYS:
            value = self.values.get(key.name)
            src = self.sources.get(key.name, "default")
            origin = key.origin
            if key.upstream_default is not None and key.origin == K.UPSTREAM:
                origin += f", upstream default {key.render(key.upstream_default)}"
            shown = "******" if key.secret and value not in (None, "") else key.render(value)
            out.append(f"{key.name}={shown}  # {src}, {origin}")
        extra = sorted(k for k in self.properties if k not in K.KEY_BY_NAME)
        for name in extra:
            out.append(f"{name}={self.properties[name]}  # {self.sources.get(name, '?')}, not in the key table")
        return out
