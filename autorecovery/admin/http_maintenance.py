"""HTTP routes of ours for operator control (registered by ``admin.http.build_app``):

* ``GET  /api/v1/autorecovery/maintenance`` — windows, overrides and what the auditor holds back;
* ``PUT  /api/v1/autorecovery/maintenance`` — body ``{"action": "start"|"stop"|"override",
  "bookie": "h:p" | "rack": "/r1", "ttl": "2h", "reason": "..."}`` (mutation switch);
* ``GET  /api/v1/autorecovery/ok_to_stop?bookie=h:p[&for=600]`` — may the bookie be stopped now
  (``admin.oktostop``): 200 with ``ok`` true, 409 with ``ok`` false (the JSON names the blocking
  ledgers), 400 for an unknown bookie or a bad ``for``; answered by every daemon from ZooKeeper reads;
* ``PUT  /api/v1/autorecovery/ok_to_stop`` — body ``{"bookie": "h:p", "for": "600", "wait": 120,
  "reason": "..."}``: the planned-stop hook (wait for a yes, then open an auto-closing window; mutation
  switch): 200 window open, 409 still not ok after ``wait`` s;
* ``PUT  /api/v1/autorecovery/expire_session`` — expire this daemon's ZooKeeper session, as a long
  network partition would (a drill and test aid; mutation switch). The daemon stops its auditor and
  worker, makes a new session and rejoins (``sessionRejoinEnabled``). Served only with
  ``httpDebugEndpointsEnabled=true`` (issue 25; 404 otherwise).
"""

from __future__ import annotations

import socket

from aiohttp import web

from autorecovery.admin import maintenance as m
from autorecovery.admin import oktostop, ops, params
from autorecovery.admin.http_input import json_object

API = "/api/v1"


FIELDS = frozenset({"action", "bookie", "rack", "ttl", "reason", "override", "auto_close"})
PRESTOP_FIELDS = frozenset({"bookie", "for", "wait", "reason"})


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
            auto = body.get("auto_close", False)
            if not isinstance(auto, bool):
                raise ops.BadRequestError("field 'auto_close' must be true or false")
            w = await m.start(ctx, bookie=bookie, rack=rack, ttl=body.get("ttl") or "",
                              reason=body.get("reason") or "", override=action == "override", auto_close=auto)
            return web.json_response(w)
        if action == "stop":
            override = body.get("override", False)
            if not isinstance(override, bool):
                raise ops.BadRequestError("field 'override' must be true or false")
            found = await m.stop(ctx, bookie=bookie, rack=rack, override=override)
            return web.json_response({"stopped": found}, status=200 if found else 404)
        raise ops.BadRequestError(f"field 'action' must be start, stop or override (got {action!r:.50})")

    async def ok_get(request: web.Request) -> web.Response:
        q = request.query
        unknown = sorted(set(q) - {"bookie", "for"})
        if unknown:
            raise ops.BadRequestError(f"unknown query parameter {unknown[0]!r:.60} (expected bookie, for)")
        if not q.get("bookie"):
            raise ops.BadRequestError("query parameter 'bookie' (host:port) is required")
        for_s = oktostop.check_for(q["for"]) if "for" in q else None
        d = await oktostop.answer(ctx, q["bookie"], for_s)
        return web.json_response(d, status=200 if d["ok"] else 409)

    async def ok_put(request: web.Request) -> web.Response:
        body = await json_object(request, PRESTOP_FIELDS)
        bookie, reason = body.get("bookie"), body.get("reason", "planned restart (ok_to_stop hook)")
        if not isinstance(bookie, str) or not bookie:
            raise ops.BadRequestError("field 'bookie' must be a non-empty string")
        if not isinstance(reason, str) or not reason:
            raise ops.BadRequestError("field 'reason' must be a non-empty string")
        if "for" not in body:
            raise ops.BadRequestError("field 'for' (the planned downtime, e.g. 600 or 10m) is required")
        for_s = oktostop.check_for(body["for"])
        try:
            wait = params.seconds(body.get("wait", 0), "wait", allow_zero=True, maximum=3600)
        except ValueError as exc:
            raise ops.BadRequestError(str(exc)) from None
        d, w = await oktostop.prestop(ctx, bookie, for_s=for_s, wait_s=wait, reason=reason,
                                      by=f"http@{socket.gethostname()}")
        return web.json_response(d, status=200 if w is not None else 409)

    async def expire(_r: web.Request) -> web.Response:
        await ctx.zk.expire_session()
        return web.Response(text="ZooKeeper session expired; the daemon rejoins on a new session")

    router.add_get(f"{API}/autorecovery/maintenance", guarded(get_))
    router.add_put(f"{API}/autorecovery/maintenance", mutating(guarded(put_)))
    router.add_get(f"{API}/autorecovery/ok_to_stop", guarded(ok_get))
    router.add_put(f"{API}/autorecovery/ok_to_stop", mutating(guarded(ok_put)))
    if debug:
        router.add_put(f"{API}/autorecovery/expire_session", mutating(guarded(expire)))
