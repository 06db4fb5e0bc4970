"""Cluster-wide per-bookie copy-stream caps: a counting semaphore per bookie in ZooKeeper (EDGE).

``replicationMaxStreamsPerSourceBookie`` / ``replicationMaxStreamsPerTargetBookie`` bound the copy
streams reading from / writing to one bookie. A per-process cap lets N workers open N × cap streams
on one bookie; these slots make the bound hold for the whole cluster (issue 12). Upstream has no
such bound (only ``replicationRateByBytes`` per worker).

Layout (ours): ``<root>/underreplication/streams/<bookie id>/src-<n>`` and ``.../tgt-<n>``,
``0 <= n < cap``, **ephemeral** znodes holding JSON ``{"owner": "<worker>"}``. Taking a slot is creating the first
free one; releasing is deleting it; a worker that dies releases its slots with its session. A copy
takes its source slot and every target slot all together or none, in one ZooKeeper ``multi`` (a partial
hold would deadlock two workers waiting for each other's bookies), and gives them back in one ``multi``;
when one is full it waits on a child watch of the full bookie's directory (a release wakes it), with a
bounded fallback wait in case the watch fires before it is armed.

One process runs many copies at once (``replicationWorkerConcurrentLedgers``), so it shares its ZooKeeper
work among them: each bookie's slot listing is read once per change (the read arms the child watch; the
listing is kept until the watch fires, or :data:`FALLBACK_WAIT_S` at most in case the watch was lost)
and the process's waiters wait on that one watch; attempts to take slots are made one at a time per
process. A release then costs each waiting process one read, not one read per waiting copy (seen as
hundreds of reads and failed creates per second in a heal with five workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Collection, Mapping

import structlog

from autorecovery.errors import ZooKeeperError
from autorecovery.retry import Backoff
from autorecovery.zk.bridge import BadVersionError, NodeExistsError, NoNodeError, Op, ZkClient
from autorecovery.zk.paths import Paths

log = structlog.get_logger("autorecovery.zk.stream_slots")

SOURCE, TARGET = "src", "tgt"
#: Longest wait between attempts when no release was seen (a watch lost on a reconnect), s.
FALLBACK_WAIT_S = 5.0
#: Pause between two tries of a release that failed, s.
RELEASE_RETRY_S = 0.5


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
        #: bookie → slot names held as last seen, with this process's own takes and releases applied
        self._hints: dict[str, set[str]] = {}
        self.retries: set[asyncio.Task] = set()  # releases that failed, retried while the session lives

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
        self._hints[bookie] = set(held or ())
        return view

    def _forget(self, bookie: str) -> None:
        """Drop the view of ``bookie`` after this process changed its slots."""
        self._views.pop(bookie, None)

    def _free(self, held: Collection[str] | None, kind: str) -> list[str]:
        names = set(held or ())
        return [f"{kind}-{n}" for n in range(self.caps[kind]) if f"{kind}-{n}" not in names]

    def _hint(self, bookie: str, kind: str) -> str | None:
        """First ``<kind>-<n>`` slot free in this process's last known listing of ``bookie`` (a hint:
        kept up to date with this process's own takes and releases, possibly stale about others')."""
        free = self._free(self._hints.get(bookie), kind)
        return free[0] if free else None

    async def _create_all(self, names: list[tuple[str, str]]) -> list[str] | tuple[str, bool]:
        """Create the slots ``(bookie, name)`` in one ``multi`` (all or none). Returns the paths, or
        ``(bookie, taken)`` for the bookie whose op failed (``taken``: its slot was taken since the
        listing; otherwise its directory was missing and has been made).

        Raises:
            ZooKeeperError: ZooKeeper unreachable (slots this session may have made are deleted first).
        """
        paths = [f"{self._dir(b)}/{n}" for b, n in names]
        try:
            results = await self.zk.multi([Op("create", p, self.owner, ephemeral=True) for p in paths])
        except ZooKeeperError:
            await self._drop_own(paths)
            raise
        for i, r in enumerate(results):
            if isinstance(r, Exception) and type(r).__name__ not in ("RolledBackError", "RuntimeInconsistency"):
                bookie, name = names[i]
                self._forget(bookie)
                if isinstance(r, NoNodeError):
                    await self.zk.ensure_path(self._dir(bookie))
                    return bookie, False
                if isinstance(r, NodeExistsError):
                    self._hints.setdefault(bookie, set()).add(name)
                    return bookie, True
                raise r
        for b, n in names:
            self._hints.setdefault(b, set()).add(n)
            self._forget(b)
        return paths

    async def _drop_own(self, paths: list[str]) -> None:
        """After a lost connection: delete those of ``paths`` this session created (best effort)."""
        cid = self.zk.client_id
        for path in paths:
            try:
                stat = await self.zk.exists(path)
                if stat is not None and cid is not None and stat.ephemeralOwner == cid[0]:
                    await self.zk.delete(path)
            except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                log.debug("best-effort step failed", step="_drop_own", error=repr(cleanup_exc))

    async def acquire(self, source: str, targets: Collection[str]) -> list[str]:
        """Take a source slot on ``source`` and a target slot on every target, all or none, in one
        ``multi``; waits while a bookie is full. Returns the slot paths to pass to :meth:`release`.

        The slots to take come from this process's last listing of each bookie (no read when it shows
        a free slot: a stale listing costs one failed transaction, then a read). While any bookie is
        full nothing is written: its directory is read again and the caller waits on its child watch.
        Without this, every release woke each waiter into taking (and giving back) its source slot and
        trying every target slot: a burst of ZooKeeper writes, each synced to its log, per release
        (seen as slow heals into one bookie).

        Raises:
            ZooKeeperError: ZooKeeper unreachable (nothing is held).
        """
        wanted = [(source, SOURCE)] + [(t, TARGET) for t in sorted(set(targets))]
        wanted = [(b, k) for b, k in wanted if self.caps[k] > 0]
        if not wanted:
            return []
        while True:
            full: tuple[str, str] | None = None
            async with self._attempt:
                names: list[tuple[str, str]] = []
                for bookie, kind in wanted:
                    name = self._hint(bookie, kind)
                    if name is None:  # the hint says full: look (a read, unless the watch says unchanged)
                        free = self._free(await self._held(bookie), kind)
                        name = free[0] if free else None
                    if name is None:
                        full = (bookie, kind)
                        break
                    names.append((bookie, name))
                if full is None:
                    got = await self._create_all(names)
                    if isinstance(got, list):
                        return got
                    bookie, taken = got
                    if not taken:
                        continue  # its directory was missing: made now, try again
                    full = next((b, k) for b, k in wanted if b == bookie)  # lost a race: wait for a release
            self.waits += 1
            await self._wait_for_release(*full)
            # the bookie that was full is the contended one: try it first
            wanted.sort(key=lambda bk: bk != full)

    async def _wait_for_release(self, bookie: str, kind: str) -> None:
        """Wait until a slot of ``bookie`` may be free: its child watch fires (one watch shared by the
        process's waiters), the listing already shows a free slot, or :data:`FALLBACK_WAIT_S` passes."""
        held, changed, _at = await self._view(bookie)
        if held is None or self._free(held, kind):
            return
        try:
            await asyncio.wait_for(changed.wait(), FALLBACK_WAIT_S)
        except TimeoutError:
            self._forget(bookie)  # the watch may be lost (a session expiry): read again

    async def release(self, taken: Collection[str]) -> None:
        """Delete the slots in ``taken`` (missing ones ignored: the session may have expired): one
        ``multi``, or one delete each when that fails. Never raises (the chaos campaign, issue 26, saw
        the exception escape a shielded release as "Task exception was never retrieved"): a slot this
        session cannot delete now is deleted by a background retry (:attr:`retries`) while the session
        lives (a quorum loss keeps it alive however long), or goes with the session when it ends."""
        taken = list(taken)
        for path in taken:
            bookie, name = path.rsplit("/", 2)[-2:]
            self._forget(bookie)
            self._hints.get(bookie, set()).discard(name)
        if not taken:
            return
        with contextlib.suppress(ZooKeeperError):
            results = await self.zk.multi([Op("delete", p) for p in taken])
            if not any(isinstance(r, Exception) for r in results):
                return
        left = []
        for path in taken:
            try:
                await self.zk.delete(path)
            except NoNodeError:
                pass
            except ZooKeeperError as exc:
                log.info("stream slot release failed; retrying it while the session lives", path=path,
                         error=str(exc))
                left.append(path)
        if left:
            task = asyncio.create_task(self._retry_release(left, self.zk.session_generation),
                                       name="stream-slot-release-retry")
            self.retries.add(task)
            task.add_done_callback(self.retries.discard)

    async def _retry_release(self, left: list[str], generation: int) -> None:
        """Delete the slots in ``left`` this session made, retrying while the session is the same: a
        session outlives a ZooKeeper quorum loss however long, and its slots with it (issue 26: the
        chaos campaign's 340 s quorum loss left nine slots taken by nobody until their sessions ended,
        each one a stream fewer for its bookie cluster-wide). Ownership and version are checked, since a
        delete applied whose answer was lost may have let another worker take the slot since."""
        backoff = Backoff(RELEASE_RETRY_S, RELEASE_RETRY_S)  # jitter only: the workers of one outage spread out
        while left and self.zk.session_generation == generation:
            await backoff.sleep()
            for path in list(left):
                try:
                    stat = await self.zk.exists(path)
                    cid = self.zk.client_id
                    if cid is None:
                        break  # disconnected again: try later
                    if stat is not None and stat.ephemeralOwner == cid[0] and self.zk.session_generation == generation:
                        with contextlib.suppress(NoNodeError, BadVersionError):
                            await self.zk.delete(path, stat.version)
                except Exception as exc:  # noqa: BLE001 - still unreachable: try again later
                    log.debug("stream slot not released yet", path=path, error=str(exc))
                    break
                left.remove(path)
                self._forget(path.rsplit("/", 2)[-2])

    def targets_in_flight(self, own: Mapping[str, int] | None = None) -> dict[str, int]:
        """Bookie → copies known to be streaming into it, without any ZooKeeper read: per bookie the
        larger of ``own`` (this process's streams) and the target slots in this process's last listing
        of the bookie's slot directory (every worker's; only bookies this process copied to lately).
        The cheap cross-daemon signal for spreading replacements (:mod:`autorecovery.placement.spread`)."""
        out = {b: int(n) for b, n in (own or {}).items() if n > 0}
        for bookie, held in self._hints.items():
            n = sum(1 for name in held if name.startswith(f"{TARGET}-"))
            if n > out.get(bookie, 0):
                out[bookie] = n
        return out

    async def holders(self, bookie: str) -> dict[str, str]:
        """Slot name → owner on ``bookie`` now (for the admin API and tests)."""
        out: dict[str, str] = {}
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

