"""The AutoRecovery switches and check times on ZooKeeper (part of
:mod:`autorecovery.zk.underreplication`). EDGE.

``R/underreplication/disable`` (present = disabled), ``lostBookieRecoveryDelay`` (decimal ASCII
seconds; the znode wins over config) and the binary protobuf ctime znodes of the auditor's checks.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from autorecovery.errors import UnavailableError
from autorecovery.zk.bridge import NodeExistsError, NoNodeError, ZkClient
from autorecovery.zk.paths import Paths
from autorecovery.zk.ur.formats import CTIME_KINDS, decode_ctime, encode_ctime

log = structlog.get_logger("autorecovery.underreplication")


class SwitchesMixin:
    """Enable/disable, lost-bookie delay, audit trigger and check ctimes of
    :class:`~autorecovery.zk.underreplication.UnderreplicationManager`."""

    zk: ZkClient
    paths: Paths
    _enabled_seen: bool
    _disable_gen: int
    _session_task: asyncio.Task | None

    async def is_enabled(self) -> bool:
        return await self.zk.exists(self.paths.ur_disable) is None

    async def disable(self) -> None:
        """Create ``disable``.

        Raises:
            UnavailableError: "AutoRecovery is already disabled" when it exists (upstream NodeExists).
        """
        try:
            await self.zk.create(self.paths.ur_disable, b"", makepath=True)
        except NodeExistsError as exc:
            raise UnavailableError(f"AutoRecovery is already disabled ({self.paths.ur_disable} exists)") from exc

    async def enable(self) -> None:
        """Delete ``disable``.

        Raises:
            UnavailableError: "AutoRecovery is already enabled" when it is absent (upstream NoNode).
        """
        try:
            await self.zk.delete(self.paths.ur_disable)
        except NoNodeError as exc:
            raise UnavailableError(f"AutoRecovery is already enabled ({self.paths.ur_disable} is absent)") from exc

    async def wait_while_disabled(self) -> None:
        """Return once ``disable`` is absent; waits on an exists-watch (no polling).

        The answer "enabled" is kept while the exists-watch it armed has not fired (and the session
        has not changed), so a worker pays no ZooKeeper read per ledger for this check (upstream reads
        the znode before every lock)."""
        while not self._enabled_seen:
            ev = asyncio.Event()
            gen = self._disable_gen

            def on_event(_e, ev=ev) -> None:
                self._disable_gen += 1
                self._enabled_seen = False
                ev.set()

            stat = await self.zk.exists(self.paths.ur_disable, watch=on_event)
            if stat is None:
                # cache only if the watch did not fire meanwhile (its event may overtake this answer)
                # and only with the session listener of init() running (it forgets the answer when
                # the session changes and the watch may be lost)
                self._enabled_seen = self._disable_gen == gen and self._session_task is not None
                return
            await ev.wait()

    # -- lostBookieRecoveryDelay ----------------------------------------------------------------
    async def get_lost_bookie_recovery_delay(self) -> int:
        """Seconds from the znode.

        Raises:
            UnavailableError: when the znode is missing or not a decimal integer.
        """
        try:
            data, _ = await self.zk.get(self.paths.lost_bookie_recovery_delay)
        except NoNodeError as exc:
            raise UnavailableError(f"{self.paths.lost_bookie_recovery_delay} does not exist") from exc
        try:
            return int(data.decode().strip())
        except ValueError as exc:
            raise UnavailableError(f"{self.paths.lost_bookie_recovery_delay} holds {data[:100]!r}, not seconds") from exc

    async def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        """setData (any version) or create: the auditor's watch sees every write, even the same value."""
        data = str(int(seconds)).encode()
        try:
            await self.zk.set(self.paths.lost_bookie_recovery_delay, data)
        except NoNodeError:
            try:
                await self.zk.create(self.paths.lost_bookie_recovery_delay, data, makepath=True)
            except NodeExistsError:
                await self.zk.set(self.paths.lost_bookie_recovery_delay, data)

    async def init_lost_bookie_recovery_delay(self, seconds: int) -> None:
        """Create the znode with ``seconds`` only if absent (config seeds it; the znode wins)."""
        with contextlib.suppress(NodeExistsError):
            await self.zk.create(self.paths.lost_bookie_recovery_delay, str(int(seconds)).encode(), makepath=True)

    async def trigger_audit(self) -> None:
        """Force an audit now by re-writing the current delay (upstream BookKeeperAdmin.triggerAudit).

        Raises:
            UnavailableError: AutoRecovery is disabled, or no auditor is elected.
        """
        if not await self.is_enabled():
            raise UnavailableError("cannot trigger an audit: AutoRecovery is disabled")
        try:
            votes = [c for c in await self.zk.get_children(self.paths.auditor_election) if c.startswith("V_")]
        except NoNodeError:
            votes = []
        if not votes:
            raise UnavailableError(f"cannot trigger an audit: no auditor elected ({self.paths.auditor_election})")
        delay = await self.get_lost_bookie_recovery_delay()
        log.info("Resetting LostBookieRecoveryDelay value to kickstart audit task", value=delay)
        await self.set_lost_bookie_recovery_delay(delay)

    # -- check ctimes ---------------------------------------------------------------------------
    def _ctime_path(self, which: str) -> str:
        if which not in CTIME_KINDS:
            raise ValueError(f"unknown check {which!r}: expected one of {sorted(CTIME_KINDS)}")
        return getattr(self.paths, CTIME_KINDS[which][0])

    async def get_check_ctime(self, which: str) -> int:
        """Last completed run of ``which`` in ms since the epoch; -1 when never run or unreadable
        (an unreadable znode is logged naming it, as upstream's auditor logs the UnavailableException
        and treats the check as never run; the next run overwrites it)."""
        path = self._ctime_path(which)
        try:
            data, _ = await self.zk.get(path)
        except NoNodeError:
            return -1
        try:
            return decode_ctime(which, data, path)
        except UnavailableError as exc:
            log.error("unreadable check ctime; treating the check as never run", check=which, error=str(exc))
            return -1

    async def set_check_ctime(self, which: str, ms: int) -> None:
        path = self._ctime_path(which)
        data = encode_ctime(which, ms)
        try:
            await self.zk.set(path, data)
        except NoNodeError:
            try:
                await self.zk.create(path, data, makepath=True)
            except NodeExistsError:
                await self.zk.set(path, data)
