"""``autorecovery shell <command>``: upstream ``bin/bookkeeper shell`` admin commands (same names, same
single-dash options, same output wording) plus ours (``placementcheck``).

Every command takes the cluster location before or after its name: ``-c/-conf/--conf bk_server.conf``
(``listunderreplicated`` keeps upstream's ``-c`` = count: ``--conf`` there), ``--zk
host:port[,host:port][/chroot]``, ``--ledgers-root /ledgers``, ``-D/--define key=value`` (``--set`` too,
except on ``lostbookierecoverydelay`` where it is upstream's setter) and ``BK_<key>`` environment
variables. Upstream's options take one or two dashes, as upstream's commons-cli parser does
(``-ledgerid``/``--ledgerid``/``-l``). ``help [COMMAND]`` prints the usage. Output goes to stdout in
upstream's wording (bookies as ``BookieID:<id>, IP:<ip>, Port:<port>, Hostname:<name>``); logs and
progress to stderr. Deviations from upstream: docs/operators.md, "Compatibility with upstream".

Exit codes: 0 success; 1 the operation failed (no auditor, missing ledger, ZooKeeper unreachable,
recovery failed, decommission timed out...); 2 bad usage (bad bookie or ledger id, bad option values,
bad configuration). Every failure prints ``ERROR: <what and why>`` on stderr.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import functools
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import click

from autorecovery import logs
from autorecovery.admin import ops
from autorecovery.admin.decommission import decommission_bookie
from autorecovery.admin.recover import recover_bookies
from autorecovery.cli import formatting as fmt
from autorecovery.cli.audit import audit_entry
from autorecovery.cli import params as P
from autorecovery.admin.http import readable_bytes
from autorecovery.cli.config import parse_sets, settings_from_cli
from autorecovery.config.keys import INT_MAX, INT_MIN
from autorecovery.errors import AutoRecoveryError, ConfigError

EXIT_FAIL, EXIT_USAGE = 1, 2


class CommandFailed(Exception):
    """A command ended unsuccessfully after printing its own output; carries the exit code."""

    def __init__(self, message: str = "", code: int = EXIT_FAIL) -> None:
        super().__init__(message)
        self.code = code


# -- plumbing -------------------------------------------------------------------------------------------
def _location(f: Callable, conf_short: bool = True, set_alias: bool = True) -> Callable:
    """Add the cluster-location options. ``-D/--define KEY=VALUE`` sets a key; ``--set`` is kept as an
    older spelling except where the command has upstream's own ``--set`` (``lostbookierecoverydelay``).
    ``-c``/``-conf``/``--conf`` name the configuration file (``-conf`` is upstream's ``bookkeeper shell``
    spelling); ``conf_short=False`` leaves ``-c`` to the command."""
    d_names = ("-D", "--define", "--set") if set_alias else ("-D", "--define")
    f = click.option(*d_names, "sets", multiple=True, metavar="KEY=VALUE",
                     help="Set a configuration key (repeatable).")(f)
    f = click.option("--ledgers-root", default=None, help="zkLedgersRootPath (default /ledgers).")(f)
    f = click.option("--zk", default=None, help="ZooKeeper connect string (zkServers).")(f)
    names = ("-c", "-conf", "--conf") if conf_short else ("-conf", "--conf")
    f = click.option(*names, "conf", type=click.Path(dir_okay=False), default=None, help="bk_server.conf.")(f)
    return f


def _settings(conf, zk, ledgers_root, sets):
    parent = click.get_current_context().find_object(dict) or {}
    return settings_from_cli(conf or parent.get("conf"), zk or parent.get("zk"),
                             ledgers_root or parent.get("ledgers_root"),
                             tuple(parent.get("sets", ())) + tuple(sets or ()))


def _execute(conf, zk, ledgers_root, sets, body: Callable[[ops.AdminContext], Awaitable[int | None]]) -> None:
    """Load settings, open the cluster, run ``body``, map errors to messages and exit codes."""
    try:
        settings = _settings(conf, zk, ledgers_root, sets)
    except ConfigError as exc:
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    parent = click.get_current_context().find_object(dict) or {}
    level = "INFO" if parent.get("verbose") else "WARNING"
    logs.configure(level, settings.log_format, stream=sys.stderr)
    for w in settings.warnings:
        click.echo(f"WARNING: {w}", err=True)

    async def go() -> int | None:
        async with ops.open_admin(settings) as ctx:
            return await body(ctx)

    audit = audit_entry(settings)
    code: int | None = EXIT_FAIL
    try:
        code = asyncio.run(go())
    except CommandFailed as exc:
        code = exc.code
        if str(exc):
            click.echo(f"ERROR: {exc}", err=True)
        sys.exit(exc.code)
    except (ops.BadRequestError, ConfigError) as exc:
        code = EXIT_USAGE
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except AutoRecoveryError as exc:
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_FAIL)
    except KeyboardInterrupt:
        code = 130
        click.echo("ERROR: interrupted", err=True)
        sys.exit(130)
    finally:
        if audit is not None:
            audit(code or 0)
    sys.exit(code or 0)


def command(name: str, conf_short: bool = True, set_alias: bool = True, **kw: Any):
    """A shell sub-command with the location options; the function receives them first.
    ``conf_short=False`` leaves ``-c`` to the command (``listunderreplicated -c`` = count, upstream);
    ``set_alias=False`` leaves ``--set`` to it (``lostbookierecoverydelay --set N``, upstream)."""
    def deco(f: Callable) -> Callable:
        @functools.wraps(f)
        def wrapper(conf, zk, ledgers_root, sets, **opts):
            return f(conf, zk, ledgers_root, sets, **opts)
        return shell.command(name, **kw)(_location(wrapper, conf_short, set_alias))
    return deco


@click.group("shell", context_settings={"help_option_names": ["-h", "--help"]})
@_location
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO on stderr (default WARNING).")
@click.pass_context
def shell(ctx: click.Context, conf, zk, ledgers_root, sets, verbose) -> None:
    """Admin commands on a BookKeeper cluster (upstream bookkeeper shell names and options)."""
    parse_sets(sets)  # fail fast on a malformed -D
    ctx.obj = {"conf": conf, "zk": zk, "ledgers_root": ledgers_root, "sets": sets, "verbose": verbose}


# -- listunderreplicated ------------------------------------------------------------------------------
@command("listunderreplicated", conf_short=False, help="List ledgers marked as under-replicated, optionally filtered by missing replica.")
@click.option("-mr", "--missingreplica", "-missingreplica", default=None, help="Only ledgers whose missing replicas include this bookie.")
@click.option("-emr", "--excludingmissingreplica", "-excludingmissingreplica", default=None, help="Skip ledgers missing this bookie.")
@click.option("-pmr", "--printmissingreplica", "-printmissingreplica", is_flag=True, help="Print the missing replicas.")
@click.option("-prw", "--printreplicationworkerid", "-printreplicationworkerid", is_flag=True, help="Print the worker holding the lock.")
@click.option("-c", "--onlydisplayledgercount", "-onlydisplayledgercount", is_flag=True,
              help="Only print the count (upstream's -c; pass the configuration with --conf here).")
@click.argument("stray", nargs=-1, required=False, metavar="")
def listunderreplicated(conf, zk, ledgers_root, sets, missingreplica, excludingmissingreplica,
                        printmissingreplica, printreplicationworkerid, onlydisplayledgercount, stray):
    if stray:
        hint = (" (-c is upstream's --onlydisplayledgercount here; give the configuration file with --conf)"
                if onlydisplayledgercount else "")
        click.echo(f"ERROR: listunderreplicated takes no arguments, got {' '.join(stray)!r}{hint}", err=True)
        sys.exit(EXIT_USAGE)
    async def body(ctx):
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
    _execute(conf, zk, ledgers_root, sets, body)


# -- auditor / switches -------------------------------------------------------------------------------------
@command("whoisauditor", help="Print the bookie id of the current auditor.")
def whoisauditor(conf, zk, ledgers_root, sets):
    async def body(ctx):
        auditor = await ops.who_is_auditor(ctx)
        if auditor is None:
            click.echo("No auditor elected")
            raise CommandFailed("no auditor elected: no autorecovery daemon is running")
        click.echo(f"Auditor: {auditor}")
    _execute(conf, zk, ledgers_root, sets, body)


@command("triggeraudit", help="Force an audit by resetting the lostBookieRecoveryDelay.")
def triggeraudit(conf, zk, ledgers_root, sets):
    async def body(ctx):
        delay = await ops.trigger_audit(ctx)
        click.echo(f"Resetting LostBookieRecoveryDelay value: {delay}, to kickstart audit task")
    _execute(conf, zk, ledgers_root, sets, body)


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
    _execute(conf, zk, ledgers_root, sets, body)


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
    _execute(conf, zk, ledgers_root, sets, body)


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
    _execute(conf, zk, ledgers_root, sets, body)


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
    _execute(conf, zk, ledgers_root, sets, body)


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
    _execute(conf, zk, ledgers_root, sets, body)


@command("clusterinfo", help="Cluster summary (auditor, under-replication, bookie counts): upstream's header "
                             "line then its JSON.")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON, on one line (ours).")
def clusterinfo(conf, zk, ledgers_root, sets, as_json):
    async def body(ctx):
        info = await ops.cluster_info(ctx)
        if as_json:
            click.echo(json.dumps(info))
            return
        click.echo("--------- Cluster Info ---------")
        click.echo(jackson_pretty(info))
    _execute(conf, zk, ledgers_root, sets, body)


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
    _execute(conf, zk, ledgers_root, sets, body)


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
                with open(dump_to, "wb") as fh:
                    fh.write(data)
            except OSError as exc:
                raise CommandFailed(f"cannot write {dump_to}: {exc.strerror}") from None
            return
        if restore_from:
            try:
                with open(restore_from, "rb") as fh:
                    data = fh.read()
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
    _execute(conf, zk, ledgers_root, sets, body)


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
    _execute(conf, zk, ledgers_root, sets, body)


# -- progress rendering -------------------------------------------------------------------------------------
class _ProgressPrinter:
    """Progress on stderr: a rewriting line on a TTY, else at most one line every ``every_s`` seconds."""

    def __init__(self, every_s: float = 2.0) -> None:
        self.tty = sys.stderr.isatty()
        self.every_s = every_s
        self._last = 0.0
        self._width = 0
        self._open = False  # a rewriting line is on the terminal without its newline

    def __call__(self, p: ops.OpProgress) -> None:
        now = time.monotonic()
        final = p.phase == "done"
        if not self.tty and not final and now - self._last < self.every_s:
            return
        self._last = now
        line = fmt.progress_line(p)
        if self.tty:
            pad = " " * max(0, self._width - len(line))
            sys.stderr.write("\r" + line + pad + ("\n" if final else ""))
            self._width = len(line)
            self._open = not final
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def end_line(self) -> None:
        """End the rewriting line if it is still open, so that what is printed next (a result, a ledger's
        outcome, an error) starts on a line of its own (issue 28: the decommission result was glued to
        the bar). A no-op when nothing is open and off a terminal."""
        if self._open:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._open = False


# -- recover ------------------------------------------------------------------------------------------------
@command("recover", help="Re-replicate the data of bookies (BOOKIES: host:port[,host:port]).")
@click.argument("bookies")
@click.argument("ignored_dest", required=False, metavar="")
@click.option("-q", "--query", "-query", is_flag=True,
              help="Only list the ledgers that contain the bookies, ensemble by ensemble (upstream's query).")
@click.option("-dr", "--dryrun", "-dryrun", "--dry-run", "dry_run", is_flag=True,
              help="Print the plan; change nothing.")
@click.option("-f", "--force", "-force", is_flag=True, help="Do not ask for confirmation.")
@click.option("-l", "--ledger", "-ledger", default=None, type=P.LEDGER_ID, help="Recover only this ledger.")
@click.option("-sk", "--skipOpenLedgers", "-skipOpenLedgers", "--skip-open-ledgers", "skip_open", is_flag=True,
              help="Leave open ledgers alone.")
@click.option("-d", "--deleteCookie", "-deleteCookie", "--delete-cookie", "delete_cookie", is_flag=True,
              help="Delete the bookies' cookies after a successful recovery.")
@click.option("-sku", "--skipUnrecoverableLedgers", "-skipUnrecoverableLedgers", "--skip-unrecoverable-ledgers",
              "skip_unrecoverable",
              is_flag=True, help="Report unrecoverable ledgers as skipped instead of failing.")
@click.option("-rate", "--replicationRate", "-replicationRate", "--rate", "rate", default=None,
              type=P.integer("replicationRate", INT_MIN, INT_MAX, "bytes/s"),
              metavar="BYTES_PER_S", help="Copy throttle in bytes/s (default replicationRateByBytes; <= 0 unlimited).")
@click.option("--target", "targets", default=None, metavar="BOOKIE[,BOOKIE]",
              help="Copy to these bookies instead of the placement policy's choice.")
@click.option("--lock-wait", type=P.seconds("lock-wait", allow_zero=True), default=60.0, show_default=True,
              help="Seconds to wait for ledgers a ReplicationWorker holds (0 .. 31536000).")
def recover(conf, zk, ledgers_root, sets, bookies, ignored_dest, query, dry_run, force, ledger, skip_open,
            delete_cookie, skip_unrecoverable, rate, targets, lock_wait):
    sources = [b.strip() for b in bookies.split(",") if b.strip()]
    target_list = [t.strip() for t in targets.split(",") if t.strip()] if targets else None
    if ignored_dest:
        click.echo(f"The provided bookie dest {ignored_dest} will be ignored!", err=True)
    if query:
        _execute(conf, zk, ledgers_root, sets, functools.partial(_query, sources))
        return
    if not dry_run and not force:
        click.echo(f"Bookies : {sources}", err=True)
        answer = click.prompt("Are you sure to recover them : (Y/N)", default="N", show_default=False,
                              prompt_suffix=" ", err=True)
        if answer.strip().lower() not in ("y", "yes"):
            click.echo("Give up!", err=True)
            sys.exit(EXIT_FAIL)

    printer = _ProgressPrinter()

    async def body(ctx):
        def on_ledger(o):
            if dry_run:
                return
            printer.end_line()
            extra = f": {o.detail}" if o.detail else ""
            click.echo(f"ledger {o.ledger_id}: {o.status}{' (fenced and closed)' if o.fenced else ''}{extra}")

        try:
            report = await recover_bookies(
                ctx, sources, dry_run=dry_run, targets=target_list, ledger=ledger, skip_open_ledgers=skip_open,
                rate_bytes_per_s=rate, delete_cookie=delete_cookie, skip_unrecoverable=skip_unrecoverable,
                force=True,  # -f or a "Y" at the prompt: the operator confirmed (a running source is a migration)
                lock_wait_s=lock_wait, on_progress=None if dry_run else printer, on_ledger=on_ledger)
        finally:
            printer.end_line()
        for w in report.warnings:
            click.echo(f"WARNING: {w}", err=True)
        if dry_run:
            _print_plan(report)
        else:
            ok = sum(1 for o in report.ledgers if o.status == "recovered")
            click.echo(f"Recovered {ok} ledger(s), {len(report.failed)} failed, "
                       f"{sum(1 for o in report.ledgers if o.status == 'skipped')} skipped; "
                       f"{report.bytes_copied} bytes written")
            for b in report.cookies_deleted:
                click.echo(f"Cookie of {b} deleted")
        if report.failed:
            raise CommandFailed("recovery failed for ledger(s) " + ", ".join(str(o.ledger_id) for o in report.failed))
    _execute(conf, zk, ledgers_root, sets, body)


async def _query(sources: list[str], ctx: ops.AdminContext) -> None:
    """``recover -q``: the ledgers whose ensembles name a source, in upstream's (pre-slf4j) layout."""
    ids = {ops.check_bookie_id(b) for b in sources}
    click.echo("NOTE: Bookies in inspection list are marked with '*'.", err=True)
    for lid, md in await ops.ledgers_containing(ctx, ids):
        click.echo(f"ledger {lid} : {md.state.name}")
        summary = []
        for seg in md.segments:
            marks = "".join(f"{b}{'*' if b in ids else ' '} " for b in seg.ensemble)
            click.echo(f"{seg.first_entry_id}:\t{marks}")
            summary.append(f"{seg.first_entry_id}={sum(1 for b in seg.ensemble if b in ids)}, ")
        click.echo(f"summary: [{''.join(summary)}]")
        click.echo("")
    click.echo("Done", err=True)


def _print_plan(report) -> None:
    click.echo(f"Recovery plan for {', '.join(report.sources)} (dry run: nothing is changed)")
    total_bytes = frags = 0
    for o in report.ledgers:
        size = sum(f.bytes for f in o.fragments)
        total_bytes += size
        frags += len(o.fragments)
        status = "" if o.status == "planned" else f" [{o.status}]"
        detail = f" ({o.detail})" if o.detail else ""
        click.echo(f"ledger {o.ledger_id}: {len(o.fragments)} fragment(s), {size} bytes{status}{detail}")
        srcs = set(report.sources)
        for f in o.fragments:
            old = ", ".join(("*" + b) if b in srcs else b for b in f.ensemble)
            new = ", ".join(f.new_ensemble())
            moves = ", ".join(f"{a} -> {b}" for a, b in f.replacements)
            click.echo(f"  entries {f.first}..{f.last}: {f.bytes} bytes; {moves}; "
                       f"read from {', '.join(f.sources) or '(nothing to copy)'}")
            click.echo(f"    ensemble [{old}] -> [{new}]")
            if f.unsourced:
                click.echo(f"    WARNING: {f.unsourced} entries have no readable replica")
    click.echo(f"Total: {len(report.ledgers)} ledger(s), {frags} fragment(s), {total_bytes} bytes to copy")


# -- decommissionbookie ---------------------------------------------------------------------------------------
@command("decommissionbookie", help="Re-replicate everything a shut-down bookie stored, then delete its cookie.")
@click.option("-bookieid", "--bookieid", default=None, help="Bookie to decommission (default: this node's bookieId).")
@click.option("--timeout", type=P.seconds("timeout"), default=None, metavar="SECONDS",
              help="Give up after this long, listing the ledgers that block completion (default: wait forever); "
                   "finite, > 0 and at most a year, as the HTTP API's timeout_s.")
@click.option("--poll", type=P.seconds("poll"), default=1.0, show_default=True,
              help="Seconds between checks (finite, > 0, at most a year).")
def decommissionbookie(conf, zk, ledgers_root, sets, bookieid, timeout, poll):
    async def body(ctx):
        from autorecovery.admin.decommission import DecommissionTimeoutError

        target = bookieid or ctx.settings.bookie_id
        printer = _ProgressPrinter()
        try:
            try:
                report = await decommission_bookie(ctx, target, timeout_s=timeout, poll_s=poll, on_progress=printer)
            finally:
                printer.end_line()  # the result (or the error) on a line of its own, not after the bar
        except DecommissionTimeoutError as exc:
            click.echo(f"Decommission of {exc.bookie_id} did not complete within {timeout:g}s. "
                       f"Ledgers blocking completion:")
            for lid, why in sorted(exc.blocked.items()):
                click.echo(f"  ledger {lid}: {why}")
            raise CommandFailed(f"decommission of {exc.bookie_id} timed out; "
                                f"{len(exc.blocked)} ledger(s) still store data on it") from None
        for w in report.warnings:
            click.echo(f"WARNING: {w}", err=True)
        click.echo(f"The ledgers stored in the given decommissioning bookie: {report.bookie_id} are properly replicated")
        if report.cookie_deleted:
            click.echo(f"Cookie of the decommissioned bookie: {report.bookie_id} is deleted successfully")
    _execute(conf, zk, ledgers_root, sets, body)


# -- help --------------------------------------------------------------------------------------------------
@shell.command("help", help="Describe the usage of this program or its subcommands.")
@click.argument("command_name", required=False, metavar="[COMMAND]")
@click.pass_context
def help_cmd(ctx: click.Context, command_name: str | None) -> None:
    """Upstream ``bookkeeper shell help [COMMAND]``: the shell's usage, or one command's."""
    group_ctx = ctx.parent
    if not command_name:
        click.echo(group_ctx.get_help())
        return
    cmd = shell.get_command(group_ctx, command_name)
    if cmd is None:
        click.echo(f"Unknown command {command_name}", err=True)
        click.echo(group_ctx.get_help(), err=True)
        sys.exit(EXIT_USAGE)
    with click.Context(cmd, info_name=command_name, parent=group_ctx) as sub:
        click.echo(cmd.get_help(sub))


def jackson_pretty(obj: dict[str, Any]) -> str:
    """A flat JSON object as Jackson's default pretty printer writes it (upstream ``JsonUtil.toJson``):
    two-space indent and ``"key" : value``."""
    return json.dumps(obj, indent=2, separators=(",", " : "))


__all__ = ["shell"]


# commands that live in their own modules register themselves on the group when imported
from autorecovery.cli import cluster_init  # noqa: E402,F401  (initnewcluster)
from autorecovery.cli import maintenance as _maintenance  # noqa: E402,F401  (maintenance group)
