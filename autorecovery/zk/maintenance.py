"""Maintenance windows and guard overrides in ZooKeeper (EDGE; the rules are ``audit.maintenance``).

Records live under ``<root>/underreplication/maintenance/<kind>:<target>`` (ours), one JSON document
each (:class:`~autorecovery.audit.maintenance.Window`). Anyone with the mutation switch (shell, HTTP)
starts or stops a window; the elected Auditor reads them through a child watch, enforces their expiry
(it deletes expired records) and publishes what it holds back in ``underreplication/maintenance-state``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import structlog

from autorecovery.audit.maintenance import KINDS, Window, znode_name
from autorecovery.errors import ConfigError, MalformedMetadataError
from autorecovery.zk.bridge import NodeExistsError, NoNodeError, ZkClient
from autorecovery.zk.paths import Paths

log = structlog.get_logger("autorecovery.maintenance")


def now_ms() -> int:
    return int(time.time() * 1000)


class MaintenanceStore:
    """Read and write maintenance records.

    Raises (from every method): ZooKeeperError naming the path on ZooKeeper failures.
    """

    def __init__(self, zk: ZkClient, paths: Paths) -> None:
        self.zk = zk
        self.paths = paths

    async def start(self, kind: str, target: str, ttl_ms: int, reason: str, by: str = "") -> Window:
        """Create or replace the window ``kind``/``target`` expiring ``ttl_ms`` from now.

        Raises:
            ConfigError: unknown kind, empty target or reason, or a rack that is not a /path.
        """
        if kind not in KINDS:
            raise ConfigError(f"unknown maintenance kind {kind!r}: expected one of {', '.join(KINDS)}")
        if not target:
            raise ConfigError("a maintenance window needs a bookie id or a rack")
        if kind in ("rack", "override") and not target.startswith("/"):
            raise ConfigError(f"rack {target!r} must be a network location such as /rack1 or /region/rack1")
        if not reason.strip():
            raise ConfigError("a maintenance window needs a --reason (shown to every operator)")
        t = now_ms()
        w = Window(kind, target, reason.strip(), t, t + ttl_ms, by)
        path = f"{self.paths.maintenance}/{w.znode_name}"
        try:
            await self.zk.create(path, w.to_json(), makepath=True)
        except NodeExistsError:
            await self.zk.set(path, w.to_json())
        log.info("maintenance window started", kind=kind, target=target, ttl_s=ttl_ms // 1000, reason=reason)
        return w

    async def stop(self, kind: str, target: str) -> bool:
        """Delete a window; returns False when there was none."""
        try:
            await self.zk.delete(f"{self.paths.maintenance}/{znode_name(kind, target)}")
        except NoNodeError:
            return False
        log.info("maintenance window stopped", kind=kind, target=target)
        return True

    async def list(self, watch: Callable | None = None) -> list[Window]:
        """Every record (expired ones included, until the auditor removes them). A malformed record
        is skipped with a warning naming its znode."""
        try:
            names = await self.zk.get_children(self.paths.maintenance, watch=watch)
        except NoNodeError:
            if watch is not None:
                await self.zk.exists(self.paths.maintenance, watch=watch)
            return []
        out = []

        async def one(name: str) -> None:
            path = f"{self.paths.maintenance}/{name}"
            try:
                data, _ = await self.zk.get(path)
                out.append(Window.from_json(data, path))
            except NoNodeError:
                return
            except MalformedMetadataError as exc:
                log.warning("skipping a malformed maintenance record", error=str(exc))

        await asyncio.gather(*(one(n) for n in names))
        return sorted(out, key=lambda w: (w.kind, w.target))

    async def remove_expired(self, windows: list[Window], at_ms: int) -> list[Window]:
        """Delete the records expired at ``at_ms`` (the auditor enforces TTLs); returns them."""
        gone = []
        for w in windows:
            if w.expired(at_ms):
                try:
                    await self.zk.delete(f"{self.paths.maintenance}/{w.znode_name}")
                except NoNodeError:
                    pass
                gone.append(w)
                log.info("maintenance window expired", kind=w.kind, target=w.target, reason=w.reason)
        return gone

    async def write_state(self, state: dict) -> None:
        """Publish what the auditor holds back (``maintenance-state``)."""
        data = json.dumps(state, sort_keys=True).encode()
        try:
            await self.zk.set(self.paths.guard_state, data)
        except NoNodeError:
            try:
                await self.zk.create(self.paths.guard_state, data, makepath=True)
            except NodeExistsError:
                await self.zk.set(self.paths.guard_state, data)

    async def read_state(self) -> dict:
        """The auditor's last published state ({} when none)."""
        try:
            data, _ = await self.zk.get(self.paths.guard_state)
            return json.loads(data)
        except (NoNodeError, ValueError):
            return {}
