"""The Auditor's heal history: open, follow and close heal episodes, publish its state (EDGE).

Ours (upstream keeps no history). The rules are :mod:`autorecovery.audit.episodes`, the znodes
:mod:`autorecovery.zk.history`. The elected auditor's :class:`HealRecorder`:

* **opens** an episode when the auditor writes markers for ledgers that were not marked before (a lost
  bookie, a rack, a placement/replicas/ledger check): one create, and an INFO line;
* **follows** every open episode on marker changes (the watches the gauges use: no read), at most
  every ``min_step_s`` (1 s): one setData per episode whose figures changed, plus one get_children of
  ``underreplication/unrecoverable``. Who healed: the lock holders (daemons) seen while the episode is
  open (one read per lock created, from a child watch on ``underreplication/locks``) and the bookies a
  healed ledger's ensembles gained since it was marked (from the auditor's index, no read);
* **closes** it when its ledgers are healed (or unrecoverable/blocked for ``SETTLE_MS``): the final
  record, an INFO line with the figures, ``autorecovery_heal_episodes_total{kind,state}``;
* on election **continues** the open episodes it finds (their ids are in the records), so an auditor
  change keeps them, and publishes the cluster state (lost bookies since when, last check times,
  under-replicated figures) in ``underreplication/history`` for ``shell overview`` on any node.

Metrics (auditor only, 0 on other nodes, so ``sum()`` and ``max()`` over daemons are the cluster's):
``autorecovery_heal_episodes_open``, ``autorecovery_heal_last_episode_duration_seconds``,
``autorecovery_heal_last_episode_ledgers``, ``autorecovery_heal_last_episode_bytes`` (the newest closed
episode, read back from ZooKeeper on election). ``autorecovery_heal_episodes_total{kind,state}``
counts the closes made by this node while auditor (sum over nodes = every close, each counted once).

A failure to write history is a WARNING and never stops marking; a bad record is skipped with a
one-line error naming its znode.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import structlog

from autorecovery import metrics
from autorecovery.audit import episodes as E
from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.lost_bookies import lost_since_after
from autorecovery.ledger.ids import ledger_id_from_ur_leaf
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.zk.history import HistoryStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

log = structlog.get_logger("autorecovery.history")

SCOPE = "autorecovery"
_DOCS = {
    "heal_episodes_open": "heal episodes open now; exported by the auditor only, 0 elsewhere (ours)",
    "heal_last_episode_duration_seconds":
        "detection to close of the newest closed heal episode (s); auditor only, 0 elsewhere (ours)",
    "heal_last_episode_ledgers": "ledgers marked by the newest closed heal episode; auditor only (ours)",
    "heal_last_episode_bytes": "bytes marked by the newest closed heal episode; auditor only (ours)",
    "heal_episodes_total": "heal episodes this node closed while auditor, by kind and final state (ours)",
}
#: lock reads per lock-directory change at most (the rest are read on the next change)
MAX_LOCK_READS = 256


def _bookies_of(index: BookieLedgerIndex, lid: int) -> frozenset[str]:
    md = index.get(lid)
    if md is None:
        return frozenset()
    return frozenset(b for seg in md.segments for b in seg.ensemble)


class HealRecorder:
    """Heal episodes of one elected auditor (see the module docstring).

    Args:
        zk, paths: the auditor's session and the cluster's paths.
        urm: the auditor's :class:`UnderreplicationManager` (watched marker ids, change events).
        index: the auditor's bookie → ledgers index (ledger lengths and ensembles).
        bookie_id: this auditor's id. wall_ms: ms since the epoch.
        checks: ``() -> {check name: CheckResult}`` (the auditor's ``last_results``).
        figures: ``() -> {"ledgers", "bytes", "unrecoverable"}`` (the cluster gauges).
        blocked: ``() -> ledger ids that cannot progress now`` (optional).
        min_step_s: least time between two progress steps, s.
    """

    def __init__(self, zk: ZkClient, paths: Paths, urm: UnderreplicationManager, index: BookieLedgerIndex, *,
                 bookie_id: str, wall_ms: Callable[[], int] | None = None,
                 checks: Callable[[], Mapping[str, Any]] | None = None,
                 figures: Callable[[], Mapping[str, int]] | None = None,
                 blocked: Callable[[], Iterable[int]] | None = None,
                 registry: metrics.MetricsRegistry | None = None, min_step_s: float = 1.0,
                 settle_ms: int = E.SETTLE_MS) -> None:
        self.zk, self.paths, self.urm, self.index = zk, paths, urm, index
        self.store = HistoryStore(zk, paths)
        self.bookie_id = bookie_id
        self.wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self.checks = checks or (lambda: {})
        self.figures = figures or (lambda: {})
        self.blocked = blocked or (lambda: ())
        self.min_step_s = min_step_s
        self.settle_ms = settle_ms
        self.episodes: dict[str, E.Episode] = {}  # open ones, by znode name
        self._bookies_at_mark: dict[int, frozenset[str]] = {}
        self._holders: dict[int, str] = {}  # ledger id -> lock holder seen
        self._seen_locks: set[str] = set()
        self.lost_since: dict[str, int] = {}
        self._state_written: dict[str, Any] | None = None
        self._elected_ms = self.wall_ms()
        self._kick = asyncio.Event()
        self._locks_changed = asyncio.Event()
        self.steps = 0
        reg = registry or metrics.REGISTRY
        self.g = {n: reg.gauge(SCOPE, n, doc=_DOCS[n]) for n in (
            "heal_episodes_open", "heal_last_episode_duration_seconds", "heal_last_episode_ledgers",
            "heal_last_episode_bytes")}
        self._reg = reg
        # every (kind, final state) series exists from election on, at 0 (bounded: 8 kinds x 3 states), so
        # rate()/increase() see the first close
        for kind in E.KINDS:
            for state in E.STATES[1:]:
                self._closes(kind, state)

    def _closes(self, kind: str, state: str) -> metrics.Counter:
        return self._reg.counter(SCOPE, "heal_episodes_total", labels={"kind": kind, "state": state},
                                 doc=_DOCS["heal_episodes_total"])

    # -- lifecycle --------------------------------------------------------------------------------------
    async def start(self, lost: Iterable[str]) -> None:
        """Continue the open episodes found in ZooKeeper (this auditor is added to their ``auditors``),
        read the newest closed one into the gauges and the lost bookies' since-times of the previous
        state. Never raises for bad records (logged, one line each)."""
        listing = await self.store.listing()
        for line in listing.errors:  # WARNING: healing goes on; the record is skipped, not lost data
            log.warning(line)
        closed = [e for e in listing.episodes if not e.open]
        if closed:
            self._set_last(closed[-1])
        state, bad = await self.store.read_state()
        if bad:
            log.warning(bad)
        lost_doc = state.get("lost")
        prev: dict[str, Any] = lost_doc if isinstance(lost_doc, dict) else {}
        now = self.wall_ms()
        for b in lost:
            v = prev.get(b)
            self.lost_since[b] = v if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= now else now
        for ep in listing.episodes:
            if ep.open:
                ep = E.with_auditor(ep, self.bookie_id)
                self.episodes[ep.name] = ep
                log.info(f"heal episode continued by the new auditor: {E.log_line(ep)}", episode=ep.name,
                         kind=ep.kind, ledgers_left=ep.ledgers_left)
                try:
                    await self.store.update(ep)
                except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.debug("best-effort step failed", step="start", error=repr(cleanup_exc))
        self.g["heal_episodes_open"].set(len(self.episodes))
        self._kick.set()
        if self.episodes:
            self._locks_changed.set()  # follow the workers of the continued episodes too

    def reset(self) -> None:
        """Not the auditor any more: the auditor-only gauges back to 0."""
        for g in self.g.values():
            g.set(0)

    def _set_last(self, ep: E.Episode) -> None:
        self.g["heal_last_episode_duration_seconds"].set(ep.duration_s or 0.0)
        self.g["heal_last_episode_ledgers"].set(ep.ledgers_marked)
        self.g["heal_last_episode_bytes"].set(ep.bytes_marked)

    # -- inputs -----------------------------------------------------------------------------------------
    def note_bookies(self, available: Iterable[str], known: Iterable[str]) -> None:
        """Membership changed: ``known`` − ``available`` are lost (since now unless known earlier)."""
        self.lost_since = lost_since_after(self.lost_since, known, available, self.wall_ms())
        self._kick.set()

    def claimed(self) -> set[int]:
        out: set[int] = set()
        for ep in self.episodes.values():
            out |= ep.ids
        return out

    async def record(self, kind: str, subject: str, ledger_ids: Iterable[int], before: Iterable[int]) -> E.Episode | None:
        """Open an episode for the ledgers of ``ledger_ids`` that were not marked ``before`` and belong to
        no open episode; None when there are none. Never raises (a failed write is a WARNING)."""
        try:
            prior = set(before) | self.claimed()
            new = [lid for lid in ledger_ids if lid not in prior]
            if not new:
                return None
            lengths = {lid: self.index.total_length([lid]) for lid in new}
            ep = E.opened(kind, subject, lengths, self.wall_ms(), self.bookie_id)
            name = await self.store.create(ep)
            ep = replace(ep, name=name)
            self.episodes[name] = ep
            for lid in new:
                self._bookies_at_mark[lid] = _bookies_of(self.index, lid)
            self.g["heal_episodes_open"].set(len(self.episodes))
            log.info(f"heal episode opened: {E.log_line(ep)}", episode=name, kind=kind, subject=subject,
                     ledgers=ep.ledgers_marked, bytes=ep.bytes_marked)
            gone = await self.store.trim(list(self.episodes))
            for n in gone:
                self.episodes.pop(n, None)
            self._kick.set()
            self._locks_changed.set()
            return ep
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - history never stops marking
            log.warning("could not record a heal episode", kind=kind, subject=subject, error=repr(exc))
            return None

    # -- the loops --------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Follow the episodes and publish the state until cancelled (then the gauges go to 0)."""
        changed = self.urm.subscribe()
        locks = asyncio.ensure_future(self._follow_locks())
        try:
            while True:
                changed.clear()
                self._kick.clear()
                try:
                    await self.step()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: the next change retries
                    log.warning("could not update the heal history", error=repr(exc))
                waits = [asyncio.ensure_future(changed.wait()), asyncio.ensure_future(self._kick.wait())]
                try:
                    await asyncio.wait(waits, timeout=5.0, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()
                await asyncio.sleep(self.min_step_s)  # coalesce a heal's burst of marker deletions
        finally:
            locks.cancel()
            await asyncio.gather(locks, return_exceptions=True)
            self.urm.unsubscribe(changed)
            self.reset()

    async def _follow_locks(self) -> None:
        """While episodes are open, read the holder of every new lock (a child watch on ``locks``)."""
        while True:
            await self._locks_changed.wait()
            self._locks_changed.clear()
            if not self.episodes:
                continue
            try:
                names = await self.zk.get_children(self.paths.ur_locks, watch=lambda _e: self._locks_changed.set())
            except NoNodeError:
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the next change re-reads
                log.warning("could not list the replication locks", path=self.paths.ur_locks, error=repr(exc))
                await asyncio.sleep(1.0)
                self._locks_changed.set()
                continue
            claimed = self.claimed()
            fresh = [n for n in names if n not in self._seen_locks][:MAX_LOCK_READS]
            self._seen_locks &= set(names)
            for n in fresh:
                self._seen_locks.add(n)
                try:
                    lid = ledger_id_from_ur_leaf(n)
                except ValueError:
                    continue
                if lid not in claimed:
                    continue
                try:
                    holder = await self.urm.lock_holder(lid)
                    if holder:
                        self._holders[lid] = holder
                except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.debug("best-effort step failed", step="_follow_locks", error=repr(cleanup_exc))

    async def _unrecoverable_ids(self) -> set[int]:
        try:
            names = await self.zk.get_children(self.paths.unrecoverable)
        except NoNodeError:
            return set()
        out = set()
        for n in names:
            with contextlib.suppress(ValueError):
                out.add(ledger_id_from_ur_leaf(n))
        return out

    async def step(self) -> None:
        """One progress step: advance every open episode, write what changed, close what is done, and
        publish the state when it changed."""
        self.steps += 1
        now = self.wall_ms()
        if self.episodes:
            marked = set(await self.urm.watched_marked_ids())
            unrec = await self._unrecoverable_ids()
            blocked = set(self.blocked())
            for name, ep in list(self.episodes.items()):
                healed_now = [i for i in ep.ids if i not in marked]
                workers: dict[str, int] = {}
                targets: dict[str, int] = {}
                lengths: dict[int, int] = {}
                for lid in healed_now:
                    lengths[lid] = self.index.total_length([lid])
                    h = self._holders.pop(lid, None)
                    if h:
                        workers[h] = workers.get(h, 0) + 1
                    before = self._bookies_at_mark.pop(lid, None)
                    if before is not None:
                        for b in _bookies_of(self.index, lid) - before:
                            targets[b] = targets.get(b, 0) + 1
                new, _ = E.advance(ep, marked, unrec, blocked, lengths, now, workers=workers, copied_to=targets,
                                   settle_ms=self.settle_ms)
                if (new.ledgers_left, new.ledgers_blocked, new.ledgers_unrecoverable, new.state) == (
                        ep.ledgers_left, ep.ledgers_blocked, ep.ledgers_unrecoverable, ep.state):
                    self.episodes[name] = new  # nothing to write
                    continue
                await self.store.update(new)
                if new.open:
                    self.episodes[name] = new
                    continue
                del self.episodes[name]
                for lid in new.ids:
                    self._bookies_at_mark.pop(lid, None)
                self._set_last(new)
                self._closes(new.kind, new.state).inc()
                log.info(f"heal episode closed: {E.log_line(new)}", episode=name, kind=new.kind, state=new.state,
                         duration_s=round(new.duration_s or 0.0, 3), ledgers_healed=new.ledgers_healed,
                         bytes_healed=new.bytes_healed, unrecoverable=new.ledgers_unrecoverable,
                         blocked=new.ledgers_blocked, workers=dict(new.workers), copied_to=dict(new.copied_to))
            self.g["heal_episodes_open"].set(len(self.episodes))
        await self._publish_state(now)

    def state(self, now_ms: int) -> dict[str, Any]:
        """The published state document (see :mod:`autorecovery.zk.history`)."""
        checks: dict[str, Any] = {}
        for name, r in self.checks().items():
            checks[name] = {"started_ms": getattr(r, "started_ms", None), "ok": getattr(r, "ok", None),
                            "skipped": getattr(r, "skipped", "") or ""}
        fig = dict(self.figures())
        return {"v": 1, "auditor": self.bookie_id, "elected_ms": self._elected_ms,
                "lost": dict(sorted(self.lost_since.items())), "checks": checks,
                "underreplicated": {k: int(fig.get(k, 0)) for k in ("ledgers", "bytes", "unrecoverable")},
                "open_episodes": sorted(self.episodes), "updated_ms": now_ms}

    async def _publish_state(self, now_ms: int) -> None:
        doc = self.state(now_ms)
        same = dict(doc)
        same.pop("updated_ms")
        if same == self._state_written:
            return
        await self.store.write_state(doc)
        self._state_written = same


__all__ = ["HealRecorder"]
