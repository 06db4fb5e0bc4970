"""``autorecovery config``: validate a bk_server.conf and print the effective configuration.

Also home of the options every command uses to find the cluster (``-c/--conf``, ``--zk``,
``--ledgers-root``, ``-D key=value``) and of :func:`settings_from_cli`, the only place where the CLI
hands ``os.environ`` to the loader.

Exit codes: 0 valid (warnings allowed unless ``--strict``), 2 invalid (every bad key named on stderr).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

import click

from autorecovery.config import keys as K
from autorecovery.config.load import Settings, load_settings
from autorecovery.errors import ConfigError

EXIT_CONFIG = 2


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
    """Parse the auditor, worker and placement settings the daemon will use; return their errors.

    Modules that are not installed are skipped (nothing to validate). Each error names the key.
    """
    errors: list[str] = []
    props = dict(settings.properties)

    def attempt(mod: str, attr: str, call: Callable[[Any], Any]) -> Any:
        try:
            m = __import__(mod, fromlist=[attr])
            obj = getattr(m, attr)
        except (ImportError, AttributeError):
            return None
        try:
            return call(obj)
        except ConfigError as exc:
            errors.append(str(exc))
        except ValueError as exc:
            errors.append(f"{attr}: {exc}")
        return None

    attempt("autorecovery.roles.auditor", "AuditorSettings", lambda c: c.from_properties(props))
    attempt("autorecovery.roles.worker", "WorkerSettings", lambda c: c.from_properties(props))
    pconf = attempt("autorecovery.placement.config", "PlacementConfig",
                    lambda c: c.from_properties(c.select(props)))
    if pconf is not None:
        def build(policy_from_name):
            from autorecovery.placement import StaticResolver  # type: ignore[attr-defined]

            return policy_from_name(str(settings.get("ensemblePlacementPolicy")), pconf, StaticResolver({}))

        attempt("autorecovery.placement", "policy_from_name", build)
    return errors


@click.group("config")
def config() -> None:
    """Check configuration files and list the configuration keys."""


@config.command("check")
@location_options
@click.option("--strict", is_flag=True, help="Exit non-zero on warnings (unknown keys) too.")
def check(conf: str | None, zk: str | None, ledgers_root: str | None, sets: tuple[str, ...], strict: bool) -> None:
    """Validate the configuration and print the effective value of every key.

    Unknown keys are warnings (with "did you mean"); bad values are errors naming key and value.
    """
    try:
        settings = settings_from_cli(conf, zk, ledgers_root, sets)
    except ConfigError as exc:
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    for w in settings.warnings:
        click.echo(f"WARNING: {w}", err=True)
    errors = validate_roles(settings)
    if errors:
        click.echo("ERROR: invalid configuration:\n  " + "\n  ".join(errors), err=True)
        sys.exit(EXIT_CONFIG)
    click.echo(f"# effective configuration ({settings.conf_path or 'no file'}; BK_<key> env and flags applied)")
    click.echo(f"# metadata store: {settings.metadata_service_uri}  bookie id: {settings.bookie_id}")
    for line in settings.effective_lines():
        click.echo(line)
    if settings.warnings and strict:
        sys.exit(1)


@config.command("keys")
@click.option("--markdown", is_flag=True, help="Print a Markdown table (what docs/operators.md contains).")
def keys_cmd(markdown: bool) -> None:
    """List every configuration key: name, type, unit, default, origin, meaning."""
    from autorecovery.config.load import provider_key_objects, provider_keys

    if markdown:
        click.echo("| key | type | unit | default | origin | meaning |")
        click.echo("|---|---|---|---|---|---|")
    declared = provider_key_objects()
    for key in (*K.KEYS, *declared):
        default = key.render(key.default) or "(unset)"
        origin = key.origin
        if key.upstream_default is not None:
            origin += f" (upstream default {key.render(key.upstream_default)})"
        if markdown:
            click.echo(f"| `{key.name}` | {key.type} | {key.unit or ''} | {default} | {origin} | {key.doc} |")
        else:
            click.echo(f"{key.name}\t{key.type}\t{key.unit or '-'}\t{default}\t{origin}\t{key.doc}")
    listed = {k.name for k in (*K.KEYS, *declared)}
    for name in sorted(set(provider_keys()) - listed):
        if markdown:
            click.echo(f"| `{name}` | | | | declared by a role module | see that module |")
        else:
            click.echo(f"{name}\t-\t-\t-\tdeclared by a role module\t-")
