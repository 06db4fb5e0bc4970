"""``autorecovery shell recover`` and ``decommissionbookie``: re-replicate the data of bookies (upstream
names and options), with progress on stderr and ``recover --query`` / ``--dryrun`` reports.
"""

from __future__ import annotations

import functools
import sys
import time

import click

from autorecovery.admin import ops
from autorecovery.admin.decommission import decommission_bookie
from autorecovery.admin.recover import recover_bookies
from autorecovery.cli import formatting as fmt
from autorecovery.cli import params as P
from autorecovery.cli.shell_group import command
from autorecovery.cli.shell_run import EXIT_FAIL, CommandFailed, execute
from autorecovery.config.keys.model import INT_MAX, INT_MIN


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
        execute(conf, zk, ledgers_root, sets, functools.partial(_query, sources))
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

        started_ms = int(time.time() * 1000)
        try:
            report = await recover_bookies(
                ctx, sources, dry_run=dry_run, targets=target_list, ledger=ledger, skip_open_ledgers=skip_open,
                rate_bytes_per_s=rate, delete_cookie=delete_cookie, skip_unrecoverable=skip_unrecoverable,
                force=True,  # -f or a "Y" at the prompt: the operator confirmed (a running source is a migration)
                lock_wait_s=lock_wait, on_progress=None if dry_run else printer, on_ledger=on_ledger)
        finally:
            printer.end_line()
        from autorecovery.admin import ops_overview

        await ops_overview.record_recover(ctx, report, started_ms)  # heal history (ours); never raises
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
    execute(conf, zk, ledgers_root, sets, body)


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
    execute(conf, zk, ledgers_root, sets, body)


from autorecovery.cli import shell_drain  # noqa: E402,F401  (drain: registers itself on the group)
