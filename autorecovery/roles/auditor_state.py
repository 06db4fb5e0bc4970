"""The Auditor's shared state, its typed events and their queue (EDGE).

:class:`AuditorState` is the one object the Auditor's parts (``roles/auditor_checks.py``,
``roles/auditor_holds.py``) share: the enable flag, the lost-bookie state, the bookie watcher, the
maintenance windows and holds, the last check results, the marking lock and the event queue. Each part
gets it in its constructor; nothing else is shared between them.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from autorecovery.audit.decisions import LostBookieTracker
from autorecovery.audit.lost_bookies import LostState
from autorecovery.audit.maintenance import Holds, Window
from autorecovery.zk.bookies import BookieWatcher

log = structlog.get_logger("autorecovery.auditor")


async def rearm(fn: Callable[[], Awaitable[None]]) -> None:
    """Re-arm a watch (``fn`` reads and sets it again); a failure is a WARNING (the elector retries on
    the next reconnect)."""
    try:
        await fn()
    except Exception as exc:  # noqa: BLE001 - retried on the next reconnect by the elector
        log.warning("could not re-arm a watch", error=str(exc))


class AuditorEvent(enum.Enum):
    """What the Auditor's event loop handles, one at a time (the values are the ``auditor_event`` log field)."""

    BOOKIES = "bookies"  # registrations changed
    DELAY = "delay"  # the lostBookieRecoveryDelay znode was written
    FIRE = "fire"  # the delayed audit's timer (token: which arming)
    MAINTENANCE = "maintenance"  # maintenance windows changed, expired, or a returned bookie is looked at again
    RETRY_AUDIT = "retry_audit"  # audit again (a failed audit, the rack-loss guard's settle time)


class AuditorEvents:
    """FIFO of ``(AuditorEvent, token)``; ``token`` is the delayed audit's arming number for FIRE, else None."""

    def __init__(self) -> None:
        self._q: asyncio.Queue[tuple[AuditorEvent, int | None]] = asyncio.Queue()

    def put(self, kind: AuditorEvent, token: int | None = None) -> None:
        """Queue an event (callable from a timer or a watch callback)."""
        self._q.put_nowait((kind, token))

    async def get(self) -> tuple[AuditorEvent, int | None]:
        """Wait for the next event."""
        return await self._q.get()

    def empty(self) -> bool:
        return self._q.empty()

    def drain(self) -> list[tuple[AuditorEvent, int | None]]:
        """Take every queued event, oldest first."""
        out = []
        while not self._q.empty():
            out.append(self._q.get_nowait())
        return out

    def drop_leading(self, kind: AuditorEvent) -> int:
        """Drop the events of ``kind`` at the head of the queue (coalescing a burst); returns how many."""
        dropped = 0
        rest = self.drain()
        while dropped < len(rest) and rest[dropped][0] is kind:
            dropped += 1
        for e in rest[dropped:]:
            self._q.put_nowait(e)
        return dropped


@dataclass
class AuditReport:
    """One lost-bookie audit: which bookies, how many ledgers, and its cost.

    ``find_ms`` is the index lookup (no ZooKeeper reads), ``write_ms`` the marker writes,
    ``zk_ops`` the ZooKeeper operations the client issued during the audit.
    """

    trigger: str
    lost: list[str]
    ledgers: int
    find_ms: float
    write_ms: float
    writes: int
    zk_ops: int


@dataclass
class CheckResult:
    """Outcome of the last run of one check (for progress/admin output)."""

    name: str
    started_ms: int
    duration_ms: float
    ok: bool
    skipped: str = ""
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class AuditorState:
    """State shared by the Auditor's parts (one per elected term).

    Attributes:
        events: the event queue of the Auditor's loop.
        enabled: AutoRecovery is enabled (cached from the watch on ``underreplication/disable``);
            ``enabled_changed`` is set on every read of it.
        started, stopped: lifecycle flags.
        lost: the lost-bookie path's state (:mod:`autorecovery.audit.lost_bookies`); None before start.
        bookie_watcher: the registration watcher; None before start.
        windows: the maintenance windows loaded (acked) by this auditor.
        last_holds: what was last published as held back; pending_holds: what the last audit held back.
        last_results: check name -> :class:`CheckResult` of its last run.
        check_lock: marking by different tasks does not interleave per ledger set.
    """

    events: AuditorEvents = field(default_factory=AuditorEvents)
    enabled: bool = True
    enabled_changed: asyncio.Event = field(default_factory=asyncio.Event)
    started: bool = False
    stopped: bool = False
    lost: LostState | None = None
    bookie_watcher: BookieWatcher | None = None
    windows: list[Window] = field(default_factory=list)
    last_holds: Holds = field(default_factory=lambda: Holds({}, {}))
    pending_holds: Holds = field(default_factory=lambda: Holds({}, {}))
    last_results: dict[str, CheckResult] = field(default_factory=dict)
    check_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def tracker(self) -> LostBookieTracker | None:
        return self.lost.tracker if self.lost is not None else None

    @property
    def pending(self) -> bool:
        """A delayed lost-bookie audit is armed (periodic checks skip meanwhile, #3818)."""
        return self.lost is not None and self.lost.tracker.pending

    def available(self) -> frozenset[str]:
        """Registered bookies (writable ∪ read-only); empty before start."""
        return self.bookie_watcher.available if self.bookie_watcher else frozenset()

    def foreign(self) -> dict[str, tuple[str, ...]]:
        """Available bookies without our gRPC endpoint (their copies are skipped by every check)."""
        return self.bookie_watcher.foreign if self.bookie_watcher else {}

    async def wait_enabled(self) -> None:
        """Return once AutoRecovery is enabled."""
        while not self.enabled:
            self.enabled_changed.clear()
            await self.enabled_changed.wait()


__all__ = ["AuditReport", "AuditorEvent", "AuditorEvents", "AuditorState", "CheckResult", "rearm"]
