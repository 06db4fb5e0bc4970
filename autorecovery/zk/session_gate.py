"""The connected gate and the error translation of :class:`~autorecovery.zk.bridge.ZkClient` (EDGE):
a request waits here while the session is disconnected, kazoo's failures become errors that name the
path, and a session not made becomes one line naming each server and its cause.

kazoo queues a request made while disconnected and wakes its I/O thread with one byte on a socket pair
that it drains only once connected: some 280 such requests fill the pair and the next one blocked the
event loop until ZooKeeper came back (issue 26: a campaign's sampler froze the runner during a quorum
loss). So no request is handed to kazoo before the connection is back (:func:`until_connected`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError, NotEmptyError

from autorecovery.config.settings import ZkSecurity
from autorecovery.errors import ZooKeeperError
from autorecovery.zk import probe as zk_probe
from autorecovery.zk.client_security import zk_ssl_context

#: kazoo's errors the callers handle by type: raised as they are, not translated
PASSED_THROUGH: tuple[type[Exception], ...] = (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError)


def translate(exc: Exception, path: str) -> Exception:
    """``exc`` itself when it is one of :data:`PASSED_THROUGH`, else a :class:`ZooKeeperError` naming
    ``path`` and kazoo's error (``ZooKeeper operation on <path> failed: <type> <message>``)."""
    if isinstance(exc, PASSED_THROUGH):
        return exc
    return ZooKeeperError(f"ZooKeeper operation on {path} failed: {type(exc).__name__} {exc}")


def fresh(exc: BaseException) -> BaseException:
    """A copy of kazoo's failure for one request: same type and arguments, no traceback.

    kazoo fails every request pending at a connection drop with ONE exception instance; each request
    re-raised it, and every raise appended its frames to that instance's traceback, which then held
    those frames (and their futures) alive: tracebacks of hundreds of repeated frames and a daemon's
    memory growing over a long outage (issue 26, the fourth full campaign). Falls back to the same
    instance with its traceback cleared when the type cannot be rebuilt from its arguments."""
    try:
        new = type(exc)(*exc.args)
    except Exception:  # noqa: BLE001 - an exception type with another constructor
        return exc.with_traceback(None)
    return new


def consume(fut: asyncio.Future) -> None:
    """Done-callback marking a request's failure as retrieved: a request whose caller stopped waiting
    (cancelled while its submission was off the loop) must not log asyncio's "Future exception was
    never retrieved" at ERROR when kazoo fails it later (issue 26: 124 such lines in one daemon)."""
    if not fut.cancelled():
        fut.exception()


async def until_connected(kz: KazooClient, connected: asyncio.Event, stopping: Callable[[], bool],
                          loop: asyncio.AbstractEventLoop, timeout_s: float, path: str) -> None:
    """Hold a request for ``path`` while ``kz`` is disconnected, for up to ``timeout_s`` seconds (the
    session timeout); returns at once when connected or when ``stopping()`` (the client is closing).
    ``connected`` is the client's event set on CONNECTED (it lags kazoo's state by one loop turn at
    most).

    Raises:
        ZooKeeperError: naming ``path``, a ConnectionLoss, when not connected within ``timeout_s``.
    """
    deadline = loop.time() + timeout_s
    while not kz.connected and not stopping():
        left = deadline - loop.time()
        if left <= 0:
            raise translate(ConnectionLoss("not connected within the session timeout"), path)
        try:
            await asyncio.wait_for(connected.wait(), timeout=min(left, 0.5))
        except TimeoutError:
            continue
        if not kz.connected:  # the event lags kazoo's state by one loop turn at most
            await asyncio.sleep(0.01)


async def connect_failure(exc: Exception, hosts: str, security: ZkSecurity, timeout_s: float) -> ZooKeeperError:
    """The error for a session not made within ``timeout_s`` by kazoo's start (which raised ``exc``):
    for ``AuthFailedError``, auth failed and what to check; for a TLS set-up that fails here, that
    error and the files to check; else one line naming each server of ``hosts`` and its cause from a
    probe of the servers (:mod:`autorecovery.zk.probe`; kazoo itself only says ``Connection time-out``).
    """
    if isinstance(exc, AuthFailedError):
        why = str(exc) or "the server refused the credentials"
        return ZooKeeperError(f"cannot connect to ZooKeeper at {hosts}: auth failed ({why}) - check "
                              "zookeeper.authProvider and the digest or SASL user and password")
    try:
        ctx = zk_ssl_context(security)
    except (OSError, ValueError) as ctx_exc:
        return ZooKeeperError(f"cannot connect to ZooKeeper at {hosts}: TLS set-up failed: {ctx_exc} "
                              "- check the zookeeper.ssl.* trust store and key store files")
    probes = await zk_probe.probe(hosts, timeout_s=min(3.0, max(1.0, timeout_s)), tls=ctx)
    return ZooKeeperError(zk_probe.explain(hosts, probes, str(exc) or type(exc).__name__))
