"""``autorecovery shell maintenance start|stop|override|list`` (ours; see ``admin.maintenance``)."""

from __future__ import annotations

import json

import click

from autorecovery.admin import maintenance as m
from autorecovery.cli import params as P
from autorecovery.cli.shell_group import shell
from autorecovery.cli.shell_run import execute, shell_location


@shell.group("maintenance", help="Maintenance windows on bookies or racks (their loss is not audited until "
                                 "the window expires) and rack-loss guard overrides. Ours.")
def maintenance() -> None:
    """Group of the maintenance sub-commands."""


def _target_options(f):
    f = click.option("--rack", default=None, help="A network location, e.g. /rack1 or /region/rack1.")(f)
    f = click.option("--bookie", default=None, help="A bookie id host:port.")(f)
    return f


@maintenance.command("start", help="Open a window: the bookie's (or rack's) loss is not audited until it expires; "
                                   "a failure leaving a fragment below AQ still is.")
@shell_location
@_target_options
@click.option("--ttl", required=True, type=P.DURATION, help="How long: 90s, 30m, 2h, 1d (at most 365 days).")
@click.option("--reason", required=True, help="Why (shown to every operator).")
@click.option("--auto-close", is_flag=True, help="Bookie windows: close by itself once the bookie, seen down, "
                                                 "is registered again and no under-replication marker names it.")
def start_cmd(conf, zk, ledgers_root, sets, bookie, rack, ttl, reason, auto_close):
    async def body(ctx):
        w = await m.start(ctx, bookie=bookie, rack=rack, ttl=ttl, reason=reason, auto_close=auto_close)
        click.echo(f"Maintenance window on {w['kind']} {w['target']} until {w['expires_ms']} "
                   f"(in {w['expires_in_s']} s): {w['reason']}")
    execute(conf, zk, ledgers_root, sets, body)


@maintenance.command("override", help="Lift the rack-loss guard for one rack (autorecoveryDownOutSubtreeLimit): "
                                      "its lost bookies are audited now.")
@shell_location
@click.option("--rack", required=True, help="The failure domain, e.g. /rack1.")
@click.option("--ttl", default="1h", show_default=True, type=P.DURATION,
              help="How long the override lasts (at most 365 days).")
@click.option("--reason", required=True, help="Why (shown to every operator).")
def override_cmd(conf, zk, ledgers_root, sets, rack, ttl, reason):
    async def body(ctx):
        w = await m.start(ctx, rack=rack, ttl=ttl, reason=reason, override=True)
        click.echo(f"Rack-loss guard lifted for {w['target']} for {w['expires_in_s']} s: {w['reason']}")
    execute(conf, zk, ledgers_root, sets, body)


@maintenance.command("stop", help="Close a window (or, with --override, a guard override) before it expires.")
@shell_location
@_target_options
@click.option("--override", "is_override", is_flag=True, help="Close the guard override of --rack.")
def stop_cmd(conf, zk, ledgers_root, sets, bookie, rack, is_override):
    async def body(ctx):
        if not await m.stop(ctx, bookie=bookie, rack=rack, override=is_override):
            click.echo(f"No maintenance window on {bookie or rack}")
            return 1
        click.echo(f"Maintenance window on {bookie or rack} stopped; lostBookieRecoveryDelay applies from now")
        return 0
    execute(conf, zk, ledgers_root, sets, body)


@maintenance.command("list", help="Windows, overrides and what the auditor holds back right now.")
@shell_location
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_cmd(conf, zk, ledgers_root, sets, as_json):
    async def body(ctx):
        st = await m.state(ctx)
        if as_json:
            click.echo(json.dumps(st, indent=2, sort_keys=True))
            return
        if not st["windows"]:
            click.echo("No maintenance windows")
        for w in st["windows"]:
            state = "expired" if w["expired"] else f"{w['expires_in_s']} s left"
            auto = "; closes by itself when the bookie is back" if w.get("auto_close") else ""
            click.echo(f"{w['kind']} {w['target']}: {state}; {w['reason']} (by {w['by'] or '?'}){auto}")
        held = st["held"]
        for d, bs in sorted((held.get("guard") or {}).items()):
            click.echo(f"rack {d} lost as a whole: waiting ({', '.join(bs)})")
        for b, w in sorted((held.get("windows") or {}).items()):
            click.echo(f"lost bookie {b} held by the window on {w['target']}")
        for e in st.get("ended", [])[-5:]:
            click.echo(f"ended: {e.get('kind')} {e.get('target')} at {e.get('ended_ms')}: {e.get('end_reason')}")
    execute(conf, zk, ledgers_root, sets, body)
