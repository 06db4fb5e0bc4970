"""The admin HTTP application: :func:`build_app` maps every path of :mod:`autorecovery.admin.http`'s table
to a handler over :mod:`autorecovery.admin.ops` (upstream ``HttpRouter`` names and bodies), with the
mutation switch, the error-to-status mapping (400/403/404/409/503, one line, never a traceback) and
:class:`HttpDeps`, what the handlers need from the daemon.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal
from typing import Any

import structlog
from aiohttp import web

from autorecovery import metrics
from autorecovery.admin import ops, params
from autorecovery.admin.decommission import decommission_bookie
from autorecovery.admin.http_auth import (
    Credentials,
    audit_middleware,
    auth_middleware,
)
from autorecovery.admin.http_input import json_object, known_fields, one_line, query_bool, query_choice
from autorecovery.admin.http_jobs import Job, Jobs
from autorecovery.admin.recover import recover_bookies
from autorecovery.errors import AutoRecoveryError, IllegalOpError

log = structlog.get_logger("autorecovery.http")

API = "/api/v1"

#: Largest request body accepted, bytes (aiohttp ``client_max_size``; the admin bodies are small JSON
#: documents): larger ones answer 413 before any handler runs.
MAX_REQUEST_BYTES = 64 * 1024


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


# -- the application ------------------------------------------------------------------------------------
def text_response(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/plain")


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(obj), status=status, content_type="application/json")


def _error(exc: BaseException) -> web.Response:
    return text_response(one_line(str(exc)), ops.http_status(exc))


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
                return text_response("mutating admin endpoints are disabled on this daemon; "
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
                return text_response(one_line(str(exc)), 400)
            except Exception as exc:  # noqa: BLE001 - never a bare 500 without a body
                log.error("admin request failed", path=request.path, error=str(exc))
                return text_response(one_line(f"{type(exc).__name__}: {exc}"), 500)
        return wrapped

    async def metrics_h(_r: web.Request) -> web.Response:
        return web.Response(body=metrics.generate_text(deps.registry),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def healthz(_r: web.Request) -> web.Response:
        return json_response(deps.liveness())

    async def readyz(_r: web.Request) -> web.Response:
        ready, details = deps.readiness()
        return json_response({"ready": ready, **details}, 200 if ready else 503)

    async def status_get(_r: web.Request) -> web.Response:
        return json_response({"enabled": await ops.autorecovery_enabled(ctx)})

    async def status_put(request: web.Request) -> web.Response:
        if "enabled" not in request.query:
            return text_response(one_line(f"Param 'enabled' not found in {dict(request.query)}"), 400)
        res = await ops.set_autorecovery(ctx, query_bool(request, "enabled"))
        return json_response({"enabled": res.enabled})

    async def lur(request: web.Request) -> web.Response:
        q = request.query
        items = await ops.list_underreplicated(ctx, q.get("missingreplica") or None,
                                               q.get("excludingmissingreplica") or None)
        if not items:
            return text_response("No under replicated ledgers found", 404)
        if query_bool(request, "printmissingreplica"):
            return json_response({str(i.ledger_id): list(i.replicas) for i in items})
        return json_response([i.ledger_id for i in items])

    async def who(_r: web.Request) -> web.Response:
        auditor = await ops.who_is_auditor(ctx)
        if auditor is None:
            return text_response("No auditor elected", 404)
        return text_response(f"Auditor: {auditor}")

    async def trigger(_r: web.Request) -> web.Response:
        await ops.trigger_audit(ctx)
        return text_response("Success trigger audit.")

    async def delay_get(_r: web.Request) -> web.Response:
        return text_response(f"lostBookieRecoveryDelay value: {await ops.get_lost_bookie_recovery_delay(ctx)}")

    async def delay_put(request: web.Request) -> web.Response:
        body = await json_object(request, {"delay_seconds"}, check=False)
        if "delay_seconds" not in body:
            return text_response("Request body not contains lostBookieRecoveryDelay.", 400)
        known_fields(body, {"delay_seconds"})
        delay = body["delay_seconds"]
        if isinstance(delay, bool) or not isinstance(delay, (int, str)):
            raise ops.BadRequestError(f"field delay_seconds must be an integer number of seconds, got {delay!r:.50}")
        value = await ops.set_lost_bookie_recovery_delay(ctx, delay)
        return text_response(f"Success set lostBookieRecoveryDelay to {value}")

    async def recover_put(request: web.Request) -> web.Response:
        body = await json_object(request, {"bookie_src", "delete_cookie", "force"}, check=False)
        if not body.get("bookie_src"):
            return text_response("Request body not contains bookie_src.", 400)
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
            import time

            from autorecovery.admin import ops_overview

            started_ms = int(time.time() * 1000)
            report = await recover_bookies(ctx, sources, delete_cookie=delete_cookie, force=force,
                                       on_progress=lambda p: job.progress.update(_as_dict(p)))
            await ops_overview.record_recover(ctx, report, started_ms)  # heal history (ours); never raises
            return _as_dict(report)

        job = deps.jobs.start("recover", ",".join(sources), run)
        return text_response(f"Success send recovery request command. (job {job.id}; see {API}/autorecovery/progress)")

    async def decommission_put(request: web.Request) -> web.Response:
        body = await json_object(request, {"bookie_src", "timeout_s"}, check=False)
        if not body.get("bookie_src"):
            return text_response("Request body not contains bookie_src.", 400)
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
        return text_response(f"Success send decommission Bookie command {bookie} (job {job.id}; "
                     f"see {API}/autorecovery/progress)")

    async def list_bookie_info(_r: web.Request) -> web.Response:
        report = await ops.bookie_info(ctx)
        if not report.infos:
            return text_response("Not found any Bookie info.", 404)
        out: dict[str, str] = {}
        for b, (free, total) in sorted(report.infos.items()):
            out[b] = f": {{Free: {free}{readable_bytes(free)}, Total: {total}{readable_bytes(total)}}},"
        tf, tt = report.total_free, report.total_capacity
        out["ClusterInfo: "] = f"{{Free: {tf}{readable_bytes(tf)}, Total: {tt}{readable_bytes(tt)}}}"
        return json_response(out)

    async def cluster_info(_r: web.Request) -> web.Response:
        return json_response(await ops.cluster_info(ctx))

    async def progress(_r: web.Request) -> web.Response:
        from autorecovery.admin import maintenance

        doc = ops.worker_progress(ctx) or {}
        try:  # windows, overrides and what the auditor holds back (issue 16); best effort
            maint: Any = await maintenance.state(ctx)
        except AutoRecoveryError as exc:
            maint = {"error": str(exc)}
        from autorecovery.admin import ops_topics

        try:  # by tenant / namespace / topic (ours); best effort, as the maintenance section
            by_topic: Any = await ops_topics.by_topic(ctx, (doc.get("cluster") or {}).get("blocked"))
        except AutoRecoveryError as exc:
            by_topic = {"error": str(exc)}
        return json_response({"cluster": doc.get("cluster"), "worker": doc.get("worker"), "jobs": deps.jobs.snapshot(),
                      "maintenance": maint, "by_topic": by_topic})

    async def overview(_r: web.Request) -> web.Response:
        from autorecovery.admin import ops_overview

        return json_response(await ops_overview.overview(ctx))

    async def history(request: web.Request) -> web.Response:
        import time

        from autorecovery.admin import ops_overview

        limit = None
        if "limit" in request.query:
            raw = request.query["limit"]
            if not raw.isdigit() or int(raw) < 1:
                raise ops.BadRequestError(f"bad limit {raw[:50]!r}: expected a positive number of episodes")
            limit = int(raw)
        listing = await ops_overview.history(ctx, limit)
        now = int(time.time() * 1000)
        return json_response({"episodes": [e.as_dict(now) for e in listing.episodes], "errors": listing.errors})

    async def ledger_meta(request: web.Request) -> web.Response:
        if "ledger_id" not in request.query:
            return text_response("Param 'ledger_id' not found: expected ?ledger_id=N", 400)
        fmt = query_choice(request, "format", ("upstream", "autorecovery"), "upstream")
        # issue 25: the password only for an authenticated admin (checked by auth_middleware)
        with_password = query_bool(request, "withPassword")
        lid, md, version = await ops.ledger_metadata(ctx, request.query["ledger_id"])
        if fmt == "autorecovery":  # ours: flat fields, bookie ids as strings, never the password
            return json_response(ops.metadata_json(lid, md, version))
        return json_response({str(lid): ops.metadata_upstream_json(lid, md, with_password=with_password)})

    async def heartbeat(_r: web.Request) -> web.Response:
        return text_response("OK\n")

    async def list_bookies(request: web.Request) -> web.Response:
        w = await ctx.get_watcher()
        chosen = w.readonly if query_choice(request, "type", ("rw", "ro"), "rw") == "ro" else w.writable
        hostnames = query_bool(request, "print_hostnames")
        return json_response({b: (b.rpartition(":")[0].strip("[]") if hostnames else None) for b in sorted(chosen)})

    async def server_config_get(_r: web.Request) -> web.Response:
        return json_response(ops.server_config(ctx.settings))

    async def server_config_put(_r: web.Request) -> web.Response:
        return text_response("changing the configuration at run time is not supported by autorecovery: "
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
    r.add_get(f"{API}/autorecovery/overview", guarded(overview))
    r.add_get(f"{API}/autorecovery/history", guarded(history))
    r.add_get(f"{API}/bookie/list_bookie_info", guarded(list_bookie_info))
    r.add_get(f"{API}/bookie/cluster_info", guarded(cluster_info))
    r.add_get(f"{API}/ledger/metadata", guarded(ledger_meta))
    r.add_get("/heartbeat", heartbeat)
    r.add_get(f"{API}/bookie/list_bookies", guarded(list_bookies))
    r.add_get(f"{API}/config/server_config", guarded(server_config_get))
    r.add_put(f"{API}/config/server_config", server_config_put)
    from autorecovery.admin import http_maintenance

    http_maintenance.add_routes(r, ctx, mutating, guarded, debug=deps.debug_endpoints)
    from autorecovery.admin import http_drain

    http_drain.add_routes(r, ctx, mutating, guarded, deps.jobs)
    return app


def _as_dict(obj: Any) -> Any:
    if obj is None:
        return None
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    if isinstance(obj, dict):
        return obj
    return {"value": str(obj)}
