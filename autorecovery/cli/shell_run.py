"""How one ``autorecovery shell`` command runs: the cluster-location options, the settings they give,
and :func:`execute` (open the cluster, run the command body, map errors to messages and exit codes).

Exit codes: 0 success; 1 the operation failed; 2 bad usage or bad configuration. Every failure prints
``ERROR: <what and why>`` on stderr. The shell group and its commands: :mod:`autorecovery.cli.shell`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

import click

from autorecovery import logs
from autorecovery.admin import ops
from autorecovery.cli.audit import audit_entry
from autorecovery.cli.config import settings_from_cli
from autorecovery.errors import AutoRecoveryError, ConfigError

EXIT_FAIL, EXIT_USAGE = 1, 2


class CommandFailed(Exception):
    """A command ended unsuccessfully after printing its own output; carries the exit code."""

    def __init__(self, message: str = "", code: int = EXIT_FAIL) -> None:
        super().__init__(message)
        self.code = code


# -- plumbing -------------------------------------------------------------------------------------------
def shell_location(f: Callable, conf_short: bool = True, set_alias: bool = True) -> Callable:
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


def shell_settings(conf, zk, ledgers_root, sets):
    """The settings for a command: its own location options over the group's (``shell --zk ... CMD``).

    Raises:
        ConfigError: a bad configuration file, key or value.
    """
    parent = click.get_current_context().find_object(dict) or {}
    return settings_from_cli(conf or parent.get("conf"), zk or parent.get("zk"),
                             ledgers_root or parent.get("ledgers_root"),
                             tuple(parent.get("sets", ())) + tuple(sets or ()))


def execute(conf, zk, ledgers_root, sets, body: Callable[[ops.AdminContext], Awaitable[int | None]]) -> None:
    """Load settings, open the cluster, run ``body``, map errors to messages and exit codes."""
    try:
        settings = shell_settings(conf, zk, ledgers_root, sets)
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
