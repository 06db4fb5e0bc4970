"""HTTP routes of ours for operator control (registered by ``admin.http.build_app``):

* ``GET  /api/v1/autorecovery/maintenance`` — windows, overrides and what the auditor holds back;
* ``PUT  /api/v1/autorecovery/maintenance`` — body ``{"action": "start"|"stop"|"override",
  "bookie": "h:p" | "rack": "/r1", "ttl": "2h", "reason": "..."}`` (mutation switch);
* ``PUT  /api/v1/autorecovery/expire_session`` — expire this daemon's ZooKeeper session, as a long
  network partition would (a drill and test aid; mutation switch). The daemon stops its auditor and
  worker, makes a new session and rejoins (``sessionRejoinEnabled``). Served only with
  ``httpDebugEndpointsEnabled=true`` (issue 25; 404 otherwise).
"""

from __future__ import annotations

from aiohttp import web

from autorecovery.admin import maintenance as m
from autorecovery.admin import ops
from autorecovery.admin.http_input import json_object

API = "/api/v1"


FIELDS = frozenset({"action", "bookie", "rack", "ttl", "reason", "override"})


def add_routes(router: web.UrlDispatcher, ctx: ops.AdminContext, mutating, guarded, *, debug: bool = False) -> None:
    """Add the routes; ``mutating`` and ``guarded`` are build_app's wrappers (switch, error mapping);
    ``debug`` adds ``expire_session`` (``httpDebugEndpointsEnabled``)."""

    async def get_(_r: web.Request) -> web.Response:
        return web.json_response(await m.state(ctx))

    async def put_(request: web.Request) -> web.Response:
        body = await json_object(request, FIELDS)
        action = body.get("action")
        bookie, rack = body.get("bookie"), body.get("rack")
        for name, v in (("bookie", bookie), ("rack", rack), ("ttl", body.get("ttl")), ("reason", body.get("reason"))):
            if v is not None and not isinstance(v, str):
                raise ops.BadRequestError(f"field {name!r} must be a string")
        if action in ("start", "override"):
            w = await m.start(ctx, bookie=bookie, rack=rack, ttl=body.get("ttl") or "",
                              reason=body.get("reason") or "", override=action == "override")
            return web.json_response(w)
        if action == "stop":
            override = body.get("override", False)
            if not isinstance(override, bool):
                raise ops.BadRequestError("field 'override' must be true or false")
            found = await m.stop(ctx, bookie=bookie, rack=rack, override=override)
            return web.json_response({"stopped": found}, status=200 if found else 404)
        raise ops.BadRequestError(f"field 'action' must be start, stop or override (got {action!r:.50})")

    async def expire(_r: web.Request) -> web.Response:
        await ctx.zk.expire_session()
        return web.Response(text="ZooKeeper session expired; the daemon rejoins on a new session")

    router.add_get(f"{API}/autorecovery/maintenance", guarded(get_))
    router.add_put(f"{API}/autorecovery/maintenance", mutating(guarded(put_)))
    if debug:
        router.add_put(f"{API}/autorecovery/expire_session", mutating(guarded(expire)))
