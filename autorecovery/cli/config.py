"""``autorecovery config``: validate a bk_server.conf and print the effective configuration.

Also home of the options every command uses to find the cluster (``-c/--conf``, ``--zk``,
``--ledgers-root``, ``-D key=value``) and of :func:`settings_from_cli`, the only place where the CLI
hands ``os.environ`` to the loader.

Exit codes (docs/operators.md, "Exit codes", is the one table): 0 valid and every key that is set takes
effect; 1 valid, but a key that is set yields to another key (``zkServers`` under ``metadataServiceUri``,
``httpServerAddress`` under ``httpServerHost``, a TLS file without its switch) — each listed as a
``WARNING: no effect:`` line, the daemon would start and log the same warnings; 2 configuration error:
a bad value, an unknown or misspelt key, a refused key (every one named on stderr; ``run`` and the shell
refuse the same configuration with exit 2). Keys of :data:`~autorecovery.config.keys.NO_EFFECT_KEYS` are
accepted for compatibility and listed with their reason, never silently.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

import click

from autorecovery.config import keys as K
from autorecovery.config.load import load_settings
from autorecovery.config.settings import Settings
from autorecovery.errors import ConfigError

EXIT_CONFIG = 2
EXIT_IGNORED = 1


def parse_sets(values: Iterable[str]) -> dict[str, str]:
    """``-D key=value`` flags → dict.

    Raises:
        click.BadParameter: naming the flag when it has no ``=``.
    """
    out = {}
    for item in values or ():
        if "=" not in item:
            raise click.BadParameter(f"{item!r}: expected key=value", param_hint="-D/--define")
        k, _, v = item.partition("=")
        out[k.strip()] = v
    return out


def location_options(f: Callable) -> Callable:
    """Decorate a click command with the cluster-location options."""
    f = click.option("-D", "--define", "--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Set a configuration key (overrides the file and BK_<key> env).")(f)
    f = click.option("--ledgers-root", default=None, help="zkLedgersRootPath (default /ledgers).")(f)
    f = click.option("--zk", default=None, help="ZooKeeper connect string (zkServers), e.g. 127.0.0.1:2181.")(f)
    f = click.option("-c", "--conf", type=click.Path(dir_okay=False), default=None,
                     help="bk_server.conf (Java properties, upstream keys).")(f)
    return f


def settings_from_cli(conf: str | None, zk: str | None, ledgers_root: str | None, sets: Iterable[str] = (),
                      extra: dict[str, Any] | None = None, require_metadata: bool = True) -> Settings:
    """Load settings from the file, ``BK_<key>`` env and flags (flags win).

    ``--zk`` replaces any metadataServiceUri from the file or env (the operator pointed somewhere
    explicitly).

    Raises:
        ConfigError: see :func:`autorecovery.config.load.load_settings`.
    """
    overrides = parse_sets(sets)
    if zk:
        overrides["zkServers"] = zk
        overrides.setdefault("metadataServiceUri", "")
    if ledgers_root:
        overrides["zkLedgersRootPath"] = ledgers_root
    for k, v in (extra or {}).items():
        if v is not None:
            overrides[k] = str(v)
    if overrides.get("metadataServiceUri") == "":
        # an explicit --zk drops the URI; the root then comes from zkLedgersRootPath (or the old URI)
        probe = load_settings(conf, env=os.environ, overrides={k: v for k, v in overrides.items()
                                                               if k not in ("metadataServiceUri", "zkServers")},
                              require_metadata=False)
        if "zkLedgersRootPath" not in overrides:
            overrides["zkLedgersRootPath"] = probe.ledgers_root
    return load_settings(conf, env=os.environ, overrides=overrides, require_metadata=require_metadata)


def validate_roles(settings: Settings) -> list[str]:
    """Check what the loader cannot check alone: that the placement policy ``settings.placement``
    names can be built. The auditor, worker and placement sections themselves were built (and their
    values checked) once by :func:`~autorecovery.config.load.load_settings`.

    Returns:
        the errors, each naming the key (empty when the daemon would start).
    """
    from autorecovery.placement import StaticResolver, policy_from_name

    try:
        policy_from_name(settings.placement.ensemble_placement_policy, settings.placement, StaticResolver({}))
    except ConfigError as exc:
        return [str(exc)]
    except ValueError as exc:
        return [f"ensemblePlacementPolicy: {exc}"]
    return []


@click.group("config")
def config() -> None:
    """Check configuration files and list the configuration keys."""


@config.command("check")
@location_options
@click.option("--strict", is_flag=True, hidden=True,
              help="Kept for compatibility: a key that yields to another already makes check exit 1.")
@click.option("--cluster", is_flag=True,
              help="Also read the cluster's LAYOUT (read only) and check the configured ledger manager against it.")
def check(conf: str | None, zk: str | None, ledgers_root: str | None, sets: tuple[str, ...], strict: bool,
          cluster: bool) -> None:
    """Validate the configuration and print the effective value of every key.

    A key that is set but yields to another key is a WARNING line and exit status 1. An unknown or
    misspelt key (with "did you mean"), a refused key and a bad value are configuration errors naming
    the key (exit 2, as ``run`` and the shell). Keys accepted for compatibility that have no effect here
    are listed with their reason.
    With ``--cluster`` it also reads the cluster's ``LAYOUT`` (read only) and fails (exit 2) when the
    configured ledger manager (``metadataServiceUri`` scheme, ``ledgerManagerFactoryClass``,
    ``ledgerManagerType``) is not the one the cluster was formatted with.
    """
    try:
        settings = settings_from_cli(conf, zk, ledgers_root, sets)
    except ConfigError as exc:
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    errors = validate_roles(settings)
    if errors:
        click.echo("ERROR: invalid configuration:\n  " + "\n  ".join(errors), err=True)
        sys.exit(EXIT_CONFIG)
    for w in settings.warnings:
        click.echo(f"WARNING: no effect: {w}", err=True)
    click.echo(f"# effective configuration ({settings.conf_path or 'no file'}; BK_<key> env and flags applied)")
    click.echo(f"# metadata store: {settings.metadata_service_uri}  bookie id: {settings.bookie_id}")
    sec = settings.zk_security
    click.echo(f"# zookeeper: {sec.describe()}")
    st = settings.stats
    click.echo("# prometheus listener: "
               + (f"{st.address}:{st.port}/metrics ({st.reason})" if st.prometheus_enabled else f"off ({st.reason})"))
    for line in settings.effective_lines():
        click.echo(line)
    for name in settings.ignored:
        click.echo(f"# {name}: accepted for compatibility, no effect here: {K.no_effect_reason(name)} "
                   f"[{settings.sources.get(name, '?')}]")
    if cluster:
        _check_against_cluster(settings)
    if settings.warnings:
        sys.exit(EXIT_IGNORED)


def _check_against_cluster(settings: Settings) -> None:
    """``config check --cluster``: read ``LAYOUT`` (nothing is written) and compare the ledger manager.

    Exits 2 on a mismatch or an unsupported layout, 1 when ZooKeeper or the cluster cannot be reached.
    """
    import asyncio

    from autorecovery.errors import CompatibilityError, NoClusterError, ZooKeeperError
    from autorecovery.ledger.layout import require_matches
    from autorecovery.zk.bridge import ZkClient
    from autorecovery.zk.ledgers import read_layout
    from autorecovery.zk.paths import Paths

    async def probe():
        zk = ZkClient.from_settings(settings)
        await zk.start(timeout_s=max(1.0, settings.zk_timeout_ms / 1000.0))
        try:
            paths = Paths(settings.ledgers_root)
            layout = await read_layout(zk, paths)
            require_matches(layout, settings.ledger_manager, settings.ledger_manager_key, paths.layout)
            return layout, paths
        finally:
            await zk.stop()

    try:
        layout, paths = asyncio.run(probe())
    except CompatibilityError as exc:
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    except (ZooKeeperError, NoClusterError) as exc:
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_IGNORED)
    named = f"configured by {settings.ledger_manager_key}" if settings.ledger_manager else "not configured: follows LAYOUT"
    click.echo(f"# cluster: {paths.layout} names {layout.manager_factory}:{layout.manager_version} ({named})")


@config.command("keys")
@click.option("--markdown", is_flag=True, help="Print a Markdown table (what docs/operators.md contains).")
@click.option("--no-effect", "no_effect", is_flag=True,
              help="List the upstream keys accepted for compatibility that have no effect here, with the reason.")
def keys_cmd(markdown: bool, no_effect: bool) -> None:
    """List every configuration key: name, type, unit, default, origin, meaning."""
    if no_effect:
        if markdown:
            click.echo("| keys | why they have no effect here |")
            click.echo("|---|---|")
        for reason, names in K.NO_EFFECT_GROUPS:
            if markdown:
                click.echo(f"| {', '.join(f'`{n}`' for n in names)} | {reason} |")
            else:
                for n in names:
                    click.echo(f"{n}\t{reason}")
        return

    if markdown:
        click.echo("| key | type | unit | default | origin | meaning |")
        click.echo("|---|---|---|---|---|---|")
    for key in K.KEYS:
        default = key.render(key.default) or "(unset)"
        origin = key.origin
        if key.upstream_default is not None:
            origin += f" (upstream default {key.render(key.upstream_default)})"
        if markdown:
            click.echo(f"| `{key.name}` | {key.type} | {key.unit or ''} | {default} | {origin} | {key.doc} |")
        else:
            click.echo(f"{key.name}\t{key.type}\t{key.unit or '-'}\t{default}\t{origin}\t{key.doc}")
