"""The colocated bookie's death, seen at once (ours, ``localBookieLossDetectionEnabled``; on by default). EDGE.

Upstream learns that a bookie is lost when its registration (``available/<id>`` or
``available/readonly/<id>``, ephemeral znodes) goes, that is when ZooKeeper expires the dead process's
session: ``zkTimeout`` after the crash (10 s by default). That wait is most of a small heal's time from
the kill, for upstream's AutoRecovery and ours. A daemon runs next to its bookie (``bookieId``), and when
the bookie *process* dies while its host stays up (a crash, an OOM kill, ``kill -9``), the daemon can tell
for sure: the kernel closes a dead process's sockets, so the daemon's idle connection to the bookie's
port ends, new connections to the port are refused, and the process is gone from ``/proc``. The
registration then belongs to a session that no process can resume, and the daemon deletes it, as the
expiry would a few seconds later; the Auditor, wherever it runs, sees the loss at once.

What makes this safe:

* the watch runs only when the bookie's address is an address of this host (of this network namespace:
  a socket binds to it), so a refusal comes from this kernel, never from a remote host or a firewall in
  between; otherwise it logs why it is off and the expiry applies, as upstream;
* a verdict needs :data:`REFUSALS` refused connects in a row, :data:`PROBE_GAP_S` apart
  (``ECONNREFUSED``: nothing listens on the port); a timeout, an unreachable host or any other error
  proves nothing and changes nothing (the expiry still applies);
* where ``/proc`` shows it, the process is checked too: nothing may still listen on the port (a local
  ``REJECT`` rule refuses too), and the process seen holding the listening socket while the bookie
  answered must be gone (exited or a zombie). A bookie that closes its port and still runs (upstream's
  graceful stop closes the port first, then flushes, then closes its session; a bookie that shut its
  server on a fatal error) is left alone: it unregisters itself, or its session expires;
* only a registration seen while the bookie answered is deleted: its ``ephemeralOwner`` (the session)
  is recorded whenever a connection succeeds (and when the registration appears while connected), and
  the delete is versioned on a znode still owned by that session. A restarted bookie registers under a
  new session, and only once the old znode is gone, so it is never touched, even when (as upstream's
  bookie does) it registers before it opens its port;
* a refused delete (an ACL) is logged once and left to the expiry.

Where the process cannot be seen (another PID namespace, as a Kubernetes sidecar without
``shareProcessNamespace``, or another user's process), the port's refusals are the verdict: a graceful
stop is then seen when its port closes instead of when it unregisters, moments later.
A host that dies with its bookie takes this daemon too: then the expiry is the only signal, as upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
from collections.abc import Callable, Iterable

import structlog

from autorecovery.aio import background
from autorecovery.errors import ZooKeeperError
from autorecovery.zk.bridge import BadVersionError, NoNodeError, ZkClient
from autorecovery.zk.paths import Paths

log = structlog.get_logger("autorecovery.local_bookie")

#: refused connects in a row that make the verdict "nothing listens on the port"
REFUSALS = 3
#: seconds between those connects: the kernel refuses only when nothing listens, so the repeats only rule
#: out a one-off; 50 ms from the first refusal to the verdict
PROBE_GAP_S = 0.025
#: seconds a connect may take before it counts as "no answer" (proves nothing)
CONNECT_TIMEOUT_S = 2.0
#: seconds between connects while the bookie does not answer (not running yet, or gone)
IDLE_RETRY_S = 2.0
#: seconds between looks while the port refuses and the bookie's process still runs (a graceful stop):
#: when it dies before its session closes (SIGKILL after a stop timeout), it is seen this soon
ALIVE_POLL_S = 0.1
#: after SHORTS held connections in a row that each ended sooner than SHORT_S seconds while the port
#: still answers, the next is held only after IDLE_RETRY_S (a dying process may accept once or twice
#: more; a death is still seen at once: the port is tried right after every close)
SHORT_S = 1.0
SHORTS = 3

PROC = "/proc"
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp{,6}

#: a process as seen in /proc: (pid, start time in clock ticks since boot; a reused pid differs)
Process = tuple[int, int]


# -- /proc parsing (pure: text in, facts out) ------------------------------------------------------------
def _proc_address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``/proc/net/tcp{,6}``'s address (host byte order per 32-bit word) → an address; a v4-mapped v6
    address is given as its v4 address."""
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    v6 = ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
    return v6.ipv4_mapped or v6


def listening_inodes(table: str, address: str, port: int) -> set[int]:
    """Inodes of the sockets that LISTEN on ``address:port`` (or on the wildcard address at ``port``) in
    one ``/proc/net/tcp`` or ``/proc/net/tcp6`` text. Lines that do not parse are skipped."""
    want = ipaddress.ip_address(address.split("%", 1)[0])  # no IPv6 scope
    if isinstance(want, ipaddress.IPv6Address) and want.ipv4_mapped:
        want = want.ipv4_mapped
    out: set[int] = set()
    for line in table.splitlines()[1:]:
        f = line.split()
        if len(f) < 10 or f[3] != _LISTEN:
            continue
        try:
            hex_addr, hex_port = f[1].split(":")
            if int(hex_port, 16) != port:
                continue
            got = _proc_address(hex_addr)
            inode = int(f[9])
        except ValueError:
            continue
        if got == want or got.is_unspecified:
            out.add(inode)
    return out


def parse_stat(text: str) -> tuple[str, int] | None:
    """``/proc/<pid>/stat`` → (state letter, start time in clock ticks), None when it does not parse."""
    _, _, rest = text.rpartition(")")  # the command name may hold spaces and parentheses
    f = rest.split()
    try:
        return f[0], int(f[19])
    except (IndexError, ValueError):
        return None


# -- /proc reading (Linux; None where it cannot be read) ---------------------------------------------
def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def listening(address: str, port: int, proc: str = PROC) -> set[int] | None:
    """Inodes of the sockets listening on ``address:port`` in this network namespace; None when
    ``/proc/net/tcp`` cannot be read (not Linux, or a restricted ``/proc``)."""
    tables = [t for t in (_read(f"{proc}/net/tcp"), _read(f"{proc}/net/tcp6")) if t is not None]
    if not tables:
        return None
    out: set[int] = set()
    for t in tables:
        out |= listening_inodes(t, address, port)
    return out


def holders(inodes: Iterable[int], proc: str = PROC) -> set[Process]:
    """The processes with an open descriptor on any socket in ``inodes`` that this process may look at
    (same PID namespace, same user or privileged); empty when none is visible."""
    names = {f"socket:[{i}]" for i in inodes}
    out: set[Process] = set()
    if not names:
        return out
    try:
        pids = [int(p) for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        fd_dir = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or not ours to look at
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") in names:
                    stat = parse_stat(_read(f"{proc}/{pid}/stat") or "")
                    if stat is not None:
                        out.add((pid, stat[1]))
                    break
            except OSError:
                continue
    return out


def running(process: Process, proc: str = PROC) -> bool:
    """True while ``process`` runs (a zombie or a reused pid counts as gone)."""
    stat = parse_stat(_read(f"{proc}/{process[0]}/stat") or "")
    return stat is not None and stat[0] not in ("Z", "X", "x") and stat[1] == process[1]


def local_address(host: str, port: int) -> tuple[str | None, str, bool]:
    """``(address, "", False)``: the address of ``host`` to watch, an address of this host (a socket
    binds to it); else ``(None, why, retry)``, ``retry`` when the name does not resolve (yet). Blocking
    (name resolution): run it in a thread."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return None, f"{host} does not resolve ({exc})", True
    seen = []
    for family, _, _, _, sockaddr in infos:
        addr = str(sockaddr[0])
        seen.append(addr)
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((addr, 0))
        except OSError:
            continue
        return addr, "", False
    return None, f"{host} ({', '.join(sorted(set(seen)))}) is not an address of this host", False


class LocalBookieWatch:
    """Watch this node's own bookie and delete its registration as soon as its process is gone.

    Args:
        zk / paths: the cluster.
        bookie_id: the colocated bookie (``host:port``: the address its port is reached at).
        proc: where ``/proc`` is (tests may point it elsewhere).

    Attributes:
        removed: registrations this watch deleted (each a bookie process seen gone before its session
            expired).
        verdicts: times the bookie's port was found closed (:data:`REFUSALS` refusals in a row), deleted
            or not.
        spared: of those, times the bookie's process still ran (a graceful stop): nothing deleted then.
        owners: registration path → the session id seen owning it while the bookie answered.
        processes: the processes seen holding the bookie's listening socket while it answered; empty
            when they cannot be seen (another PID namespace or user).
        address: the local address watched; None until resolved, or when the watch is off.
        off_reason: why the watch does not run ("" while it runs).
    """

    def __init__(self, zk: ZkClient, paths: Paths, bookie_id: str, *, proc: str = PROC) -> None:
        host, _, port = bookie_id.rpartition(":")
        self.zk, self.paths, self.bookie_id, self.proc = zk, paths, bookie_id, proc
        self.host, self.port = host.strip("[]"), int(port)
        self.removed = 0
        self.verdicts = 0
        self.spared = 0
        self.owners: dict[str, int] = {}
        self.processes: set[Process] = set()
        self.address: str | None = None
        self.off_reason = ""
        self._connected = False
        self._task: asyncio.Task | None = None
        self._warned_acl = False
        self._spared_verdict = 0
        self._armed: set[str] = set()  # registration paths with an exists-watch pending

    @property
    def registrations(self) -> tuple[str, str]:
        """The bookie's two possible registration znodes: ``(available/<id>, available/readonly/<id>)``."""
        return self.paths.available_bookie(self.bookie_id), self.paths.readonly_bookie(self.bookie_id)

    @property
    def active(self) -> bool:
        """True while the watch runs (False once it found the bookie's address is not local, or stopped)."""
        return self._task is not None and not self._task.done()

    async def start(self) -> LocalBookieWatch:
        """Start watching (idempotent). When ``bookie_id``'s host is not an address of this host the watch
        stops at once, logging why (INFO), and ``off_reason`` says it."""
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

    async def _resolve(self) -> bool:
        """Find the local address to watch; False (watch off, logged) when the host is not local."""
        warned = False
        while True:
            addr, why, retry = await asyncio.to_thread(local_address, self.host, self.port)
            if addr is not None:
                self.address = addr
                log.info("local bookie watch on: a crash of this node's bookie process is seen at once "
                         "(its registration deleted) instead of at its session expiry",
                         bookie_id=self.bookie_id, address=f"{addr}:{self.port}")
                return True
            if not retry:
                self.off_reason = why
                log.info("local bookie watch off: the bookie does not run on this host; its loss is seen at "
                         "its session expiry", bookie_id=self.bookie_id, reason=why)
                return False
            if not warned:  # a name not published yet (a pod starting): tried again
                warned = True
                log.info("local bookie watch waiting for the bookie's address to resolve",
                         bookie_id=self.bookie_id, reason=why)
            await asyncio.sleep(IDLE_RETRY_S)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | str:
        """A connection to the bookie's port, or ``"refused"`` / ``"no answer"``."""
        try:
            return await asyncio.wait_for(asyncio.open_connection(self.address, self.port), CONNECT_TIMEOUT_S)
        except ConnectionRefusedError:
            return "refused"
        except (TimeoutError, OSError):
            return "no answer"

    async def _run(self) -> None:
        if not await self._resolve():
            return
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
                        await self._record_processes()
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
                    if self.owners and not await self._gone():
                        await asyncio.sleep(ALIVE_POLL_S)  # a graceful stop: look again soon
                        continue
                    if self.owners:
                        await self._remove()
                else:
                    refusals = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the watch must outlive any one failure
                log.info("local bookie watch step failed; retrying", bookie_id=self.bookie_id, error=repr(exc))
            await asyncio.sleep(IDLE_RETRY_S)

    async def _record_processes(self) -> None:
        """Record the processes holding the bookie's listening socket now (the bookie answers)."""
        assert self.address is not None
        address, port, proc = self.address, self.port, self.proc

        def look() -> set[Process]:
            inodes = listening(address, port, proc)
            return holders(inodes, proc) if inodes else set()

        seen = await asyncio.to_thread(look)
        if seen != self.processes:
            self.processes = seen
            if seen:
                log.info("local bookie process found", bookie_id=self.bookie_id, pids=sorted(p for p, _ in seen))
            else:
                log.info("local bookie process not visible from here (another PID namespace or user): a port "
                         "that stays closed is the verdict", bookie_id=self.bookie_id)

    async def _gone(self) -> bool:
        """Whether the process behind the closed port is gone: nothing listens on the port any more (where
        ``/proc`` shows it) and no process seen holding its socket still runs (where those were seen).
        False once per stop logs why nothing is deleted (INFO)."""
        assert self.address is not None
        address, port, proc, seen = self.address, self.port, self.proc, set(self.processes)

        def look() -> str:
            inodes = listening(address, port, proc)
            if inodes:
                return "a socket still listens on the port (a local firewall rule refuses the connects?)"
            alive = sorted(p for p in seen if running(p, proc))
            return f"its process still runs (pid {', '.join(str(p) for p, _ in alive)})" if alive else ""

        why = await asyncio.to_thread(look)
        if not why:
            return True
        if self._spared_verdict != self.verdicts:  # once per closed-port episode
            self._spared_verdict = self.verdicts
            self.spared += 1
            log.info("the local bookie's port refuses connections but " + why + ": its registration is left "
                     "to the bookie (a graceful stop unregisters itself) or to its session expiry",
                     bookie_id=self.bookie_id)
        return False

    @staticmethod
    async def _close(writer: asyncio.StreamWriter) -> None:
        writer.close()
        try:
            await writer.wait_closed()
        except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
            log.debug("best-effort step failed", step="_close", error=repr(cleanup_exc))

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
                background(self._record_owners())
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
