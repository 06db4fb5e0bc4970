"""Fault injectors of a chaos campaign over a :class:`LocalCluster` (EDGE: signals, files, ZooKeeper,
``ip``/``nft``/``tc``).

Each injector applies one :class:`~autorecovery.testing.chaos.schedule.Fault` for real, holds it (at
least ``hold_s`` seconds; kinds that must outlast a session timeout add it), heals it, and returns a
one-line account; a fault that cannot be applied or healed raises (the runner records it as a fault
error: a finding). Holding a fault is the fault itself; every *synchronisation* (a session expired, a
bookie registered again, a daemon ready) waits on a condition with a deadline (:func:`until`). A fault
aimed at the soak witness (:attr:`Injector.witness`) that would kill or restart it hits the next node.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

from autorecovery.bookie.entrylog import ENTRYLOG_DIR
from autorecovery.bookie.storage import CURRENT_DIR
from autorecovery.testing.chaos import disk as chaos_disk
from autorecovery.testing.chaos.daemon_netns import DaemonNetns
from autorecovery.testing.chaos.netfilter import LinkFaults
from autorecovery.testing.chaos.netns import BookieNetns
from autorecovery.testing.chaos.schedule import Fault
from autorecovery.testing.chaos.stock import (LEDGER_FILL_FRACTION, StockChaosCluster, registered_readonly,
                                             registered_writable, wipe)
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.testing.tcp_proxy import TcpProxy
from autorecovery.testing.zk_ensemble import ZooKeeperEnsemble
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.errors import is_retriable
from autorecovery.roles.checker import LedgerChecker
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.zk.election import current_auditor
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

#: bytes a crash in the middle of an add leaves after the last indexed body (as tests/integration does)
TORN_TAIL = b"\x00garbage-of-an-unacknowledged-add" * 7


async def until(pred: Callable[[], Awaitable[bool]], timeout_s: float, what: str, interval_s: float = 0.1) -> None:
    """Poll ``await pred()`` until true.

    Raises:
        TimeoutError: naming ``what`` after ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while not await pred():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)  # polling a condition with a deadline


@contextlib.asynccontextmanager
async def applied(apply: Callable[[], object], heal: Callable[[], object]) -> AsyncIterator[None]:
    """``apply`` a fault in a worker thread (``ip``/``nft``/``tc`` commands block), run the block (the
    fault held), then ``heal`` in a worker thread however the block ends. A raising ``apply`` heals nothing."""
    await asyncio.to_thread(apply)
    try:
        yield
    finally:
        await asyncio.to_thread(heal)


@contextlib.contextmanager
def stopped(pgid: int) -> Iterator[None]:
    """SIGSTOP process group ``pgid`` for the block, SIGCONT however it ends."""
    os.killpg(pgid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(pgid, signal.SIGCONT)


@contextlib.contextmanager
def proxies_faulted(proxies: list[TcpProxy], fault: Callable[[TcpProxy], None]) -> Iterator[None]:
    """``fault`` every proxy (:meth:`TcpProxy.cut` or :meth:`TcpProxy.blackhole`) for the block, then
    :meth:`TcpProxy.restore` every one however it ends."""
    for p in proxies:
        fault(p)
    try:
        yield
    finally:
        for p in proxies:
            p.restore()


class Injector:
    """Applies faults to ``cluster`` (bookies and daemons indexed alike: node i = bookie i + daemon i).

    Args:
        zk: a session of the runner's own (not proxied), for conditions.
        proxies: daemon i's ZooKeeper proxies, one per ZooKeeper server (the ``zk_conn_cut`` fault).
        daemon_session_s: the daemons' zkTimeout in seconds (how long a SIGSTOP must last).
        on_bookie_lost: called with (bookie id, monotonic time) when a bookie goes down.
    """

    def __init__(self, cluster: LocalCluster, zk: ZkClient, paths: Paths, proxies: dict[int, list[TcpProxy]],
                 daemon_session_s: float, on_bookie_lost: Callable[[str, float], None]) -> None:
        self.cluster = cluster
        self.zk = zk
        self.paths = paths
        self.proxies = proxies
        self.daemon_session_s = daemon_session_s
        self.on_bookie_lost = on_bookie_lost
        #: the bookie whose data dir is a size-limited tmpfs (the ``disk_full_during_copy`` fault), or None
        self.disk_full_bookie: int | None = None
        #: (bookie index, its namespace) for ``partition_bookie_from_workers``, or None
        self.netns: tuple[int, BookieNetns] | None = None
        #: per-direction faults on that bookie's (data link, ZooKeeper link), or None (nftables missing)
        self.link_faults: tuple[LinkFaults, LinkFaults] | None = None
        #: (daemon index, its namespace, its link's faults) for the ``daemon_netns_*`` and
        #: ``slow_link_one_worker`` kinds, or None
        self.daemon_ns: tuple[int, DaemonNetns, LinkFaults] | None = None
        #: the soak witness: the node whose bookie and daemon no fault kills (its RSS and fds are
        #: sampled over the whole run; a fault aimed at it hits the next node), or None
        self.witness: int | None = None
        #: the runner's under-replication manager: a disk wipe waits on it for the previous wipe's ledgers
        #: to be healed (None: no wait)
        self.urm: UnderreplicationManager | None = None
        #: the runner's ledger client (its bookie client speaks both protocols): a disk wipe reads with it
        #: whether the previous wipe's ledgers are healed (None: no wait)
        self.bk: BookKeeper | None = None
        #: the bookie id the last disk wipe emptied, or None
        self._wiped: str | None = None
        #: called with (start, end monotonic s, ``#seq kind``) after each fault (the bound's fault windows)
        self.on_fault: Callable[[float, float, str], None] = lambda start, end, label: None
        #: daemon i → held while a fault cuts or blackholes its ZooKeeper proxies: with two lanes a network
        #: fault's restore would otherwise end the other lane's blackhole early (an hour's auditor_kill9 on
        #: the witness waited 63 s for a session expiry that a zk_conn_cut on the same daemon undid)
        self.proxy_locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)

    # -- conditions ----------------------------------------------------------------------------
    async def registered(self, bookie_id: str) -> bool:
        """True when ``bookie_id`` is under ZooKeeper's ``available/``, writable or read-only (a bookie
        whose disk filled up is rightly read-only: the fourth full run's disk-full bookie filled its
        tmpfs with real data and every health wait after that timed out); False when the path is
        missing or the runner's own session cannot tell right now (a retriable error such as
        ConnectionLoss while the other lane holds a ZooKeeper fault: the waits poll again until their
        deadline)."""
        try:
            if bookie_id in await self.zk.get_children(self.paths.available):
                return True
            return bookie_id in await self.zk.get_children(self.paths.readonly)
        except NoNodeError:
            return False
        except Exception as exc:  # broad: only what a later poll may answer
            if is_retriable(exc):
                return False
            raise

    async def auditor_index(self) -> int | None:
        """The node index of the daemon holding the auditor election, or None (no vote, not ours, or the
        runner's session cannot tell right now: a retriable error)."""
        try:
            who = await current_auditor(self.zk, self.paths)
        except Exception as exc:  # broad: only what a later poll may answer
            if is_retriable(exc):
                return None
            raise
        ids = self.cluster.bookie_ids()
        return ids.index(who) if who in ids else None

    async def healthy(self) -> bool:
        """Every bookie and daemon process alive and every bookie registered."""
        return await self.unhealthy() is None

    async def unhealthy(self) -> str | None:
        """What keeps the cluster from :meth:`healthy`, the first thing found (a bookie not running or not
        registered, daemons not running, ZooKeeper members neither leader nor follower), or None."""
        for i in self.cluster.bookies:
            if not self.cluster.bookie_alive(i):
                return f"bookie {self.cluster.bookie_id(i)} not running"
            if not await self.registered(self.cluster.bookie_id(i)):
                return f"bookie {self.cluster.bookie_id(i)} not registered"
        down = [i for i in self.cluster.daemons if not self.cluster.daemon_alive(i)]
        if down:
            return f"daemons {down} not running"
        ens = self.cluster.zk_ensemble
        if ens is None:
            return None
        # four-letter words are blocking socket calls: off the event loop (the writer runs on it)
        modes = await asyncio.to_thread(lambda: [(m.myid, m.mode()) for m in ens.members])
        bad = [f"{myid} ({mode or 'not serving'})" for myid, mode in modes if mode not in ("leader", "follower")]
        return f"ZooKeeper members {', '.join(bad)}" if bad else None

    def victim(self, target: int, *avoid: int | None) -> int:
        """The first node from ``target`` on (cyclic) that is neither in ``avoid`` nor the witness.

        Raises:
            RuntimeError: every node is excluded.
        """
        n = len(self.cluster.bookies)
        for k in range(n):
            c = (target + k) % n
            if c not in avoid and c != self.witness:
                return c
        raise RuntimeError(f"no node to fault: all of {n} are the witness or excluded ({avoid})")

    # -- faults --------------------------------------------------------------------------------
    async def apply(self, f: Fault) -> str:
        """Inject ``f``, hold it, heal it; returns what was done (``kind target: detail``)."""
        return await getattr(self, f"_{f.kind}")(f)

    async def _start_bookie(self, i: int) -> None:
        bid = self.cluster.bookie_id(i)
        await asyncio.to_thread(self.cluster.start_bookie, i)
        await until(lambda: self.registered(bid), 30, f"bookie {bid} registered again")

    async def _bookie_kill9(self, f: Fault) -> str:
        bid = await self._bookie_down_for(self.victim(f.target), f.hold_s)
        return f"bookie {bid} killed (SIGKILL), down {f.hold_s}s, restarted"

    async def _bookie_restart(self, f: Fault) -> str:
        b = self.victim(f.target)
        bid = await asyncio.to_thread(self.cluster.stop_bookie, b)
        await self._start_bookie(b)
        return f"bookie {bid} stopped (SIGTERM) and restarted"

    async def _bookie_torn_tail(self, f: Fault) -> str:
        b = self.victim(f.target)
        bid = await asyncio.to_thread(self.cluster.kill_bookie, b)
        self.on_bookie_lost(bid, time.monotonic())
        logs = sorted((Path(self.cluster.bookies[b].data_dir) / CURRENT_DIR / ENTRYLOG_DIR).glob("*.log"))
        torn = "no entry log yet"
        if logs:
            with open(logs[-1], "ab") as fh:
                fh.write(TORN_TAIL)
            torn = f"{len(TORN_TAIL)} torn bytes after {logs[-1].name}"
        await self._start_bookie(b)
        return f"bookie {bid} killed (SIGKILL), {torn}, restarted"

    async def _bookie_sigstop(self, f: Fault) -> str:
        b = self.victim(f.target)
        info = self.cluster.bookies[b]
        bid = self.cluster.bookie_id(b)
        with stopped(info.pid):
            self.on_bookie_lost(bid, time.monotonic())
            session_s = self.cluster.bookie_session_timeout_ms / 1000
            await until(lambda: _not(self.registered(bid)), session_s * 3 + 10, f"{bid}'s session to expire")
            await asyncio.sleep(f.hold_s)  # the fault's duration past the expiry
        # a bookie whose session expired registers again (or exits and is restarted)
        if await self._registered_or_restart(b):
            return f"bookie {bid} stopped (SIGSTOP) past its session expiry, resumed, registered again"
        return f"bookie {bid} stopped (SIGSTOP) past its session expiry, resumed, did not register: restarted"

    async def _bookie_sigstop_short(self, f: Fault) -> str:
        b = self.victim(f.target)
        bid = self.cluster.bookie_id(b)
        hold = min(f.hold_s, self.cluster.bookie_session_timeout_ms / 1000 / 2)
        with stopped(self.cluster.bookies[b].pid):
            await asyncio.sleep(hold)  # the fault's duration: below the session timeout
        return f"bookie {bid} stopped (SIGSTOP) {hold:.1f}s (below its session timeout), resumed"

    async def _bookie_rolling_restart(self, f: Fault) -> str:
        done = []
        for b in sorted(self.cluster.bookies):
            if b == self.witness:
                continue
            done.append(await asyncio.to_thread(self.cluster.stop_bookie, b))
            await self._start_bookie(b)
        return f"rolling restart of {len(done)} bookies (SIGTERM, start, registered, next): {', '.join(done)}"

    # -- stock bookies only (testing/chaos/stock.py) ---------------------------------------------------------
    def _stock(self, kind: str, disk: bool = False) -> StockChaosCluster:
        c = self.cluster
        if not isinstance(c, StockChaosCluster):
            raise RuntimeError(f"{kind} needs the stock cluster (bench/chaos.py --cluster stock)")
        if disk and c.disk_bookie is None:
            raise RuntimeError(f"{kind} needs the stock disk bookie's tmpfs dirs ({c.disk_refused or 'disk_mb = 0'})")
        return c

    async def _ledger_dir_full(self, f: Fault) -> str:
        c = self._stock(f.kind, disk=True)
        t = c.disk_bookie
        assert t is not None
        d = c.ledger_dir(t)
        filled = await asyncio.to_thread(chaos_disk.fill, d, to_fraction=LEDGER_FILL_FRACTION)
        victim = self.victim(f.target, t)
        try:
            await until(lambda: asyncio.to_thread(registered_readonly, c, t), 60,
                        f"bookie {c.bookie_id(t)} read-only with its ledger dir full")
            bid = await asyncio.to_thread(c.kill_bookie, victim)
            self.on_bookie_lost(bid, time.monotonic())
            await asyncio.sleep(f.hold_s + 2)  # the fault's duration: copies run while it is read-only
        finally:
            await asyncio.to_thread(chaos_disk.free, d)
        await until(lambda: asyncio.to_thread(registered_writable, c, t), 60,
                    f"bookie {c.bookie_id(t)} writable again after its ledger dir was freed")
        await self._start_bookie(victim)
        return (f"bookie {c.bookie_id(t)}'s ledger dir filled ({filled} bytes), it turned read-only; bookie {bid} "
                f"down {f.hold_s + 2:.1f}s meanwhile; space freed, writable again, {bid} restarted")

    async def _journal_dir_full(self, f: Fault) -> str:
        c = self._stock(f.kind, disk=True)
        t = c.disk_bookie
        assert t is not None
        d = c.journal_dir(t)
        bid = c.bookie_id(t)
        filled = await asyncio.to_thread(chaos_disk.fill, d)
        try:
            await asyncio.sleep(f.hold_s + 2)  # the fault's duration
        finally:
            await asyncio.to_thread(chaos_disk.free, d)
        if c.bookie_alive(t):
            if await self._registered_or_restart(t):
                return f"bookie {bid}'s journal dir filled ({filled} bytes) {f.hold_s + 2:.1f}s, freed; it kept running"
            return f"bookie {bid}'s journal dir filled ({filled} bytes) {f.hold_s + 2:.1f}s, freed; not registered: restarted"
        self.on_bookie_lost(bid, time.monotonic())
        await self._start_bookie(t)
        return f"bookie {bid}'s journal dir filled ({filled} bytes) {f.hold_s + 2:.1f}s: it exited; freed, restarted"

    async def _healed_since(self, wiped: str, timeout_s: float = 180.0) -> None:
        """Wait until the under-replication queue is empty and every closed ledger whose metadata names
        ``wiped`` (the bookie whose disk the previous wipe emptied) passes a read check of every member
        (:class:`~autorecovery.roles.checker.LedgerChecker`: the first and last entry of each member's
        share, upstream's check): the copies the wiped disk held are back. A second wipe before that
        could destroy the last copy of an entry written at WQ2 — a data loss the faults made, not a bug
        — so each wipe waits for the one before. (The replicas check cannot tell: a stock bookie on
        DbLedgerStorage lists no entries.)

        Raises:
            TimeoutError: not within ``timeout_s``.
        """
        urm, bk = self.urm, self.bk
        assert urm is not None and bk is not None
        live: list[frozenset[str]] = [frozenset()]
        checker = LedgerChecker(bk.bookies, lambda: live[0])

        async def done() -> bool:
            try:
                if await urm.list_marked_ids():
                    return False
                ro = set(await self.zk.get_children(self.paths.readonly))
                live[0] = frozenset((set(await self.zk.get_children(self.paths.available)) - {"readonly"}) | ro)
                for lid in await bk.ledgers.list_ledger_ids():
                    try:
                        md, _ = await bk.ledgers.read(lid)
                    except NoNodeError:
                        continue
                    if md.is_closed and any(wiped in seg.ensemble for seg in md.segments) and \
                            await checker.check(lid, md):
                        return False
                return True
            except Exception as exc:  # broad: only what a later poll may answer
                if is_retriable(exc):
                    return False
                raise

        await until(done, timeout_s, f"the ledgers of the previously wiped bookie {wiped} healed (an empty queue, "
                    "every closed ledger naming it read back from each member)", 2.0)

    async def _bookie_empty_ledger_dir(self, f: Fault) -> str:
        c = self._stock(f.kind)
        waited = ""
        if self._wiped is not None and self.urm is not None and self.bk is not None:
            t = time.monotonic()
            await self._healed_since(self._wiped)
            waited = f" (after {time.monotonic() - t:.1f}s waiting for the previous wipe's ledgers healed)"
        b = self.victim(f.target)
        bid = await asyncio.to_thread(c.kill_bookie, b)
        self.on_bookie_lost(bid, time.monotonic())
        await asyncio.to_thread(wipe, c.ledger_dir(b))
        log = c.bookie_log(b)
        mark = log.stat().st_size if log.exists() else 0
        assert c.java is not None
        jb = c.java.bookies[b]
        await asyncio.to_thread(jb.start, False)
        c.bookies[b].pid = jb.process.pid or 0

        async def exited() -> bool:
            return not c.bookie_alive(b)

        try:
            await until(exited, 60, f"bookie {bid} refused with an empty ledger dir")
        except TimeoutError:
            await asyncio.to_thread(c.kill_bookie, b)
            raise RuntimeError(f"bookie {bid} started with an empty ledger dir (its cookie should have refused it)") from None
        with open(log, "rb") as fh:
            fh.seek(mark)
            said = fh.read().decode(errors="replace")
        cookie = "cookie" in said.lower()
        await asyncio.sleep(f.hold_s)  # the fault's duration: the bookie stays lost
        # the operator's fix for a replaced disk: wipe its dirs, delete its cookie, start it empty
        await asyncio.to_thread(wipe, c.journal_dir(b))
        await asyncio.to_thread(c.operator_reformat, b)
        await self._start_bookie(b)
        self._wiped = bid
        return (f"bookie {bid} killed, its ledger dir emptied; started: refused ({'cookie mismatch' if cookie else 'exited'}"
                f"); operator's fix (bookieformat -deleteCookie), started empty, registered{waited}")

    async def _restart_daemon(self, i: int) -> None:
        """Start daemon ``i`` again on its conf, never while the other lane holds its ZooKeeper proxies
        faulted: AutoRecoveryMain exits at start-up when it cannot reach ZooKeeper (a restart during a
        blackhole failed the stock hour's auditor_kill9), ours would only start late."""
        async with self.proxy_locks[i]:
            await asyncio.to_thread(self.cluster.start_daemon, i, None, 60.0)

    async def _daemon_kill9(self, f: Fault) -> str:
        aud = await self.auditor_index()
        i = self.victim(f.target, aud)
        await asyncio.to_thread(self.cluster.stop_daemon, i, signal.SIGKILL)
        await asyncio.sleep(f.hold_s)  # the fault's duration
        await self._restart_daemon(i)
        return f"daemon {i} killed (SIGKILL), down {f.hold_s}s, restarted"

    async def _auditor_kill9(self, f: Fault) -> str:
        seen: list[int] = []

        async def elected() -> bool:
            # one read both waits and names the auditor: a second read could see the vote gone
            i = await self.auditor_index()
            if i is not None:
                seen[:] = [i]
            return i is not None

        await until(elected, 30, "an elected auditor")
        i = seen[0]
        moved = ""
        if i == self.witness:
            # the witness is never killed (its RSS and fds must span the run): its session is expired
            # instead, ZooKeeper blackholed past the session timeout, which hands the auditor role on,
            # and the daemon elected next is the one killed (the fourth full run found the witness
            # daemon killed 19 times as the auditor)
            async with self.proxy_locks[i]:
                with proxies_faulted(self.proxies[i], TcpProxy.blackhole):
                    await until(lambda: _differs(self.auditor_index(), i), 60 + self.daemon_session_s,
                                "a new auditor after the witness's session expired")
            await until(elected, 30, "an elected auditor")
            moved = f"the auditor was the witness (daemon {i}): its session expired by a ZooKeeper blackhole; "
            i = seen[0]
            if i == self.witness:
                return moved + "it was elected again at once, so no daemon was killed"
        await asyncio.to_thread(self.cluster.stop_daemon, i, signal.SIGKILL)
        await until(lambda: _differs(self.auditor_index(), i), 60, "a new auditor")
        await asyncio.sleep(f.hold_s)  # the fault's duration
        await self._restart_daemon(i)
        info = getattr(self.cluster, "daemons", {}).get(i)  # names ours or AutoRecoveryMain on the stock cluster
        who = f" ({info.name})" if info is not None else ""
        return f"{moved}auditor daemon {i}{who} killed (SIGKILL), another elected, restarted after {f.hold_s}s"

    async def _daemon_sigstop(self, f: Fault) -> str:
        info = self.cluster.daemons[f.target]
        with stopped(info.pid):
            await asyncio.sleep(self.daemon_session_s + f.hold_s)  # past the session timeout: the fault
        return f"daemon {f.target} stopped (SIGSTOP) {self.daemon_session_s + f.hold_s:.1f}s, resumed"

    async def _zk_conn_cut(self, f: Fault) -> str:
        async with self.proxy_locks[f.target]:
            with proxies_faulted(self.proxies[f.target], TcpProxy.cut):
                await asyncio.sleep(f.hold_s)  # the fault's duration (shorter than the session timeout)
        return f"daemon {f.target}'s ZooKeeper connections cut for {f.hold_s}s, restored"

    # -- partitions -------------------------------------------------------------------------------
    async def _partition_bookie_from_workers(self, f: Fault) -> str:
        if self.netns is None:
            raise RuntimeError("partition_bookie_from_workers needs a bookie in a network namespace")
        i, ns = self.netns
        async with applied(ns.cut, ns.heal):
            await asyncio.sleep(f.hold_s + 2)  # the fault's duration
        how = getattr(ns, "cut_how", f"veth {ns.data_link} down")  # the stock cluster's loopback drops say how
        return (f"bookie {self.cluster.bookie_id(i)} cut from workers and clients ({how}; its "
                f"ZooKeeper link up) for {f.hold_s + 2:.1f}s, healed")

    async def _partition_daemon_from_zk(self, f: Fault) -> str:
        hold = self.daemon_session_s + f.hold_s
        async with self.proxy_locks[f.target]:
            with proxies_faulted(self.proxies[f.target], TcpProxy.blackhole):
                await asyncio.sleep(hold)  # the fault's duration: past the session timeout
        return f"daemon {f.target} cut from ZooKeeper (proxies blackholed, bookies reachable) for {hold:.1f}s, healed"

    # -- per direction (nftables, tc tbf: testing/chaos/netfilter.py) -----------------------------------------
    def _links(self, kind: str) -> tuple[int, BookieNetns, LinkFaults, LinkFaults]:
        if self.netns is None or self.link_faults is None:
            raise RuntimeError(f"{kind} needs a bookie in a network namespace and nftables")
        return (*self.netns, *self.link_faults)

    async def _registered_or_restart(self, i: int) -> bool:
        """Wait for bookie ``i`` to be registered (20 s bound): True; restart it when it is not: False."""
        bid = self.cluster.bookie_id(i)
        try:
            await until(lambda: self.registered(bid), 20, f"bookie {bid} registered after the heal")
            return True
        except TimeoutError:
            if self.cluster.bookie_alive(i):
                await asyncio.to_thread(self.cluster.kill_bookie, i)
            await self._start_bookie(i)
            return False

    async def _one_way_loss(self, f: Fault) -> str:
        """Random loss of 20-50 % of the packets in one direction of the bookie's data link (target's
        parity: even = to the bookie, odd = from it) for the hold + 2 s."""
        i, _, data, _ = self._links(f.kind)
        direction, pct = ("to", "from")[f.target % 2], 20 + 10 * (f.target % 4)
        async with applied(lambda: data.drop(direction, pct), data.clear_drops):
            await asyncio.sleep(f.hold_s + 2)  # the fault's duration
        return (f"{pct}% of the packets {direction} bookie {self.cluster.bookie_id(i)} dropped at random "
                f"(data link {data.link}, the other direction intact) for {f.hold_s + 2:.1f}s, healed")

    async def _asymmetric_partition(self, f: Fault) -> str:
        """Every packet of one direction dropped, the other delivered (target % 4: 0 workers/clients →
        bookie, 1 bookie → workers/clients, 2 bookie → ZooKeeper, 3 ZooKeeper → bookie). A cut of its
        ZooKeeper link lasts past the bookie's session timeout."""
        i, _, data, zkl = self._links(f.kind)
        link, direction, what = ((data, "to", "workers and clients → bookie"), (data, "from", "bookie → workers and clients"),
                                 (zkl, "from", "bookie → ZooKeeper"), (zkl, "to", "ZooKeeper → bookie"))[f.target % 4]
        hold = f.hold_s + 2 + (self.cluster.bookie_session_timeout_ms / 1000 if link is zkl else 0)
        if link is zkl:
            self.on_bookie_lost(self.cluster.bookie_id(i), time.monotonic())
        async with applied(lambda: link.drop(direction), link.clear_drops):
            await asyncio.sleep(hold)  # the fault's duration
        after = "registered" if await self._registered_or_restart(i) else "not registered 20 s after the heal: restarted"
        return (f"one-way partition {what} (bookie {self.cluster.bookie_id(i)}, link {link.link}; the reverse "
                f"direction delivered) for {hold:.1f}s, healed; {after}")

    async def _bookie_down_for(self, victim: int, hold_s: float) -> str:
        """Kill bookie ``victim`` (SIGKILL), hold it down ``hold_s`` seconds (the fault's duration:
        copies of its ledgers run meanwhile), start it again; returns its bookie id."""
        bid = await asyncio.to_thread(self.cluster.kill_bookie, victim)
        self.on_bookie_lost(bid, time.monotonic())
        await asyncio.sleep(hold_s)  # the fault's duration, not a synchronisation
        await self._start_bookie(victim)
        return bid

    async def _slow_link(self, f: Fault) -> str:
        """The bookie's data link capped at ``SLOW_RATE_KBIT`` each way (tc tbf) while another bookie
        is down, so workers copy that bookie's ledgers reading from this one over the slow link; the
        other bookie is started again and the cap removed after the hold + 3 s."""
        i, _, data, _ = self._links(f.kind)
        victim = self.victim(f.target, i)
        async with applied(data.slow, data.clear_slow):
            bid = await self._bookie_down_for(victim, f.hold_s + 3)
        return (f"bookie {self.cluster.bookie_id(i)}'s data link slowed (tbf {data.link}) while bookie {bid} was "
                f"down {f.hold_s + 3:.1f}s (copies reading from the slow source), {bid} restarted, link restored")

    # -- the daemon in its own namespace (testing/chaos/daemon_netns.py) ---------------------------------------
    def _dns(self, kind: str) -> tuple[int, DaemonNetns, LinkFaults]:
        if self.daemon_ns is None:
            raise RuntimeError(f"{kind} needs a daemon in a network namespace and nftables")
        return self.daemon_ns

    async def _cut_both_ways(self, lf: LinkFaults, peer: str, hold_s: float) -> None:
        async with applied(lambda: lf.drop("to", 100, peer), lf.clear_drops):
            await asyncio.to_thread(lf.drop, "from", 100, peer)
            await asyncio.sleep(hold_s)  # the fault's duration

    async def _daemon_netns_cut_zk(self, f: Fault) -> str:
        """Every packet between the namespaced daemon and its ZooKeeper proxies dropped (its link's root
        address) past its session timeout; the bookies stay reachable over the same link."""
        i, ns, lf = self._dns(f.kind)
        hold = self.daemon_session_s + f.hold_s
        await self._cut_both_ways(lf, ns.root, hold)
        return (f"daemon {i} (own namespace) cut from ZooKeeper by packet drops on {ns.link} for {hold:.1f}s "
                f"(bookies reachable), healed")

    async def _daemon_netns_cut_bookie(self, f: Fault) -> str:
        """Every packet between the namespaced daemon and bookie ``target`` dropped for the hold + 2 s:
        that worker loses one bookie that every other process still reaches."""
        i, ns, lf = self._dns(f.kind)
        b = f.target
        await self._cut_both_ways(lf, self.cluster.bookies[b].host, f.hold_s + 2)
        return (f"daemon {i} (own namespace) cut from bookie {self.cluster.bookie_id(b)} only, by packet drops on "
                f"{ns.link}, for {f.hold_s + 2:.1f}s, healed")

    async def _slow_link_one_worker(self, f: Fault) -> str:
        """What one source bookie sends to the namespaced daemon capped at ``SLOW_RATE_KBIT`` (tc htb +
        u32) while another bookie is down, so that worker copies the lost bookie's ledgers reading from the
        slow source; the other bookie is started again and the cap removed after the hold + 3 s."""
        i, ns, lf = self._dns(f.kind)
        src = f.target
        victim = self.victim((src + 1) % len(self.cluster.bookies), src)
        host = self.cluster.bookies[src].host
        async with applied(lambda: lf.slow_from(host), lf.clear_slow):
            bid = await self._bookie_down_for(victim, f.hold_s + 3)
        return (f"bookie {self.cluster.bookie_id(src)} → daemon {i} slowed (htb on {ns.link}; every other pair "
                f"at full speed) while bookie {bid} was down {f.hold_s + 3:.1f}s, {bid} restarted, link restored")

    # -- a full disk ----------------------------------------------------------------------------
    async def _disk_full_during_copy(self, f: Fault) -> str:
        t = self.disk_full_bookie
        if t is None:
            raise RuntimeError("disk_full_during_copy needs a bookie on a tmpfs data dir (CampaignConfig.disk_full_mb)")
        data = Path(self.cluster.bookies[t].data_dir)
        filled = await asyncio.to_thread(chaos_disk.fill, data)
        victim = self.victim(f.target, t)
        try:
            bid = await asyncio.to_thread(self.cluster.kill_bookie, victim)
            self.on_bookie_lost(bid, time.monotonic())
            # workers copy the victim's ledgers while the target's disk is full (the fault's duration)
            await asyncio.sleep(f.hold_s + 2)
        finally:
            await asyncio.to_thread(chaos_disk.free, data)
        await self._start_bookie(victim)
        return (f"bookie {self.cluster.bookie_id(t)}'s tmpfs filled ({filled} bytes, ENOSPC) while bookie {bid} "
                f"was down {f.hold_s + 2:.1f}s (copies running), space freed, {bid} restarted")

    # -- ZooKeeper ensemble ----------------------------------------------------------------------
    def _ensemble(self) -> ZooKeeperEnsemble:
        ens = self.cluster.zk_ensemble
        if ens is None:
            raise RuntimeError("ZooKeeper ensemble faults need LocalCluster(zk_members=3)")
        return ens

    async def _zk_member_down_up(self, myids: list[int], hold_s: float, sig: int = signal.SIGKILL) -> None:
        ens = self._ensemble()
        for n in myids:
            await asyncio.to_thread(ens.kill, n, sig)
        await asyncio.sleep(hold_s)  # the fault's duration
        for n in myids:
            await asyncio.to_thread(ens.spawn, n)
        await asyncio.to_thread(self.cluster.save)  # cluster.json names the members' new pids
        await asyncio.to_thread(ens.wait_serving, None, 60.0)

    async def _zk_leader(self) -> int:
        """The ensemble's leader (myid), waited for (30 s bound) and named by the same read.

        Raises:
            TimeoutError: no leader within 30 s.
        """
        ens = self._ensemble()
        seen: list[int] = []

        async def led() -> bool:
            lead = await asyncio.to_thread(ens.leader)
            if lead is not None:
                seen[:] = [lead]
            return lead is not None

        await until(led, 30, "a ZooKeeper leader")
        return seen[0]

    async def _zk_leader_kill9(self, f: Fault) -> str:
        lead = await self._zk_leader()
        await self._zk_member_down_up([lead], f.hold_s)
        return f"ZooKeeper leader {lead} killed (SIGKILL), down {f.hold_s}s, restarted; quorum serving"

    async def _zk_follower_kill9(self, f: Fault) -> str:
        lead = await self._zk_leader()
        ids = [m.myid for m in self._ensemble().members if m.myid != lead]
        n = ids[f.target % len(ids)]
        await self._zk_member_down_up([n], f.hold_s)
        return f"ZooKeeper follower {n} killed (SIGKILL), down {f.hold_s}s, restarted; quorum serving"

    async def _zk_quorum_loss(self, f: Fault) -> str:
        ens = self._ensemble()
        lost = [m.myid for m in ens.members][: len(ens.members) // 2 + 1]
        longest = max(self.cluster.bookie_session_timeout_ms / 1000, self.daemon_session_s)
        hold = longest + f.hold_s
        await self._zk_member_down_up(lost, hold)
        return f"ZooKeeper members {lost} killed (SIGKILL): no quorum for {hold:.1f}s (> session timeouts), restarted"

    async def _zk_rolling_restart(self, f: Fault) -> str:
        ens = self._ensemble()
        for m in ens.members:
            await asyncio.to_thread(ens.kill, m.myid, signal.SIGTERM)
            await asyncio.to_thread(ens.spawn, m.myid)
            await asyncio.to_thread(self.cluster.save)
            await asyncio.to_thread(ens.wait_serving, None, 60.0)
        return f"ZooKeeper rolling restart of {len(ens.members)} members (SIGTERM, start, quorum serving, next)"


async def _not(a: Awaitable[bool]) -> bool:
    return not await a


async def _differs(a: Awaitable[object], old: object) -> bool:
    now = await a
    return now is not None and now != old
