"""One async function per admin command, shared by the shell (``autorecovery shell``) and the HTTP API.

Each function takes an :class:`AdminContext` (a ZooKeeper session and the stores built on it) and
returns plain data; the shell renders upstream's wording, the HTTP layer upstream's JSON. Errors are
:class:`~autorecovery.errors.AutoRecoveryError` subclasses with a message that names what they are
about; :func:`http_status` maps them to status codes and the shell prints them and exits non-zero.

Upstream sources: ``BookieShell`` and ``tools/cli/commands/{autorecovery,bookies,client}/*`` for the
commands, ``server/http/service/*`` for the endpoints (see docs/operators.md for the mapping).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from autorecovery.config.load import Settings
from autorecovery.errors import (
    AutoRecoveryError,
    BookieError,
    ConfigError,
    IllegalOpError,
    NoClusterError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnavailableError,
    ZooKeeperError,
)
from autorecovery.ledger.ids import validate_bookie_id, validate_ledger_id
from autorecovery.ledger.layout import Layout, require_matches
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.topology_source import PlacementSetup, read_pulsar_racks  # noqa: F401
from autorecovery.zk.topology_source import build_placement as _build_placement
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.zk.election import current_auditor
from autorecovery.zk.ledgers import LedgerStore, read_layout
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UNASSIGNED_CTIME, UnderreplicationManager

log = structlog.get_logger("autorecovery.admin")


# -- errors ---------------------------------------------------------------------------------------------
class AdminError(AutoRecoveryError):
    """An admin request that cannot be served as asked (HTTP 400 unless a subclass says otherwise)."""

    upstream_name = "BKIllegalOpException"
    http_status = 400


class BadRequestError(AdminError):
    """A malformed argument: bad bookie id, bad ledger id, contradictory options."""


def http_status(exc: BaseException) -> int:
    """HTTP status for an error raised by a command (400 bad input, 404 missing ledger, 409 illegal in
    the current state, 503 unavailable / no auditor / ZooKeeper down, 500 otherwise)."""
    if isinstance(exc, AdminError):
        return exc.http_status
    if isinstance(exc, (ValueError, ConfigError)):
        return 400
    if isinstance(exc, NoSuchLedgerError):
        return 404
    if isinstance(exc, NoClusterError):
        return 503
    if isinstance(exc, IllegalOpError):
        return 409
    if isinstance(exc, (UnavailableError, ZooKeeperError, NotEnoughBookiesError, BookieError)):
        return 503
    return 500


def check_bookie_id(bookie_id: str, what: str = "bookie id") -> str:
    """Validate ``host:port``.

    Raises:
        BadRequestError: ``bad bookie id 'x': expected host:port``.
    """
    try:
        return validate_bookie_id((bookie_id or "").strip())
    except ValueError:
        raise BadRequestError(f"bad {what} {bookie_id!r}: expected host:port") from None


def check_ledger_id(value: Any) -> int:
    """Parse and validate a ledger id (decimal).

    Raises:
        BadRequestError: ``bad ledger id 'x'``.
    """
    try:
        lid = int(str(value).strip(), 10)
        return validate_ledger_id(lid)
    except ValueError:
        raise BadRequestError(f"bad ledger id {value!r}: expected a non-negative integer") from None


# -- context ------------------------------------------------------------------------------------------
@dataclass
class AdminContext:
    """What the commands work on. The daemon builds one from its own roles; the shell opens one with
    :func:`open_admin`.

    Attributes:
        zk, paths, urm, ledgers: ZooKeeper session, znode paths, under-replication manager, metadata store.
        settings: the effective configuration (placement keys, timeouts).
        bookies: gRPC bookie client (created on first use when None and owned then).
        watcher: bookie registrations (started on first use when None and owned then).
        policy: placement policy (built from the settings on first use when None).
        reader: the daemon's BookieInfoReader, or None.
        progress_source: returns the local worker's :class:`~autorecovery.plan.progress.Progress`
            (daemon only).
    """

    zk: ZkClient
    paths: Paths
    urm: UnderreplicationManager
    ledgers: LedgerStore
    settings: Settings | None = None
    bookies: Any = None
    watcher: BookieWatcher | None = None
    policy: Any = None
    reader: Any = None
    progress_source: Callable[[], Any] | None = None
    _owned: list[Callable[[], Any]] = field(default_factory=list)
    _placement: Any = None

    async def get_watcher(self) -> BookieWatcher:
        if self.watcher is None:
            self.watcher = BookieWatcher(self.zk, self.paths)
            await self.watcher.start()
            self._owned.append(self.watcher.stop)
        return self.watcher

    def get_bookies(self) -> Any:
        if self.bookies is None:
            from autorecovery.rpc.bookie_client import BookieClient

            timeout = float(self.settings.bookie_info.timeout_s) if self.settings else 5.0
            self.bookies = BookieClient(timeout_s=max(timeout, 5.0), tls=getattr(self.settings, "tls", None))
            self._owned.append(self.bookies.close)
        return self.bookies

    async def get_policy(self) -> Any:
        """The placement policy, fed with the current writable/read-only sets."""
        if self.policy is None:
            setup = await build_placement(self.settings, self.zk)
            self._placement = setup
            self.policy = setup.policy
            w = await self.get_watcher()
            self.policy.on_cluster_changed(set(w.writable), set(w.readonly))
            w.add_listener(lambda wr, ro: self.policy.on_cluster_changed(set(wr), set(ro)))
        return self.policy

    async def close(self) -> None:
        """Stop what this context created itself (never the daemon's shared roles). Idempotent."""
        owned, self._owned = self._owned, []
        for stop in reversed(owned):
            with contextlib.suppress(Exception):
                res = stop()
                if asyncio.iscoroutine(res):
                    await res


async def check_cluster(zk: ZkClient, paths: Paths, settings: Settings | None = None) -> Layout:
    """Make sure a BookKeeper cluster this version understands is formatted under ``paths.root``: read
    and validate ``LAYOUT`` (upstream ``LedgerLayout``; issue 9: a wrong ledgers root is refused, not
    served as an empty cluster). Returns the parsed layout; lay ledger paths out with
    ``paths.with_layout(layout)``.

    Args:
        settings: when given, the ledger manager it names (``metadataServiceUri`` scheme,
            ``ledgerManagerFactoryClass``, ``ledgerManagerType``) must be the one ``LAYOUT`` names.

    Raises:
        NoClusterError: naming the connect string and the missing ``LAYOUT`` znode.
        CompatibilityError: ``LAYOUT`` names a format or ledger manager this version does not lay out
            ledger paths for, or another one than the configuration (names the znode and the key).
    """
    layout = await read_layout(zk, paths)
    if settings is not None:
        require_matches(layout, settings.ledger_manager, settings.ledger_manager_key, paths.layout)
    return layout


@contextlib.asynccontextmanager
async def open_admin(settings: Settings, *, connect_timeout_s: float | None = None) -> AsyncIterator[AdminContext]:
    """Open a ZooKeeper session on the configured cluster and yield an :class:`AdminContext`.

    Raises:
        ZooKeeperError: ``cannot connect to ZooKeeper at <hosts>`` within ``connect_timeout_s``
            (default: the session timeout ``zkTimeout``).
        NoClusterError: nothing formatted under the ledgers root.
    """
    timeout = connect_timeout_s if connect_timeout_s is not None else max(1.0, settings.zk_timeout_ms / 1000.0)
    zk = ZkClient.from_settings(settings)
    try:
        await zk.start(timeout_s=timeout)
    except ZooKeeperError:
        with contextlib.suppress(Exception):
            await zk.stop()
        raise
    ctx = None
    try:
        paths = Paths(settings.ledgers_root)
        paths = paths.with_layout(await check_cluster(zk, paths, settings))
        urm = UnderreplicationManager(zk, paths, store_ctime=bool(settings.get("storeSystemTimeAsLedgerUnderreplicatedMarkTime")))
        await urm.init()
        ctx = AdminContext(zk=zk, paths=paths, urm=urm, ledgers=LedgerStore(zk, paths), settings=settings)
        ctx._owned.append(urm.close)
        yield ctx
    finally:
        if ctx is not None:
            await ctx.close()
        await zk.stop()


# -- placement set-up (shared with the daemon, in zk/topology_source.py) ---------------------------------
async def build_placement(settings: Settings | None, zk: ZkClient, *, watch: Callable[[Any], Any] | None = None
                          ) -> PlacementSetup:
    """The configured placement policy with its rack resolver (see :func:`topology_source.build_placement`).

    Raises:
        ConfigError: a bad placement key, or an ``ensemblePlacementPolicy`` class we do not know.
    """
    props = dict(settings.properties) if settings is not None else {}
    explicit = settings is not None and settings.sources.get("reppDnsResolverClass", "default") != "default"
    name = str(settings.get("ensemblePlacementPolicy")) if settings is not None else None
    return await _build_placement(props, zk, explicit_resolver=explicit, policy_name=name, watch=watch)


# -- listunderreplicated ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class URLedgerInfo:
    """One marked ledger: id, ctime (ms, -1 when the marker has none), missing replicas, lock holder."""

    ledger_id: int
    ctime: int
    replicas: tuple[str, ...]
    worker: str | None = None


def _replica_predicate(missing: str | None, excluding: str | None) -> Callable[[list[str]], bool] | None:
    inc = (missing or "").strip()
    exc = (excluding or "").strip()
    if inc and exc:
        return lambda reps: inc in reps and exc not in reps
    if inc:
        return lambda reps: inc in reps
    if exc:
        return lambda reps: exc not in reps
    return None


async def list_underreplicated(ctx: AdminContext, missing_replica: str | None = None,
                               excluding_missing_replica: str | None = None,
                               with_workers: bool = False) -> list[URLedgerInfo]:
    """Markers, filtered like upstream ``listunderreplicated -mr/-emr``, ordered by ledger id.

    Raises:
        BadRequestError: a filter that is not ``host:port``.
    """
    for v, what in ((missing_replica, "missing replica"), (excluding_missing_replica, "excluded missing replica")):
        if v:
            check_bookie_id(v, what)
    pred = _replica_predicate(missing_replica, excluding_missing_replica)
    out = []
    async for m in ctx.urm.list_underreplicated(pred):
        worker = await ctx.urm.lock_holder(m.ledger_id) if with_workers else None
        out.append(URLedgerInfo(m.ledger_id, m.ctime, tuple(m.replicas), worker))
    out.sort(key=lambda x: x.ledger_id)
    return out


# -- auditor, switches, delay -----------------------------------------------------------------------------
async def who_is_auditor(ctx: AdminContext) -> str | None:
    """Bookie id of the current auditor (first vote), None when nobody is elected."""
    return await current_auditor(ctx.zk, ctx.paths)


async def trigger_audit(ctx: AdminContext) -> int:
    """Force an audit now by re-writing ``lostBookieRecoveryDelay`` (upstream ``triggeraudit``).

    Returns the delay value written back.

    Raises:
        UnavailableError: AutoRecovery is disabled, no auditor is elected, or the delay znode is missing.
    """
    if await who_is_auditor(ctx) is None:
        raise UnavailableError("cannot trigger an audit: no auditor elected (is any autorecovery daemon running?)")
    delay = await ctx.urm.get_lost_bookie_recovery_delay()
    await ctx.urm.trigger_audit()
    return delay


async def autorecovery_enabled(ctx: AdminContext) -> bool:
    """Whether AutoRecovery is enabled (``underreplication/disable`` absent)."""
    return await ctx.urm.is_enabled()


@dataclass(frozen=True)
class ToggleResult:
    """``changed`` False when AutoRecovery already was in the requested state."""

    enabled: bool
    changed: bool


async def set_autorecovery(ctx: AdminContext, enable: bool) -> ToggleResult:
    """Enable or disable AutoRecovery; idempotent (upstream says "already enabled. Doing nothing")."""
    current = await ctx.urm.is_enabled()
    if current == enable:
        return ToggleResult(enabled=current, changed=False)
    try:
        if enable:
            await ctx.urm.enable()
        else:
            await ctx.urm.disable()
    except UnavailableError:
        pass  # a concurrent toggle got there first: same end state
    return ToggleResult(enabled=await ctx.urm.is_enabled(), changed=True)


async def get_lost_bookie_recovery_delay(ctx: AdminContext) -> int:
    """Seconds from ``underreplication/lostBookieRecoveryDelay``.

    Raises:
        UnavailableError: the znode does not exist (no auditor ever started) or is not a number.
    """
    return await ctx.urm.get_lost_bookie_recovery_delay()


async def set_lost_bookie_recovery_delay(ctx: AdminContext, seconds: Any) -> int:
    """Write a new delay (seconds, >= 0); the auditor reacts at once (upstream semantics).

    Raises:
        BadRequestError: not a non-negative integer.
    """
    try:
        value = int(str(seconds).strip(), 10)
    except ValueError:
        raise BadRequestError(f"bad lostBookieRecoveryDelay {seconds!r}: expected seconds (an integer >= 0)") from None
    if value < 0 or value > 2**31 - 1:
        raise BadRequestError(f"bad lostBookieRecoveryDelay {seconds!r}: expected seconds (an integer >= 0)")
    await ctx.urm.set_lost_bookie_recovery_delay(value)
    return value


@dataclass(frozen=True)
class RecoveringLedger:
    """A marked ledger whose lock is held: id, lock holder (host name), metadata length (verbose)."""

    ledger_id: int
    worker: str
    length: int | None = None


async def query_autorecovery_status(ctx: AdminContext, verbose: bool = False) -> list[RecoveringLedger]:
    """Ledgers being recovered right now (marker + lock), upstream ``queryautorecoverystatus``."""
    out = []
    async for m in ctx.urm.list_underreplicated(None):
        holder = await ctx.urm.lock_holder(m.ledger_id)
        if holder is None:
            continue
        length = None
        if verbose:
            try:
                md, _ = await ctx.ledgers.read(m.ledger_id)
                length = md.length
            except NoSuchLedgerError:
                length = None
        out.append(RecoveringLedger(m.ledger_id, holder, length))
    return sorted(out, key=lambda r: r.ledger_id)


#: ``forceauditchecks`` resets the chosen last-run times to now − 21 days (upstream).
FORCE_AUDIT_AGE_MS = 21 * 24 * 3600 * 1000


async def force_audit_checks(ctx: AdminContext, check_all_ledgers: bool, placement_policy: bool, replicas: bool,
                             now_ms: int | None = None) -> dict[str, int]:
    """Reset the chosen check ctimes so those checks run right after the next auditor start.

    Returns which ctime znode got which value (ms since the epoch).

    Raises:
        BadRequestError: no check chosen ("must contain at least one type of check").
    """
    chosen = [w for w, on in (("checkallledgers", check_all_ledgers), ("placementpolicycheck", placement_policy),
                              ("replicascheck", replicas)) if on]
    if not chosen:
        raise BadRequestError("Command line args must contain atleast one type of check (-calc, -ppc, -rc). "
                              "This was a no-op.")
    value = (now_ms if now_ms is not None else int(time.time() * 1000)) - FORCE_AUDIT_AGE_MS
    for which in chosen:
        await ctx.urm.set_check_ctime(which, value)
    return {w: value for w in chosen}


# -- bookies --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BookieRow:
    """One bookie: id, ``writable``/``readonly``/``unavailable`` (cookie only), rack (None = unknown)."""

    bookie_id: str
    state: str
    rack: str | None = None


async def all_bookies(ctx: AdminContext) -> set[str]:
    """Every bookie that has a cookie (upstream ``getAllBookies``), plus any registered one."""
    try:
        cookies = set(await ctx.zk.get_children(ctx.paths.cookies))
    except NoNodeError:
        cookies = set()
    w = await ctx.get_watcher()
    return cookies | set(w.writable) | set(w.readonly)


async def list_bookies(ctx: AdminContext, with_racks: bool = True) -> list[BookieRow]:
    """Writable, read-only and unavailable bookies with their racks, sorted by state then id."""
    w = await ctx.get_watcher()
    everyone = await all_bookies(ctx)
    racks: dict[str, str | None] = {}
    if with_racks and everyone:
        try:
            policy = await ctx.get_policy()
            for b in everyone:
                racks[b] = _location(policy, b)
        except (ConfigError, ImportError) as exc:
            log.warning("racks unavailable", error=str(exc))
    rows = []
    for b in everyone:
        state = "writable" if b in w.writable else "readonly" if b in w.readonly else "unavailable"
        rows.append(BookieRow(b, state, racks.get(b)))
    order = {"writable": 0, "readonly": 1, "unavailable": 2}
    return sorted(rows, key=lambda r: (order[r.state], r.bookie_id))


def _location(policy: Any, bookie_id: str) -> str | None:
    fn = getattr(policy, "location_of", None)
    if fn is None:
        return None
    try:
        return fn(bookie_id)
    except Exception:  # noqa: BLE001 - an unresolvable bookie has no rack to show
        return None


UNKNOWN = "UNKNOWN"


def _resolve_address(bookie_id: str) -> tuple[str, int, str]:
    """Blocking part of :func:`bookie_addresses` for one bookie."""
    host, sep, port_text = bookie_id.rpartition(":")
    if not sep or not port_text.isdigit():
        return UNKNOWN, 0, UNKNOWN  # not host:port: upstream's unresolvable bookie id
    host = host.strip("[]")
    port = int(port_text)
    try:
        ipaddress.ip_address(host)
        literal = True
    except ValueError:
        literal = False
    if literal:
        try:
            name = socket.gethostbyaddr(host)[0]
        except OSError:
            name = host  # Java's getCanonicalHostName falls back to the address text
        return host, port, name
    try:
        ip = socket.gethostbyname(host)
    except OSError:
        ip = UNKNOWN
    return ip, port, host


def _in_daemon_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future:
    """Run blocking ``fn(*args)`` in a daemon thread; a future of its result. Unlike the default
    executor, a lookup stuck in the resolver does not hold up ``asyncio.run``'s shutdown or the
    process exit once the caller stopped waiting."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if not fut.done():
            fut.set_exception(exc) if exc is not None else fut.set_result(result)

    def work() -> None:
        try:
            result, exc = fn(*args), None
        except BaseException as e:  # noqa: BLE001 - handed to the waiting coroutine
            result, exc = None, e
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=work, name="bookie-address-lookup", daemon=True).start()
    return fut


async def bookie_addresses(bookie_ids: Iterable[str], timeout_s: float = 2.0) -> dict[str, tuple[str, int, str]]:
    """``bookie id → (ip, port, hostname)`` as upstream's ``CommandHelpers`` works them out: an IP literal
    gets a reverse lookup for the host name (the address text when that fails), a host name gets a
    forward lookup for the IP (``UNKNOWN`` when that fails); an id that is not ``host:port`` gives
    ``(UNKNOWN, 0, UNKNOWN)``. Lookups run in threads, bounded to ``timeout_s`` in all; a lookup still
    running then falls back as if it had failed."""
    ids = sorted(set(bookie_ids))

    async def one(b: str) -> tuple[str, int, str]:
        try:
            return await asyncio.wait_for(_in_daemon_thread(_resolve_address, b), timeout_s)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - a slow resolver must not hang the shell
            host, _sep, port = b.rpartition(":")
            if not port.isdigit():
                return UNKNOWN, 0, UNKNOWN
            host = host.strip("[]")
            try:
                ipaddress.ip_address(host)
                return host, int(port), host  # an IP literal without a reverse name
            except ValueError:
                return UNKNOWN, int(port), host  # a host name that did not resolve

    return dict(zip(ids, await asyncio.gather(*(one(b) for b in ids))))


def bookie_line(bookie_id: str, address: tuple[str, int, str]) -> str:
    """Upstream ``CommandHelpers.getBookieSocketAddrStringRepresentation``:
    ``BookieID:<id>, IP:<ip>, Port:<port>, Hostname:<hostname>``."""
    ip, port, name = address
    return f"BookieID:{bookie_id}, IP:{ip}, Port:{port}, Hostname:{name}"


@dataclass(frozen=True)
class BookieInfoReport:
    """Disk figures per bookie in bytes, and the bookies that did not answer (id → error)."""

    infos: dict[str, tuple[int, int]]  # bookie -> (free, total)
    failed: dict[str, str]

    @property
    def total_free(self) -> int:
        return sum(f for f, _t in self.infos.values())

    @property
    def total_capacity(self) -> int:
        return sum(t for _f, t in self.infos.values())


async def bookie_info(ctx: AdminContext, timeout_s: float | None = None) -> BookieInfoReport:
    """GET_BOOKIE_INFO to every registered bookie (writable and read-only), in parallel."""
    w = await ctx.get_watcher()
    targets = sorted(set(w.writable) | set(w.readonly))
    bookies = ctx.get_bookies()
    t = timeout_s if timeout_s is not None else (ctx.settings.bookie_info.timeout_s if ctx.settings else 5.0)

    async def one(b: str) -> tuple[str, Any, str]:
        try:
            r = await asyncio.wait_for(bookies.get_bookie_info(b, 3), t)
            return b, r, ""
        except asyncio.TimeoutError:
            return b, None, f"no answer within {t:g}s"
        except Exception as exc:  # noqa: BLE001 - reported per bookie
            return b, None, str(exc)

    infos: dict[str, tuple[int, int]] = {}
    failed: dict[str, str] = {}
    for b, r, err in await asyncio.gather(*(one(b) for b in targets)):
        if r is None:
            failed[b] = err
        else:
            infos[b] = (int(r.free_disk_space), int(r.total_disk_space))
    return BookieInfoReport(infos, failed)


async def cluster_info(ctx: AdminContext) -> dict[str, Any]:
    """Upstream ``ClusterInfoCommand.ClusterInfo`` as a dict (same field names)."""
    auditor = await who_is_auditor(ctx)
    under = False
    async for _m in ctx.urm.list_underreplicated(None):
        under = True
        break
    w = await ctx.get_watcher()
    total = len(await all_bookies(ctx))
    writable, readonly = len(w.writable), len(w.readonly)
    return {
        "auditorElected": auditor is not None,
        "auditorId": auditor or "",
        "clusterUnderReplicated": under,
        "ledgerReplicationEnabled": await ctx.urm.is_enabled(),
        "totalBookiesCount": total,
        "writableBookiesCount": writable,
        "readonlyBookiesCount": readonly,
        "unavailableBookiesCount": max(0, total - writable - readonly),
    }


#: Keys whose values ``server_config`` does not show (ours: upstream prints every value).
_SECRET_WORDS = ("password", "secret", "token")


def server_config(settings: Settings | None) -> dict[str, str]:
    """Upstream ``AbstractConfiguration.asJson``: every key that was set (file, env, flags; defaults are
    not listed) → its value as a string. Values of keys naming a password, secret or token (and not a
    ``...Path``/``...File`` to one) are shown as ``******`` (ours)."""
    out: dict[str, str] = {}
    for k, v in sorted((settings.properties if settings is not None else {}).items()):
        low = k.lower()
        secret = any(w in low for w in _SECRET_WORDS) and not low.endswith(("path", "file"))
        out[k] = "******" if secret else str(v)
    return out


# -- ledgers ----------------------------------------------------------------------------------------------
async def ledger_metadata(ctx: AdminContext, ledger_id: Any) -> tuple[int, LedgerMetadata, int]:
    """(ledger id, metadata, znode version).

    Raises:
        BadRequestError: a bad ledger id. NoSuchLedgerError: ``ledger N does not exist``.
    """
    lid = check_ledger_id(ledger_id)
    md, version = await ctx.ledgers.read(lid)
    return lid, md, version


async def ledger_metadata_bytes(ctx: AdminContext, ledger_id: Any) -> tuple[int, bytes]:
    """(ledger id, the metadata znode's bytes): what upstream's ``ledgermetadata -dumptofile`` writes
    (``LedgerMetadataSerDe.serialize`` of what it read, i.e. the stored form).

    Raises:
        BadRequestError: a bad ledger id. NoSuchLedgerError: ``ledger N does not exist``.
    """
    lid = check_ledger_id(ledger_id)
    path = ctx.paths.ledger(lid)
    try:
        data, _stat = await ctx.zk.get(path)
    except NoNodeError:
        raise NoSuchLedgerError(f"ledger {lid} does not exist ({path})") from None
    return lid, bytes(data)


async def restore_ledger_metadata(ctx: AdminContext, ledger_id: Any, data: bytes, source: str,
                                  update: bool = False) -> tuple[int, bool]:
    """Upstream ``ledgermetadata -restorefromfile FILE [-update]``: parse ``data`` (a ``-dumptofile``
    output, any format version we read) and create the ledger's metadata znode; with ``update`` an
    existing one is overwritten whatever its version. Returns (ledger id, True when it overwrote).

    Raises:
        BadRequestError: a bad ledger id, or ``data`` is not ledger metadata (names ``source``).
        IllegalOpError: the ledger exists and ``update`` is False.
    """
    from autorecovery.errors import MalformedMetadataError
    from autorecovery.ledger import formats
    from autorecovery.zk.bridge import NodeExistsError

    lid = check_ledger_id(ledger_id)
    try:
        md = formats.deserialize(data, source)
    except (MalformedMetadataError, ValueError) as exc:
        raise BadRequestError(f"{source} is not ledger metadata: {exc}") from None
    try:
        await ctx.ledgers.create(lid, md)
        return lid, False
    except NodeExistsError:
        if not update:
            raise IllegalOpError(f"ledger {lid} already exists ({ctx.paths.ledger(lid)}); "
                                 "add -update to overwrite its metadata") from None
    await ctx.ledgers.write(lid, md, -1)
    return lid, True


#: Upstream ``client.api.DigestType`` names (ours says HMAC where upstream's API says MAC).
UPSTREAM_DIGEST_NAMES = {"CRC32": "CRC32", "HMAC": "MAC", "CRC32C": "CRC32C", "DUMMY": "DUMMY"}


def upstream_digest_name(md: LedgerMetadata) -> str:
    """``MAC``/``CRC32``/``CRC32C``/``DUMMY``: the digest type as upstream's ``LedgerMetadata`` prints it."""
    return UPSTREAM_DIGEST_NAMES.get(md.digest_type.name, md.digest_type.name)


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def format_metadata(md: LedgerMetadata) -> str:
    """Upstream ``LedgerMetadataImpl.toString()`` (4.17), field for field::

        LedgerMetadata{formatVersion=3, ensembleSize=3, writeQuorumSize=2, ackQuorumSize=2, state=CLOSED,
        length=1280, lastEntryId=4, digestType=CRC32C, password=base64:cHc=, ensembles={0=[a:1, b:2, c:3]},
        customMetadata={key=base64:dmFsdWU=}}

    ``length``/``lastEntryId`` only for a closed ledger (as upstream); the password in base64 (upstream's
    ``toString``, not ``toSafeString``); custom metadata values in base64, keys sorted (upstream's order
    is a HashMap's). ``ctime`` is not part of upstream's text; see ``ledgermetadata --json``.
    """
    ens = ", ".join(f"{s.first_entry_id}=[{', '.join(s.ensemble)}]" for s in md.segments)
    custom = ", ".join(f"{k}=base64:{_b64(v)}" for k, v in sorted(md.custom_metadata.items()))
    parts = [
        f"formatVersion={md.format_version}",
        f"ensembleSize={md.ensemble_size}",
        f"writeQuorumSize={md.write_quorum}",
        f"ackQuorumSize={md.ack_quorum}",
        f"state={md.state.name}",
    ]
    if md.state == LedgerState.CLOSED:
        parts += [f"length={md.length}", f"lastEntryId={md.last_entry_id}"]
    parts += [
        f"digestType={upstream_digest_name(md)}",
        f"password=base64:{_b64(md.password)}",
        f"ensembles={{{ens}}}",
        f"customMetadata={{{custom}}}",
    ]
    return "LedgerMetadata{" + ", ".join(parts) + "}"


def metadata_upstream_json(ledger_id: int, md: LedgerMetadata) -> dict[str, Any]:
    """One ledger's metadata as upstream's HTTP ``/api/v1/ledger/metadata`` serialises it (Jackson on
    ``LedgerMetadataImpl``'s getters): bookies as ``{"id": "host:port"}`` objects, password and custom
    metadata values in base64, ``lastEntryId`` -1 and ``length`` 0 while open."""
    return {
        "ledgerId": ledger_id,
        "allEnsembles": {str(s.first_entry_id): [{"id": b} for b in s.ensemble] for s in md.segments},
        "ensembleSize": md.ensemble_size,
        "writeQuorumSize": md.write_quorum,
        "ackQuorumSize": md.ack_quorum,
        "ctime": md.ctime,
        "password": _b64(md.password),
        "digestType": upstream_digest_name(md),
        "lastEntryId": md.last_entry_id if md.state == LedgerState.CLOSED else -1,
        "length": md.length if md.state == LedgerState.CLOSED else 0,
        "closed": md.state == LedgerState.CLOSED,
        "state": md.state.name,
        "customMetadata": {k: _b64(v) for k, v in sorted(md.custom_metadata.items())},
        "metadataFormatVersion": md.format_version,
        "ctoken": md.ctoken,
    }


async def ledgers_containing(ctx: AdminContext, bookies: Iterable[str]) -> list[tuple[int, LedgerMetadata]]:
    """Every ledger whose ensembles name one of ``bookies`` (upstream ``getLedgersContainBookies``, the
    ``recover -q`` query), by ledger id. Malformed metadata znodes are skipped (counted by the store)."""
    wanted = set(bookies)
    out = []
    async for lid, md, _v in ctx.ledgers.scan():
        if md.all_bookies() & wanted:
            out.append((lid, md))
    return sorted(out, key=lambda x: x[0])


def metadata_json(ledger_id: int, md: LedgerMetadata, version: int) -> dict[str, Any]:
    """Metadata as JSON (ours; upstream's HTTP get_ledger_meta uses the same field names)."""
    return {
        "ledgerId": ledger_id,
        "version": version,
        "formatVersion": md.format_version,
        "ensembleSize": md.ensemble_size,
        "writeQuorumSize": md.write_quorum,
        "ackQuorumSize": md.ack_quorum,
        "state": md.state.name,
        "length": md.length,
        "lastEntryId": md.last_entry_id,
        "digestType": md.digest_type.name,
        "ctime": md.ctime,
        "ensembles": {str(s.first_entry_id): list(s.ensemble) for s in md.segments},
        "customMetadata": {k: v.decode("utf-8", "replace") for k, v in md.custom_metadata.items()},
    }


# -- placementcheck ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NonAdheringLedger:
    """A closed ledger with a segment that fails (or only softly meets) the policy."""

    ledger_id: int
    adherence: str
    segments: tuple[tuple[int, int, tuple[tuple[str, str | None], ...]], ...]  # (first, last, ((bookie, rack),...))


@dataclass(frozen=True)
class PlacementReport:
    """Counts of closed ledgers by adherence for one policy, plus the ones that are not strict."""

    policy: str
    counts: dict[str, int]
    open_skipped: int
    unreadable: int
    not_adhering: tuple[NonAdheringLedger, ...]


async def placement_check(ctx: AdminContext, policy: Any = None, policy_name: str | None = None,
                          ledger_ids: Iterable[int] | None = None) -> PlacementReport:
    """Evaluate every closed ledger against a placement policy (the configured one by default).

    Open ledgers are counted as skipped, as upstream's placement check does (their last segment may
    still change). Each segment is judged with ``policy.is_ensemble_adhering``; a ledger takes its
    worst segment's verdict.
    """
    policy = policy or await ctx.get_policy()
    name = policy_name or getattr(policy, "upstream_class", "") or type(policy).__name__
    counts = {"MEETS_STRICT": 0, "MEETS_SOFT": 0, "FAIL": 0}
    open_skipped = unreadable = 0
    bad: list[NonAdheringLedger] = []
    ids = list(ledger_ids) if ledger_ids is not None else await ctx.ledgers.list_ledger_ids()
    for lid in ids:
        try:
            md, _v = await ctx.ledgers.read(lid)
        except NoSuchLedgerError:
            continue
        except AutoRecoveryError:
            unreadable += 1
            continue
        if md.state != LedgerState.CLOSED:
            open_skipped += 1
            continue
        worst = 2
        segs = []
        for i, seg in enumerate(md.segments):
            last = md.segment_end(i)
            verdict = int(policy.is_ensemble_adhering(list(seg.ensemble), md.write_quorum, md.ack_quorum))
            worst = min(worst, verdict)
            if verdict < 2:
                segs.append((seg.first_entry_id, last, tuple((b, _location(policy, b)) for b in seg.ensemble)))
        label = {0: "FAIL", 1: "MEETS_SOFT", 2: "MEETS_STRICT"}[worst]
        counts[label] += 1
        if worst < 2:
            bad.append(NonAdheringLedger(lid, label, tuple(segs)))
    return PlacementReport(name, counts, open_skipped, unreadable, tuple(bad))


# -- progress of long admin operations (recover, decommission) --------------------------------------------
@dataclass(frozen=True)
class OpProgress:
    """Where a recover/decommission run stands.

    Attributes:
        ledgers_total / ledgers_left: ledgers in scope and not done yet.
        bytes_total / bytes_left: estimated bytes to copy (closed ledgers: average entry size × entries
            the lost bookie stored; open ledgers count 0 until closed).
        rate_bytes_per_s: recent copy rate (sliding window). eta_s: bytes_left / rate, None when unknown.
        blocked: ledger id → why it is not progressing now.
        phase: short description of what the command is doing.
    """

    ledgers_total: int
    ledgers_left: int
    bytes_total: int
    bytes_left: int
    rate_bytes_per_s: float
    eta_s: float | None
    blocked: dict[int, str] = field(default_factory=dict)
    phase: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "ledgers_total": self.ledgers_total,
            "ledgers_left": self.ledgers_left,
            "bytes_total": self.bytes_total,
            "bytes_left": self.bytes_left,
            "rate_bytes_per_s": round(self.rate_bytes_per_s, 1),
            "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
            "blocked": {str(k): v for k, v in sorted(self.blocked.items())},
        }


def human_bytes(n: float) -> str:
    """``1.5 MB`` style (powers of 1000, as upstream's shell)."""
    units = ["B", "KB", "MB", "GB", "TB", "PB"]
    x = float(n)
    i = 0
    while abs(x) >= 1000 and i < len(units) - 1:
        x /= 1000
        i += 1
    return f"{x:.0f} {units[i]}" if i == 0 else f"{x:.1f} {units[i]}"


def human_duration(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s" if m else f"{sec}s"


def progress_line(p: OpProgress, width: int = 24) -> str:
    """One-line progress bar: ``[#####.....] 3/10 ledgers left, 1.2 MB/4.0 MB left, 350.0 KB/s, ETA 8s``."""
    done_frac = 1.0
    if p.bytes_total > 0:
        done_frac = 1.0 - p.bytes_left / p.bytes_total
    elif p.ledgers_total > 0:
        done_frac = 1.0 - p.ledgers_left / p.ledgers_total
    done_frac = min(1.0, max(0.0, done_frac))
    filled = int(round(done_frac * width))
    bar = "#" * filled + "." * (width - filled)
    rate = f"{human_bytes(p.rate_bytes_per_s)}/s"
    blocked = f", {len(p.blocked)} blocked" if p.blocked else ""
    return (f"[{bar}] {p.ledgers_left}/{p.ledgers_total} ledgers left, {human_bytes(p.bytes_left)}/"
            f"{human_bytes(p.bytes_total)} left, {rate}, ETA {human_duration(p.eta_s)}{blocked}")


# -- progress (daemon) ------------------------------------------------------------------------------------
def worker_progress(ctx: AdminContext) -> dict[str, Any] | None:
    """The local node's progress as JSON ``{"cluster": {...}, "worker": {...}}`` (``plan.progress.Progress``), or
    None outside a daemon."""
    if ctx.progress_source is None:
        return None
    p = ctx.progress_source()
    if p is None:
        return None
    return p.as_dict() if hasattr(p, "as_dict") else dict(p)


# -- recover / decommission entry points ------------------------------------------------------------------
async def recover(ctx: AdminContext, sources: Iterable[str], **kwargs: Any) -> Any:
    """``recover``: see :func:`autorecovery.admin.recover.recover_bookies`."""
    from autorecovery.admin.recover import recover_bookies

    return await recover_bookies(ctx, list(sources), **kwargs)


async def decommission(ctx: AdminContext, bookie_id: str, **kwargs: Any) -> Any:
    """``decommissionbookie``: see :func:`autorecovery.admin.decommission.decommission_bookie`."""
    from autorecovery.admin.decommission import decommission_bookie

    return await decommission_bookie(ctx, bookie_id, **kwargs)


__all__ = [
    "AdminContext", "AdminError", "BadRequestError", "NoClusterError", "open_admin", "http_status",
    "list_underreplicated", "who_is_auditor", "trigger_audit", "autorecovery_enabled", "set_autorecovery",
    "get_lost_bookie_recovery_delay", "set_lost_bookie_recovery_delay", "query_autorecovery_status",
    "force_audit_checks", "list_bookies", "bookie_info", "cluster_info", "ledger_metadata", "placement_check",
    "worker_progress", "recover", "decommission", "bookie_addresses", "bookie_line", "server_config",
    "format_metadata", "metadata_upstream_json", "ledger_metadata_bytes", "restore_ledger_metadata", "ledgers_containing", "upstream_digest_name", "build_placement", "UNASSIGNED_CTIME", "OpProgress",
    "progress_line", "human_bytes", "human_duration",
]
