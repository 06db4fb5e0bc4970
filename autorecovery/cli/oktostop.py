"""``autorecovery shell oktostop -bookieid ID [--for S] [--wait S --open-window]`` (ours; see
``admin.oktostop``).

Exit codes (for a Kubernetes preStop hook or an upgrade script): 0 ok to stop (and, with
``--open-window``, the window is open); 3 not ok to stop (the blocking ledgers are named); 1 could not
tell (ZooKeeper unreachable, no cluster); 2 bad usage (an unknown bookie id, a bad ``--for``).
"""

from __future__ import annotations

import getpass
import json
import socket
import sys

import click

from autorecovery.admin import oktostop as ots
from autorecovery.admin.op_context import BadRequestError
from autorecovery.cli import params as P
from autorecovery.cli.shell_group import shell
from autorecovery.cli.shell_run import EXIT_USAGE, execute, shell_location

EXIT_OK, EXIT_NOT_OK = 0, 3


def _for(value):
    try:
        return ots.check_for(value, "--for")
    except BadRequestError as exc:
        raise ValueError(str(exc)) from None


FOR = P.Checked(_for, "duration")


@shell.command("oktostop", help="Is it safe to stop this bookie now? Exit 0: yes (every fragment keeps its ack "
                                "quorum readable); 3: no (names the ledgers that block); 1: could not tell. "
                                "With --open-window: wait up to --wait s for a yes, then open an auto-closing "
                                "maintenance window for --for s (the planned-stop hook). Ours.")
@shell_location
@click.option("-bookieid", "--bookieid", "bookieid", required=True, help="The bookie id host:port.")
@click.option("--for", "for_s", default=None, type=FOR, help="Planned downtime: 600, 90s, 10m, 2h (1 s .. 365 days).")
@click.option("--wait", "wait_s", default="0", show_default=True, type=P.seconds("--wait", allow_zero=True),
              help="With --open-window: how long to wait for a yes (s).")
@click.option("--open-window", is_flag=True, help="When the answer is yes, open a maintenance window for --for s "
                                                  "that closes by itself once the bookie is back with its ledgers "
                                                  "whole (a mutation: audited).")
@click.option("--reason", default="planned restart (oktostop --open-window)", show_default=True,
              help="The window's reason (shown to every operator).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def oktostop(conf, zk, ledgers_root, sets, bookieid, for_s, wait_s, open_window, reason, as_json):
    if open_window and for_s is None:
        click.echo("ERROR: --open-window needs --for (how long the bookie stays down)", err=True)
        sys.exit(EXIT_USAGE)

    async def body(ctx):
        if open_window:
            assert for_s is not None
            try:
                who = getpass.getuser()
            except (KeyError, OSError):
                who = "unknown"
            d, w = await ots.prestop(ctx, bookieid, for_s=for_s, wait_s=float(wait_s), reason=reason,
                                     by=f"{who}@{socket.gethostname()}")
        else:
            d, w = await ots.answer(ctx, bookieid, for_s), None
        if as_json:
            click.echo(json.dumps(d, indent=2, sort_keys=True))
        else:
            click.echo(d["summary"])
            for lid, why in d["blocking_detail"].items():
                click.echo(f"  ledger {lid}: {why}")
            if w is not None:
                click.echo(f"Maintenance window on bookie {w.target} for {for_s} s (closes by itself once it is back)"
                           + ("" if d.get("acked") else "; no auditor has loaded it yet"))
        return EXIT_OK if d["ok"] else EXIT_NOT_OK
    execute(conf, zk, ledgers_root, sets, body)
