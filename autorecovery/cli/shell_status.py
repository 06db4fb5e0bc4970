"""``autorecovery shell`` commands on AutoRecovery's state (upstream names and options):
``listunderreplicated``, ``whoisauditor``, ``triggeraudit``, ``autorecovery``,
``lostbookierecoverydelay``, ``queryautorecoverystatus``, ``forceauditchecks``; and ours: ``overview`` (the
cluster at a glance) and ``history`` (heal episodes).
"""

from __future__ import annotations

import datetime as _dt
import json as _json
import sys

import click

from autorecovery.admin import ops
from autorecovery.cli import params as P
from autorecovery.cli.shell_group import command
from autorecovery.cli.shell_run import EXIT_USAGE, CommandFailed, execute


# -- listunderreplicated ------------------------------------------------------------------------------
@command("listunderreplicated", conf_short=False, help="List ledgers marked as under-replicated, optionally filtered by missing replica.")
@click.option("-mr", "--missingreplica", "-missingreplica", default=None, help="Only ledgers whose missing replicas include this bookie.")
@click.option("-emr", "--excludingmissingreplica", "-excludingmissingreplica", default=None, help="Skip ledgers missing this bookie.")
@click.option("-pmr", "--printmissingreplica", "-printmissingreplica", is_flag=True, help="Print the missing replicas.")
@click.option("-prw", "--printreplicationworkerid", "-printreplicationworkerid", is_flag=True, help="Print the worker holding the lock.")
@click.option("-c", "--onlydisplayledgercount", "-onlydisplayledgercount", is_flag=True,
              help="Only print the count (upstream's -c; pass the configuration with --conf here).")
@click.option("--by-topic", "by_topic", is_flag=True,
              help="Ours: roll the under-replicated, at-risk and unrecoverable ledgers up by Pulsar tenant, "
                   "namespace and topic (pulsar/managed-ledger custom metadata; others are \"not Pulsar\").")
@click.argument("stray", nargs=-1, required=False, metavar="")
def listunderreplicated(conf, zk, ledgers_root, sets, missingreplica, excludingmissingreplica,
                        printmissingreplica, printreplicationworkerid, onlydisplayledgercount, by_topic, stray):
    if stray:
        hint = (" (-c is upstream's --onlydisplayledgercount here; give the configuration file with --conf)"
                if onlydisplayledgercount else "")
        click.echo(f"ERROR: listunderreplicated takes no arguments, got {' '.join(stray)!r}{hint}", err=True)
        sys.exit(EXIT_USAGE)
    async def body(ctx):
        if by_topic:
            from autorecovery.admin.ops_topics import by_topic as rollup_by_topic
            from autorecovery.audit.topics import format_rollup

            doc = await rollup_by_topic(ctx)
            for line in format_rollup(doc):
                click.echo(line)
            click.echo(f"Ledgers rolled up: {doc['ledgers']}")
            return
        items = await ops.list_underreplicated(ctx, missingreplica, excludingmissingreplica,
                                               with_workers=printreplicationworkerid and not onlydisplayledgercount)
        if not onlydisplayledgercount:
            for it in items:
                click.echo(str(it.ledger_id))
                if it.ctime != ops.UNASSIGNED_CTIME:
                    click.echo(f"\tCtime : {it.ctime}")
                if printmissingreplica:
                    for r in it.replicas:
                        click.echo(f"\tMissingReplica : {r}")
                if printreplicationworkerid and it.worker is not None:
                    click.echo(f"\tReplicationWorkerId : {it.worker}")
        click.echo(f"Under replicated ledger count: {len(items)}")
    execute(conf, zk, ledgers_root, sets, body)


# -- auditor / switches -------------------------------------------------------------------------------------
@command("whoisauditor", help="Print the bookie id of the current auditor.")
def whoisauditor(conf, zk, ledgers_root, sets):
    async def body(ctx):
        auditor = await ops.who_is_auditor(ctx)
        if auditor is None:
            click.echo("No auditor elected")
            raise CommandFailed("no auditor elected: no autorecovery daemon is running")
        click.echo(f"Auditor: {auditor}")
    execute(conf, zk, ledgers_root, sets, body)


@command("triggeraudit", help="Force an audit by resetting the lostBookieRecoveryDelay.")
def triggeraudit(conf, zk, ledgers_root, sets):
    async def body(ctx):
        delay = await ops.trigger_audit(ctx)
        click.echo(f"Resetting LostBookieRecoveryDelay value: {delay}, to kickstart audit task")
    execute(conf, zk, ledgers_root, sets, body)


@command("autorecovery", help="Enable or disable AutoRecovery; with -s/--status or without options print its status.")
@click.option("-e", "--enable", "-enable", is_flag=True, help="Enable AutoRecovery.")
@click.option("-d", "--disable", "-disable", is_flag=True, help="Disable AutoRecovery.")
@click.option("-s", "--status", "-status", is_flag=True,
              help="Print whether AutoRecovery is enabled (upstream bkctl `autorecovery toggle -s/--status`).")
def autorecovery_cmd(conf, zk, ledgers_root, sets, enable, disable, status):
    """Upstream ``BookieShell.AutoRecoveryCmd`` (``-e``/``-d``, neither = status) and the status flag of
    its ``ToggleCommand`` (``-s``/``--status``); the status line is ToggleCommand's, period included."""
    if enable + disable + status > 1:
        click.echo("ERROR: only one of -e/--enable, -d/--disable and -s/--status can be specified", err=True)
        sys.exit(EXIT_USAGE)

    async def body(ctx):
        if not enable and not disable:
            on = await ops.autorecovery_enabled(ctx)
            click.echo(f"Autorecovery is {'enabled' if on else 'disabled'}.")
            return
        res = await ops.set_autorecovery(ctx, enable)
        word = "enabled" if enable else "disabled"
        if not res.changed:
            click.echo(f"Autorecovery already {word}. Doing nothing")
        else:
            click.echo("Enabling autorecovery" if enable else "Disabling autorecovery")
    execute(conf, zk, ledgers_root, sets, body)


@command("lostbookierecoverydelay", set_alias=False,
         help="Get or set the lostBookieRecoveryDelay (seconds) in ZooKeeper.")
@click.option("-g", "--get", "-get", "get_", is_flag=True, help="Print the value.")
@click.option("-s", "--set", "-set", "--set-value", "set_", default=None, metavar="SECONDS", type=P.RECOVERY_DELAY,
              help="Set the value (0 .. 31536000, as the HTTP API accepts).")
def lostbookierecoverydelay(conf, zk, ledgers_root, sets, get_, set_):
    if get_ == (set_ is not None):
        click.echo("ERROR: exactly one of -g/--get and -s/--set must be specified", err=True)
        sys.exit(EXIT_USAGE)

    async def body(ctx):
        if get_:
            click.echo(f"LostBookieRecoveryDelay value in ZK: {await ops.get_lost_bookie_recovery_delay(ctx)}")
        else:
            value = await ops.set_lost_bookie_recovery_delay(ctx, set_)
            click.echo(f"Successfully set LostBookieRecoveryDelay value in ZK: {value}")
    execute(conf, zk, ledgers_root, sets, body)


@command("queryautorecoverystatus", help="List the ledgers being re-replicated right now.")
@click.option("-v", "--verbose", "-verbose", is_flag=True, help="Also print the ledger size.")
def queryautorecoverystatus(conf, zk, ledgers_root, sets, verbose):
    async def body(ctx):
        items = await ops.query_autorecovery_status(ctx, verbose)
        click.echo("CurrentRecoverLedgerInfo:")
        for it in items:
            line = f"\tLedgerId:{it.ledger_id}\tBookieId:{it.worker}"
            if verbose:
                line += f"\tLedgerSize:{it.length if it.length is not None else '?'}"
            click.echo(line)
        if not items:
            click.echo("\t No Ledger is being recovered.")
    execute(conf, zk, ledgers_root, sets, body)


@command("forceauditchecks", help="Reset the last run time of auditor checks; they run after the next auditor start.")
@click.option("-calc", "--checkallledgerscheck", "-checkallledgerscheck", is_flag=True, help="Force checkAllLedgers.")
@click.option("-ppc", "--placementpolicycheck", "-placementpolicycheck", is_flag=True, help="Force placementPolicyCheck.")
@click.option("-rc", "--replicascheck", "-replicascheck", is_flag=True, help="Force replicasCheck.")
def forceauditchecks(conf, zk, ledgers_root, sets, checkallledgerscheck, placementpolicycheck, replicascheck):
    async def body(ctx):
        done = await ops.force_audit_checks(ctx, checkallledgerscheck, placementpolicycheck, replicascheck)
        names = {"checkallledgers": "CheckAllLedgersCTime", "placementpolicycheck": "PlacementPolicyCheckCTime",
                 "replicascheck": "ReplicasCheckCTime"}
        for which, ms in done.items():
            ts = _dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            click.echo(f"Resetting {names[which]} to : {ts}")
        click.echo("The current auditor must be REBOOTED for the checks to run now.")
    execute(conf, zk, ledgers_root, sets, body)


# -- the cluster at a glance, heal history (ours) ---------------------------------------------------------
def print_overview(doc: dict, as_json: bool) -> None:
    """The overview document as JSON (one line) or the ``ceph -s``-like layout."""
    from autorecovery.audit import overview as O

    click.echo(_json.dumps(doc) if as_json else O.format_overview(doc))


@command("overview", help="The cluster at a glance, as `ceph -s` is for Ceph: auditor, bookies up/down/read-only/in "
                          "maintenance, under-replicated ledgers and bytes, in progress, blocked, heal rate and ETA, "
                          "last checks, heal episodes (ours; from any node).")
@click.option("--json", "as_json", is_flag=True, help="Print the document as JSON, on one line.")
def overview_cmd(conf, zk, ledgers_root, sets, as_json):
    async def body(ctx):
        from autorecovery.admin import ops_overview

        print_overview(await ops_overview.overview(ctx), as_json)
    execute(conf, zk, ledgers_root, sets, body)


@command("history", help="Heal episodes, newest first: what was marked, healed, how long it took, who healed it "
                         "(ours; kept in ZooKeeper, so any node shows them).")
@click.option("--json", "as_json", is_flag=True, help="Print {\"episodes\": [...], \"errors\": [...]} as JSON, oldest first.")
@click.option("-n", "--limit", default=None, type=click.IntRange(min=1), metavar="N", help="Only the newest N episodes.")
def history_cmd(conf, zk, ledgers_root, sets, as_json, limit):
    async def body(ctx):
        import time

        from autorecovery.admin import ops_overview
        from autorecovery.audit import overview as O

        listing = await ops_overview.history(ctx, limit)
        now = int(time.time() * 1000)
        items = [e.as_dict(now) for e in listing.episodes]
        for err in listing.errors:
            click.echo(f"ERROR: {err}", err=True)
        if as_json:
            click.echo(_json.dumps({"episodes": items, "errors": listing.errors}))
        else:
            click.echo(O.format_history(items, now))
    execute(conf, zk, ledgers_root, sets, body)
