"""``autorecovery shell initnewcluster``: format a new cluster's metadata (upstream
``bookkeeper shell initnewcluster``), registered on the shell group.

Creates exactly what upstream 4.17 creates (``ZKRegistrationManager.initNewCluster``): the ledgers
root, ``available/``, ``available/readonly/`` and ``INSTANCEID`` in one transaction, then ``LAYOUT``;
``cookies/`` and the under-replication tree are created where first needed, as upstream
(:func:`autorecovery.zk.ledgers.init_cluster`). A formatted cluster is refused ("Ledger root path: ...
already exists", exit 1). The ledger manager written to ``LAYOUT`` is the one the configuration names
(``metadataServiceUri`` ``zk+longhierarchical://...``, ``ledgerManagerFactoryClass``,
``ledgerManagerType``), hierarchical by default, as upstream. ``--if-absent`` (ours) turns "already
formatted" into success, so a deployment's init step (docker-compose ``init`` service, Kubernetes Job)
can run on every start: nothing that exists is overwritten.
"""

from __future__ import annotations

import asyncio
import sys

import click

from autorecovery import logs
from autorecovery.cli.params import FiniteFloatRange
from autorecovery.cli.shell_group import command
from autorecovery.cli.shell_run import EXIT_FAIL, EXIT_USAGE, shell_settings
from autorecovery.config.keys.model import YEAR_S
from autorecovery.errors import CompatibilityError, ConfigError, ZooKeeperError
from autorecovery.ledger.layout import HIERARCHICAL
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledgers import init_cluster
from autorecovery.zk.paths import Paths


@command("initnewcluster", help="Initialise a new cluster's metadata (LAYOUT, INSTANCEID, available/, "
                                "available/readonly/: what upstream creates).")
@click.option("--if-absent", is_flag=True,
              help="(ours) succeed without changes when the cluster is already formatted.")
@click.option("--timeout", "timeout_s", default=60.0, show_default=True, type=FiniteFloatRange(1, YEAR_S),
              help="Seconds to wait for ZooKeeper (an init container may start before it).")
def initnewcluster(conf, zk, ledgers_root, sets, if_absent, timeout_s):
    try:
        settings = shell_settings(conf, zk, ledgers_root, sets)
    except ConfigError as exc:
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    logs.configure("WARNING", settings.log_format, stream=sys.stderr)
    paths = Paths(settings.ledgers_root)

    async def go() -> bool:
        client = ZkClient.from_settings(settings)
        await client.start(timeout_s=timeout_s)
        try:
            return await init_cluster(client, paths, settings.ledger_manager or HIERARCHICAL)
        finally:
            await client.stop()

    try:
        formatted = asyncio.run(go())
    except (ZooKeeperError, CompatibilityError) as exc:
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_FAIL)
    if formatted:
        click.echo(f"Successfully initiated cluster at {paths.root}")
        return
    click.echo(f"Ledger root path: {paths.root} already exists")
    if not if_absent:
        sys.exit(EXIT_FAIL)
