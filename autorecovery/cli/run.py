"""``autorecovery run -c bk_server.conf``: the AutoRecovery daemon (upstream ``bin/bookkeeper autorecovery``).

Configuration precedence: the file, then ``BK_<key>`` environment variables, then flags. The process
prints ``AUTORECOVERY_READY bookie_id=<id> http=<addr:port>`` on stdout once every role runs; logs go
to stderr (JSON lines unless stderr is a TTY). SIGTERM/SIGINT stop it gracefully within
``shutdownTimeoutSeconds``.

Exit codes: 0 clean stop; 1 start failure or a role died; 2 bad configuration; 3 ZooKeeper session
expired with ``sessionRejoinEnabled=false``.
"""

from __future__ import annotations

import asyncio
import sys

import click

from autorecovery import logs
from autorecovery.cli.config import EXIT_CONFIG, location_options, settings_from_cli
from autorecovery.errors import AutoRecoveryError, ConfigError


@click.command("run")
@location_options
@click.option("--bookie-id", default=None, help="This node's id in the election (bookieId).")
@click.option("--http-port", type=int, default=None, help="httpServerPort (0 = any free port).")
@click.option("--http-address", default=None, help="httpServerAddress (default 127.0.0.1).")
@click.option("--log-level", default=None, help="logLevel: DEBUG, INFO, WARNING, ERROR.")
@click.option("--log-format", type=click.Choice(["auto", "json", "console"]), default=None, help="logFormat.")
def run(conf, zk, ledgers_root, sets, bookie_id, http_port, http_address, log_level, log_format) -> None:
    """Run the Auditor election and a ReplicationWorker (AutoRecoveryMain)."""
    try:
        settings = settings_from_cli(conf, zk, ledgers_root, sets, extra={
            "bookieId": bookie_id, "httpServerPort": http_port, "httpServerAddress": http_address,
            "logLevel": log_level, "logFormat": log_format})
    except ConfigError as exc:
        click.echo(f"ERROR: {exc}", err=True)
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
