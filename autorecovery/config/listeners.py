"""What we serve, from the keys: the HTTP admin API (``httpServer*``: address, port, tokens, TLS) into
:class:`~autorecovery.config.settings.HttpSettings`, and the upstream Prometheus stats listener
(``statsProviderClass``, ``prometheusStatsHttp*``) into :class:`~autorecovery.config.settings.StatsSettings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autorecovery.config.files import secret_first_line
from autorecovery.config.settings import HttpSettings, StatsSettings
from autorecovery.config.tls_settings import check_pem

PROMETHEUS_PROVIDER = "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider"
NULL_PROVIDER = "org.apache.bookkeeper.stats.NullStatsProvider"


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


def build_http_settings(values: Mapping[str, Any], errors: list[str]) -> HttpSettings:
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
                check_pem(str(path), name, errors, private_key=private)
        if ca:
            check_pem(str(ca), "httpServerClientCaPath", errors)
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
    line = secret_first_line(key, path, errors)
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


def build_stats_settings(values: Mapping[str, Any], sources: Mapping[str, str], errors: list[str]) -> StatsSettings:
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
