"""HTTP routes of the live drain (ours, BP-56; registered by ``admin.http_routes.build_app``):

* ``GET    /api/v1/autorecovery/drain`` — the drain record (``state``, segments and bytes left,
  ``waiting_open``, ``blocked``, ``owner_alive``) and this daemon's job progress; 404 when none;
* ``GET    /api/v1/autorecovery/drain?bookie=h:p&dry_run=true`` — the plan, nothing changed;
* ``PUT    /api/v1/autorecovery/drain`` — body ``{"bookie": "h:p", "rate": N}``: start (or resume) the
  drain as a background job of this daemon (mutation switch, admin credentials, audit line);
* ``DELETE /api/v1/autorecovery/drain`` — cancel it (mutation switch, admin, audited).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from autorecovery.admin import drain as dr
from autorecovery.admin import ops
from autorecovery.admin.http_input import json_object, query_bool
from autorecovery.admin.http_jobs import Job, Jobs
from autorecovery.plan.drain import ASSUMED_RATE_BYTES_PER_S

API = "/api/v1"
FIELDS = frozenset({"bookie", "rate"})


def add_routes(router: web.UrlDispatcher, ctx: ops.AdminContext, mutating, guarded, jobs: Jobs) -> None:
    """Add the routes; ``mutating`` and ``guarded`` are build_app's wrappers (switch, error mapping)."""

    async def get_(request: web.Request) -> web.Response:
        if query_bool(request, "dry_run"):
            bookie = request.query.get("bookie")
            if not bookie:
                raise ops.BadRequestError("dry_run needs ?bookie=host:port")
            plan = await dr.make_plan(ctx, bookie)
            return web.json_response(plan.as_dict(dr.rate_for(ctx, None) if dr.rate_for(ctx, None) > 0
                                                  else ASSUMED_RATE_BYTES_PER_S))
        doc = await dr.status(ctx)
        if doc is None:
            return web.Response(text="No drain was started", status=404)
        doc["jobs"] = [j for j in jobs.snapshot() if j.get("kind") == "drain"]
        return web.json_response(doc)

    async def put_(request: web.Request) -> web.Response:
        body = await json_object(request, FIELDS)
        bookie = body.get("bookie")
        if not isinstance(bookie, str) or not bookie:
            raise ops.BadRequestError("field 'bookie' must be a string \"host:port\"")
        rate = body.get("rate")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int)):
            raise ops.BadRequestError(f"bad rate {rate!r:.50}: expected an integer number of bytes/s")
        # fail fast, before a job exists: bad id, stopped bookie, blockers, another drain running
        plan = await dr.make_plan(ctx, bookie)
        if plan.blocked:
            lines = "; ".join(f"ledger {lid}: {why}" for lid, why in sorted(plan.blocked.items()))
            raise ops.IllegalOpError(f"drain of {plan.bookie_id} refused: {len(plan.blocked)} ledger(s) have no "
                                     f"placement-adhering replacement: {lines}")
        cur = await dr.status(ctx)
        if cur is not None and cur.get("state") in ("running", "cancelling") and (
                cur.get("bookie_id") != plan.bookie_id or cur.get("owner_alive")):
            raise ops.IllegalOpError(f"a drain of {cur.get('bookie_id')} is running (started by {cur.get('by')}); "
                                     "one drain at a time: wait for it or cancel it")

        async def run(job: Job) -> Any:
            report = await dr.drain_bookie(ctx, plan.bookie_id, rate_bytes_per_s=rate,
                                           on_progress=lambda p: job.progress.update(p.as_dict()))
            return report.as_dict()

        job = jobs.start("drain", plan.bookie_id, run)
        return web.Response(text=f"Drain of {plan.bookie_id} started (job {job.id}; see {API}/autorecovery/drain)")

    async def delete_(_r: web.Request) -> web.Response:
        doc = await dr.cancel(ctx)
        return web.json_response(doc)

    router.add_get(f"{API}/autorecovery/drain", guarded(get_))
    router.add_put(f"{API}/autorecovery/drain", mutating(guarded(put_)))
    router.add_delete(f"{API}/autorecovery/drain", mutating(guarded(delete_)))
