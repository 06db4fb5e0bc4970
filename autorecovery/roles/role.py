"""What the daemon asks of a role (Auditor, ReplicationWorker): the :class:`Role` protocol.

The daemon (``daemon.py``) starts a role, watches ``running`` (a role whose tasks died makes the
daemon exit 1 so a supervisor restarts it) and stops it with a drain bound; it never probes a role's
attributes. Membership → placement policy is one subscription owned by the daemon: roles are handed
a policy that is already kept current and do not subscribe to the BookieWatcher for it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Role(Protocol):
    """A long-running part of the daemon.

    ``start()`` returns once the role serves (raising if it cannot); ``stop(drain_timeout_s)`` lets
    in-flight work finish for up to ``drain_timeout_s`` seconds, then aborts it without leaving
    half-written metadata, and is idempotent; ``running`` is false once the role stopped or one of
    its tasks died.
    """

    async def start(self) -> Role: ...

    async def stop(self, drain_timeout_s: float = 10.0) -> None: ...

    @property
    def running(self) -> bool: ...
