"""Cluster-wide per-bookie copy-stream caps: a counting semaphore per bookie in ZooKeeper (EDGE).

``replicationMaxStreamsPerSourceBookie`` / ``replicationMaxStreamsPerTargetBookie`` bound the copy
streams reading from / writing to one bookie. A per-process cap lets N workers open N × cap streams
on one bookie; these slots make the bound hold for the whole cluster (issue 12). Upstream has no
such bound (only ``replicationRateByBytes`` per worker).

Layout (ours): ``<root>/underreplication/streams/<bookie id>/src-<n>`` and ``.../tgt-<n>``,
``0 <= n < cap``, **ephemeral** znodes holding JSON ``{"owner": "<worker>"}``. Taking a slot is creating the first
free one; releasing is deleting it; a worker that dies releases its slots with its session. A copy
takes its source slot and every target slot all together or none (a partial hold would deadlock two
workers waiting for each other's bookies); when one is full it gives back what it took and waits on
a child watch of the full bookie's directory (a release wakes it), with a bounded fallback wait in case
the watch fires before it is armed.

One process runs many copies at once (``replicationWorkerConcurrentLedgers``), so it shares its ZooKeeper
work among them: each bookie's slot listing is read once per change (the read arms the child watch; the
listing is kept until the watch fires, or :data:`FALLBACK_WAIT_S` at most in case the watch was lost)
and the process's waiters wait on that one watch; attempts to take slots are made one at a time per
process. A release then costs each waiting process one read, not one read per waiting copy (seen as
hundreds of reads and failed creates per second in a heal with five workers).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Mapping

from autorecovery.zk.bridge import NodeExistsError, NoNodeError, ZkClient
from autorecovery.zk.paths import Paths

SOURCE, TARGET = "src", "tgt"
#: Longest wait between attempts when no release was seen (a watch lost on a reconnect), s.
FALLBACK_WAIT_S = 5.0


class ClusterStreamSlots:
    """Per-bookie stream slots shared by every worker of the cluster.

    Args:
        zk / paths: the cluster.
        max_per_source / max_per_target: slots per bookie (<= 0: unlimited, nothing is written).
        owner: text stored in the slot znodes (lock owner / host name), for operators.
    """

    def __init__(self, zk: ZkClient, paths: Paths, max_per_source: int, max_per_target: int, owner: str) -> None:
        self.zk, self.paths = zk, paths
        self.caps = {SOURCE: max_per_source, TARGET: max_per_target}
        self.owner = json.dumps({"owner": owner}, sort_keys=True).encode()
        self.waits = 0  # times an acquire had to wait (metrics/tests)
        #: bookie → (slot names when read, event set when its child watch fired, monotonic read time)
        self._views: dict[str, tuple[list[str] | None, asyncio.Event, float]] = {}
        self._attempt = asyncio.Lock()  # one attempt to take slots at a time in this process

    def _dir(self, bookie: str) -> str:
        return f"{self.paths.underreplication}/streams/{bookie}"

    async def _held(self, bookie: str) -> list[str] | None:
        """Slot names held on ``bookie`` (None when its directory does not exist yet): this process's
        view, read again (arming a child watch) once the watch fired or the view is
        :data:`FALLBACK_WAIT_S` old."""
        return (await self._view(bookie))[0]

    async def _view(self, bookie: str) -> tuple[list[str] | None, asyncio.Event, float]:
        loop = asyncio.get_running_loop()
        view = self._views.get(bookie)
        if view is not None and not view[1].is_set() and loop.time() - view[2] < FALLBACK_WAIT_S:
            return view
        changed = asyncio.Event()

        def on_event(_e) -> None:  # the bridge runs watch callbacks on the event loop
            changed.set()

        try:
            held: list[str] | None = await self.zk.get_children(self._dir(bookie), watch=on_event)
        except NoNodeError:
            held = None
            changed.set()  # no directory, no watch: read again next time
        view = (held, changed, loop.time())
        self._views[bookie] = view
        return view

    def _forget(self, bookie: str) -> None:
        """Drop the view of ``bookie`` after this process changed its slots."""
        self._views.pop(bookie, None)

    def _free(self, held: Collection[str] | None, kind: str) -> list[str]:
        names = set(held or ())
        return [f"{kind}-{n}" for n in range(self.caps[kind]) if f"{kind}-{n}" not in names]

    async def _take(self, bookie: str, kind: str) -> str | None:
        """Create a free ``<kind>-<n>`` slot of ``bookie``; None when all are taken.

        The directory is read first and only slots seen free are tried, so a full bookie costs one
        read, not ``cap`` failed creates (every create is a ZooKeeper write)."""
        base = self._dir(bookie)
        for name in self._free(await self._held(bookie), kind):
            path = f"{base}/{name}"
            self._forget(bookie)
            try:
                await self.zk.create(path, self.owner, ephemeral=True, makepath=True)
                return path
            except NodeExistsError:  # taken since the read
                continue
        return None

    async def acquire(self, source: str, targets: Collection[str]) -> list[str]:
        """Take a source slot on ``source`` and a target slot on every target, all or none; waits while
        a bookie is full. Returns the slot paths to pass to :meth:`release`.

        While any bookie is full nothing is written: every wanted bookie is checked with a read first,
        and the caller waits on the full one's child watch. Without this, every release woke each
        waiter into taking (and giving back) its source slot and trying every target slot: a burst of
        ZooKeeper writes, each synced to its log, per release (seen as slow heals into one bookie).

        Raises:
            ZooKeeperError: ZooKeeper unreachable (nothing is held).
        """
        wanted = [(source, SOURCE)] + [(t, TARGET) for t in sorted(set(targets))]
        wanted = [(b, k) for b, k in wanted if self.caps[k] > 0]
        while True:
            full: tuple[str, str] | None = None
            async with self._attempt:
                for bookie, kind in wanted:
                    if not self._free(await self._held(bookie), kind):
                        full = (bookie, kind)
                        break
                if full is None:
                    taken: list[str] = []
                    try:
                        for bookie, kind in wanted:
                            path = await self._take(bookie, kind)
                            if path is None:
                                full = (bookie, kind)
                                break
                            taken.append(path)
                    except BaseException:
                        await self.release(taken)
                        raise
                    if full is None:
                        return taken
                    await self.release(taken)  # lost a race for the last slot: give back, then wait
            self.waits += 1
            await self._wait_for_release(*full)
            # the bookie that was full is the contended one: try it first, so that losing the race for
            # its freed slot costs one failed create and no slot taken and given back elsewhere
            wanted.sort(key=lambda bk: bk != full)

    async def _wait_for_release(self, bookie: str, kind: str) -> None:
        """Wait until a slot of ``bookie`` may be free: its child watch fires (one watch shared by the
        process's waiters), the listing already shows a free slot, or :data:`FALLBACK_WAIT_S` passes."""
        held, changed, _at = await self._view(bookie)
        if held is None or self._free(held, kind):
            return
        try:
            await asyncio.wait_for(changed.wait(), FALLBACK_WAIT_S)
        except asyncio.TimeoutError:
            self._forget(bookie)  # the watch may be lost (a session expiry): read again

    async def release(self, taken: Collection[str]) -> None:
        """Delete the slots in ``taken`` (missing ones ignored: the session may have expired)."""
        for path in taken:
            self._forget(path.rsplit("/", 2)[-2])
            try:
                await self.zk.delete(path)
            except NoNodeError:
                pass

    def targets_in_flight(self, own: Mapping[str, int] | None = None) -> dict[str, int]:
        """Bookie → copies known to be streaming into it, without any ZooKeeper read: per bookie the
        larger of ``own`` (this process's streams) and the target slots in this process's last listing
        of the bookie's slot directory (every worker's; only bookies this process copied to lately).
        The cheap cross-daemon signal for spreading replacements (:mod:`autorecovery.placement.spread`)."""
        out = {b: int(n) for b, n in (own or {}).items() if n > 0}
        for bookie, (held, _changed, _at) in self._views.items():
            n = sum(1 for name in held or () if name.startswith(f"{TARGET}-"))
            if n > out.get(bookie, 0):
                out[bookie] = n
        return out

    async def holders(self, bookie: str) -> dict[str, str]:
        """Slot name → owner on ``bookie`` now (for the admin API and tests)."""
        out = {}
        try:
            names = await self.zk.get_children(self._dir(bookie))
        except NoNodeError:
            return out
        for n in sorted(names):
            try:
                data, _ = await self.zk.get(f"{self._dir(bookie)}/{n}")
            except NoNodeError:
                continue
            try:
                out[n] = str(json.loads(data.decode()).get("owner", "?"))
            except (ValueError, AttributeError):
                out[n] = data.decode(errors="replace")
        return out

