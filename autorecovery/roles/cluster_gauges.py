"""Gauges an operator alerts on, exported so that ``sum()`` and ``max()`` over nodes are right (EDGE).

Upstream exports no current under-replication figure: ``auditor_NUM_UNDER_REPLICATED_LEDGERS`` is an
OpStats recorded per audit (how many ledgers one publish marked), so its last value says nothing about
the queue now (issue 9: it "stayed 12 while the queue was empty"). Upstream's ``AuditorStats`` declares
an ``underReplicatedLedgersGuageValue`` but never registers it. Ours, Prometheus style:

==================================================  ======  ===============================================
name                                                where   value
==================================================  ======  ===============================================
``autorecovery_auditor_elected``                    every   1 on the elected auditor, else 0
``autorecovery_enabled``                            every   1 unless ``underreplication/disable`` exists
``autorecovery_underreplicated_ledgers``            auditor markers under ``underreplication/ledgers``
``autorecovery_underreplicated_bytes``              auditor sum of metadata ``length`` of marked ledgers
``autorecovery_unrecoverable_ledgers``              auditor marked ledgers with an ``unrecoverable/urL…``
                                                            side znode (surfaced by a worker)
``autorecovery_underreplicated_oldest_age_seconds`` auditor now − ctime of the oldest marker (s)
``autorecovery_underreplicated_ledgers_by_namespace`` auditor marked ledgers per Pulsar namespace
                                                            (label ``namespace``; see below)
``autorecovery_unrecoverable_ledgers_by_namespace`` auditor unrecoverable ledgers per Pulsar namespace
==================================================  ======  ===============================================

**By namespace** (ours; apache/pulsar#9099: operators think in topics, not ledger ids): the namespace
comes from each marked ledger's ``pulsar/managed-ledger`` custom metadata (read once per marked ledger
and cached while it stays marked; ``not Pulsar`` when absent). Cardinality is bounded: the
``auditorTopicMetricsMaxNamespaces`` namespaces (default 20) with the most marked ledgers get a series
each, every other namespace (and a ledger whose metadata could not be read yet) is summed into
``namespace="other"``, so the series of a family sum to the unlabelled gauge. A namespace that leaves
the top N loses its series; the auditor that stops drops them all (absent elsewhere, so ``sum()`` and
``max()`` over daemons are the auditor's figure).

The four cluster-wide gauges are 0 on every node that is not the auditor (registered at 0 by
:class:`NodeGauges` on every daemon, reset to 0 when an auditor stops), so ``sum()`` over nodes is the
cluster figure and ``max()`` is too. The auditor refreshes them on every marker created or deleted (the
watches of :meth:`UnderreplicationManager.watched_marked_ids`: no read) and on every change of the
side-znode directory (its listing is read once per change of it), at most every
:data:`COALESCE_S_PER_MARKER` per marker queued (a recount is O(queue)); marker data is read once per
marker (for its ctime). The oldest age is computed at collection time, so it grows between changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from autorecovery import metrics
from autorecovery.audit.topics import OTHER, names_of, namespace_series
from autorecovery.errors import AutoRecoveryError, NoSuchLedgerError
from autorecovery.ledger.ids import ledger_id_from_ur_leaf
from autorecovery.zk.bridge import NoNodeError, SessionEvent, ZkClient
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

log = structlog.get_logger("autorecovery.gauges")

SCOPE = "autorecovery"
ELECTED = "auditor_elected"
ENABLED = "enabled"
UR_LEDGERS = "underreplicated_ledgers"
UR_BYTES = "underreplicated_bytes"
UNRECOVERABLE = "unrecoverable_ledgers"
OLDEST_AGE = "underreplicated_oldest_age_seconds"
CLUSTER_GAUGES = (UR_LEDGERS, UR_BYTES, UNRECOVERABLE, OLDEST_AGE)
UR_BY_NS = "underreplicated_ledgers_by_namespace"
UNRECOVERABLE_BY_NS = "unrecoverable_ledgers_by_namespace"
#: Default of ``auditorTopicMetricsMaxNamespaces``: namespaces with a series of their own.
DEFAULT_TOP_NAMESPACES = 20
_NS_DOCS = {
    UR_BY_NS: "marked under-replicated ledgers per Pulsar namespace (top auditorTopicMetricsMaxNamespaces, "
              "the rest in namespace=other); exported by the auditor only",
    UNRECOVERABLE_BY_NS: "unrecoverable ledgers per Pulsar namespace (same namespaces); exported by the auditor only",
}
#: Recounts are spaced by this per marker queued, s (at most :data:`MAX_COALESCE_S`).
COALESCE_S_PER_MARKER = 1e-4
MAX_COALESCE_S = 1.0

_DOCS = {
    ELECTED: "1 on the node that is the elected auditor, 0 elsewhere",
    ENABLED: "1 while AutoRecovery is enabled (no underreplication/disable znode), else 0",
    UR_LEDGERS: "under-replicated ledgers (markers) in the cluster; exported by the auditor only, 0 elsewhere",
    UR_BYTES: "sum of the metadata length (bytes) of under-replicated ledgers; auditor only, 0 elsewhere",
    UNRECOVERABLE: "marked ledgers surfaced as unrecoverable (no replica holds some entries); auditor only",
    OLDEST_AGE: "age (s) of the oldest under-replication marker; auditor only, 0 elsewhere or when none",
}


def register(registry: metrics.MetricsRegistry) -> dict[str, metrics.Gauge]:
    """The six gauges in ``registry`` (created at 0 when new). Returns short name → gauge."""
    return {n: registry.gauge(SCOPE, n, doc=_DOCS[n]) for n in (ELECTED, ENABLED, *CLUSTER_GAUGES)}


class NodeGauges:
    """Per-node gauges: ``autorecovery_auditor_elected`` (set by the daemon) and ``autorecovery_enabled``
    (an exists-watch on the disable znode, re-armed after every event and every reconnect). Registers
    the auditor-only gauges at 0 so every node exports them.

    Args: zk (started), paths, registry.
    """

    def __init__(self, zk: ZkClient, paths: Paths, registry: metrics.MetricsRegistry | None = None) -> None:
        self.zk, self.paths = zk, paths
        self.g = register(registry or metrics.REGISTRY)
        self.g[ELECTED].set(0)
        self._kick = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._session_q: asyncio.Queue | None = None

    def set_elected(self, elected: bool) -> None:
        self.g[ELECTED].set(1 if elected else 0)

    async def start(self) -> NodeGauges:
        """Read the disable znode once (raises ZooKeeper errors) and keep watching it."""
        self._session_q = self.zk.session_events()
        await self._read()
        self._task = asyncio.create_task(self._loop(), name="node-gauges")
        return self

    async def _read(self) -> None:
        stat = await self.zk.exists(self.paths.ur_disable, watch=lambda _e: self._kick.set())
        self.g[ENABLED].set(0 if stat is not None else 1)

    async def _loop(self) -> None:
        assert self._session_q is not None
        q = self._session_q

        async def sessions() -> None:
            while True:
                if await q.get() in (SessionEvent.CONNECTED, SessionEvent.LOST):
                    self._kick.set()  # watches may be gone: read and re-arm

        feeder = asyncio.create_task(sessions())
        try:
            while True:
                await self._kick.wait()
                self._kick.clear()
                try:
                    await self._read()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - retried on the next reconnect
                    log.warning("could not read the AutoRecovery switch", path=self.paths.ur_disable, error=repr(exc))
        finally:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._session_q is not None:
            self.zk.unsubscribe(self._session_q)
            self._session_q = None


class ClusterGauges:
    """The auditor's cluster-wide gauges (see the module docstring); run :meth:`run` while elected and
    :meth:`reset` when the auditor stops.

    Args:
        urm: the auditor's :class:`UnderreplicationManager` (its watches drive the refresh).
        zk, paths: the auditor's session and the cluster's paths (side znodes).
        length_of: ledger ids → total metadata ``length`` in bytes (the auditor's index).
        registry: metrics registry. wall_ms: wall clock, ms since the epoch (marker ctimes are wall ms).
        quiet: a lock the auditor holds while it writes markers; a refresh starts only when it is free,
            so a burst of markers is counted once at its end and the audit's ZooKeeper-op count stays
            its own (the refresh never holds it: it never delays marking).
    """

    def __init__(self, urm: UnderreplicationManager, zk: ZkClient, paths: Paths,
                 length_of: Callable[[list[int]], int], registry: metrics.MetricsRegistry | None = None,
                 wall_ms: Callable[[], int] | None = None, quiet: asyncio.Lock | None = None,
                 top_namespaces: int = DEFAULT_TOP_NAMESPACES) -> None:
        self.urm, self.zk, self.paths = urm, zk, paths
        self.registry = registry or metrics.REGISTRY
        self.top_namespaces = top_namespaces
        self._store = LedgerStore(zk, paths)
        self._ns: dict[int, str] = {}  # marked ledger id -> its Pulsar namespace (cached while marked)
        self._ns_series: set[str] = set()  # namespace labels exported now
        self.quiet = quiet
        self.length_of = length_of
        self.wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self.g = register(registry or metrics.REGISTRY)
        self._ctimes: dict[int, int] = {}  # marked ledger id -> marker ctime (ms), first-seen time if absent
        self._oldest_ms: int | None = None
        self._active = False
        self.refreshes = 0
        self._unrecoverable_names: list[str] | None = None  # cached while the directory's watch is armed

    def _age_s(self) -> float:
        if not self._active or self._oldest_ms is None:
            return 0.0
        return max(0.0, (self.wall_ms() - self._oldest_ms) / 1000.0)

    async def refresh(self, changed: asyncio.Event | None = None) -> None:
        """Recount from ZooKeeper (through the watch cache) and set the gauges; arms the watches that set
        ``changed`` (the marker hierarchy through ``urm``, the side-znode directory directly)."""
        ids = set(await self.urm.watched_marked_ids())
        for lid in list(self._ctimes):
            if lid not in ids:
                del self._ctimes[lid]
        new = [lid for lid in ids if lid not in self._ctimes]
        now = self.wall_ms()
        sem = asyncio.Semaphore(64)

        async def ctime(lid: int) -> None:
            async with sem:
                m = await self.urm.get_marker(lid)
            if m is not None:
                self._ctimes[lid] = m.ctime if m.ctime >= 0 else now

        await asyncio.gather(*(ctime(lid) for lid in new))
        names = self._unrecoverable_names
        if names is None or changed is None:
            names = await self._read_unrecoverable(changed)
        unrecoverable = 0
        unrec_ids: set[int] = set()
        for n in names:
            with contextlib.suppress(ValueError):
                lid_u = ledger_id_from_ur_leaf(n)
                if lid_u in ids:
                    unrecoverable += 1
                    unrec_ids.add(lid_u)
        await self._refresh_namespaces(ids, unrec_ids, sem)
        marked = sorted(self._ctimes)
        self._active = True
        self.g[UR_LEDGERS].set(len(marked))
        self.g[UR_BYTES].set(self.length_of(marked))
        self.g[UNRECOVERABLE].set(unrecoverable)
        self._oldest_ms = min(self._ctimes.values()) if self._ctimes else None
        self.g[OLDEST_AGE].set_function(self._age_s)
        self.refreshes += 1

    async def _refresh_namespaces(self, ids: set[int], unrec_ids: set[int], sem: asyncio.Semaphore) -> None:
        """The by-namespace gauges (module docstring): metadata read for newly marked ledgers only."""
        for lid in list(self._ns):
            if lid not in ids:
                del self._ns[lid]

        async def read(lid: int) -> None:
            async with sem:
                try:
                    md, _ = await self._store.read(lid)
                except NoSuchLedgerError:
                    return  # deleted: its marker goes too
                except AutoRecoveryError:
                    return  # not cached: counted as "other" and read again on the next refresh
            self._ns[lid] = names_of(md.custom_metadata)[1]

        await asyncio.gather(*(read(lid) for lid in ids if lid not in self._ns))
        counts: dict[str, dict[str, int]] = {}
        for lid in ids:
            c = counts.setdefault(self._ns.get(lid, OTHER), {"under_replicated": 0, "unrecoverable": 0})
            c["under_replicated"] += 1
            if lid in unrec_ids:
                c["unrecoverable"] += 1
        series = namespace_series(counts, self.top_namespaces)
        now = {ns for ns, _ in series}
        for ns in self._ns_series - now:
            for name in (UR_BY_NS, UNRECOVERABLE_BY_NS):
                self.registry.remove(f"{SCOPE}_{name}", {"namespace": ns})
        families = {"under_replicated": UR_BY_NS, "unrecoverable": UNRECOVERABLE_BY_NS}
        for (ns, status), value in series.items():
            family = families.get(status)
            if family is not None:
                self.registry.gauge(SCOPE, family, labels={"namespace": ns}, doc=_NS_DOCS[family]).set(value)
        self._ns_series = now

    async def _read_unrecoverable(self, changed: asyncio.Event | None) -> list[str]:
        """The side-znode directory's names, kept until its watch fires (one read per change of the
        directory, not per marker change)."""
        def on_event(_e) -> None:
            self._unrecoverable_names = None
            if changed is not None:
                changed.set()

        cb = on_event if changed is not None else None
        try:
            names = await self.zk.get_children(self.paths.unrecoverable, watch=cb)
        except NoNodeError:
            names = []
            if cb is not None:
                await self.zk.exists(self.paths.unrecoverable, watch=cb)
        if cb is not None:
            self._unrecoverable_names = names
        return names

    async def run(self) -> None:
        """Refresh now and after every change (marker created/deleted, side znode, reconnect); a failed
        refresh is retried on the next change or after 5 s. Runs until cancelled, then resets."""
        changed = self.urm.subscribe()
        try:
            while True:
                changed.clear()
                try:
                    if self.quiet is not None:
                        async with self.quiet:  # wait for the marker writes in progress to end
                            pass
                    await self.refresh(changed)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: the next change/5 s retries
                    log.warning("could not refresh the under-replication gauges", error=repr(exc))
                    # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
                    # arrives as the event is set, and the auditor's stop() would then hang
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(5.0):
                            await changed.wait()
                    continue
                await changed.wait()
                # a heal deletes markers one by one: recount at most every len(queue) x 100 µs (1 s at
                # 10,000 markers), not per marker (each recount is O(queue))
                pause = min(MAX_COALESCE_S, len(self._ctimes) * COALESCE_S_PER_MARKER)
                if pause > 0.01:
                    await asyncio.sleep(pause)
        finally:
            self.urm.unsubscribe(changed)
            self.reset()

    def reset(self) -> None:
        """Not the auditor any more: every cluster-wide gauge back to 0."""
        self._active = False
        self._unrecoverable_names = None
        self._ctimes.clear()
        self._oldest_ms = None
        for n in (UR_LEDGERS, UR_BYTES, UNRECOVERABLE):
            self.g[n].set(0)
        for ns in self._ns_series:  # the by-namespace series are the auditor's only: absent elsewhere
            for name in (UR_BY_NS, UNRECOVERABLE_BY_NS):
                self.registry.remove(f"{SCOPE}_{name}", {"namespace": ns})
        self._ns_series = set()
        self._ns.clear()
        self.g[OLDEST_AGE].set_function(self._age_s)


__all__ = ["NodeGauges", "ClusterGauges", "register", "CLUSTER_GAUGES"]
