"""The ``autorecovery shell`` click group, the :func:`command` decorator its sub-commands register with,
and ``shell help [COMMAND]``. The commands themselves live in ``cli/shell_*.py`` modules, gathered by
:mod:`autorecovery.cli.shell`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click

from autorecovery.cli.config import parse_sets
from autorecovery.cli.shell_run import EXIT_USAGE, shell_location


def command(name: str, conf_short: bool = True, set_alias: bool = True, **kw: Any):
    """A shell sub-command with the location options; the function receives them first.
    ``conf_short=False`` leaves ``-c`` to the command (``listunderreplicated -c`` = count, upstream);
    ``set_alias=False`` leaves ``--set`` to it (``lostbookierecoverydelay --set N``, upstream)."""
    def deco(f: Callable) -> Callable:
        @functools.wraps(f)
        def wrapper(conf, zk, ledgers_root, sets, **opts):
            return f(conf, zk, ledgers_root, sets, **opts)
        return shell.command(name, **kw)(shell_location(wrapper, conf_short, set_alias))
    return deco


@click.group("shell", context_settings={"help_option_names": ["-h", "--help"]})
@shell_location
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO on stderr (default WARNING).")
@click.pass_context
def shell(ctx: click.Context, conf, zk, ledgers_root, sets, verbose) -> None:
    """Admin commands on a BookKeeper cluster (upstream bookkeeper shell names and options)."""
    parse_sets(sets)  # fail fast on a malformed -D
    ctx.obj = {"conf": conf, "zk": zk, "ledgers_root": ledgers_root, "sets": sets, "verbose": verbose}


# -- help --------------------------------------------------------------------------------------------------
@shell.command("help", help="Describe the usage of this program or its subcommands.")
@click.argument("command_name", required=False, metavar="[COMMAND]")
@click.pass_context
def help_cmd(ctx: click.Context, command_name: str | None) -> None:
    """Upstream ``bookkeeper shell help [COMMAND]``: the shell's usage, or one command's."""
    group_ctx = ctx.parent
    if group_ctx is None:  # help runs under the shell group, which is always its parent
        raise click.UsageError("help must run under the shell group")
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
