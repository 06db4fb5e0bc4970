"""What the Auditor holds back from marking (EDGE): maintenance windows and the rack-loss guard.

Upstream has neither (ours; see docs on maintenance windows and ``autorecoveryDownOutSubtreeLimit``).
The decisions are :mod:`autorecovery.audit.maintenance` (pure: :func:`~autorecovery.audit.maintenance.holds`,
:func:`~autorecovery.audit.maintenance.data_first`); this part of the
:class:`~autorecovery.roles.auditor.Auditor` (a mixin: it uses the auditor's index, tracker, clocks,
metrics and event queue) watches the maintenance records, publishes ``maintenance-state`` and
filters a lost-bookie audit's markers.
"""

from __future__ import annotations

import asyncio
import dataclasses

import structlog

from autorecovery.aio import background
from autorecovery.audit.decisions import Decision
from autorecovery.audit.maintenance import Holds, auto_close_due, data_first, holds

log = structlog.get_logger("autorecovery.auditor")

#: while a returned bookie is still named by a marker, its auto-closing window is looked at again this often (s)
AUTO_CLOSE_RECHECK_S = 15.0


class MaintenanceHolds:
    """Maintenance windows and the rack-loss guard of the :class:`~autorecovery.roles.auditor.Auditor`."""

    async def _watch_maintenance(self) -> None:
        """Load the maintenance records (child watch re-armed on every change) and re-evaluate."""
        def cb(event) -> None:
            if not self._stopped:
                background(self._rearm(self._watch_maintenance))

        self.windows = await self.maintenance.list(watch=cb)
        now = self.wall_ms()
        await self._ack_windows(now)
        live = [w for w in self.windows if not w.expired(now)]
        self._m["maint_windows"].set(len([w for w in live if w.kind != "override"]))
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        if self.windows:
            nxt = min(w.expires_ms for w in self.windows)
            delay_s = max(0.0, (nxt - now) / 1000.0)
            self._expiry_timer = asyncio.get_running_loop().call_later(
                delay_s, self._events.put_nowait, ("maintenance", None))
        if self._started and not self._stopped:
            self._events.put_nowait(("maintenance", None))

    async def _on_maintenance_change(self, now: float) -> Decision | None:
        """Windows changed or expired: enforce expiry; a bookie no longer covered is lost anew (the
        normal lostBookieRecoveryDelay applies from now); a lifted guard is audited at once."""
        assert self.tracker is not None
        expired = await self.maintenance.remove_expired(self.windows, self.wall_ms())
        if expired:
            self.windows = [w for w in self.windows if w not in expired]
        available = self._available()
        lost = self.index.bookies() - available
        await self._note_lost_under_windows(available)
        await self._auto_close(available)
        h = holds(lost, available, self._location_of, self.windows, self.wall_ms(),
                  self.settings.autorecovery_down_out_subtree_limit)
        released = (set(self.last_holds.windows) - set(h.windows)) & lost
        unguarded = (self.last_holds.held - set(self.last_holds.windows)) - h.held
        decision = None
        if released:
            log.info("maintenance ended for lost bookies; lostBookieRecoveryDelay applies from now",
                     bookies=sorted(released))
            self.tracker.known |= released
            delay = await self.urm.get_lost_bookie_recovery_delay()
            decision = self.tracker.on_bookies_changed(available, delay, now, self.index.in_some_ensemble)
        if unguarded & lost:
            log.warning("rack-loss guard lifted (override or config); auditing the held bookies now",
                        bookies=sorted(unguarded & lost))
            decision = Decision(audit_now=True)
        await self._publish_holds(h)
        return decision

    async def _ack_windows(self, now_ms: int) -> None:
        """Stamp ``acked_ms`` on windows this auditor loaded for the first time: ``shell oktostop
        --open-window`` waits for it before the bookie stops, so the loss is never audited first."""
        out = []
        for w in self.windows:
            if w.acked_ms == 0 and not w.expired(now_ms):
                w = dataclasses.replace(w, acked_ms=now_ms)
                if not await self.maintenance.update(w):
                    continue
            out.append(w)
        self.windows = out

    async def _note_lost_under_windows(self, available: frozenset[str]) -> None:
        """Record in auto-closing bookie windows that the bookie was seen down (``lost_seen_ms``: not
        registered, whether or not it is in some ensemble), so a window opened on a running bookie only
        closes after it went down and came back; the record survives an auditor change."""
        out = []
        for w in self.windows:
            if w.kind == "bookie" and w.auto_close and w.lost_seen_ms == 0 and w.target not in available:
                w = dataclasses.replace(w, lost_seen_ms=self.wall_ms())
                if await self.maintenance.update(w):
                    log.info("bookie down under its maintenance window: its heal is deferred", bookie_id=w.target,
                             expires_ms=w.expires_ms, reason=w.reason)
            out.append(w)
        self.windows = out

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
        waiting = {w.target for w in self.windows if w.kind == "bookie" and w.auto_close and w.lost_seen_ms
                   and w.target in available}
        if not waiting:
            return
        named = await self._named_by_markers(waiting)
        for w in auto_close_due(self.windows, available, named):
            reason = ("auto-closed: bookie registered again and no under-replication marker names it "
                      f"(down {max(0, self.wall_ms() - w.lost_seen_ms) // 1000} s)")
            if await self.maintenance.close(w, reason):
                log.info("maintenance window closed by itself: the bookie is back with its ledgers whole",
                         bookie_id=w.target, reason=w.reason, end_reason=reason)
            self.windows = [x for x in self.windows if x != w]
        if named:
            if self._autoclose_timer is not None:
                self._autoclose_timer.cancel()
            self._autoclose_timer = asyncio.get_running_loop().call_later(
                AUTO_CLOSE_RECHECK_S, self._events.put_nowait, ("maintenance", None))

    def _location_of(self, bookie: str) -> str:
        if self.policy is None:
            return "/default-rack"
        try:
            return self.policy.location_of(bookie)
        except Exception as exc:  # noqa: BLE001 - an unresolvable bookie sits in the default rack
            log.debug("bookie location not resolved", bookie_id=bookie, error=str(exc))
            return "/default-rack"

    async def _publish_holds(self, h: Holds) -> None:
        """Log, publish (``maintenance-state``) and export what is held back, when it changed. The gauges
        are set after the state is written, so a gauge never runs ahead of what ``shell maintenance
        status`` shows (a test that waited for the gauge read the state before its write)."""
        if (dict(h.windows), dict(h.guarded)) != (dict(self.last_holds.windows), dict(self.last_holds.guarded)):
            await self._write_holds(h)
        self._m["maint_held"].set(len(h.windows))
        self._m["guard_domains"].set(len(h.guarded))
        self._m["guard_held"].set(sum(len(b) for b in h.guarded.values()))

    async def _write_holds(self, h: Holds) -> None:
        """Log what changed in ``h`` and write it to the ``maintenance-state`` znode."""
        for d, bs in sorted(h.guarded.items()):
            if d not in self.last_holds.guarded:
                log.warning(f"rack {d} lost as a whole: waiting (autorecoveryDownOutSubtreeLimit="
                            f"{self.settings.autorecovery_down_out_subtree_limit}); copies start only for ledgers "
                            "that would fall below AQ, or after `shell maintenance override --rack`",
                            rack=d, bookies=sorted(bs))
        for b, w in sorted(h.windows.items()):
            if b not in self.last_holds.windows:
                log.info("lost bookie in a maintenance window: not audited", bookie_id=b, window=w.target,
                         reason=w.reason, expires_ms=w.expires_ms)
        self.last_holds = h
        state = {"windows": {b: {"kind": w.kind, "target": w.target, "reason": w.reason, "expires_ms": w.expires_ms}
                             for b, w in h.windows.items()},
                 "guard": {d: sorted(bs) for d, bs in h.guarded.items()},
                 "level": self.settings.autorecovery_down_out_subtree_limit or "none",
                 "auditor": self.bookie_id, "time_ms": self.wall_ms()}
        try:
            await self.maintenance.write_state(state)
        except Exception as exc:  # noqa: BLE001 - the next change writes it again
            log.warning("could not publish the maintenance state", error=str(exc))

    def _marks_after_holds(self, lost: list[str], available: frozenset[str]) -> dict[int, list[str]]:
        """Ledgers to mark for ``lost``, minus what maintenance windows and the rack-loss guard hold
        back, plus (data first) every ledger the losses leave with a fragment below AQ."""
        now_s = self.clock()
        for b in list(self._lost_since):
            if b in available:
                del self._lost_since[b]
        for b in lost:
            self._lost_since.setdefault(b, now_s)
        settle = float(self.tracker.previous_delay) if self.tracker is not None else 0.0
        h = holds(lost, available, self._location_of, self.windows, self.wall_ms(),
                  self.settings.autorecovery_down_out_subtree_limit, lost_since_s=self._lost_since, now_s=now_s,
                  settle_s=settle)
        self._pending_holds = h
        if h.settle_at_s is not None:
            if self._settle_timer is not None:
                self._settle_timer.cancel()
            self._settle_timer = asyncio.get_running_loop().call_later(
                max(0.0, h.settle_at_s - now_s) + 0.01, self._events.put_nowait, ("retry_audit", None))
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
