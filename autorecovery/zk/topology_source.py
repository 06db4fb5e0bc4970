"""Placement policy set-up from configuration and the rack mapping kept in ZooKeeper (EDGE).

Racks come from Pulsar's rack document at ``/bookies`` (``{"group": {"host:port": {"rack": ...}}}``)
unless ``reppDnsResolverClass`` names another resolver. :class:`RackInfoWatcher` keeps the resolver
current with a data watch on ``/bookies`` and tells the policy to re-resolve its known bookies
(upstream ``onBookieRackChange``), so a rack mapping written after the bookies joined takes effect.
Shared by the daemon, the admin shell and the ledger client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from autorecovery.zk.bridge import NoNodeError, ZkClient

log = structlog.get_logger("autorecovery.placement")

PULSAR_RACKS_PATH = "/bookies"


@dataclass
class PlacementSetup:
    """A policy, its resolver, and where the racks come from (``pulsar`` /bookies, ``config``, ``default``)."""

    policy: Any
    resolver: Any
    source: str
    config: Any = None


async def read_pulsar_racks(zk: ZkClient, watch: Callable[[Any], Any] | None = None) -> bytes | None:
    """The Pulsar rack document at ``/bookies`` (None when absent or empty); arms ``watch`` either way."""
    try:
        data, _ = await zk.get(PULSAR_RACKS_PATH, watch=watch)
    except NoNodeError:
        if watch is not None:
            try:
                await zk.exists(PULSAR_RACKS_PATH, watch=watch)
            except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                log.debug("best-effort step failed", step="read_pulsar_racks", error=repr(cleanup_exc))
        return None
    return data or None


async def build_placement(props: Mapping[str, Any], zk: ZkClient, *, explicit_resolver: bool = False,
                          policy_name: str | None = None, watch: Callable[[Any], Any] | None = None,
                          config: Any = None) -> PlacementSetup:
    """Build the placement policy named by ``ensemblePlacementPolicy`` with its rack resolver.

    Args:
        props: upstream config keys (only the placement keys are used); ignored when ``config`` is given.
        explicit_resolver: ``reppDnsResolverClass`` was set by the operator; otherwise Pulsar's
            ``/bookies`` document is used when present, else every bookie is in the default rack.
        policy_name: overrides ``ensemblePlacementPolicy``.
        config: an already built :class:`~autorecovery.placement.config.PlacementConfig` (the daemon
            and the admin shell pass ``Settings.placement``, parsed once by the loader).

    Raises:
        ConfigError: a bad placement key, or an ``ensemblePlacementPolicy`` class we do not know.
    """
    from autorecovery.placement import (
        PlacementConfig,
        PulsarRackResolver,
        RackawarePolicy,
        policy_from_name,
        resolver_from_config,
    )

    pconf = config if config is not None else PlacementConfig.from_properties(PlacementConfig.select(dict(props)))
    pulsar = await read_pulsar_racks(zk, watch)
    if explicit_resolver:
        resolver, source = resolver_from_config(pconf, pulsar_data=pulsar), "config"
    elif pulsar is not None:
        resolver, source = PulsarRackResolver(pulsar), "pulsar"
    else:
        resolver, source = PulsarRackResolver(None), "default"  # becomes live if /bookies appears
    name = policy_name or (None if config is not None else props.get("ensemblePlacementPolicy")) \
        or pconf.ensemble_placement_policy
    policy = policy_from_name(str(name), pconf, resolver)
    if _one_level_racks(pulsar) and type(policy) is RackawarePolicy:
        # Racks like "/rack1" are one level deep: unknown bookies must land in a one-level default
        # rack too, or the topology rejects them for the depth mismatch (upstream NetworkTopologyImpl).
        policy = policy_from_name(str(name), pconf, resolver, default_rack="/default-rack")
    return PlacementSetup(policy=policy, resolver=resolver, source=source, config=pconf)


def _one_level_racks(data: bytes | None) -> bool:
    """True when every rack in a Pulsar ``/bookies`` document is one level deep (``/rack1``)."""
    if not data:
        return False
    try:
        doc = json.loads(data)
        racks = [str(info.get("rack", "")) for group in doc.values() for info in group.values()]
    except (ValueError, AttributeError, TypeError, RecursionError):
        return False
    racks = [r.strip("/") for r in racks if r.strip("/")]
    return bool(racks) and all("/" not in r for r in racks)


class RackInfoWatcher:
    """Keeps a Pulsar resolver current from ``/bookies`` and re-resolves the policy's bookies.

    Only active when the setup's racks come from ``/bookies`` (``source`` pulsar or default).
    """

    def __init__(self, zk: ZkClient, setup: PlacementSetup) -> None:
        self.zk = zk
        self.setup = setup
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.updates = 0

    def on_watch(self, _event: Any = None) -> None:
        """A ZooKeeper watch callback (pass it as ``watch`` to :func:`build_placement`)."""
        self._changed.set()

    async def start(self) -> RackInfoWatcher:
        if self.setup.source != "config" and self._task is None:
            self._changed.set()  # read once to arm the watch
            self._task = asyncio.ensure_future(self._loop())
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                data = await read_pulsar_racks(self.zk, watch=self.on_watch)
            except Exception as exc:  # noqa: BLE001 - a session event or the next change re-arms
                log.warning("cannot read /bookies rack info", error=str(exc))
                continue
            try:
                self.setup.resolver.update(data)
            except Exception as exc:  # noqa: BLE001 - keep the previous mapping
                log.error("bad /bookies rack info; keeping the previous mapping", error=str(exc))
                continue
            refresh = getattr(self.setup.policy, "on_bookie_rack_change", None)
            if callable(refresh):
                refresh()
            self.updates += 1
            log.debug("rack info updated from /bookies")
