"""Load the effective configuration once: bk_server.conf, then ``BK_<key>`` env, then CLI flags (EDGE).

Precedence (later wins): the Java-properties file (``-c bk_server.conf``, parsed with javaproperties,
so ``\\`` continuations, ``:`` separators and unicode escapes behave as in Java) → environment variables
``BK_<key>`` (upstream's Docker image convention: ``BK_zkServers=zk1:2181``) → command-line flags
(``--zk``, ``--ledgers-root``, ``-D key=value``...). With ``AUTORECOVERY_ENV_KEYS=plain`` the
environment layer also takes the Apache Pulsar image's names (``zkTimeout=...``,
``PULSAR_PREFIX_<key>=...``: the Pulsar Helm chart's ConfigMaps), below ``BK_<key>``.

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

This module is the loader; the parts it assembles are modules of their own (issue 30), and every name
they define that callers used from here still resolves from here: :mod:`~autorecovery.config.settings`
(the frozen tree), :mod:`~autorecovery.config.sources` (file and environment properties, name mapping),
:mod:`~autorecovery.config.uri` (``metadataServiceUri``, ``zkServers``),
:mod:`~autorecovery.config.zk_auth` (ZooKeeper digest, SASL, TLS), :mod:`~autorecovery.config.tls_settings`
(TLS to the bookies) and :mod:`~autorecovery.config.listeners` (HTTP API, Prometheus).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from autorecovery.config import keys as K
from autorecovery.config.listeners import build_http_settings, build_stats_settings
from autorecovery.config.sections import AuditorSettings, WorkerSettings
from autorecovery.config.settings import BookieInfoSettings, Settings, ZkSettings
from autorecovery.config.sources import Layer, env_layer, normalise, read_properties_file
from autorecovery.config.tls_settings import build_bookie_tls, tls_off_warnings
from autorecovery.config.uri import parse_metadata_service_uri_manager, strip_pulsar_store_prefix, validate_root
from autorecovery.config.zk_auth import build_zk_security, zk_security
from autorecovery.errors import CompatibilityError, ConfigError
from autorecovery.ledger.ids import validate_bookie_id
from autorecovery.ledger.layout import manager_from_config
from autorecovery.placement.config import PlacementConfig

#: the names this module has always offered (the code now lives in the modules named above)
__all__ = [
    "load_settings", "Settings", "ZkSettings",
    "BookieInfoSettings", "SECRET_MASK",
    "read_properties_file", "parse_metadata_service_uri_manager", "strip_pulsar_store_prefix", "zk_security"]


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


#: what ``values`` and ``properties`` show instead of a secret
SECRET_MASK = "******"


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
        env: the process environment (the CLI passes ``os.environ``); ``BK_<key>`` is read, and with
            ``AUTORECOVERY_ENV_KEYS=plain`` also variables named after a key and ``PULSAR_PREFIX_<key>``
            (the Apache Pulsar image's convention, :func:`~autorecovery.config.sources.plain_env_properties`).
        overrides: key → raw value from command-line flags (highest precedence).
        extra_keys: further key names not to report as unknown (their raw values stay in
            ``properties``); every key autorecovery reads is in the table, so the default is none.
        require_metadata: raise when neither metadataServiceUri nor zkServers is set.

    Raises:
        ConfigError: listing every bad value (each line names the key and the value, and the
            environment variable it came from when that is not ``BK_<key>``), a missing metadata store,
            an unreadable file, or a bad ``AUTORECOVERY_ENV_KEYS``.
    """
    extra = frozenset(extra_keys or ())
    layers = []
    if conf_path is not None:
        layers.append(Layer("file", read_properties_file(conf_path)))
    if env:
        layers.append(env_layer(env, extra))
    if overrides:
        layers.append(Layer("flag", {k: str(v) for k, v in overrides.items() if v is not None}))

    warnings: list[str] = []
    errors: list[str] = []
    merged: dict[str, tuple[str, str]] = {}
    switches: dict[str, tuple[bool, str]] = {}
    ignored: dict[str, str] = {}
    for layer in layers:
        normalise(layer, extra, warnings, merged, switches, errors, ignored)

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
            validate_root(root, "zkLedgersRootPath")
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

    zk_security = build_zk_security(values, errors)
    stats = build_stats_settings(values, sources, errors)
    bookie_tls = build_bookie_tls(values, errors)
    http = build_http_settings(values, errors)
    warnings.extend(tls_off_warnings(values, sources))

    # the role sections, from the values parsed above (never from the raw strings)
    sections: dict[str, Any] = {}
    roles: tuple[tuple[str, Any], ...] = (("auditor", AuditorSettings), ("worker", WorkerSettings),
                                          ("placement", PlacementConfig))
    for attr, section in roles:
        try:
            sections[attr] = section.from_values(values)
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
