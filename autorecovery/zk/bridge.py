"""ZooKeeper operations as asyncio coroutines (EDGE); with :mod:`autorecovery.zk.kazoo_ext` and
:mod:`autorecovery.zk.session_gate` (the connected gate and the error translation) the only modules that import
kazoo.

kazoo runs its own threads. Every ``*_async`` result and every watch callback is handed to the event
loop with ``loop.call_soon_threadsafe``; callbacks only enqueue, so no kazoo thread ever runs our code
and the loop is never blocked. Concurrency of outstanding operations is bounded by a semaphore
(upstream ``auditorMaxNumberOfConcurrentOpenLedgerOperations``, default 500, #2802) and every
operation is counted (``ops``) so audits can report the ZooKeeper operations they cost.

ZooKeeper 3.6+ extensions kazoo 2.11 lacks (:mod:`autorecovery.zk.kazoo_ext`): :meth:`ZkClient.add_watch`
(a persistent, optionally recursive, watch) and :meth:`ZkClient.get_many` (``multiRead``: many getData
in one request). Against an older server both raise :class:`ServerTooOld`.

Session states are published as :class:`SessionEvent` values on ``session_events()`` subscribers:
``CONNECTED``, ``SUSPENDED`` (connection lost, session may survive) and ``LOST`` (session expired:
ephemeral znodes, watches and locks are gone; kazoo makes a new session by itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (  # noqa: F401  (re-exported: the rest of the code imports them from here)
    AuthFailedError,
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError as KazooSessionExpired,
    UnimplementedError,
    ZookeeperError,
)
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat  # noqa: F401
from kazoo.retry import KazooRetry
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE

from autorecovery import logs
from autorecovery.aio import background
from autorecovery.config.settings import ZkSecurity
from autorecovery.errors import ZooKeeperError
from autorecovery.zk import session_gate, kazoo_ext, kazoo_poll, wake
from autorecovery.zk.client_security import kazoo_security_kwargs
from autorecovery.zk.kazoo_ext import ServerTooOld

_log = logs.get_logger("autorecovery.zk")


class SessionEvent(enum.Enum):
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


@dataclass(frozen=True)
class Op:
    """One operation of a :meth:`ZkClient.multi` transaction."""

    kind: str  # "create" | "delete" | "set" | "check"
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False


WatchCallback = Callable[[WatchedEvent], Any]


class ZkClient:
    """An asyncio ZooKeeper client on top of kazoo.

    Args:
        hosts: connect string ``h1:2181,h2:2181`` (an optional ``/chroot`` suffix is honoured by kazoo).
        session_timeout_ms: requested session timeout in ms (upstream ``zkTimeout``, default 10000).
        max_concurrent_ops: bound on outstanding operations (semaphore); :attr:`outstanding` and
            :attr:`peak_outstanding` count them (requests handed to kazoo and not yet answered).
        security: identity and ACL (:class:`~autorecovery.config.settings.ZkSecurity`; default: no
            authentication, OPEN_ACL_UNSAFE). With ``security.digest`` the session authenticates with
            the ``digest`` scheme on every (re)connect; with ``security.enabled`` every znode this client
            creates — ``ensure_path`` parents, ``makepath`` intermediates and transaction creates
            included — gets ``CREATOR_ALL_ACL``, as upstream's ``ZkUtils.getACLs``. ``security.sasl``
            authenticates with SASL DIGEST-MD5 (checked by one request before :meth:`start` returns);
            ``security.tls`` makes every connection TLS (see :func:`kazoo_security_kwargs`).

    Raises (from operations): ``NoNodeError``, ``NodeExistsError``, ``BadVersionError``,
    ``NotEmptyError`` (re-exported from kazoo), and :class:`ZooKeeperError` naming the path for others.
    """

    def __init__(self, hosts: str, session_timeout_ms: int = 10000, max_concurrent_ops: int = 500,
                 security: ZkSecurity | None = None) -> None:
        self.hosts = hosts
        self.session_timeout_ms = session_timeout_ms
        self.security = security or ZkSecurity()
        self._kz = KazooClient(
            hosts=hosts,
            timeout=session_timeout_ms / 1000.0,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
            # kazoo applies default_acl to create(), makepath parents, ensure_path and transaction creates
            default_acl=self.acl,
            handler=kazoo_poll.PollHandler(),  # one poll(2) per wait, not a new epoll (issue 29)
            **kazoo_security_kwargs(self.security),
        )
        self.max_concurrent_ops = max_concurrent_ops
        self._sem = asyncio.Semaphore(max_concurrent_ops)
        self._submitter = wake.submit_thread()
        self.offloaded = 0  # requests submitted from the submit thread (kazoo's wake-up pair backed up)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscribers: list[asyncio.Queue[SessionEvent]] = []
        self._lock = threading.Lock()
        self.ops = 0
        self.outstanding = 0  # requests submitted to kazoo and not yet answered (this session)
        self.peak_outstanding = 0  # the most at once since start or reset_peak()
        self.multi_read_items = 0  # reads carried by get_many requests (each request is one of ``ops``)
        self._persistent = kazoo_ext.PersistentWatches()
        kazoo_ext.install_event_hook(self._kz, self._persistent)
        self.connected = asyncio.Event()
        self._was_connected = False
        self._stopping = False
        self.session_generation = 0

    @property
    def acl(self) -> list:
        """The ACL of every znode this client creates: ``CREATOR_ALL_ACL`` when ``zkEnableSecurity``,
        else ``OPEN_ACL_UNSAFE`` (upstream ``ZkUtils.getACLs``)."""
        return list(CREATOR_ALL_ACL if self.security.enabled else OPEN_ACL_UNSAFE)

    @classmethod
    def from_settings(cls, settings: Any, **kw: Any) -> ZkClient:
        """A client for ``settings`` (:class:`~autorecovery.config.load.Settings`): its ``zk`` section
        (connect string, session timeout, security); ``kw`` overrides
        (e.g. ``max_concurrent_ops``)."""
        zk = settings.zk
        kw.setdefault("session_timeout_ms", zk.timeout_ms)
        kw.setdefault("security", zk.security)
        return cls(zk.connect, **kw)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, timeout_s: float = 30.0) -> ZkClient:
        """Connect and wait for a session.

        Raises:
            ZooKeeperError: when no session is made within ``timeout_s``: one line naming each server
                and its cause (connection refused, cannot resolve host, timed out, unreachable, TLS
                handshake failed, closed the connection, auth failed) and what to check, from a probe of
                the servers made after kazoo gives up (:mod:`autorecovery.zk.probe`; kazoo itself only
                says ``Connection time-out``).
        """
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        self._kz.add_listener(self._on_state)
        try:
            await asyncio.to_thread(self._kz.start, timeout_s)
        except Exception as exc:  # AuthFailedError, or kazoo's own timeout error whatever the cause
            raise await session_gate.connect_failure(exc, self.hosts, self.security, timeout_s) from exc
        if self.security.sasl is not None:
            # kazoo reports CONNECTED before the SASL exchange; a refused identity shows on the first
            # request (or its connection thread ends), so make one before the caller relies on the session
            try:
                await asyncio.to_thread(self._sasl_check, min(timeout_s, 10.0))
            except Exception as exc:  # broad: kazoo's AuthFailed/SessionClosedRequireSasl/timeout
                await self.stop()
                raise ZooKeeperError(
                    f"cannot connect to ZooKeeper at {self.hosts}: SASL authentication of user "
                    f"{self.security.sasl.username} failed (wrong user or password, or the server does not "
                    f"accept {self.security.sasl.mechanism}): {type(exc).__name__} {exc}".rstrip()) from exc
        self.connected.set()
        return self

    def _sasl_check(self, timeout_s: float) -> None:  # worker thread
        self._kz.exists_async("/").get(timeout=timeout_s)

    async def stop(self) -> None:
        """Close the session (ephemeral znodes are deleted by the server). Idempotent."""
        self._stopping = True
        try:
            await asyncio.to_thread(self._kz.stop)
            await asyncio.to_thread(self._kz.close)
        except (KazooException, OSError) as exc:
            # the server drops the session at its timeout anyway (ephemeral znodes then go): nothing to do
            _log.info("ZooKeeper session did not close cleanly; the server expires it",
                      hosts=self.hosts, error=f"{type(exc).__name__}: {exc}")
        self._submitter.shutdown(wait=False)

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """(session id, password) of the current session; tests use it to expire the session."""
        return self._kz.client_id

    async def expire_session(self) -> None:
        """Expire this client's session on the server, as a network partition longer than the
        session timeout would (a test and drill aid, behind the admin mutation switch): a second
        client joins the session with its id and password and closes it. kazoo then reports LOST and
        makes a new session by itself.

        Raises:
            ZooKeeperError: no session, or the server could not be reached.
        """
        cid = self._kz.client_id
        if cid is None:
            raise ZooKeeperError(f"no ZooKeeper session to expire on {self.hosts}")

        def expire() -> None:
            other = KazooClient(hosts=self.hosts, client_id=cid, timeout=self.session_timeout_ms / 1000.0,
                                **kazoo_security_kwargs(self.security))
            try:
                other.start(10)
            finally:
                other.stop()
                other.close()

        try:
            await asyncio.to_thread(expire)
        except Exception as exc:  # broad: kazoo's own timeout/connection errors
            raise ZooKeeperError(f"could not expire the session on {self.hosts}: {exc}") from exc

    def _on_state(self, state: str) -> None:  # kazoo thread
        event = {
            KazooState.CONNECTED: SessionEvent.CONNECTED,
            KazooState.SUSPENDED: SessionEvent.SUSPENDED,
            KazooState.LOST: SessionEvent.LOST,
        }[state]
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._publish, event)

    def _publish(self, event: SessionEvent) -> None:
        # kazoo's own connection lines are DEBUG (logs.configure, issue 28): say the state change once here
        if event == SessionEvent.CONNECTED:
            if not self.connected.is_set() and self._was_connected:
                _log.info("ZooKeeper connection re-established", hosts=self.hosts)
            self._was_connected = True
            self.connected.set()
        else:
            if self.connected.is_set() and not self._stopping:
                _log.warning("ZooKeeper connection lost; reconnecting" if event == SessionEvent.SUSPENDED
                             else "ZooKeeper session expired; making a new one", hosts=self.hosts)
            self.connected.clear()
        if event == SessionEvent.LOST:
            self.session_generation += 1
        for q in list(self._subscribers):
            q.put_nowait(event)

    def session_events(self) -> asyncio.Queue[SessionEvent]:
        """A queue that receives every later session state change."""
        q: asyncio.Queue[SessionEvent] = asyncio.Queue()
        self._subscribers.append(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[SessionEvent]) -> None:
        if q in self._subscribers:
            self._subscribers.remove(q)

    # -- bridging ---------------------------------------------------------------------------
    def _watch(self, cb: WatchCallback | None):
        if cb is None:
            return None
        loop = self._loop

        def fire(event: WatchedEvent) -> None:  # kazoo thread: only enqueue
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(_run_callback, cb, event)

        return fire

    async def _call(self, path: str, start: Callable[[], Any]) -> Any:
        assert self._loop is not None, "ZkClient.start() was not awaited"
        loop = self._loop
        async with self._sem:
            # the connected gate (issue 26): no request reaches kazoo while disconnected
            await session_gate.until_connected(self._kz, self.connected, lambda: self._stopping, loop,
                                       self.session_timeout_ms / 1000.0, path)
            self.ops += 1
            self.outstanding += 1
            if self.outstanding > self.peak_outstanding:
                self.peak_outstanding = self.outstanding
            try:
                return await self._submit_and_wait(loop, path, start)
            finally:
                self.outstanding -= 1

    async def _submit_and_wait(self, loop: asyncio.AbstractEventLoop, path: str,
                               start: Callable[[], Any]) -> Any:
        """Hand ``start``'s request to kazoo (from this loop, or the submit thread when kazoo's wake-up
        pair is backed up) and await its answer, translated."""
        fut: asyncio.Future = loop.create_future()
        fut.add_done_callback(session_gate.consume)

        def done(async_result) -> None:  # kazoo thread
            def settle() -> None:
                if fut.done():
                    return
                try:
                    fut.set_result(async_result.get_nowait())
                except Exception as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                    fut.set_exception(session_gate.fresh(exc))

            if not loop.is_closed():
                loop.call_soon_threadsafe(settle)

        def submit() -> None:
            start().rawlink(done)

        try:
            if wake.wake_backlog(self._kz) < wake.SAFE_BACKLOG:
                submit()
            else:  # kazoo's wake-up pair is backed up: a write may block, so not on this loop
                self.offloaded += 1
                await loop.run_in_executor(self._submitter, submit)
        except KazooException as exc:
            raise session_gate.translate(exc, path) from exc
        try:
            return await fut
        except session_gate.PASSED_THROUGH:
            raise
        except KazooException as exc:
            raise session_gate.translate(exc, path) from exc

    # -- operations -------------------------------------------------------------------------
    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, ZnodeStat]:
        return await self._call(path, lambda: self._kz.get_async(path, watch=self._watch(watch)))

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        return await self._call(path, lambda: self._kz.get_children_async(path, watch=self._watch(watch)))

    async def exists(self, path: str, watch: WatchCallback | None = None) -> ZnodeStat | None:
        return await self._call(path, lambda: self._kz.exists_async(path, watch=self._watch(watch)))

    async def get_many(self, paths: list[str]) -> list[tuple[bytes, ZnodeStat] | Exception]:
        """getData of every path in ONE ``multiRead`` request (ZooKeeper 3.6+; no watches): per path
        ``(data, stat)`` or the exception of that read (``NoNodeError``...), in order. One request, one
        response packet: the per-operation cost of kazoo's connection thread is paid once per batch.
        Keep batches to a few thousand small znodes (the answer is one packet).

        Raises:
            ServerTooOld: the server has no multiRead (before 3.6). ZooKeeperError: the request failed.
        """
        if not paths:
            return []
        chroot = self._kz.chroot
        # our paths are absolute and normalised: kazoo's _prefix_root (normpath per path) only for "/"
        ops = [(kazoo_ext.GET_DATA, chroot + p if p != "/" else _prefix_root(chroot, p)) for p in paths]
        self.multi_read_items += len(paths)
        try:
            return await self._call(paths[0], lambda: self._raw(kazoo_ext.MultiRead(ops)))
        except ZooKeeperError as exc:
            if isinstance(exc.__cause__, UnimplementedError):
                raise ServerTooOld(f"ZooKeeper at {self.hosts} has no multiRead (needs 3.6+)") from exc
            raise

    async def get_children_many(self, paths: list[str]) -> list[list[str] | Exception]:
        """getChildren of every path in ONE ``multiRead`` request (ZooKeeper 3.6+; no watches): per path
        its child names or the exception of that listing (``NoNodeError``...), in order. Keep batches to
        a few thousand small listings (the answer is one packet, under the server's ``jute.maxbuffer``).

        Raises:
            ServerTooOld: the server has no multiRead (before 3.6). ZooKeeperError: the request failed.
        """
        if not paths:
            return []
        chroot = self._kz.chroot
        ops = [(kazoo_ext.GET_CHILDREN, chroot + p if p != "/" else _prefix_root(chroot, p)) for p in paths]
        try:
            return await self._call(paths[0], lambda: self._raw(kazoo_ext.MultiRead(ops)))
        except ZooKeeperError as exc:
            if isinstance(exc.__cause__, UnimplementedError):
                raise ServerTooOld(f"ZooKeeper at {self.hosts} has no multiRead (needs 3.6+)") from exc
            raise

    def reset_peak(self) -> int:
        """Start a new :attr:`peak_outstanding` window (from the requests outstanding now); returns the
        peak of the window that ends."""
        peak, self.peak_outstanding = self.peak_outstanding, self.outstanding
        return peak

    async def add_watch(self, path: str, callback: Callable[[str, str], Any], *, recursive: bool = True,
                        accept: Callable[[str], bool] | None = None) -> Callable[[str, str], None]:
        """A persistent watch on ``path`` (and, ``recursive``, every znode below it): ``callback(type,
        path)`` runs on the event loop for each CREATED/DELETED/CHANGED (and CHILD, non-recursive only)
        notification, in the order the server sent them, and the watch stays (ZooKeeper 3.6+
        ``addWatch``). ``accept(path)``, when given, runs on kazoo's thread and drops the notifications
        it refuses before they cross to the loop (keep it a cheap, pure string test); accepted ones are
        handed over in bursts (one loop wake-up per burst, not per notification). It lives on the
        server *connection*: after a connection loss (SUSPENDED) the server has dropped it and changes
        made meanwhile are not notified; the owner calls this again once CONNECTED and re-reads what it
        covers. Calling it again for ``path`` replaces the callback. Returns the registration, for
        :meth:`remove_watch`.

        Raises:
            ServerTooOld: the server has no addWatch (before 3.6); nothing stays registered.
            ZooKeeperError: the request failed.
        """
        loop = self._loop
        assert loop is not None, "ZkClient.start() was not awaited"
        burst: list[tuple[str, str]] = []
        lock = threading.Lock()

        def drain() -> None:  # event loop
            with lock:
                events = burst[:]
                burst.clear()
            for etype, p in events:
                callback(etype, p)

        def deliver(etype: str, p: str) -> None:  # kazoo thread: only filter and enqueue
            if accept is not None and not accept(p):
                return
            with lock:
                burst.append((etype, p))
                wake = len(burst) == 1
            if wake and not loop.is_closed():
                loop.call_soon_threadsafe(drain)

        full = _prefix_root(self._kz.chroot, path)
        self._persistent.add(path, recursive, deliver)
        mode = kazoo_ext.MODE_PERSISTENT_RECURSIVE if recursive else kazoo_ext.MODE_PERSISTENT
        try:
            await self._call(path, lambda: self._raw(kazoo_ext.AddWatch(full, mode)))
        except ZooKeeperError as exc:
            self._persistent.remove(path, deliver)
            if isinstance(exc.__cause__, UnimplementedError):
                raise ServerTooOld(f"ZooKeeper at {self.hosts} has no persistent watches (addWatch needs 3.6+)") from exc
            raise
        except BaseException:
            self._persistent.remove(path, deliver)
            raise
        return deliver

    def forget_watch(self, path: str, registration: Callable[[str, str], None] | None = None) -> bool:
        """Stop calling back for the persistent watch on ``path`` at once (client side only), if it is
        still ``registration`` (from :meth:`add_watch`) when given; True if it was forgotten."""
        return self._persistent.remove(path, registration)

    async def remove_watch(self, path: str, registration: Callable[[str, str], None] | None = None, *,
                           recursive: bool = True) -> None:
        """Forget the persistent watch on ``path`` (see :meth:`forget_watch`) and have the server drop it
        (best effort: a missing watch or a lost connection is fine, the server drops it with the
        connection anyway). With ``registration``, only that registration is forgotten; whenever
        ``path`` is registered again (by anyone) by the time the request would go, the server's watch
        is theirs now and is left alone (a later addWatch is queued behind this request: FIFO)."""
        self._persistent.remove(path, registration)
        if path in self._persistent:
            return
        full = _prefix_root(self._kz.chroot, path)
        kind = kazoo_ext.WATCHER_TYPE_PERSISTENT_RECURSIVE if recursive else kazoo_ext.WATCHER_TYPE_PERSISTENT
        try:
            await self._call(path, lambda: self._raw(kazoo_ext.RemoveWatches(full, kind)))
        except (ZooKeeperError, KazooException) as exc:  # best effort, see above
            _log.debug("persistent watch not removed on the server (it goes with the connection)",
                       path=path, error=f"{type(exc).__name__}: {exc}")

    def _raw(self, request: Any):
        """Queue a request record on kazoo's connection (as kazoo's own ``*_async`` do)."""
        result = self._kz.handler.async_result()
        self._kz._call(request, result)
        return result

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create a znode; returns the created path (with the sequence suffix if ``sequence``)."""
        return await self._call(
            path,
            lambda: self._kz.create_async(path, data, ephemeral=ephemeral, sequence=sequence, makepath=makepath),
        )

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        """setData with a version check (-1 = any); ``BadVersionError`` on a lost race."""
        return await self._call(path, lambda: self._kz.set_async(path, data, version))

    async def delete(self, path: str, version: int = -1) -> None:
        await self._call(path, lambda: self._kz.delete_async(path, version))

    async def ensure_path(self, path: str, attempts: int = 10) -> None:
        """Create ``path`` and its parents as persistent empty znodes if missing.

        Another session may delete a level it emptied between our create of it and our create below
        it (a worker's ``mark_replicated`` removes the empty levels of the marker tree): the walk then
        starts again from the top, up to ``attempts`` times.

        Raises:
            NoNodeError: a parent kept vanishing ``attempts`` times in a row.
        """
        parts = [p for p in path.split("/") if p]
        for attempt in range(attempts):
            cur = ""
            try:
                for p in parts:
                    cur += "/" + p
                    with contextlib.suppress(NodeExistsError):
                        await self.create(cur)
                return
            except NoNodeError:
                if attempt == attempts - 1:
                    raise

    async def multi(self, ops: list[Op]) -> list[Any]:
        """Run ``ops`` atomically (a ZooKeeper transaction). Returns per-op results; a failed
        transaction returns the exceptions in place (kazoo semantics: nothing was applied)."""
        if not ops:
            return []

        def start():
            t = self._kz.transaction()
            for op in ops:
                if op.kind == "create":
                    t.create(op.path, op.data, ephemeral=op.ephemeral)
                elif op.kind == "delete":
                    t.delete(op.path, op.version)
                elif op.kind == "set":
                    t.set_data(op.path, op.data, op.version)
                elif op.kind == "check":
                    t.check(op.path, op.version)
                else:
                    raise ValueError(f"unknown multi op {op.kind!r} on {op.path}")
            return t.commit_async()

        return await self._call(ops[0].path, start)


def _run_callback(cb: WatchCallback, event: WatchedEvent) -> None:
    res = cb(event)
    if asyncio.iscoroutine(res):
        background(res)
