"""``autorecovery shell`` commands that inspect the cluster: ``bookieinfo``, ``clusterinfo``,
``listbookies``, ``ledgermetadata`` (upstream names, options and output wording) and ``placementcheck``
(ours).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from autorecovery.admin import ops
from autorecovery.admin.http_routes import readable_bytes
from autorecovery.cli import formatting as fmt
from autorecovery.cli import params as P
from autorecovery.cli.shell_group import command
from autorecovery.cli.shell_run import EXIT_USAGE, CommandFailed, execute
from autorecovery.config.keys.model import INT_MAX
from autorecovery.errors import ConfigError


# -- bookies ----------------------------------------------------------------------------------------------
@command("bookieinfo", help="Free and total disk space of every bookie (GET_BOOKIE_INFO).")
def bookieinfo(conf, zk, ledgers_root, sets):
    async def body(ctx):
        report = await ops.bookie_info(ctx)
        for b, err in sorted(report.failed.items()):
            click.echo(f"Failed to retrieve bookie information from {b}: {err}", err=True)
        if not report.infos:
            click.echo("Failed to retrieve bookie information from any of the bookies")
            raise CommandFailed("no bookie answered GET_BOOKIE_INFO")
        click.echo("Free disk space info:")
        addresses = await ops.bookie_addresses(report.infos)
        for b, (free, total) in sorted(report.infos.items()):
            click.echo(f"{fmt.bookie_line(b, addresses[b])}: \tFree: {free}{readable_bytes(free)}"
                       f"\tTotal: {total}{readable_bytes(total)}")
        tf, tt = report.total_free, report.total_capacity
        click.echo(f"Total free disk space in the cluster:\t{tf}{readable_bytes(tf)}")
        click.echo(f"Total disk capacity in the cluster:\t{tt}{readable_bytes(tt)}")
    execute(conf, zk, ledgers_root, sets, body)


@command("clusterinfo", help="Cluster summary (auditor, under-replication, bookie counts): upstream's header "
                             "line then its JSON.")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON, on one line (ours).")
@click.option("--overview", "glance", is_flag=True,
              help="Print the cluster at a glance instead (ours; the same as `shell overview`, with --json too).")
def clusterinfo(conf, zk, ledgers_root, sets, as_json, glance):
    """Upstream ``ClusterInfoCommand`` (its header and JSON, which scripts parse: kept as they are);
    ``--overview`` prints ours, the cluster at a glance (``shell overview``)."""
    async def body(ctx):
        if glance:
            from autorecovery.admin import ops_overview
            from autorecovery.cli.shell_status import print_overview

            print_overview(await ops_overview.overview(ctx), as_json)
            return
        info = await ops.cluster_info(ctx)
        if as_json:
            click.echo(json.dumps(info))
            return
        click.echo("--------- Cluster Info ---------")
        click.echo(jackson_pretty(info))
    execute(conf, zk, ledgers_root, sets, body)


@command("whatisinstanceid", help="Print the instance id of the cluster (exit 1 while it is not formatted).")
def whatisinstanceid(conf, zk, ledgers_root, sets):
    """Upstream ``bookkeeper shell whatisinstanceid`` (``InstanceIdCommand``): one line
    ``Metadata Service Uri: URI InstanceId: ID``. Exits 1 with one line naming the missing znode
    (``<root>/LAYOUT`` or ``INSTANCEID``) when the cluster is not formatted, so a wait loop (the Apache Pulsar Helm chart's init container:
    ``until bin/bookkeeper shell whatisinstanceid; do sleep 3; done``) can use it."""
    async def body(ctx):
        instance_id = await ops.cluster_instance_id(ctx)
        s = ctx.settings
        uri = s.metadata_service_uri if s is not None else ""
        if not uri and s is not None:
            uri = f"zk+hierarchical://{s.zk_servers.replace(',', ';')}{s.ledgers_root}"
        click.echo(f"Metadata Service Uri: {uri} InstanceId: {instance_id}")
    execute(conf, zk, ledgers_root, sets, body)


@command("listbookies", context_settings={"help_option_names": ["--help"]},
         help="List bookies: upstream's sections and BookieID/IP/Port/Hostname lines (-h is upstream's "
              "--hostnames here; help is --help).")
@click.option("-rw", "--readwrite", "-readwrite", is_flag=True, help="Print writable bookies.")
@click.option("-ro", "--readonly", "-readonly", is_flag=True, help="Print read-only bookies.")
@click.option("-a", "--all", "-all", "all_", is_flag=True, help="Print all bookies (those with a cookie).")
@click.option("-h", "--hostnames", "-hostnames", is_flag=True,
              help="Upstream's deprecated 'also print hostnames': every line already carries Hostname.")
@click.option("--racks", is_flag=True,
              help="Append each bookie's rack (and, under All Bookies, its state) to the line (ours).")
def listbookies(conf, zk, ledgers_root, sets, readwrite, readonly, all_, hostnames, racks):
    if not (readwrite or readonly or all_):
        readwrite = readonly = all_ = True

    async def body(ctx):
        rows = await ops.list_bookies(ctx, with_racks=racks)
        addresses = await ops.bookie_addresses(r.bookie_id for r in rows)

        def line(r, with_state=False):
            text = fmt.bookie_line(r.bookie_id, addresses[r.bookie_id])
            if racks:
                text += f"\track={r.rack or '(default)'}"
                if with_state:
                    text += f"\tstate={r.state}"
            return text

        printed = False
        for title, state, flag in (("ReadWrite Bookies :", "writable", readwrite),
                                   ("Readonly Bookies :", "readonly", readonly)):
            sel = [r for r in rows if r.state == state]
            if flag and sel:
                click.echo(title)
                for r in sel:
                    click.echo(line(r))
                printed = True
        if all_ and rows:
            click.echo("All Bookies :")
            for r in sorted(rows, key=lambda r: r.bookie_id):
                click.echo(line(r, with_state=True))
            printed = True
        if not printed:
            click.echo("No bookie exists!")  # upstream logs this and still exits 0
    execute(conf, zk, ledgers_root, sets, body)


# -- ledgers ----------------------------------------------------------------------------------------------
@command("ledgermetadata", help="Print the metadata of a ledger (upstream's toString), or dump it to / "
                                "restore it from a file.")
@click.option("-l", "--ledgerid", "-ledgerid", default=None, type=P.LEDGER_ID, help="Ledger id.")
@click.option("-dumptofile", "--dumptofile", "dump_to", default=None, metavar="FILE",
              help="Write the ledger's metadata znode, byte for byte, to FILE (upstream's serialised form).")
@click.option("-restorefromfile", "--restorefromfile", "restore_from", default=None, metavar="FILE",
              help="Create the ledger's metadata from FILE (a -dumptofile output).")
@click.option("-update", "--update", is_flag=True, help="With -restorefromfile: overwrite an existing ledger.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of upstream's toString form (ours).")
@click.option("--with-password", "-withpassword", "with_password", is_flag=True,
              help="Print the ledger password (base64, upstream's toString) instead of password=OMITTED (ours).")
def ledgermetadata(conf, zk, ledgers_root, sets, ledgerid, dump_to, restore_from, update, as_json, with_password):
    if ledgerid is None:
        click.echo("ERROR: Must specify a ledger id (-l/--ledgerid/-ledgerid N)", err=True)
        sys.exit(EXIT_USAGE)
    if dump_to and restore_from:
        click.echo("ERROR: Only one of --dumptofile and --restorefromfile can be specified", err=True)
        sys.exit(EXIT_USAGE)
    if update and not restore_from:
        click.echo("ERROR: -update only applies to -restorefromfile", err=True)
        sys.exit(EXIT_USAGE)

    async def body(ctx):
        if dump_to:
            lid, data = await ops.ledger_metadata_bytes(ctx, ledgerid)
            try:
                await asyncio.to_thread(Path(dump_to).write_bytes, data)
            except OSError as exc:
                raise CommandFailed(f"cannot write {dump_to}: {exc.strerror}") from None
            return
        if restore_from:
            try:
                data = await asyncio.to_thread(Path(restore_from).read_bytes)
            except OSError as exc:
                raise CommandFailed(f"cannot read {restore_from}: {exc.strerror}") from None
            lid, updated = await ops.restore_ledger_metadata(ctx, ledgerid, data, restore_from, update=update)
            if updated:
                click.echo(f"successsfully updated ledger metadata {lid}")
            return
        lid, md, version = await ops.ledger_metadata(ctx, ledgerid)
        if as_json:
            click.echo(json.dumps(ops.metadata_json(lid, md, version), indent=2))
        else:
            click.echo(f"ledgerID: {lid}")
            click.echo(fmt.format_metadata(md, with_password=with_password))
    execute(conf, zk, ledgers_root, sets, body)


@command("placementcheck", help="One-off placement report: ledgers by adherence, non-adhering ones with racks.")
@click.option("--policy", "policies", multiple=True,
              help="Judge against this policy (class name or rackaware/regionaware/zoneaware/default); "
                   "repeatable; default: the configured ensemblePlacementPolicy.")
@click.option("--max-list", default=50, show_default=True, type=click.IntRange(0, INT_MAX),
              help="Non-adhering ledgers to print per policy.")
def placementcheck(conf, zk, ledgers_root, sets, policies, max_list):
    async def body(ctx):
        judged = []
        if policies:
            from autorecovery.placement import policy_from_name

            base = await ctx.get_policy()
            w = await ctx.get_watcher()
            for name in policies:
                try:
                    p = policy_from_name(name, base.config, base.resolver)
                except ConfigError as exc:
                    raise ops.BadRequestError(str(exc)) from None
                p.on_cluster_changed(set(w.writable), set(w.readonly))
                judged.append((p, name))
        else:
            judged.append((await ctx.get_policy(), None))
        ids = await ctx.ledgers.list_ledger_ids()
        for p, name in judged:
            rep = await ops.placement_check(ctx, p, name, ids)
            click.echo(f"Placement policy: {rep.policy}")
            closed = sum(rep.counts.values())
            click.echo(f"Closed ledgers checked: {closed} (open ledgers skipped: {rep.open_skipped}"
                       + (f", unreadable: {rep.unreadable}" if rep.unreadable else "") + ")")
            for k in ("MEETS_STRICT", "MEETS_SOFT", "FAIL"):
                click.echo(f"  {k}: {rep.counts[k]}")
            if rep.not_adhering:
                click.echo("Ledgers not adhering strictly:")
                for nl in rep.not_adhering[:max_list]:
                    for first, last, members in nl.segments:
                        racks = ", ".join(f"{b}({r or 'default-rack'})" for b, r in members)
                        click.echo(f"  ledger {nl.ledger_id} [{nl.adherence}] entries {first}..{last}: {racks}")
                if len(rep.not_adhering) > max_list:
                    click.echo(f"  ... and {len(rep.not_adhering) - max_list} more")
    execute(conf, zk, ledgers_root, sets, body)


def jackson_pretty(obj: dict[str, Any]) -> str:
    """A flat JSON object as Jackson's default pretty printer writes it (upstream ``JsonUtil.toJson``):
    two-space indent and ``"key" : value``."""
    return json.dumps(obj, indent=2, separators=(",", " : "))
