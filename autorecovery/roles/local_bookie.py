"""The colocated bookie's death, seen at once (ours, ``localBookieLossDetectionEnabled``; off by default). EDGE.

Upstream learns that a bookie is lost when its registration (``available/<id>`` or
``available/readonly/<id>``, ephemeral znodes) goes, that is when ZooKeeper expires the dead process's
session: ``zkTimeout`` after the crash (10 s by default). That wait is most of a small heal's time from
the kill (issue 29: 3.5–4.8 s of 5–9 s with a 4–5 s ``zkTimeout``), and the same for upstream's
AutoRecovery and ours. A daemon runs next to its bookie (``bookieId``), and when the bookie *process*
dies while its host stays up (a crash, an OOM kill, ``kill -9``), the daemon can tell for sure: the
kernel closes a dead process's sockets, so the daemon's idle connection to the bookie's port ends and
new connections to the port are refused. The registration then belongs to a session that no process
can resume, and the daemon deletes it, as the expiry would a few seconds later; the Auditor, wherever
it runs, sees the loss at once.

What makes this safe:

* a verdict needs :data:`REFUSALS` refused connects in a row, :data:`PROBE_GAP_S` apart
  (``ECONNREFUSED``: nothing listens on the port); a timeout, an unreachable host or any other error
  proves nothing and changes nothing (the expiry still applies);
* only a registration seen while the bookie answered is deleted: its ``ephemeralOwner`` (the session)
  is recorded whenever a connection succeeds (and when the registration appears while connected), and
  the delete is versioned on a znode still owned by that session. A restarted bookie registers under a
  new session, and only once the old znode is gone, so it is never touched, even when (as upstream's
  bookie does) it registers before it opens its port;
* a refused delete (an ACL) is logged once and left to the expiry.

A host that dies with its bookie takes this daemon too: then the expiry is the only signal, as upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from autorecovery.errors import ZooKeeperError
from autorecovery.zk.bridge import BadVersionError, NoNodeError, ZkClient
from autorecovery.zk.paths import Paths

log = structlog.get_logger("autorecovery.local_bookie")

#: refused connects in a row that make the verdict "the process is gone"
REFUSALS = 3
#: seconds between those connects: the kernel refuses only when nothing listens, so the repeats only rule
#: out a one-off; 50 ms from the first refusal to the verdict
PROBE_GAP_S = 0.025
#: seconds a connect may take before it counts as "no answer" (proves nothing)
CONNECT_TIMEOUT_S = 2.0
#: seconds between connects while the bookie does not answer (not running yet, or gone)
IDLE_RETRY_S = 2.0
#: after SHORTS held connections in a row that each ended sooner than SHORT_S seconds while the port
#: still answers, the next is held only after IDLE_RETRY_S (a dying process may accept once or twice
#: more; a death is still seen at once: the port is tried right after every close)
SHORT_S = 1.0
SHORTS = 3


class LocalBookieWatch:
    """Watch this node's own bookie and delete its registration as soon as its process is gone.

    Args:
        zk / paths: the cluster.
        bookie_id: the colocated bookie (``host:port``: the address its port is reached at).

    Attributes:
        removed: registrations this watch deleted (each a bookie process seen gone before its session
            expired).
        verdicts: times the bookie was found gone (:data:`REFUSALS` refusals in a row), deleted or not.
        owners: registration path → the session id seen owning it while the bookie answered.
    """

    def __init__(self, zk: ZkClient, paths: Paths, bookie_id: str) -> None:
        host, _, port = bookie_id.rpartition(":")
        self.zk, self.paths, self.bookie_id = zk, paths, bookie_id
        self.host, self.port = host.strip("[]"), int(port)
        self.removed = 0
        self.verdicts = 0
        self.owners: dict[str, int] = {}
        self._connected = False
        self._task: asyncio.Task | None = None
        self._warned_acl = False
        self._armed: set[str] = set()  # registration paths with an exists-watch pending

    @property
    def registrations(self) -> tuple[str, str]:
        """The bookie's two possible registration znodes: ``(available/<id>, available/readonly/<id>)``."""
        return self.paths.available_bookie(self.bookie_id), self.paths.readonly_bookie(self.bookie_id)

    async def start(self) -> "LocalBookieWatch":
        """Start watching (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())
        return self

    async def stop(self) -> None:
        """Stop watching (idempotent); the bookie and its registration are left as they are."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | str:
        """A connection to the bookie's port, or ``"refused"`` / ``"no answer"``."""
        try:
            return await asyncio.wait_for(asyncio.open_connection(self.host, self.port), CONNECT_TIMEOUT_S)
        except ConnectionRefusedError:
            return "refused"
        except (OSError, asyncio.TimeoutError):
            return "no answer"

    async def _run(self) -> None:
        refusals, shorts = 0, 0
        while True:
            try:
                got = await self._connect()
                if isinstance(got, tuple):
                    refusals = 0
                    reader, writer = got
                    if shorts >= SHORTS:  # the port answers but closes what it accepts: no busy loop
                        shorts = 0
                        await self._close(writer)
                        await asyncio.sleep(IDLE_RETRY_S)
                        continue
                    opened = asyncio.get_running_loop().time()
                    self._connected = True
                    try:
                        await self._record_owners()
                        await self._until_closed(reader)
                    finally:
                        self._connected = False
                        await self._close(writer)
                    shorts = shorts + 1 if asyncio.get_running_loop().time() - opened < SHORT_S else 0
                    continue  # ended: the process may be gone; look again at once
                if got == "refused":
                    refusals += 1
                    if refusals < REFUSALS:
                        await asyncio.sleep(PROBE_GAP_S)
                        continue
                    if refusals == REFUSALS:
                        self.verdicts += 1
                        await self._remove()
                else:
                    refusals = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the watch must outlive any one failure
                log.info("local bookie watch step failed; retrying", bookie_id=self.bookie_id, error=repr(exc))
            await asyncio.sleep(IDLE_RETRY_S)

    @staticmethod
    async def _close(writer: asyncio.StreamWriter) -> None:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()

    @staticmethod
    async def _until_closed(reader: asyncio.StreamReader) -> None:
        """Read (and drop) whatever comes until the connection ends: the bookie closed it or died."""
        with contextlib.suppress(OSError):
            while await reader.read(65536):
                pass

    async def _record_owners(self) -> None:
        """Record the session owning each registration now (the bookie answers); a registration still
        missing is recorded when it appears, if the bookie still answers then."""
        for path in self.registrations:
            # one pending watch per path at most (kazoo keeps every callback it is given); marked armed
            # before the request, since the watch may fire before this coroutine resumes
            watch = None if path in self._armed else self._on_registration(path)
            if watch is not None:
                self._armed.add(path)
            try:
                stat = await self.zk.exists(path, watch=watch)
            except ZooKeeperError:
                self._armed.discard(path)
                continue  # recorded at the next connection
            if stat is not None and stat.ephemeralOwner:
                self.owners[path] = stat.ephemeralOwner

    def _on_registration(self, path: str) -> Callable[[object], None]:
        def fired(_event: object) -> None:
            self._armed.discard(path)
            if self._connected:
                asyncio.ensure_future(self._record_owners())
        return fired

    async def _remove(self) -> None:
        """Delete each registration still owned by the session recorded while the bookie answered."""
        for path in self.registrations:
            owner = self.owners.get(path)
            if owner is None:
                continue
            try:
                stat = await self.zk.exists(path)
                if stat is None or stat.ephemeralOwner != owner:
                    self.owners.pop(path, None)  # expired already, or a new process's: not ours to touch
                    continue
                await self.zk.delete(path, stat.version)
            except (NoNodeError, BadVersionError):
                self.owners.pop(path, None)
                continue
            except ZooKeeperError as exc:
                if type(exc.__cause__).__name__ == "NoAuthError" or "NoAuth" in str(exc):  # kazoo's, translated
                    if not self._warned_acl:
                        self._warned_acl = True
                        log.warning("cannot delete the local bookie's registration (ZooKeeper ACL); its loss is "
                                    "seen when its session expires", bookie_id=self.bookie_id, znode=path)
                    continue
                log.info("deleting the local bookie's registration failed; it goes at its session expiry",
                         bookie_id=self.bookie_id, znode=path, error=str(exc))
                continue
            self.owners.pop(path, None)
            self.removed += 1
            log.warning("the local bookie's process is gone (its port refuses connections): its registration "
                        "was deleted now instead of at its session expiry", bookie_id=self.bookie_id, znode=path,
                        session=hex(owner))
