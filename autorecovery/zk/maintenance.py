"""Maintenance windows and guard overrides in ZooKeeper (EDGE; the rules are ``audit.maintenance``).

Records live under ``<root>/underreplication/maintenance/<kind>:<target>`` (ours), one JSON document
each (:class:`~autorecovery.audit.maintenance.Window`). Anyone with the mutation switch (shell, HTTP)
starts or stops a window; the elected Auditor reads them through a child watch, enforces their expiry
(it deletes expired records) and publishes what it holds back in ``underreplication/maintenance-state``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import time
from collections.abc import Callable

import structlog

from autorecovery.audit.maintenance import KINDS, Window, znode_name
from autorecovery.errors import ConfigError, MalformedMetadataError
from autorecovery.zk.bridge import BadVersionError, NodeExistsError, NoNodeError, ZkClient
from autorecovery.zk.paths import Paths

log = structlog.get_logger("autorecovery.maintenance")

#: how many ended windows ``maintenance-ended`` keeps
ENDED_KEPT = 50


def now_ms() -> int:
    return int(time.time() * 1000)


class MaintenanceStore:
    """Read and write maintenance records.

    Raises (from every method): ZooKeeperError naming the path on ZooKeeper failures.
    """

    def __init__(self, zk: ZkClient, paths: Paths) -> None:
        self.zk = zk
        self.paths = paths

    @property
    def ended_path(self) -> str:
        """``underreplication/maintenance-ended``: the last :data:`ENDED_KEPT` windows that ended, with
        why (JSON list, newest last; ours)."""
        return f"{self.paths.underreplication}/maintenance-ended"

    async def start(self, kind: str, target: str, ttl_ms: int, reason: str, by: str = "",
                    auto_close: bool = False) -> Window:
        """Create or replace the window ``kind``/``target`` expiring ``ttl_ms`` from now; ``auto_close``
        (bookie windows): the auditor closes it once the bookie is back with its ledgers whole.

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
        w = Window(kind, target, reason.strip(), t, t + ttl_ms, by, auto_close=auto_close and kind == "bookie")
        path = f"{self.paths.maintenance}/{w.znode_name}"
        try:
            await self.zk.create(path, w.to_json(), makepath=True)
        except NodeExistsError:
            await self.zk.set(path, w.to_json())
        log.info("maintenance window started", kind=kind, target=target, ttl_s=ttl_ms // 1000, reason=reason,
                 by=by, auto_close=w.auto_close)
        return w

    async def get(self, kind: str, target: str) -> Window | None:
        """The record of ``kind``/``target``, or None."""
        path = f"{self.paths.maintenance}/{znode_name(kind, target)}"
        try:
            data, _ = await self.zk.get(path)
        except NoNodeError:
            return None
        return Window.from_json(data, path)

    async def update(self, w: Window) -> bool:
        """Rewrite an existing record (the auditor's ``acked_ms`` / ``lost_seen_ms``); False when it is gone."""
        try:
            await self.zk.set(f"{self.paths.maintenance}/{w.znode_name}", w.to_json())
        except NoNodeError:
            return False
        return True

    async def stop(self, kind: str, target: str, ended_by: str = "") -> bool:
        """Delete a window; returns False when there was none."""
        path = f"{self.paths.maintenance}/{znode_name(kind, target)}"
        try:
            data, _ = await self.zk.get(path)
            await self.zk.delete(path)
        except NoNodeError:
            return False
        log.info("maintenance window stopped", kind=kind, target=target, by=ended_by)
        with contextlib.suppress(MalformedMetadataError):
            await self.record_end(Window.from_json(data, path), f"stopped by {ended_by or '?'}")
        return True

    async def close(self, w: Window, reason: str) -> bool:
        """Delete ``w``'s record and record why it ended (the auditor's auto-close); False when gone."""
        try:
            await self.zk.delete(f"{self.paths.maintenance}/{w.znode_name}")
        except NoNodeError:
            return False
        await self.record_end(w, reason)
        return True

    async def record_end(self, w: Window, reason: str) -> None:
        """Append ``w`` and its end reason to ``maintenance-ended`` (the last :data:`ENDED_KEPT`;
        a conditional set, retried on a concurrent write). Never raises for a lost race."""
        entry = {"kind": w.kind, "target": w.target, "reason": w.reason, "started_ms": w.started_ms,
                 "expires_ms": w.expires_ms, "by": w.by, "ended_ms": now_ms(), "end_reason": reason}
        for _ in range(5):
            try:
                data, stat = await self.zk.get(self.ended_path)
                try:
                    items = json.loads(data) if data else []
                except ValueError:
                    items = []
                items = [*(items if isinstance(items, list) else [])[-(ENDED_KEPT - 1):], entry]
                await self.zk.set(self.ended_path, json.dumps(items, sort_keys=True).encode(), stat.version)
                return
            except NoNodeError:
                try:
                    await self.zk.create(self.ended_path, json.dumps([entry]).encode(), makepath=True)
                    return
                except NodeExistsError:
                    continue
            except BadVersionError:
                continue

    async def ended(self) -> list[dict]:
        """The windows that ended last (oldest first), each with ``end_reason`` and ``ended_ms``."""
        try:
            data, _ = await self.zk.get(self.ended_path)
            items = json.loads(data)
        except (NoNodeError, ValueError):
            return []
        return items if isinstance(items, list) else []

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

    async def remove_expired(self, windows: builtins.list[Window], at_ms: int) -> builtins.list[Window]:
        """Delete the records expired at ``at_ms`` (the auditor enforces TTLs); returns them."""
        gone = []
        for w in windows:
            if w.expired(at_ms):
                with contextlib.suppress(NoNodeError):
                    await self.zk.delete(f"{self.paths.maintenance}/{w.znode_name}")
                gone.append(w)
                log.info("maintenance window expired", kind=w.kind, target=w.target, reason=w.reason)
                await self.record_end(w, "expired")
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
