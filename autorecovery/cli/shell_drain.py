"""``autorecovery shell drain -bookieid ID`` (ours; BP-56): move every closed segment off a running
bookie, copy first and ensemble change second (:mod:`autorecovery.admin.drain`); ``--dry-run`` prints
the plan, ``--status`` the drain record, ``--cancel`` stops the running drain.
"""

from __future__ import annotations

import json
import sys

import click

from autorecovery.admin import drain as dr
from autorecovery.cli import formatting as fmt
from autorecovery.cli import params as P
from autorecovery.cli.shell_group import command
from autorecovery.cli.shell_run import CommandFailed, execute
from autorecovery.config.keys.model import INT_MAX, INT_MIN


@command("drain", help="Move every closed ledger segment off a running bookie (BP-56), copying before the "
                       "metadata changes, so it can then be stopped and decommissioned with nothing to copy.")
@click.option("-bookieid", "--bookieid", default=None, help="Bookie to drain (default: this node's bookieId).")
@click.option("--dry-run", "-dr", "dry_run", is_flag=True, help="Print the plan (segment, replacement, bytes, ETA); change nothing.")
@click.option("--status", "show_status", is_flag=True, help="Print the drain record (JSON) and exit.")
@click.option("--cancel", "do_cancel", is_flag=True, help="Cancel the running drain (stops between two segments).")
@click.option("-rate", "--rate", "rate", default=None, type=P.integer("rate", INT_MIN, INT_MAX, "bytes/s"),
              metavar="BYTES_PER_S", help="Copy throttle in bytes/s (default replicationRateByBytes; <= 0 unlimited).")
@click.option("--timeout", type=P.seconds("timeout"), default=None, metavar="SECONDS",
              help="Stop waiting for open ledgers after this long (the drain stays resumable).")
@click.option("--poll", type=P.seconds("poll"), default=1.0, show_default=True,
              help="Seconds between re-plans while open ledgers wait for their writer.")
def drain(conf, zk, ledgers_root, sets, bookieid, dry_run, show_status, do_cancel, rate, timeout, poll):
    async def body(ctx):
        if show_status:
            doc = await dr.status(ctx)
            click.echo(json.dumps(doc, indent=2, sort_keys=True) if doc is not None else "No drain was started")
            return
        if do_cancel:
            doc = await dr.cancel(ctx)
            click.echo(f"Drain of {doc.get('bookie_id')} {doc['state']}")
            return
        target = bookieid or ctx.settings.bookie_id
        if dry_run:
            plan = await dr.make_plan(ctx, target)
            for line in dr.plan_text(plan, dr.rate_for(ctx, rate)):
                click.echo(line)
            if plan.blocked:
                raise CommandFailed(f"drain of {plan.bookie_id} would be refused: {len(plan.blocked)} ledger(s) "
                                    "have no placement-adhering replacement")
            return

        def printer(p) -> None:
            sys.stderr.write(fmt.progress_line(p) + "\n")

        report = await dr.drain_bookie(ctx, target, rate_bytes_per_s=rate, poll_s=poll, timeout_s=timeout,
                                       on_progress=printer)
        click.echo(f"Drained {report.bookie_id}: {report.segments_moved} segment(s) moved, "
                   f"{report.bytes_copied} bytes copied in {report.elapsed_s:.1f} s")
        if report.done:
            click.echo(f"No ledger names {report.bookie_id} any more: it can be stopped and decommissioned "
                       "with nothing to copy")
            return
        for lid in report.waiting_open:
            click.echo(f"  ledger {lid}: open; moved once its writer closes it")
        for lid, why in sorted(report.blocked.items()):
            click.echo(f"  ledger {lid}: {why}")
        raise CommandFailed(f"drain of {report.bookie_id} not finished: {len(report.waiting_open)} open and "
                            f"{len(report.blocked)} blocked ledger(s) left; run the same drain again to resume")
    execute(conf, zk, ledgers_root, sets, body)
