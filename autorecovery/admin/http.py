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
import contextlib
import itertools
import json
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal
from typing import Any

import structlog
from aiohttp import web

from autorecovery import metrics
from autorecovery.admin import ops, params
from autorecovery.admin.decommission import decommission_bookie
from autorecovery.admin.http_auth import (
    MUTATING_METHODS,
    CredentialReloader,
    Credentials,
    ReloadableTls,
    audit_middleware,
    auth_middleware,
    server_ssl_context,
)
from autorecovery.admin.http_input import json_object, known_fields, one_line, query_bool, query_choice
from autorecovery.admin.recover import recover_bookies
from autorecovery.errors import AutoRecoveryError, IllegalOpError

log = structlog.get_logger("autorecovery.http")

API = "/api/v1"

#: Largest request body accepted, bytes (aiohttp ``client_max_size``; the admin bodies are small JSON
#: documents): larger ones answer 413 before any handler runs.
MAX_REQUEST_BYTES = 64 * 1024

__all__ = ["MAX_REQUEST_BYTES", "MUTATING_METHODS", "AdminHttpServer", "CredentialReloader", "Credentials",
           "HttpDeps", "Jobs", "PrometheusHttpServer", "ReloadableTls", "build_app", "readable_bytes",
           "server_ssl_context"]


def readable_bytes(value: int) -> str:
    """Upstream ``getReadable``: powers of 1000, three decimals rounded down, e.g. ``(35.576GB)``; ``""``
    below 1000 bytes."""
    units = ["", "KB", "MB", "GB", "TB"]
    d = Decimal(int(value))
    i = 0
    while d >= 1000 and i < len(units) - 1:
        d /= 1000
        i += 1
    if i == 0:
        return ""
    q = d.quantize(Decimal("0.001"), rounding=ROUND_DOWN).normalize()
    text = format(q, "f")
    return f"({text}{units[i]})"


# -- background admin jobs (recover / decommission started over HTTP) -----------------------------------
@dataclass
class Job:
    """One background admin operation; ``progress`` is the latest progress snapshot (a dict)."""

    id: int
    kind: str
    target: str
    started_at: float
    state: str = "running"  # running | done | failed | cancelled
    error: str = ""
    result: Any = None
    progress: dict[str, Any] = field(default_factory=dict)
    task: asyncio.Task | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "kind": self.kind, "target": self.target, "state": self.state,
               "started_at": round(self.started_at, 3), "progress": self.progress}
        if self.error:
            out["error"] = self.error
        if self.result is not None:
            out["result"] = self.result
        return out


class Jobs:
    """Owner of background admin tasks: started by PUT requests, cancelled and awaited by :meth:`stop`.

    Finished jobs (done/failed/cancelled) are kept for ``keep_s`` seconds (default 3600) and at most
    ``max_finished`` of them (default 50, oldest dropped first), so repeated PUTs cannot grow memory or
    ``/progress`` without bound (issue 15: 300 PUTs used to leave 303 jobs). Running jobs are never dropped.
    ``clock`` (seconds, default ``time.monotonic``) is injectable for tests.
    """

    def __init__(self, *, max_finished: int = 50, keep_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._stopped = False
        self.max_finished, self.keep_s, self._clock = max_finished, keep_s, clock
        self._finished_at: dict[int, float] = {}

    def _prune(self) -> None:
        now = self._clock()
        for jid, job in list(self._jobs.items()):
            if job.state != "running" and jid not in self._finished_at:
                self._finished_at[jid] = now
        finished = sorted(self._finished_at.items(), key=lambda kv: (kv[1], kv[0]))
        excess = len(finished) - self.max_finished
        for i, (jid, at) in enumerate(finished):
            if i < excess or now - at >= self.keep_s:
                self._jobs.pop(jid, None)
                self._finished_at.pop(jid, None)

    def start(self, kind: str, target: str, run: Callable[[Job], Awaitable[Any]]) -> Job:
        if self._stopped:
            raise ops.AdminError("the daemon is stopping; no new admin jobs")
        job = Job(next(self._ids), kind, target, time.time())

        async def body() -> None:
            try:
                res = await run(job)
                job.result = res
                job.state = "done"
                log.info("admin job finished", job=job.id, kind=kind, target=target)
            except asyncio.CancelledError:
                job.state = "cancelled"
                raise
            except Exception as exc:  # noqa: BLE001 - reported in /progress
                # an exception without a message (kazoo's, asyncio's) is named by its type
                why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                job.state, job.error = "failed", why
                log.error("admin job failed", job=job.id, kind=kind, target=target, error=why,
                          exc_info=not isinstance(exc, AutoRecoveryError))

        job.task = asyncio.ensure_future(body())
        self._prune()
        self._jobs[job.id] = job
        return job

    def snapshot(self) -> list[dict[str, Any]]:
        self._prune()
        return [j.as_dict() for j in sorted(self._jobs.values(), key=lambda j: j.id)]

    async def stop(self) -> None:
        """Cancel every running job and await it. Idempotent."""
        self._stopped = True
        tasks = [j.task for j in self._jobs.values() if j.task is not None and not j.task.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


# -- the application ------------------------------------------------------------------------------------
def _text(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/plain")


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(obj), status=status, content_type="application/json")


def _error(exc: BaseException) -> web.Response:
    return _text(one_line(str(exc)), ops.http_status(exc))


def _bookie_src(value: Any, many: bool) -> list[str]:
    """``bookie_src`` as a list of strings (one unless ``many``); BadRequestError naming the field otherwise."""
    items = value if many and isinstance(value, list) else [value]
    if not items or not all(isinstance(s, str) for s in items):
        raise ops.BadRequestError("bookie_src must be a string \"host:port\"" + (" or a list of them" if many else ""))
    return [ops.check_bookie_id(s, "bookie_src") for s in items]


def _timeout_s(value: Any) -> float | None:
    """``timeout_s`` (seconds) as a finite positive float (at most a year) or None, checked by
    :func:`autorecovery.admin.params.seconds` as ``decommissionbookie --timeout`` is; BadRequestError
    naming the field otherwise."""
    if value is None:
        return None
    try:
        if isinstance(value, str):  # JSON numbers only, as before; the rule itself is the shell's too
            raise ValueError(f"bad timeout_s {value[:50]!r}: expected a JSON number of seconds")
        return params.seconds(value, "timeout_s")
    except ValueError as exc:
        raise ops.BadRequestError(str(exc)) from None


@dataclass
class HttpDeps:
    """What the handlers need.

    Attributes:
        ctx: the daemon's admin context.
        mutations_enabled: serve PUTs (``httpAdminMutationsEnabled``).
        liveness: ``() -> dict`` for /healthz.
        readiness: ``() -> (ready, details)`` for /readyz.
        registry: metrics registry served on /metrics.
        jobs: owner of background recover/decommission jobs.
        token: bearer token of the admin role (``httpAdminTokenFile``); None = none. Never logged,
            never in ``repr``. Used to build ``credentials`` when that is not given.
        credentials: the live roles' credentials (:class:`~autorecovery.admin.http_auth.Credentials`);
            the reloader changes them in place.
        debug_endpoints: serve ``PUT /api/v1/autorecovery/expire_session`` (``httpDebugEndpointsEnabled``).
    """

    ctx: ops.AdminContext
    mutations_enabled: bool = False
    liveness: Callable[[], dict[str, Any]] = lambda: {"status": "alive"}
    readiness: Callable[[], tuple[bool, dict[str, Any]]] = lambda: (True, {})
    registry: metrics.MetricsRegistry = field(default_factory=lambda: metrics.REGISTRY)
    jobs: Jobs = field(default_factory=Jobs)
    token: str | None = field(default=None, repr=False)
    credentials: Credentials | None = None
    debug_endpoints: bool = False

    def __post_init__(self) -> None:
        if self.credentials is None:
            self.credentials = Credentials(admin_token=self.token)


def build_app(deps: HttpDeps) -> web.Application:
    """The aiohttp application with every route of the module docstring."""
    ctx = deps.ctx

    def mutating(handler):
        async def wrapped(request: web.Request) -> web.StreamResponse:
            if not deps.mutations_enabled:
                return _text("mutating admin endpoints are disabled on this daemon; "
                             "set httpAdminMutationsEnabled=true to allow them", 403)
            return await handler(request)
        return wrapped

    def guarded(handler):
        async def wrapped(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except web.HTTPException:
                raise
            except AutoRecoveryError as exc:
                return _error(exc)
            except ValueError as exc:
                return _text(one_line(str(exc)), 400)
            except Exception as exc:  # noqa: BLE001 - never a bare 500 without a body
                log.error("admin request failed", path=request.path, error=str(exc))
                return _text(one_line(f"{type(exc).__name__}: {exc}"), 500)
        return wrapped

    async def metrics_h(_r: web.Request) -> web.Response:
        return web.Response(body=metrics.generate_text(deps.registry),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def healthz(_r: web.Request) -> web.Response:
        return _json(deps.liveness())

    async def readyz(_r: web.Request) -> web.Response:
        ready, details = deps.readiness()
        return _json({"ready": ready, **details}, 200 if ready else 503)

    async def status_get(_r: web.Request) -> web.Response:
        return _json({"enabled": await ops.autorecovery_enabled(ctx)})

    async def status_put(request: web.Request) -> web.Response:
        if "enabled" not in request.query:
            return _text(one_line(f"Param 'enabled' not found in {dict(request.query)}"), 400)
        res = await ops.set_autorecovery(ctx, query_bool(request, "enabled"))
        return _json({"enabled": res.enabled})

    async def lur(request: web.Request) -> web.Response:
        q = request.query
        items = await ops.list_underreplicated(ctx, q.get("missingreplica") or None,
                                               q.get("excludingmissingreplica") or None)
        if not items:
            return _text("No under replicated ledgers found", 404)
        if query_bool(request, "printmissingreplica"):
            return _json({str(i.ledger_id): list(i.replicas) for i in items})
        return _json([i.ledger_id for i in items])

    async def who(_r: web.Request) -> web.Response:
        auditor = await ops.who_is_auditor(ctx)
        if auditor is None:
            return _text("No auditor elected", 404)
        return _text(f"Auditor: {auditor}")

    async def trigger(_r: web.Request) -> web.Response:
        await ops.trigger_audit(ctx)
        return _text("Success trigger audit.")

    async def delay_get(_r: web.Request) -> web.Response:
        return _text(f"lostBookieRecoveryDelay value: {await ops.get_lost_bookie_recovery_delay(ctx)}")

    async def delay_put(request: web.Request) -> web.Response:
        body = await json_object(request, {"delay_seconds"}, check=False)
        if "delay_seconds" not in body:
            return _text("Request body not contains lostBookieRecoveryDelay.", 400)
        known_fields(body, {"delay_seconds"})
        delay = body["delay_seconds"]
        if isinstance(delay, bool) or not isinstance(delay, (int, str)):
            raise ops.BadRequestError(f"field delay_seconds must be an integer number of seconds, got {delay!r:.50}")
        value = await ops.set_lost_bookie_recovery_delay(ctx, delay)
        return _text(f"Success set lostBookieRecoveryDelay to {value}")

    async def recover_put(request: web.Request) -> web.Response:
        body = await json_object(request, {"bookie_src", "delete_cookie", "force"}, check=False)
        if not body.get("bookie_src"):
            return _text("Request body not contains bookie_src.", 400)
        known_fields(body, {"bookie_src", "delete_cookie", "force"})
        sources = _bookie_src(body["bookie_src"], many=True)
        delete_cookie = body.get("delete_cookie", False)
        force = body.get("force", False)
        for name, value in (("delete_cookie", delete_cookie), ("force", force)):
            if not isinstance(value, bool):
                raise ops.BadRequestError(f"bad {name} {value!r:.50}: expected true or false")
        # refuse a running source before a job exists (issue 15): the same checks recover_bookies makes
        w = await ctx.get_watcher()
        live = [s for s in sources if s in w.writable or s in w.readonly]
        if live and (delete_cookie or not force):
            why = ("its cookie is never deleted" if delete_cookie else
                   'recovering it copies its data away while it serves; send "force": true to migrate it')
            raise IllegalOpError(f"bookie {live[0]} is still running (registered): {why}")

        async def run(job: Job) -> Any:
            report = await recover_bookies(ctx, sources, delete_cookie=delete_cookie, force=force,
                                       on_progress=lambda p: job.progress.update(_as_dict(p)))
            return _as_dict(report)

        job = deps.jobs.start("recover", ",".join(sources), run)
        return _text(f"Success send recovery request command. (job {job.id}; see {API}/autorecovery/progress)")

    async def decommission_put(request: web.Request) -> web.Response:
        body = await json_object(request, {"bookie_src", "timeout_s"}, check=False)
        if not body.get("bookie_src"):
            return _text("Request body not contains bookie_src.", 400)
        known_fields(body, {"bookie_src", "timeout_s"})
        bookie = _bookie_src(body["bookie_src"], many=False)[0]
        timeout = _timeout_s(body.get("timeout_s"))

        async def run(job: Job) -> Any:
            report = await decommission_bookie(ctx, bookie, timeout_s=timeout,
                                            on_progress=lambda p: job.progress.update(_as_dict(p)))
            return _as_dict(report)

        # fail fast on the checks that need no waiting (bookie still up, no auditor...)
        from autorecovery.admin.decommission import precheck

        await precheck(ctx, bookie)
        job = deps.jobs.start("decommission", bookie, run)
        return _text(f"Success send decommission Bookie command {bookie} (job {job.id}; "
                     f"see {API}/autorecovery/progress)")

    async def list_bookie_info(_r: web.Request) -> web.Response:
        report = await ops.bookie_info(ctx)
        if not report.infos:
            return _text("Not found any Bookie info.", 404)
        out: dict[str, str] = {}
        for b, (free, total) in sorted(report.infos.items()):
            out[b] = f": {{Free: {free}{readable_bytes(free)}, Total: {total}{readable_bytes(total)}}},"
        tf, tt = report.total_free, report.total_capacity
        out["ClusterInfo: "] = f"{{Free: {tf}{readable_bytes(tf)}, Total: {tt}{readable_bytes(tt)}}}"
        return _json(out)

    async def cluster_info(_r: web.Request) -> web.Response:
        return _json(await ops.cluster_info(ctx))

    async def progress(_r: web.Request) -> web.Response:
        from autorecovery.admin import maintenance

        doc = ops.worker_progress(ctx) or {}
        try:  # windows, overrides and what the auditor holds back (issue 16); best effort
            maint: Any = await maintenance.state(ctx)
        except AutoRecoveryError as exc:
            maint = {"error": str(exc)}
        return _json({"cluster": doc.get("cluster"), "worker": doc.get("worker"), "jobs": deps.jobs.snapshot(),
                      "maintenance": maint})

    async def ledger_meta(request: web.Request) -> web.Response:
        if "ledger_id" not in request.query:
            return _text("Param 'ledger_id' not found: expected ?ledger_id=N", 400)
        fmt = query_choice(request, "format", ("upstream", "autorecovery"), "upstream")
        # issue 25: the password only for an authenticated admin (checked by auth_middleware)
        with_password = query_bool(request, "withPassword")
        lid, md, version = await ops.ledger_metadata(ctx, request.query["ledger_id"])
        if fmt == "autorecovery":  # ours: flat fields, bookie ids as strings, never the password
            return _json(ops.metadata_json(lid, md, version))
        return _json({str(lid): ops.metadata_upstream_json(lid, md, with_password=with_password)})

    async def heartbeat(_r: web.Request) -> web.Response:
        return _text("OK\n")

    async def list_bookies(request: web.Request) -> web.Response:
        w = await ctx.get_watcher()
        chosen = w.readonly if query_choice(request, "type", ("rw", "ro"), "rw") == "ro" else w.writable
        hostnames = query_bool(request, "print_hostnames")
        return _json({b: (b.rpartition(":")[0].strip("[]") if hostnames else None) for b in sorted(chosen)})

    async def server_config_get(_r: web.Request) -> web.Response:
        return _json(ops.server_config(ctx.settings))

    async def server_config_put(_r: web.Request) -> web.Response:
        return _text("changing the configuration at run time is not supported by autorecovery: "
                     "edit bk_server.conf (or BK_<key>) and restart the daemon", 405)

    assert deps.credentials is not None
    app = web.Application(client_max_size=MAX_REQUEST_BYTES,
                          middlewares=[audit_middleware(deps.registry), auth_middleware(deps.credentials)])
    r = app.router
    r.add_get("/metrics", metrics_h)
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get(f"{API}/autorecovery/status", guarded(status_get))
    r.add_put(f"{API}/autorecovery/status", mutating(guarded(status_put)))
    r.add_put(f"{API}/autorecovery/bookie", mutating(guarded(recover_put)))
    r.add_get(f"{API}/autorecovery/list_under_replicated_ledger", guarded(lur))
    r.add_get(f"{API}/autorecovery/who_is_auditor", guarded(who))
    r.add_put(f"{API}/autorecovery/trigger_audit", mutating(guarded(trigger)))
    r.add_get(f"{API}/autorecovery/lost_bookie_recovery_delay", guarded(delay_get))
    r.add_put(f"{API}/autorecovery/lost_bookie_recovery_delay", mutating(guarded(delay_put)))
    r.add_put(f"{API}/autorecovery/decommission", mutating(guarded(decommission_put)))
    r.add_get(f"{API}/autorecovery/progress", guarded(progress))
    r.add_get(f"{API}/bookie/list_bookie_info", guarded(list_bookie_info))
    r.add_get(f"{API}/bookie/cluster_info", guarded(cluster_info))
    r.add_get(f"{API}/ledger/metadata", guarded(ledger_meta))
    r.add_get("/heartbeat", heartbeat)
    r.add_get(f"{API}/bookie/list_bookies", guarded(list_bookies))
    r.add_get(f"{API}/config/server_config", guarded(server_config_get))
    r.add_put(f"{API}/config/server_config", server_config_put)
    from autorecovery.admin import http_maintenance

    http_maintenance.add_routes(r, ctx, mutating, guarded, debug=deps.debug_endpoints)
    return app


def _as_dict(obj: Any) -> Any:
    if obj is None:
        return None
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    if isinstance(obj, dict):
        return obj
    return {"value": str(obj)}


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
        return _text(f"Host {host[:100]!r} refused: this admin port is bound to loopback and answers only "
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

    async def start(self) -> "AdminHttpServer":
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
        except BaseException:
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

    async def start(self) -> "PrometheusHttpServer":
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
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, address, port, shutdown_timeout=2.0, ssl_context=ssl_context)
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
        with contextlib.suppress(Exception):
            await runner.cleanup()
