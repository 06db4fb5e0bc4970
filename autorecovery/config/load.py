"""Load the effective configuration once: bk_server.conf, then ``BK_<key>`` env, then CLI flags (EDGE).

Precedence (later wins): the Java-properties file (``-c bk_server.conf``, parsed with javaproperties,
so ``\\`` continuations, ``:`` separators and unicode escapes behave as in Java) → environment variables
``BK_<key>`` (upstream's Docker image convention: ``BK_zkServers=zk1:2181``) → command-line flags
(``--zk``, ``--ledgers-root``, ``-D key=value``...).

Within each layer, Pulsar ``broker.conf`` names are mapped to upstream keys
(:data:`~autorecovery.config.keys.PULSAR_ALIASES`, ``bookkeeper_<key>`` pass-through, and the
rack-/region-aware switches that select ``ensemblePlacementPolicy``). An upstream name set in the same
layer wins over its alias.

Unknown keys produce a warning naming them, with "did you mean <key>?" when a known key is close.
Bad values raise :class:`~autorecovery.errors.ConfigError` naming every bad key and its value.

Every key is in one table (:data:`~autorecovery.config.keys.KEYS`); each value is parsed once, here,
by :meth:`~autorecovery.config.keys.Key.parse`. The result is a frozen :class:`Settings` tree built
from those typed values: ``.zk`` (connect string, ledgers root, session timeout, security), ``.http``,
``.auditor`` (:class:`~autorecovery.config.sections.AuditorSettings`), ``.worker``
(:class:`~autorecovery.config.sections.WorkerSettings`), ``.placement``
(:class:`~autorecovery.placement.config.PlacementConfig`), ``.bookie_info``, ``.stats``; the daemon,
the admin commands and ``config check`` hand these down instead of re-parsing raw strings. Nothing else
in the code reads the environment.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import javaproperties

from autorecovery.config import keys as K
from autorecovery.config.sections import AuditorSettings, WorkerSettings
from autorecovery.errors import CompatibilityError, ConfigError
from autorecovery.ledger.ids import validate_bookie_id
from autorecovery.ledger.layout import manager_from_config
from autorecovery.placement.config import PlacementConfig
from autorecovery.config.files import read_first_line
from autorecovery.config.tls import TLS_CONTEXT_FACTORY, BookieTls, read_pem

ENV_PREFIX = "BK_"


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
        prometheus_enabled: serve the listener (see :func:`_stats_settings` for the rule).
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


# -- parsing --------------------------------------------------------------------------------------
def _secret_first_line(key: str, path: str, errors: list[str]) -> str | None:
    """The first line of the file ``key`` names (a digest, password or token file), or None after
    appending why it cannot be read to ``errors``: naming ``key`` and the path, never the content. Only
    a regular file under the size cap is read (:func:`~autorecovery.config.files.read_first_line`): a
    FIFO, ``/dev/zero`` or a huge file is an error naming the key, not a hang or a memory blow-up."""
    try:
        return read_first_line(path, key) + "\n"
    except ConfigError as exc:
        errors.append(str(exc))
    return None


def read_properties_file(path: str | Path) -> dict[str, str]:
    """Parse a Java-properties file.

    Raises:
        ConfigError: naming the file when it cannot be read.
    """
    p = Path(path)
    try:
        with open(p, encoding="latin-1") as f:  # Java's Properties.load reads ISO-8859-1
            return dict(javaproperties.load(f))
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}") from None
    except Exception as exc:  # noqa: BLE001 - javaproperties raises plain ValueErrors on bad escapes
        raise ConfigError(f"cannot parse config file {p}: {exc}") from None


def env_properties(env: Mapping[str, str]) -> dict[str, str]:
    """``BK_<key>`` environment variables as properties (``BK_zkServers`` → ``zkServers``).

    All-upper-case names (``BK_DATA_DIR``) are the Docker image's own variables, not config keys, and
    are skipped.
    """
    out = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or len(name) <= len(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX):]
        if key.upper() == key:
            continue
        out[key] = value
    return out


def parse_metadata_service_uri(uri: str) -> tuple[str, str]:
    """Split a metadata service URI into (ZooKeeper connect string, ledgers root).

    See :func:`parse_metadata_service_uri_manager` for the forms accepted.

    Raises:
        ConfigError: naming ``metadataServiceUri`` and the value.
    """
    hosts, root, _manager = parse_metadata_service_uri_manager(uri)
    return hosts, root


def parse_metadata_service_uri_manager(uri: str) -> tuple[str, str, str | None]:
    """Split ``zk+hierarchical://h1:2181;h2:2181/ledgers`` into (``h1:2181,h2:2181``, ``/ledgers``,
    ``"hierarchical"``).

    Accepted forms:

    * upstream ``ZKMetadataDriverBase``: ``zk://``, ``zk+hierarchical://``, ``zk+longhierarchical://``,
      ``zk+legacyhierarchical://``, ``zk+null://`` (``null`` or plain ``zk`` = use the layout the
      cluster was formatted with). Hosts are separated by ``;`` (upstream) or ``,``;
    * Pulsar's ``metadata-store:zk:h1:2181,h2:2181/ledgers`` (``PulsarMetadataBookieDriver``; the
      ``zk:`` part may be ``zk://``); other Pulsar metadata stores (etcd, rocksdb, memory) are refused.

    An empty path means ``/ledgers``. The third item is the manager type the scheme names, or None.

    Raises:
        ConfigError: naming ``metadataServiceUri`` and the value.
    """
    def bad(why: str) -> ConfigError:
        return ConfigError(f"bad value for metadataServiceUri: {uri!r} ({why})")

    text = uri.strip()
    if text.lower().startswith("metadata-store:"):
        rest = text[len("metadata-store:"):]
        if not rest.lower().startswith("zk:"):
            raise bad("only a ZooKeeper metadata store (metadata-store:zk:host:2181/ledgers) is supported")
        rest = rest[3:]
        if rest.startswith("//"):
            rest = rest[2:]
        text = "zk://" + rest
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise bad(str(exc)) from None
    scheme = parts.scheme.lower()
    base, _, manager = scheme.partition("+")
    if base != "zk":
        raise bad("expected a zk:// or zk+hierarchical:// URI; only ZooKeeper metadata stores are supported")
    if manager not in ("", "hierarchical", "longhierarchical", "legacyhierarchical", "null"):
        raise bad(f"ledger manager {manager!r} is not supported; use hierarchical or longhierarchical")
    hosts = [h.strip() for h in parts.netloc.replace(";", ",").split(",") if h.strip()]
    if not hosts:
        raise bad("no ZooKeeper servers in the URI")
    for h in hosts:
        host, _, port = h.rpartition(":")
        if not host or not port.isdigit():
            raise bad(f"server {h!r} is not host:port")
    root = parts.path.rstrip("/") or "/ledgers"
    return ",".join(hosts), root, (manager if manager not in ("", "null") else None)


def strip_pulsar_store_prefix(servers: str) -> str:
    """Pulsar's ``metadataStoreUrl`` / ``zookeeperServers`` value as a ZooKeeper connect string:
    ``zk:h1:2181,h2:2181/chroot`` → ``h1:2181,h2:2181/chroot``.

    Raises:
        ConfigError: another metadata store (``etcd:``, ``rocksdb:``, ``memory:``), naming the value.
    """
    text = servers.strip()
    low = text.lower()
    if low.startswith("metadata-store:"):
        text, low = text[len("metadata-store:"):], low[len("metadata-store:"):]
    if low.startswith("zk:"):
        text = text[3:].lstrip("/")
    elif any(low.startswith(p) for p in ("etcd:", "rocksdb:", "memory:", "oxia:")):
        raise ConfigError(f"bad value for zkServers: {servers!r} (only a ZooKeeper metadata store is supported)")
    return text


def _validate_root(root: str, key: str) -> str:
    if not root.startswith("/") or root.endswith("/") or "//" in root or len(root) < 2:
        raise ConfigError(f"bad value for {key}: {root!r} (expected an absolute znode path like /ledgers)")
    return root


def _default_bookie_id(values: Mapping[str, Any]) -> str:
    host = values.get("advertisedAddress")
    if not host:
        try:
            if values.get("useHostNameAsBookieID"):
                host = socket.getfqdn()
                if values.get("useShortHostName"):
                    host = host.split(".", 1)[0]
            else:
                host = socket.gethostbyname(socket.gethostname())
        except OSError:
            host = "127.0.0.1"
    return f"{host}:{values.get('bookiePort', 3181)}"


SECRET_MASK = "******"

PROMETHEUS_PROVIDER = "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider"
NULL_PROVIDER = "org.apache.bookkeeper.stats.NullStatsProvider"


def _zk_security(values: Mapping[str, Any], errors: list[str]) -> ZkSecurity:
    """``zkEnableSecurity`` + ``zkDigestAuth``/``zkDigestAuthFile`` → :class:`ZkSecurity`.

    Appends to ``errors`` (never quoting the secret): both digest keys set; an unreadable or empty
    digest file (naming the key and the path); a digest that is not ``user:password``;
    ``zkEnableSecurity=true`` with no identity (ZooKeeper rejects a creator-all ACL from an
    unauthenticated session with InvalidACL, so we refuse before connecting).
    """
    enabled = bool(values.get("zkEnableSecurity"))
    inline = values.get("zkDigestAuth") or None
    path = values.get("zkDigestAuthFile") or None
    digest: str | None = None
    source = ""
    if inline and path:
        errors.append("zkDigestAuth and zkDigestAuthFile are both set; set only one")
        return ZkSecurity(enabled=enabled)
    if path:
        source = "zkDigestAuthFile"
        line = _secret_first_line("zkDigestAuthFile", path, errors)
        if line is None:
            return ZkSecurity(enabled=enabled)
        digest = line.strip()
        if not digest:
            errors.append(f"bad value for zkDigestAuthFile: {path} is empty (expected a first line user:password)")
            return ZkSecurity(enabled=enabled)
    elif inline:
        source = "zkDigestAuth"
        digest = str(inline).strip()
    if digest is not None:
        user, sep, _password = digest.partition(":")
        if not sep or not user:
            where = f" (from {path})" if source == "zkDigestAuthFile" else ""
            errors.append(f"bad value for {source}{where}: expected user:password (the value is a secret and "
                          f"is not shown)")
            return ZkSecurity(enabled=enabled)
    sasl = _zk_sasl(values, errors)
    tls = _zk_tls(values, errors)
    if digest and sasl is not None:
        errors.append(f"{source} and zkSaslMechanism are both set: set one ZooKeeper identity")
    if enabled and not digest and sasl is None and not _sasl_asked(values):
        errors.append("zkEnableSecurity=true needs a ZooKeeper identity: set zkDigestAuth=user:password or "
                      "zkDigestAuthFile=<file holding user:password>, or zkSaslMechanism=DIGEST-MD5 with "
                      "zkSaslUsername and zkSaslPasswordFile (ZooKeeper refuses creator-only ACLs from an "
                      "unauthenticated session)")
    return ZkSecurity(enabled=enabled, digest=digest, source=source, sasl=sasl, tls=tls)


def _sasl_asked(values: Mapping[str, Any]) -> bool:
    return any(values.get(k) for k in ("zkSaslMechanism", "zkSaslUsername", "zkSaslPasswordFile"))


def _zk_sasl(values: Mapping[str, Any], errors: list[str]) -> ZkSasl | None:
    """``zkSaslMechanism`` + ``zkSaslUsername`` + ``zkSaslPasswordFile`` → :class:`ZkSasl` (None when
    none is set).

    Appends to ``errors`` (never quoting the password): a mechanism other than DIGEST-MD5 (GSSAPI
    needs a Kerberos KDC and the ``kerberos`` module, which this project neither ships nor tests);
    a user name or password file without the mechanism, or the mechanism without them; an
    unreadable or empty password file.
    """
    mech = str(values.get("zkSaslMechanism") or "").strip()
    user = str(values.get("zkSaslUsername") or "").strip()
    path = str(values.get("zkSaslPasswordFile") or "").strip()
    if not (mech or user or path):
        return None
    if not mech:
        errors.append("zkSaslUsername/zkSaslPasswordFile set without zkSaslMechanism: set "
                      "zkSaslMechanism=DIGEST-MD5 to authenticate with SASL")
        return None
    if mech.upper() != "DIGEST-MD5":
        errors.append(f"bad value for zkSaslMechanism: {mech!r} (only DIGEST-MD5 is supported; GSSAPI/Kerberos "
                      f"is not: see docs/security.md)")
        return None
    missing = [k for k, v in (("zkSaslUsername", user), ("zkSaslPasswordFile", path)) if not v]
    if missing:
        errors.append(f"zkSaslMechanism={mech} needs {' and '.join(missing)}")
        return None
    line = _secret_first_line("zkSaslPasswordFile", path, errors)
    if line is None:
        return None
    password = line.rstrip("\r\n")
    if not password:
        errors.append(f"bad value for zkSaslPasswordFile: {path} is empty (expected the password on its first line)")
        return None
    return ZkSasl(mechanism="DIGEST-MD5", username=user, password=password, password_file=path)


_ZK_TLS_FILES = ("zookeeper.ssl.keyStore.location", "zookeeper.ssl.trustStore.location")


def _zk_tls(values: Mapping[str, Any], errors: list[str]) -> ZkTls | None:
    """``zookeeper.client.secure`` and the ``zookeeper.ssl.*`` keys → :class:`ZkTls` (None = plaintext).

    Appends to ``errors`` when TLS is on: a key or trust store type other than PEM; a key store
    password (``zookeeper.ssl.keyStore.password``/``passwordPath``: the PEM key must be unencrypted,
    the value is never quoted); a key store file that is not PEM, lacks the certificate or the
    private key, or holds an encrypted key; a trust store that is not a PEM certificate file.
    """
    if not values.get("zookeeper.client.secure"):
        return None
    ok = True
    for kind in ("keyStore", "trustStore"):
        t = values.get(f"zookeeper.ssl.{kind}.type")
        if t and str(t).strip().upper() != "PEM":
            errors.append(f"bad value for zookeeper.ssl.{kind}.type: {t!r} (only PEM files are supported; "
                          f"convert the store with keytool/openssl)")
            ok = False
    for name in ("zookeeper.ssl.keyStore.password", "zookeeper.ssl.keyStore.passwordPath"):
        if values.get(name):
            errors.append(f"{name} is set: encrypted key stores are not supported; give an unencrypted PEM key "
                          f"(decrypt it with `openssl pkey`, keep the file readable by the service user only)")
            ok = False
    keystore = str(values.get("zookeeper.ssl.keyStore.location") or "") or None
    trust = str(values.get("zookeeper.ssl.trustStore.location") or "") or None
    if ok:
        try:
            if keystore:
                read_pem(keystore, "zookeeper.ssl.keyStore.location")  # the certificate chain
                read_pem(keystore, "zookeeper.ssl.keyStore.location", private_key=True)  # and the key
            if trust:
                read_pem(trust, "zookeeper.ssl.trustStore.location")
        except ConfigError as exc:
            errors.append(str(exc))
    return ZkTls(trust_path=trust, keystore_path=keystore,
                 hostname_verification=bool(values.get("zookeeper.ssl.hostnameVerification", True)))


def zk_security(enabled: bool, digest: str | None = None, digest_file: str | None = None, *,
                extra: Mapping[str, Any] | None = None) -> ZkSecurity:
    """:class:`ZkSecurity` from explicit values (the reference bookie's flags), validated as the keys are.

    Args:
        extra: further typed key values (``zkSaslMechanism``, ``zookeeper.client.secure``,
            ``zookeeper.ssl.*``...), as the loader would have parsed them.

    Raises:
        ConfigError: the problems :func:`_zk_security` reports (never quoting the secret).
    """
    errors: list[str] = []
    sec = _zk_security({"zkEnableSecurity": enabled, "zkDigestAuth": digest, "zkDigestAuthFile": digest_file,
                        **(extra or {})}, errors)
    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(errors))
    return sec


_JKS_HTTP_KEYS = ("httpServerKeyStorePath", "httpServerKeyStorePassword", "httpServerTrustStorePath",
                  "httpServerTrustStorePassword")


def _is_loopback(address: str) -> bool:
    """True for a loopback bind address (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    import ipaddress

    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def _check_pem(path: str, key: str, errors: list[str], *, private_key: bool = False) -> None:
    try:
        read_pem(path, key, private_key=private_key)
    except ConfigError as exc:
        errors.append(str(exc))


def _bookie_tls(values: Mapping[str, Any], errors: list[str]) -> BookieTls:
    """``tlsProviderFactoryClass`` and the PEM keys → :class:`~autorecovery.rpc.tls.BookieTls`.

    TLS is on when ``tlsProviderFactoryClass`` names upstream's ``TLSContextFactory`` (full or simple
    name). With TLS on, appends to ``errors`` (each naming the key): another factory class; a JKS or
    PKCS12 trust store (``tlsTrustStoreType``), or key store with client authentication
    (``tlsKeyStoreType``); ``tlsKeyStorePasswordPath`` (encrypted keys); ``tlsHostnameVerificationEnabled
    =false`` (gRPC cannot turn the check off); client authentication without ``tlsCertificatePath`` /
    ``tlsKeyStore``; a named file that is unreadable or not PEM.
    """
    cls = str(values.get("tlsProviderFactoryClass") or "").strip()
    enabled = K.asks_for_security(cls)
    client_auth = bool(values.get("tlsClientAuthentication"))
    cert = values.get("tlsCertificatePath") or None
    key = values.get("tlsKeyStore") or None
    trust = values.get("tlsTrustStore") or None
    refresh = float(values.get("tlsCertFilesRefreshDurationSeconds") or 0)
    tls = BookieTls(enabled=enabled, client_auth=client_auth, cert_path=cert, key_path=key, trust_path=trust,
                    refresh_s=refresh)
    if not enabled:
        return tls
    if cls.rsplit(".", 1)[-1] != "TLSContextFactory":
        errors.append(f"tlsProviderFactoryClass={cls} is not supported: only {TLS_CONTEXT_FACTORY} (PEM files) "
                      f"is; unset it for plaintext")
        return tls
    if str(values.get("tlsTrustStoreType") or "PEM").upper() != "PEM":
        errors.append(f"tlsTrustStoreType={values.get('tlsTrustStoreType')} is not supported: only PEM trust "
                      f"stores are read (convert with `keytool -exportcert -rfc`)")
    elif trust:
        _check_pem(str(trust), "tlsTrustStore", errors)
    if values.get("tlsHostnameVerificationEnabled") is False:
        errors.append("tlsHostnameVerificationEnabled=false is not supported: gRPC always checks that the bookie's "
                      "certificate names the host of its bookie id (give bookie certificates an IP or DNS SAN "
                      "for it)")
    if values.get("tlsKeyStorePasswordPath"):
        errors.append("tlsKeyStorePasswordPath is set: encrypted private keys are not supported; give tlsKeyStore "
                      "an unencrypted PEM key readable by the service user only")
    if client_auth:
        if str(values.get("tlsKeyStoreType") or "PEM").upper() != "PEM":
            errors.append(f"tlsKeyStoreType={values.get('tlsKeyStoreType')} is not supported: only PEM keys are "
                          f"read (tlsKeyStore = PEM private key, tlsCertificatePath = PEM certificate chain)")
        else:
            if not cert:
                errors.append("tlsClientAuthentication=true needs tlsCertificatePath (our PEM certificate chain)")
            else:
                _check_pem(str(cert), "tlsCertificatePath", errors)
            if not key:
                errors.append("tlsClientAuthentication=true needs tlsKeyStore (our PEM private key, "
                              "tlsKeyStoreType=PEM)")
            else:
                _check_pem(str(key), "tlsKeyStore", errors, private_key=True)
    return tls


def _tls_off_warnings(values: Mapping[str, Any], sources: Mapping[str, str]) -> list[str]:
    """Warnings for TLS keys that were set while their switch is off (they change nothing then):
    ``tlsClientAuthentication``/``tlsCertificatePath``/``tlsKeyStore``/``tlsTrustStore`` without
    ``tlsProviderFactoryClass``, and the HTTPS files without ``httpServerTlsEnable``."""
    out = []
    groups = (
        (K.asks_for_security(str(values.get("tlsProviderFactoryClass") or "")), "tlsProviderFactoryClass",
         ("tlsClientAuthentication", "tlsCertificatePath", "tlsKeyStore", "tlsTrustStore"),
         "bookie connections stay plaintext"),
        (bool(values.get("zookeeper.client.secure")), "zookeeper.client.secure=true",
         ("zookeeper.ssl.keyStore.location", "zookeeper.ssl.trustStore.location"),
         "ZooKeeper connections stay plaintext"),
        (bool(values.get("httpServerTlsEnable")), "httpServerTlsEnable=true",
         ("httpServerCertificatePath", "httpServerKeyPath", "httpServerClientCaPath", "httpAdminCertificateSubjects"),
         "the admin port serves plain HTTP"),
    )
    for on, switch, names, what in groups:
        if on:
            continue
        set_ = [n for n in names if sources.get(n, "default") != "default" and values.get(n)]
        if set_:
            out.append(f"{', '.join(set_)} set without {switch}: no effect, {what}")
    return out


def _http_settings(values: Mapping[str, Any], errors: list[str]) -> HttpSettings:
    """The admin HTTP server's keys → :class:`HttpSettings` (issue 15 checks).

    Appends to ``errors``: an upstream JKS key (``httpServerKeyStorePath``... named, value never quoted);
    ``httpServerTlsEnable=true`` without PEM certificate and key, or with unreadable ones; an
    unreadable or empty ``httpAdminTokenFile``; mutations enabled on a non-loopback bind with neither a
    token nor client certificates (``httpServerClientCaPath``).
    """
    for name in _JKS_HTTP_KEYS:
        if values.get(name):
            errors.append(f"{name} is set: JKS key/trust stores are not supported for the HTTP server; use "
                          f"httpServerCertificatePath and httpServerKeyPath (PEM) and httpServerClientCaPath")
    address = str(values["httpServerHost"])
    tls = bool(values.get("httpServerTlsEnable"))
    cert = values.get("httpServerCertificatePath") or None
    key = values.get("httpServerKeyPath") or None
    ca = values.get("httpServerClientCaPath") or None
    if tls:
        for name, path, private in (("httpServerCertificatePath", cert, False), ("httpServerKeyPath", key, True)):
            if not path:
                errors.append(f"httpServerTlsEnable=true needs {name} (PEM)")
            else:
                _check_pem(str(path), name, errors, private_key=private)
        if ca:
            _check_pem(str(ca), "httpServerClientCaPath", errors)
    token_path = values.get("httpAdminTokenFile") or None
    token = _token(values, "httpAdminTokenFile", errors)
    read_token_path = values.get("httpReadTokenFile") or None
    read_token = _token(values, "httpReadTokenFile", errors)
    if token and read_token and token == read_token:
        errors.append("httpReadTokenFile and httpAdminTokenFile hold the same token: give the read-only role "
                      "its own token")
    subjects = frozenset(s.strip() for s in str(values.get("httpAdminCertificateSubjects") or "").split(";")
                         if s.strip())
    mutations = bool(values["httpAdminMutationsEnabled"])
    if (mutations and values.get("httpServerEnabled") and not _is_loopback(address) and not token_path
            and not (tls and ca)):
        errors.append(f"httpAdminMutationsEnabled=true on a non-loopback bind (httpServerHost={address}) needs "
                      f"authentication: set httpAdminTokenFile (bearer token) or httpServerTlsEnable=true with "
                      f"httpServerClientCaPath (client certificates)")
    return HttpSettings(enabled=bool(values["httpServerEnabled"]), address=address,
                        port=int(values["httpServerPort"]), mutations_enabled=mutations, tls=tls,
                        cert_path=cert, key_path=key, client_ca_path=ca, token=token, token_path=token_path,
                        read_token=read_token, read_token_path=read_token_path, admin_subjects=subjects,
                        debug_endpoints=bool(values.get("httpDebugEndpointsEnabled")),
                        audit_file=values.get("httpAuditLogFile") or None)


def _token(values: Mapping[str, Any], key: str, errors: list[str]) -> str | None:
    """The first line of the token file ``key`` names (stripped), None when unset; appends to ``errors``
    (naming the key and path, never the content) when it is unreadable or empty."""
    path = values.get(key) or None
    if not path:
        return None
    line = _secret_first_line(key, path, errors)
    if line is None:
        return None
    token = line.strip() or None
    if token is None:
        errors.append(f"bad value for {key}: {path} is empty (expected the token on the first line)")
    return token


def _provider_kind(name: str) -> str:
    """``prometheus``, ``null`` or ``other`` for a ``statsProviderClass`` value (full or simple class name)."""
    simple = name.strip().rsplit(".", 1)[-1]
    if simple == "PrometheusMetricsProvider":
        return "prometheus"
    if simple == "NullStatsProvider":
        return "null"
    return "other"


def _stats_settings(values: Mapping[str, Any], sources: Mapping[str, str], errors: list[str]) -> StatsSettings:
    """Decide whether to open upstream's Prometheus listener (``PrometheusMetricsProvider.start``).

    On when statistics are enabled (``enableStatistics``, default true), ``prometheusStatsHttpEnable``
    is true (default) and either ``statsProviderClass`` names the Prometheus provider or it is unset
    and ``prometheusStatsHttpPort``/``prometheusStatsHttpAddress`` was set explicitly. As upstream,
    the provider opens no listener of its own when ``httpServerEnabled=true`` was set explicitly (the
    BookKeeper HTTP server then serves ``/metrics`` on ``httpServerPort``, as ours does). The daemon
    serves once when the listener's port equals the admin HTTP port.

    Appends an error naming the key for a ``statsProviderClass`` other than Prometheus or
    NullStatsProvider: the operator expects metrics we cannot produce (Codahale, OpenTelemetry...).
    """
    address = str(values.get("prometheusStatsHttpAddress") or "0.0.0.0")
    port = int(values.get("prometheusStatsHttpPort", 8000))
    cls = str(values.get("statsProviderClass") or "").strip()
    kind = _provider_kind(cls) if cls else ""
    if kind == "other":
        errors.append(f"statsProviderClass={cls} is not supported: autorecovery exports Prometheus metrics only "
                      f"(/metrics on httpServerPort; with {PROMETHEUS_PROVIDER} also on "
                      f"prometheusStatsHttpAddress:prometheusStatsHttpPort). Set it to {PROMETHEUS_PROVIDER}, "
                      f"{NULL_PROVIDER}, or remove it")
        return StatsSettings(False, address, port, "refused")
    explicit = [k for k in ("prometheusStatsHttpPort", "prometheusStatsHttpAddress")
                if sources.get(k, "default") != "default"]

    def off(why: str) -> StatsSettings:
        return StatsSettings(False, address, port, why)

    if kind == "null":
        return off(f"statsProviderClass={cls}")
    if not kind and not explicit:
        return off("statsProviderClass unset (upstream default NullStatsProvider)")
    if not values.get("enableStatistics", True):
        return off("enableStatistics=false")
    if not values.get("prometheusStatsHttpEnable", True):
        return off("prometheusStatsHttpEnable=false")
    if values.get("httpServerEnabled") and sources.get("httpServerEnabled", "default") != "default":
        return off("httpServerEnabled=true: as upstream, /metrics is served by the HTTP server on httpServerPort")
    why = f"statsProviderClass={cls}" if kind else "set explicitly: " + ", ".join(explicit)
    return StatsSettings(True, address, port, why)


@dataclass
class _Layer:
    source: str
    props: dict[str, str]


def _normalise(layer: _Layer, extra: frozenset[str], warnings: list[str],
               out: dict[str, tuple[str, str]], switches: dict[str, tuple[bool, str]],
               errors: list[str], ignored: dict[str, str]) -> None:
    """Map one layer's names to canonical keys and merge them into ``out`` (name → (raw, source));
    keys of :data:`~autorecovery.config.keys.NO_EFFECT_KEYS` go to ``ignored`` (name → source)."""
    aliased: dict[str, tuple[str, str]] = {}
    direct: dict[str, tuple[str, str]] = {}
    where = {"file": "in the config file", "env": "in the environment (BK_...)", "flag": "on the command line"}
    for name, raw in layer.props.items():
        name = name.strip()
        if name in K.KEY_BY_NAME or name in extra:
            direct[name] = (raw, layer.source)
        elif name in K.PULSAR_ALIASES:
            aliased[K.PULSAR_ALIASES[name]] = (raw, f"{layer.source} (alias {name})")
        elif name in K.OUR_ALIASES:
            target = K.OUR_ALIASES[name]
            aliased[target] = (raw, f"{layer.source} (alias {name})")
            other = layer.props.get(target)
            if other is not None and other.strip() != raw.strip():
                warnings.append(f"{name}={raw.strip()} is ignored: {target}={other.strip()} (upstream's name) "
                                f"{where[layer.source]} takes precedence")
        elif name in K.PULSAR_POLICY_SWITCHES:
            try:
                flag = K.Key(name, "bool", None, "", "").parse(raw)
            except ConfigError as exc:
                errors.append(str(exc))
                continue
            switches[name] = (flag, layer.source)
        elif name.startswith(K.PULSAR_PASSTHROUGH_PREFIX) and len(name) > len(K.PULSAR_PASSTHROUGH_PREFIX):
            target = name[len(K.PULSAR_PASSTHROUGH_PREFIX):]
            if target in K.KEY_BY_NAME or target in extra:
                aliased[target] = (raw, f"{layer.source} (alias {name})")
            elif target in K.NO_EFFECT_KEYS and not (target in K.REFUSED_WHEN_ASKED and K.asks_for_security(raw)):
                ignored.setdefault(target, f"{layer.source} (alias {name})")
            else:
                errors.append(_unknown(name, where[layer.source], extra))
        elif name in K.UNIMPLEMENTED_SECURITY_KEYS:
            if K.asks_for_security(raw):
                asks = ("certificate role authorization (BookieAuthZFactory)" if name == "authorizedRoles" else
                        "an authentication plugin (SASL, BookieAuthZFactory or another AuthProviderFactory)")
                errors.append(f"{name}={raw.strip()} {where[layer.source]} asks for {asks} that this "
                              f"implementation does not provide (issue 15); refusing to start without it. "
                              f"Authenticate with TLS client certificates instead (tlsProviderFactoryClass, "
                              f"tlsClientAuthentication; see docs/security.md), and remove the key or set it empty")
            else:
                ignored.setdefault(name, layer.source)
        elif name in K.REFUSED_WHEN_ASKED and K.asks_for_security(raw):
            errors.append(f"{name}={raw.strip()} {where[layer.source]} is not supported: {K.REFUSED_WHEN_ASKED[name]}")
        elif name in K.NO_EFFECT_KEYS:
            ignored.setdefault(name, layer.source)
        else:
            errors.append(_unknown(name, where[layer.source], extra))
    out.update(aliased)
    out.update(direct)  # the upstream name wins over its alias within a layer


def _unknown(name: str, where: str, extra: frozenset[str]) -> str:
    """The error line of a key nobody reads (a configuration error: it would be ignored)."""
    hint = K.suggest(name, tuple(extra))
    msg = f"unknown configuration key {name} {where}"
    return msg + (f"; did you mean {hint}?" if hint and hint != name else "")


def load_settings(
    conf_path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
    extra_keys: Iterable[str] | None = None,
    require_metadata: bool = True,
) -> Settings:
    """Build the effective :class:`Settings`.

    Args:
        conf_path: a bk_server.conf (Java properties) or None.
        env: the process environment (the CLI passes ``os.environ``); only ``BK_<key>`` is read.
        overrides: key → raw value from command-line flags (highest precedence).
        extra_keys: further key names not to report as unknown (their raw values stay in
            ``properties``); every key autorecovery reads is in the table, so the default is none.
        require_metadata: raise when neither metadataServiceUri nor zkServers is set.

    Raises:
        ConfigError: listing every bad value (each line names the key and the value), a missing
            metadata store, or an unreadable file.
    """
    extra = frozenset(extra_keys or ())
    layers = []
    if conf_path is not None:
        layers.append(_Layer("file", read_properties_file(conf_path)))
    if env:
        layers.append(_Layer("env", env_properties(env)))
    if overrides:
        layers.append(_Layer("flag", {k: str(v) for k, v in overrides.items() if v is not None}))

    warnings: list[str] = []
    errors: list[str] = []
    merged: dict[str, tuple[str, str]] = {}
    switches: dict[str, tuple[bool, str]] = {}
    ignored: dict[str, str] = {}
    for layer in layers:
        _normalise(layer, extra, warnings, merged, switches, errors, ignored)

    # Pulsar's rack-/region-aware switches choose the policy unless ensemblePlacementPolicy is set.
    if switches:
        rack = switches.get("bookkeeperClientRackawarePolicyEnabled", (None, ""))[0]
        region = switches.get("bookkeeperClientRegionawarePolicyEnabled", (None, ""))[0]
        derived = K.pulsar_policy(rack, region)
        srcs = ", ".join(sorted({s for _v, s in switches.values()}))
        if "ensemblePlacementPolicy" in merged:
            if derived and merged["ensemblePlacementPolicy"][0].strip() != derived:
                warnings.append(
                    f"ensemblePlacementPolicy={merged['ensemblePlacementPolicy'][0].strip()} overrides the Pulsar "
                    f"switches bookkeeperClientRackawarePolicyEnabled/RegionawarePolicyEnabled (which select {derived})"
                )
        elif derived:
            merged["ensemblePlacementPolicy"] = (derived, f"{srcs} (Pulsar policy switches)")

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in K.KEYS:
        if key.name in merged:
            raw, src = merged[key.name]
            try:
                values[key.name] = key.parse(raw)
            except ConfigError as exc:
                errors.append(f"{exc} [{src}]")
                # the default stands in while the remaining checks run (every error is reported together)
                values[key.name] = key.default
                continue
            sources[key.name] = src
        else:
            values[key.name] = key.default
            sources[key.name] = "default"

    # metadata store
    zk_servers = ""
    root = values.get("zkLedgersRootPath") or "/ledgers"
    uri = values.get("metadataServiceUri")
    uri_manager: str | None = None
    if uri:
        try:
            zk_servers, root, uri_manager = parse_metadata_service_uri_manager(uri)
        except ConfigError as exc:
            errors.append(str(exc))
        else:
            for name, mine in (("zkServers", zk_servers), ("zkLedgersRootPath", root)):
                if name in merged and sources.get(name) != "default":
                    other = str(values.get(name))
                    if name == "zkServers" and ",".join(sorted(other.split(","))) == ",".join(sorted(mine.split(","))):
                        continue
                    if other != mine:
                        warnings.append(f"{name}={other} is ignored: metadataServiceUri={uri} takes precedence")
            values["zkServers"], values["zkLedgersRootPath"] = zk_servers, root
            sources["zkServers"] = sources["zkLedgersRootPath"] = "derived (metadataServiceUri)"
    else:
        try:
            zk_servers = strip_pulsar_store_prefix(values.get("zkServers") or "")
        except ConfigError as exc:
            errors.append(str(exc))
            zk_servers = ""
        values["zkServers"] = zk_servers or values.get("zkServers")
        try:
            _validate_root(root, "zkLedgersRootPath")
        except ConfigError as exc:
            errors.append(str(exc))
        if zk_servers:
            values["metadataServiceUri"] = "zk+hierarchical://" + zk_servers.replace(",", ";") + root
            sources["metadataServiceUri"] = "derived (zkServers, zkLedgersRootPath)"
    if require_metadata and not zk_servers and not any("metadataServiceUri" in e for e in errors):
        errors.append("no metadata store configured: set metadataServiceUri (zk+hierarchical://host:2181/ledgers) "
                      "or zkServers (and zkLedgersRootPath), or pass --zk")

    # the ledger manager the configuration asks for (checked against LAYOUT at start); a URI scheme
    # wins over the older keys, and two that disagree are an error (upstream would fail at start too)
    ledger_manager: str | None = None
    manager_key = ""
    named = [(k, v) for k, v in (("metadataServiceUri", uri_manager),
                                 ("ledgerManagerFactoryClass", values.get("ledgerManagerFactoryClass")),
                                 ("ledgerManagerType", values.get("ledgerManagerType"))) if v]
    for key_name, value in named:
        try:
            cls = manager_from_config(str(value), key_name)
        except CompatibilityError as exc:
            errors.append(f"bad value for {key_name}: {value!r} ({str(exc).split(': ', 1)[-1]})")
            continue
        if cls is None:
            continue
        if ledger_manager is None:
            ledger_manager, manager_key = cls, key_name
        elif cls != ledger_manager:
            errors.append(f"{key_name}={value} names another ledger manager than {manager_key} ({ledger_manager})")

    bookie_id = values.get("bookieId") or _default_bookie_id(values)
    try:
        validate_bookie_id(bookie_id)
    except ValueError:
        errors.append(f"bad value for bookieId: {bookie_id!r} (expected host:port)")
    if not values.get("bookieId"):
        values["bookieId"] = bookie_id
        sources["bookieId"] = "derived (advertisedAddress/host, bookiePort)"

    zk_security = _zk_security(values, errors)
    stats = _stats_settings(values, sources, errors)
    bookie_tls = _bookie_tls(values, errors)
    http = _http_settings(values, errors)
    warnings.extend(_tls_off_warnings(values, sources))

    # the role sections, from the values parsed above (never from the raw strings)
    sections: dict[str, Any] = {}
    for attr, cls in (("auditor", AuditorSettings), ("worker", WorkerSettings), ("placement", PlacementConfig)):
        try:
            sections[attr] = cls.from_values(values)
        except (ConfigError, ValueError) as exc:
            errors.append(str(exc))

    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(errors))

    # the secret lives only in zk_security (kept out of its repr); the maps show a mask
    for secret in (k.name for k in K.KEYS if k.secret):
        if values.get(secret):
            values[secret] = SECRET_MASK
            if secret in merged:
                merged[secret] = (SECRET_MASK, merged[secret][1])
    properties = {name: raw for name, (raw, _src) in merged.items()}
    for name in ("zkServers", "zkLedgersRootPath", "metadataServiceUri", "bookieId"):
        if values.get(name):
            properties[name] = str(values[name])
    for name, (_raw, src) in merged.items():
        sources.setdefault(name, src)
    for name, src in ignored.items():
        sources.setdefault(name, src)

    return Settings(
        zk=ZkSettings(connect=zk_servers, root=root, timeout_ms=int(values["zkTimeout"]), security=zk_security),
        bookie_id=bookie_id,
        http=http,
        bookie_info=BookieInfoSettings(
            interval_s=float(values["getBookieInfoIntervalSeconds"]),
            retry_interval_s=float(values["getBookieInfoRetryIntervalSeconds"]),
            timeout_s=float(values["getBookieInfoTimeoutSecs"]),
        ),
        auditor=sections["auditor"],
        worker=sections["worker"],
        placement=sections["placement"],
        log_level={"WARN": "WARNING"}.get(str(values["logLevel"]).upper(), str(values["logLevel"]).upper()),
        log_format=str(values["logFormat"]).lower(),
        shutdown_timeout_s=float(values["shutdownTimeoutSeconds"]),
        session_rejoin=bool(values["sessionRejoinEnabled"]),
        values=MappingProxyType(values),
        properties=MappingProxyType(properties),
        sources=MappingProxyType(sources),
        warnings=tuple(warnings),
        conf_path=str(conf_path) if conf_path is not None else None,
        metadata_service_uri=str(values.get("metadataServiceUri") or ""),
        ledger_manager=ledger_manager,
        ledger_manager_key=manager_key,
        stats=stats,
        ignored=tuple(ignored),
        tls=bookie_tls,
    )
