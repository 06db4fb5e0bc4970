"""The daemon's HTTP server (aiohttp): metrics, health, and upstream's admin API (EDGE).

Paths (upstream ``HttpRouter`` names and bodies, see docs/operators.md):

==========================================================  ======  =========================================
path                                                        method  body / answer
==========================================================  ======  =========================================
``/metrics``                                                GET     Prometheus text, upstream metric names
``/healthz``                                                GET     ``{"status": "alive"}`` while the loop runs
``/readyz``                                                 GET     200 when the ZooKeeper session is up and
                                                                    every role runs, else 503; JSON details
``/api/v1/autorecovery/status``                             GET     ``{"enabled": true}``
                                                            PUT     ``?enabled=true|false`` → ``{"enabled": ..}``
``/api/v1/autorecovery/bookie``                             PUT     ``{"bookie_src": [..], "delete_cookie": b}``
                                                                    → recover in the background
``/api/v1/autorecovery/list_under_replicated_ledger``       GET     ``?missingreplica=&excludingmissingreplica=
                                                                    &printmissingreplica`` → ``[ids]`` or
                                                                    ``{id: [replicas]}``; 404 when none
``/api/v1/autorecovery/who_is_auditor``                     GET     ``Auditor: <bookieId>``; 404 when none
``/api/v1/autorecovery/trigger_audit``                      PUT     ``Success trigger audit.``
``/api/v1/autorecovery/lost_bookie_recovery_delay``         GET     ``lostBookieRecoveryDelay value: N``
                                                            PUT     ``{"delay_seconds": N}``
``/api/v1/autorecovery/decommission``                       PUT     ``{"bookie_src": "host:port"}`` → background
``/api/v1/bookie/list_bookie_info``                         GET     ``{"<bookie>": ": {Free: .., Total: ..},",
                                                                    "ClusterInfo: ": "{Free: .., Total: ..}"}``
``/api/v1/bookie/cluster_info``                             GET     upstream ClusterInfo JSON
``/api/v1/bookie/list_bookies``                             GET     ``?type=rw|ro&print_hostnames=true`` →
                                                                    ``{"<bookieId>": "<host>"|null}``
``/api/v1/ledger/metadata``                                 GET     ``?ledger_id=N`` → ``{"N": {upstream
                                                                    LedgerMetadata JSON}}``; ours with
                                                                    ``&format=autorecovery``
``/api/v1/config/server_config``                            GET     keys set → string values (secrets
                                                                    masked); PUT 405 (no runtime changes)
``/heartbeat``                                              GET     ``OK\n``
``/api/v1/autorecovery/progress``  (ours)                   GET     ``{"cluster", "worker", "jobs"}``: cluster
                                                                    ledgers/bytes left, smoothed rate, ETA,
                                                                    blocked apart; this worker's share; admin
                                                                    jobs (``plan/progress.py``)
``/api/v1/autorecovery/overview``  (ours)                   GET     the cluster at a glance, from any node
                                                                    (``audit/overview.py``; ``shell overview``)
``/api/v1/autorecovery/history``  (ours)                    GET     ``?limit=N`` → ``{"episodes": [..],
                                                                    "errors": [..]}``, heal episodes oldest
                                                                    first (``audit/episodes.py``)
==========================================================  ======  =========================================

Mutating requests (every PUT) answer 403 unless ``httpAdminMutationsEnabled=true`` (ours; upstream has
no switch and binds every interface). Roles, credentials (``httpAdminTokenFile``, ``httpReadTokenFile``,
client certificates and ``httpAdminCertificateSubjects``), the audit line of every mutation and the
reloading of tokens and certificates: :mod:`autorecovery.admin.http_auth` (issues 15 and 25). The
ledger password is shown only to an authenticated admin asking ``?withPassword=true``.
``httpServerTlsEnable`` serves HTTPS (PEM certificate and key), with ``httpServerClientCaPath``
requiring client certificates. Request bodies over :data:`MAX_REQUEST_BYTES` answer 413; every bad
input answers 400 with one line naming the field (:mod:`autorecovery.admin.http_input`); an
unexpected error answers 500 with one line, never a traceback. Upstream answers most errors with 404 and a text body; we keep
its success bodies and use precise codes for errors (400 bad input, 403 mutations off, 404 missing,
409 illegal state, 503 unavailable), with the error text as body.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from autorecovery import metrics
from autorecovery.admin.http_auth import CredentialReloader
from autorecovery.admin.http_routes import HttpDeps, build_app, text_response

log = structlog.get_logger("autorecovery.http")

__all__ = ["AdminHttpServer", "PrometheusHttpServer"]


def _loopback(address: str) -> bool:
    """True for a loopback bind address (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    import ipaddress

    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_only(host_header: str) -> str:
    """The host part of a ``Host`` header (``[::1]:8080`` → ``::1``, ``localhost:80`` → ``localhost``)."""
    h = host_header.strip()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


@web.middleware
async def _loopback_host_check(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                               ) -> web.StreamResponse:
    """Refuse (403) a request to a loopback-bound port whose ``Host`` is not a loopback name: a web page
    on another origin that re-binds its DNS name to 127.0.0.1 (DNS rebinding) must not reach the API."""
    host = _host_only(request.headers.get("Host", ""))
    if not _loopback(host):
        return text_response(f"Host {host[:100]!r} refused: this admin port is bound to loopback and answers only "
                     f"localhost / 127.0.0.1 / [::1]", 403)
    return await handler(request)


class AdminHttpServer:
    """Runs :func:`build_app` on ``address:port``; :attr:`port` is the bound port (useful with port 0).

    ``ssl_context`` (:func:`server_ssl_context`, or :attr:`ReloadableTls.server_context`) serves HTTPS;
    None = plain HTTP. ``reloader`` (:class:`~autorecovery.admin.http_auth.CredentialReloader`) is
    polled every ``reload_period_s`` seconds while serving (0 = never). ``audit_file``
    (``httpAuditLogFile``) also receives the audit lines while serving.
    """

    def __init__(self, deps: HttpDeps, address: str = "127.0.0.1", port: int = 8080, *,
                 ssl_context: ssl.SSLContext | None = None, reloader: CredentialReloader | None = None,
                 reload_period_s: float = 0.0, audit_file: str | None = None) -> None:
        self.audit_file = audit_file
        self._audit_handler: Any = None
        self.deps = deps
        self.address = address
        self.requested_port = port
        self.ssl_context = ssl_context
        self.reloader = reloader
        self.reload_period_s = reload_period_s
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._reload_task: asyncio.Task | None = None

    async def start(self) -> AdminHttpServer:
        """Bind and serve.

        Raises:
            OSError: naming the address when it cannot be bound (port in use...).
            ConfigError: mutations on a non-loopback address with neither a token nor required client
                certificates (issue 15; the configuration refuses this first); ``audit_file`` cannot be
                opened (naming httpAuditLogFile).
        """
        client_certs = self.ssl_context is not None and self.ssl_context.verify_mode == ssl.CERT_REQUIRED
        creds = self.deps.credentials
        assert creds is not None
        creds.client_certs = creds.client_certs or client_certs
        if self.deps.mutations_enabled and not _loopback(self.address) and not creds.admin_token and not client_certs:
            from autorecovery.errors import ConfigError

            raise ConfigError(f"refusing to serve mutating admin endpoints on {self.address} without "
                              f"authentication: set httpAdminTokenFile or httpServerClientCaPath")
        app = build_app(self.deps)
        if _loopback(self.address):
            app.middlewares.append(_loopback_host_check)
        if self.audit_file:
            from autorecovery import logs
            from autorecovery.errors import ConfigError

            try:
                self._audit_handler = logs.add_audit_file(self.audit_file)
            except OSError as exc:
                raise ConfigError(f"bad value for httpAuditLogFile: cannot append to {self.audit_file}: "
                                  f"{exc.strerror or exc}") from None
        try:
            self._runner, self.port = await _serve(app, self.address, self.requested_port, "HTTP", self.ssl_context)
        except BaseException:  # broad on purpose: closes the audit log, re-raised
            self._close_audit()
            raise
        if self.reloader is not None and self.reload_period_s > 0:
            self._reload_task = asyncio.ensure_future(self.reloader.run(self.reload_period_s))
        return self

    async def stop(self) -> None:
        """Stop the reloader and background jobs, then the server. Idempotent."""
        task, self._reload_task = self._reload_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.deps.jobs.stop()
        runner, self._runner = self._runner, None
        await _unserve(runner)
        self._close_audit()

    def _close_audit(self) -> None:
        handler, self._audit_handler = self._audit_handler, None
        if handler is not None:
            from autorecovery import logs

            logs.remove_audit_file(handler)


class PrometheusHttpServer:
    """Upstream ``PrometheusMetricsProvider``'s own listener: ``GET /metrics`` only, on
    ``prometheusStatsHttpAddress:prometheusStatsHttpPort`` (upstream default ``0.0.0.0:8000``), so
    scrape jobs written for an upstream AutoRecovery keep working. Serves the same registry and text
    as the admin server's ``/metrics``; every other path is 404. :attr:`port` is the bound port.
    """

    def __init__(self, registry: metrics.MetricsRegistry, address: str = "0.0.0.0", port: int = 8000) -> None:
        self.registry = registry
        self.address = address
        self.requested_port = port
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> PrometheusHttpServer:
        """Bind and serve.

        Raises:
            OSError: naming prometheusStatsHttpAddress:prometheusStatsHttpPort when it cannot be bound.
        """
        async def metrics_h(_r: web.Request) -> web.Response:
            return web.Response(body=metrics.generate_text(self.registry),
                                headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

        app = web.Application()
        app.router.add_get("/metrics", metrics_h)
        self._runner, self.port = await _serve(
            app, self.address, self.requested_port,
            "Prometheus /metrics (prometheusStatsHttpAddress:prometheusStatsHttpPort)")
        return self

    async def stop(self) -> None:
        """Stop serving. Idempotent."""
        runner, self._runner = self._runner, None
        await _unserve(runner)


async def _serve(app: web.Application, address: str, port: int, what: str,
                 ssl_context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, int]:
    """Bind ``app`` to ``address:port`` (0 = any free port) and serve; returns the runner and the bound port.

    Raises:
        OSError: ``cannot serve <what> on <address>:<port>: <reason>`` (nothing is left running).
    """
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, address, port, ssl_context=ssl_context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(exc.errno, f"cannot serve {what} on {address}:{port}: {exc.strerror}") from exc
    server = getattr(site, "_server", None)
    socks = getattr(server, "sockets", None) or []
    return runner, (socks[0].getsockname()[1] if socks else port)


async def _unserve(runner: web.AppRunner | None) -> None:
    if runner is not None:
        try:
            await runner.cleanup()
        except Exception as exc:  # noqa: BLE001 - best-effort shutdown of the listener, logged
            log.warning("HTTP listener cleanup failed", error=repr(exc))
