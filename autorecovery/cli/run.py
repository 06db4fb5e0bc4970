"""``autorecovery run -c bk_server.conf``: the AutoRecovery daemon (upstream ``bin/bookkeeper autorecovery``).

Configuration precedence: the file, then ``BK_<key>`` environment variables, then flags. The process
prints ``AUTORECOVERY_READY bookie_id=<id> http=<addr:port>`` on stdout once every role runs; logs go
to stderr (JSON lines unless stderr is a TTY). SIGTERM/SIGINT stop it gracefully within
``shutdownTimeoutSeconds``.

Exit codes (docs/operators.md, "Exit codes"): 0 clean stop; 1 start failure or a role died; 2
configuration error (a bad value, an unknown key, a refused key, a user not in
``permittedStartupUsers``); 3 ZooKeeper session expired with ``sessionRejoinEnabled=false``.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
from collections.abc import Callable

import click

from autorecovery import logs
from autorecovery.cli.config import EXIT_CONFIG, location_options, settings_from_cli
from autorecovery.errors import AutoRecoveryError, ConfigError


def _current_user() -> str:
    """The login name of this process (``getpass.getuser``), or ``uid <n>`` when it has none."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid without a passwd entry (containers)
        return f"uid {os.getuid()}"


def startup_user_refusal(permitted: str | None, user: Callable[[], str]) -> str | None:
    """Upstream ``permittedStartupUsers``: None when the user ``user()`` names may start the daemon,
    else the error line naming the user and the key.

    ``permitted`` is the key's comma-separated value (blanks around names ignored); unset or empty
    permits every user, as upstream (``user`` is then not called).
    """
    names = [n.strip() for n in (permitted or "").split(",") if n.strip()]
    if not names:
        return None
    who = user()
    if who in names:
        return None
    return (f"user {who!r} is not in permittedStartupUsers={','.join(names)}: refusing to start "
            f"(run as one of them, or add the user to the key)")


@click.command("run")
@location_options
@click.option("--bookie-id", default=None, help="This node's id in the election (bookieId).")
@click.option("--http-port", type=int, default=None, help="httpServerPort (0 = any free port).")
@click.option("--http-address", default=None, help="httpServerHost (default 127.0.0.1).")
@click.option("--log-level", default=None, help="logLevel: DEBUG, INFO, WARNING, ERROR.")
@click.option("--log-format", type=click.Choice(["auto", "json", "console"]), default=None, help="logFormat.")
def run(conf, zk, ledgers_root, sets, bookie_id, http_port, http_address, log_level, log_format) -> None:
    """Run the Auditor election and a ReplicationWorker (AutoRecoveryMain)."""
    try:
        settings = settings_from_cli(conf, zk, ledgers_root, sets, extra={
            "bookieId": bookie_id, "httpServerPort": http_port, "httpServerHost": http_address,
            "logLevel": log_level, "logFormat": log_format})
    except ConfigError as exc:
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    refusal = startup_user_refusal(settings.get("permittedStartupUsers"), _current_user)
    if refusal:
        click.echo(f"ERROR: {refusal}", err=True)
        sys.exit(EXIT_CONFIG)
    logs.configure(settings.log_level, settings.log_format)
    log = logs.get_logger("autorecovery.run")
    for w in settings.warnings:
        log.warning(w)
    if settings.ignored:  # accepted for compatibility: said once, never silent (issue 10)
        log.info("configuration keys accepted with no effect here (see `autorecovery config keys --no-effect`)",
                 keys=list(settings.ignored))

    from autorecovery.cli.config import validate_roles

    errors = validate_roles(settings)
    if errors:
        for e in errors:
            log.error("invalid configuration", error=e)
        click.echo("ERROR: invalid configuration:\n  " + "\n  ".join(errors), err=True)
        sys.exit(EXIT_CONFIG)

    from autorecovery.daemon import EXIT_ROLE_DIED, Daemon
    from autorecovery.malloc import tune_malloc

    tuned = tune_malloc()  # the worker's copies through itself churn the same buffers as a bookie
    log.info("allocator tuned for entry buffers" if tuned else "allocator left as configured", **(tuned or {}))

    async def main() -> int:
        return await Daemon(settings).run()

    try:
        code = asyncio.run(main())
    except ConfigError as exc:
        log.error("invalid configuration", error=str(exc))
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    except (AutoRecoveryError, OSError) as exc:
        log.error("autorecovery failed to start", error=str(exc))
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_ROLE_DIED)
    sys.exit(code)
