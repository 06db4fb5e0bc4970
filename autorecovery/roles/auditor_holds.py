"""What the Auditor holds back from marking (EDGE): maintenance windows and the rack-loss guard.

Upstream has neither (ours; see docs on maintenance windows and ``autorecoveryDownOutSubtreeLimit``).
The decisions are :mod:`autorecovery.audit.maintenance` (pure: :func:`~autorecovery.audit.maintenance.holds`,
:func:`~autorecovery.audit.maintenance.data_first`); this part of the
:class:`~autorecovery.roles.auditor.Auditor` (it gets the shared
:class:`~autorecovery.roles.auditor_state.AuditorState`, the index, the markers and the clocks) watches
the maintenance records, publishes ``maintenance-state`` and filters a lost-bookie audit's markers.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import structlog

from autorecovery.aio import background
from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.lost_bookies import lost_since_after, observe
from autorecovery.audit.maintenance import Holds, auto_close_due, data_first, holds
from autorecovery.config.sections import AuditorSettings
from autorecovery.roles.auditor_state import AuditorEvent, AuditorState, rearm
from autorecovery.zk.maintenance import MaintenanceStore
from autorecovery.zk.underreplication import UnderreplicationManager

log = structlog.get_logger("autorecovery.auditor")

#: while a returned bookie is still named by a marker, its auto-closing window is looked at again this often (s)
AUTO_CLOSE_RECHECK_S = 15.0


@dataclasses.dataclass(frozen=True)
class MaintenanceChange:
    """What a maintenance change means for the lost bookies (the Auditor acts on it).

    Attributes:
        released: lost bookies whose window ended (lostBookieRecoveryDelay applies from now).
        unguarded: lost bookies the rack-loss guard held and no longer holds (audit now).
        holds: what is held back now (publish it after acting).
    """

    released: frozenset[str]
    unguarded: frozenset[str]
    holds: Holds


class MaintenanceHolds:
    """Maintenance windows and the rack-loss guard of the :class:`~autorecovery.roles.auditor.Auditor`.

    Args:
        state: the auditor's shared state (windows, holds, lost-bookie state, events).
        settings: :class:`AuditorSettings` (``autorecoveryDownOutSubtreeLimit``).
        index: the bookie -> ledgers index. urm: the markers. store: the maintenance records.
        policy: placement policy (``location_of``) or None (every bookie in ``/default-rack``).
        metrics: the auditor's metric handles by name. bookie_id: this auditor (``maintenance-state``).
        clock: monotonic s. wall_ms: ms since the epoch.
    """

    def __init__(self, state: AuditorState, *, settings: AuditorSettings, index: BookieLedgerIndex,
                 urm: UnderreplicationManager, store: MaintenanceStore, policy: Any, metrics: dict[str, Any],
                 bookie_id: str, clock: Callable[[], float], wall_ms: Callable[[], int]) -> None:
        self.state = state
        self.settings = settings
        self.index = index
        self.urm = urm
        self.maintenance = store
        self.policy = policy
        self._m = metrics
        self.bookie_id = bookie_id
        self.clock = clock
        self.wall_ms = wall_ms
        self.expiry_timer: asyncio.TimerHandle | None = None
        self.autoclose_timer: asyncio.TimerHandle | None = None
        self.settle_timer: asyncio.TimerHandle | None = None

    def cancel_timers(self) -> None:
        """Disarm the expiry, auto-close and settle timers (the auditor stops)."""
        for t in (self.expiry_timer, self.autoclose_timer, self.settle_timer):
            if t is not None:
                t.cancel()

    def _later(self, delay_s: float, kind: AuditorEvent) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay_s, self.state.events.put, kind)

    async def watch(self) -> None:
        """Load the maintenance records (child watch re-armed on every change) and re-evaluate."""
        st = self.state

        def cb(_event: object) -> None:
            if not st.stopped:
                background(rearm(self.watch))

        st.windows = await self.maintenance.list(watch=cb)
        now = self.wall_ms()
        await self._ack_windows(now)
        live = [w for w in st.windows if not w.expired(now)]
        self._m["maint_windows"].set(len([w for w in live if w.kind != "override"]))
        if self.expiry_timer is not None:
            self.expiry_timer.cancel()
            self.expiry_timer = None
        if st.windows:
            nxt = min(w.expires_ms for w in st.windows)
            delay_s = max(0.0, (nxt - now) / 1000.0)
            self.expiry_timer = self._later(delay_s, AuditorEvent.MAINTENANCE)
        if st.started and not st.stopped:
            st.events.put(AuditorEvent.MAINTENANCE)

    async def on_change(self) -> MaintenanceChange:
        """Windows changed or expired: enforce expiry, note planned stops, auto-close windows, and say
        which lost bookies are no longer covered (the normal lostBookieRecoveryDelay applies from now)
        and which the guard let go (audit at once)."""
        st = self.state
        expired = await self.maintenance.remove_expired(st.windows, self.wall_ms())
        if expired:
            st.windows = [w for w in st.windows if w not in expired]
        available = st.available()
        lost = self.index.bookies() - available
        await self._note_lost_under_windows(available)
        await self._auto_close(available)
        h = holds(lost, available, self.location_of, st.windows, self.wall_ms(),
                  self.settings.autorecovery_down_out_subtree_limit)
        released = (set(st.last_holds.windows) - set(h.windows)) & lost
        unguarded = (st.last_holds.held - set(st.last_holds.windows)) - h.held
        return MaintenanceChange(frozenset(released), frozenset(unguarded & lost), h)

    async def _ack_windows(self, now_ms: int) -> None:
        """Stamp ``acked_ms`` on windows this auditor loaded for the first time: ``shell oktostop
        --open-window`` waits for it before the bookie stops, so the loss is never audited first."""
        out = []
        for w in self.state.windows:
            if w.acked_ms == 0 and not w.expired(now_ms):
                w = dataclasses.replace(w, acked_ms=now_ms)
                if not await self.maintenance.update(w):
                    continue
            out.append(w)
        self.state.windows = out

    async def _note_lost_under_windows(self, available: frozenset[str]) -> None:
        """Record in auto-closing bookie windows that the bookie was seen down (``lost_seen_ms``: not
        registered, whether or not it is in some ensemble), so a window opened on a running bookie only
        closes after it went down and came back; the record survives an auditor change."""
        out = []
        for w in self.state.windows:
            if w.kind == "bookie" and w.auto_close and w.lost_seen_ms == 0 and w.target not in available:
                w = dataclasses.replace(w, lost_seen_ms=self.wall_ms())
                if await self.maintenance.update(w):
                    log.info("bookie down under its maintenance window: its heal is deferred", bookie_id=w.target,
                             expires_ms=w.expires_ms, reason=w.reason)
            out.append(w)
        self.state.windows = out

    async def _named_by_markers(self, bookies: set[str]) -> set[str]:
        """Which of ``bookies`` an under-replication marker names (as a missing replica)."""
        if not bookies:
            return set()
        marked = set(await self.urm.watched_marked_ids())
        named: set[str] = set()
        for b in bookies:
            for lid in sorted(marked & self.index.ledgers_of(b)):
                m = await self.urm.get_marker(lid)
                if m is not None and b in m.replicas:
                    named.add(b)
                    break
        return named

    async def _auto_close(self, available: frozenset[str]) -> None:
        """Close auto-closing bookie windows whose bookie is back with its ledgers whole
        (:func:`~autorecovery.audit.maintenance.auto_close_due`); while a marker still names a returned
        bookie, look again every :data:`AUTO_CLOSE_RECHECK_S`."""
        st = self.state
        waiting = {w.target for w in st.windows if w.kind == "bookie" and w.auto_close and w.lost_seen_ms
                   and w.target in available}
        if not waiting:
            return
        named = await self._named_by_markers(waiting)
        for w in auto_close_due(st.windows, available, named):
            reason = ("auto-closed: bookie registered again and no under-replication marker names it "
                      f"(down {max(0, self.wall_ms() - w.lost_seen_ms) // 1000} s)")
            if await self.maintenance.close(w, reason):
                log.info("maintenance window closed by itself: the bookie is back with its ledgers whole",
                         bookie_id=w.target, reason=w.reason, end_reason=reason)
            st.windows = [x for x in st.windows if x != w]
        if named:
            if self.autoclose_timer is not None:
                self.autoclose_timer.cancel()
            self.autoclose_timer = self._later(AUTO_CLOSE_RECHECK_S, AuditorEvent.MAINTENANCE)

    def location_of(self, bookie: str) -> str:
        """The bookie's failure domain per the placement policy (``/default-rack`` without one)."""
        if self.policy is None:
            return "/default-rack"
        try:
            return str(self.policy.location_of(bookie))
        except Exception as exc:  # noqa: BLE001 - an unresolvable bookie sits in the default rack
            log.debug("bookie location not resolved", bookie_id=bookie, error=str(exc))
            return "/default-rack"

    async def publish(self, h: Holds) -> None:
        """Log, publish (``maintenance-state``) and export what is held back, when it changed. The gauges
        are set after the state is written, so a gauge never runs ahead of what ``shell maintenance
        status`` shows (a test that waited for the gauge read the state before its write)."""
        last = self.state.last_holds
        if (dict(h.windows), dict(h.guarded)) != (dict(last.windows), dict(last.guarded)):
            await self._write_holds(h)
        self._m["maint_held"].set(len(h.windows))
        self._m["guard_domains"].set(len(h.guarded))
        self._m["guard_held"].set(sum(len(b) for b in h.guarded.values()))

    async def _write_holds(self, h: Holds) -> None:
        """Log what changed in ``h`` and write it to the ``maintenance-state`` znode."""
        last = self.state.last_holds
        for d, bs in sorted(h.guarded.items()):
            if d not in last.guarded:
                log.warning(f"rack {d} lost as a whole: waiting (autorecoveryDownOutSubtreeLimit="
                            f"{self.settings.autorecovery_down_out_subtree_limit}); copies start only for ledgers "
                            "that would fall below AQ, or after `shell maintenance override --rack`",
                            rack=d, bookies=sorted(bs))
        for b, w in sorted(h.windows.items()):
            if b not in last.windows:
                log.info("lost bookie in a maintenance window: not audited", bookie_id=b, window=w.target,
                         reason=w.reason, expires_ms=w.expires_ms)
        self.state.last_holds = h
        state = {"windows": {b: {"kind": w.kind, "target": w.target, "reason": w.reason, "expires_ms": w.expires_ms}
                             for b, w in h.windows.items()},
                 "guard": {d: sorted(bs) for d, bs in h.guarded.items()},
                 "level": self.settings.autorecovery_down_out_subtree_limit or "none",
                 "auditor": self.bookie_id, "time_ms": self.wall_ms()}
        try:
            await self.maintenance.write_state(state)
        except Exception as exc:  # noqa: BLE001 - the next change writes it again
            log.warning("could not publish the maintenance state", error=str(exc))

    def marks_after_holds(self, lost: list[str], available: frozenset[str]) -> dict[int, list[str]]:
        """Ledgers to mark for ``lost``, minus what maintenance windows and the rack-loss guard hold
        back, plus (data first) every ledger the losses leave with a fragment below AQ."""
        st = self.state
        now_s = self.clock()
        if st.lost is not None:
            st.lost = observe(st.lost, available, lost, now_s)
            since, settle = st.lost.lost_since, float(st.lost.tracker.previous_delay)
        else:  # not started: nothing was seen lost before
            since, settle = lost_since_after({}, lost, available, now_s), 0.0
        h = holds(lost, available, self.location_of, st.windows, self.wall_ms(),
                  self.settings.autorecovery_down_out_subtree_limit, lost_since_s=since, now_s=now_s,
                  settle_s=settle)
        st.pending_holds = h
        if h.settle_at_s is not None:
            if self.settle_timer is not None:
                self.settle_timer.cancel()
            self.settle_timer = self._later(max(0.0, h.settle_at_s - now_s) + 0.01, AuditorEvent.RETRY_AUDIT)
            log.info("rack-loss guard: letting lost bookies settle before auditing them",
                     bookies=sorted(h.settling), settle_s=settle)
        all_marks = self.index.ledgers_to_mark(lost)
        held = h.held
        if not held:
            return all_marks
        lost_set = set(lost)
        planned = set(h.windows)
        marks: dict[int, list[str]] = {}
        overridden = []
        for lid, bs in all_marks.items():
            free = [b for b in bs if b not in held]
            md = self.index.get(lid)
            if md is not None and data_first(md, lost_set, planned):
                marks[lid] = bs
                if len(free) < len(bs):
                    overridden.append(lid)
            elif free:
                marks[lid] = free
        if overridden:
            self._m["data_first"].inc(len(overridden))
            log.warning("data first: ledgers would have fewer than AQ readable copies; marking them despite "
                        "maintenance windows / the rack-loss guard", ledgers=len(overridden),
                        ledger_ids=overridden[:20], held=sorted(held))
        return marks
