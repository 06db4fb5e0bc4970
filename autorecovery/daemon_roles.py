"""The roles a daemon runs, how it builds them, and how its start is tried again (EDGE, just below
:mod:`autorecovery.daemon`).

:data:`RoleFactory` is the shape the daemon takes its roles' builders in (tests inject fakes);
:func:`default_auditor_factory` and :func:`default_worker_factory` build the real Auditor and
ReplicationWorker from the daemon's settings, importing the roles only when called;
:func:`start_retrying` starts a daemon again when ZooKeeper drops while it starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from autorecovery.config.settings import Settings
from autorecovery.errors import ZooKeeperError, is_retriable
from autorecovery.retry import Backoff
from autorecovery.roles.role import Role
from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.paths import Paths

log = structlog.get_logger("autorecovery.daemon")

#: How long :func:`start_retrying` keeps starting again after ZooKeeper dropped mid-start, s.
START_RETRY_BUDGET_S = 60.0

#: ``factory(zk, paths, settings, policy, bookies, <bookie id | watcher>) -> Role``
RoleFactory = Callable[..., Role]


def default_auditor_factory(zk: ZkClient, paths: Paths, settings: Settings, policy: Any, bookies: Any,
                            bookie_id: str) -> Any:
    """Build the Auditor (``autorecovery.roles.auditor``) with ``settings.auditor``."""
    from autorecovery.roles.auditor import Auditor

    return Auditor(zk, paths, settings.auditor, policy, bookies, bookie_id=bookie_id,
                   update_policy=False)  # the daemon keeps the policy current


def default_worker_factory(zk: ZkClient, paths: Paths, settings: Settings, policy: Any, bookies: Any,
                           watcher: BookieWatcher) -> Any:
    """Build the ReplicationWorker (``autorecovery.roles.worker``) with ``settings.worker``."""
    from autorecovery.roles.worker import ReplicationWorker

    return ReplicationWorker(zk, paths, settings.worker, policy, bookies, watcher,
                             update_policy=False)  # the daemon keeps the policy current


def role_running(role: Role | None) -> bool:
    """A role is running while it says so (:class:`~autorecovery.roles.role.Role` ``running``)."""
    return role is not None and bool(role.running)


class Startable(Protocol):
    """What :func:`start_retrying` needs of a daemon (:class:`autorecovery.daemon.Daemon`)."""

    _connected_once: bool
    _stop_requested: asyncio.Event

    async def start(self) -> Any: ...

    def _forget_parts(self) -> None: ...


async def start_retrying(daemon: Startable, budget_s: float = START_RETRY_BUDGET_S) -> None:
    """``daemon.start()``, started again (after its full teardown) when ZooKeeper drops *during*
    start-up: a retriable ZooKeeper error after the first connect succeeded (ConnectionLoss, an expired
    session), for up to ``budget_s`` seconds with full-jitter backoff 0.5 -> 5 s (:mod:`autorecovery.retry`),
    one WARNING per attempt.
    Upstream's AutoRecoveryMain exits; the chaos campaign (issue 26) saw a 1 s cut of a starting
    daemon's ZooKeeper link end the process. ZooKeeper unreachable from the start, a missing cluster,
    a bad setting or a port in use still fail at once (one line, as before).

    Raises:
        whatever ``start`` raises; the last error once the budget is spent.
    """
    loop = asyncio.get_running_loop()
    deadline, backoff, attempt = loop.time() + budget_s, Backoff(0.5, 5.0), 1
    while True:
        pause = backoff.next_delay()
        try:
            await daemon.start()
            return
        except ZooKeeperError as exc:
            if not (daemon._connected_once and is_retriable(exc)) or loop.time() + pause > deadline \
                    or daemon._stop_requested.is_set():
                raise
            log.warning("ZooKeeper dropped during start-up; starting again", error=str(exc),
                        attempt=attempt, retry_in_s=pause)
        daemon._forget_parts()
        await asyncio.sleep(pause)
        attempt += 1
