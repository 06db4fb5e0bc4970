"""What every admin command works on, and how it fails (EDGE).

The :class:`AdminContext` (a ZooKeeper session, the stores on it, lazily the bookie watcher, the gRPC
client and the placement policy), :func:`open_admin` / :func:`check_cluster` for the shell, the
admin errors and their HTTP status (:func:`http_status`), argument checks, and :class:`OpProgress`
for long operations. :mod:`autorecovery.admin.ops` (the commands), :mod:`~autorecovery.admin.recover`
and :mod:`~autorecovery.admin.decommission` build on this module and never on each other in a cycle:
``context`` ← ``ops`` ← ``decommission``; ``context`` ← ``recover``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from autorecovery.admin import params
from autorecovery.config.settings import Settings
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
from autorecovery.ledger.ids import validate_bookie_id
from autorecovery.ledger.layout import Layout, require_matches
from autorecovery.zk.bookies import BookieWatcher, registered_protocols
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.zk.ledgers import LedgerStore, read_layout
from autorecovery.zk.paths import Paths
from autorecovery.zk.topology_source import PlacementSetup
from autorecovery.zk.topology_source import build_placement as _build_placement
from autorecovery.zk.underreplication import UnderreplicationManager

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
        return params.ledger_id(value)
    except ValueError as exc:
        raise BadRequestError(str(exc)) from None


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
            from autorecovery.rpc.transport import BookieClient

            timeout = float(self.settings.bookie_info.timeout_s) if self.settings else 5.0
            zk, paths = self.zk, self.paths
            self.bookies = BookieClient(timeout_s=max(timeout, 5.0), tls=getattr(self.settings, "tls", None),
                                        resolve=lambda b: registered_protocols(zk, paths, b))
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
            try:
                res = stop()
                if asyncio.iscoroutine(res):
                    await res
            except Exception as exc:  # noqa: BLE001 - the rest is still stopped; logged
                log.warning("admin context: stopping a part failed", part=repr(stop), error=repr(exc))


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
        try:
            await zk.stop()
        except Exception as exc:  # noqa: BLE001 - the start's failure is the one raised; logged
            log.debug("ZooKeeper client stop after a failed start failed", error=repr(exc))
        raise
    ctx = None
    try:
        paths = Paths(settings.ledgers_root)
        paths = paths.with_layout(await check_cluster(zk, paths, settings))
        urm = UnderreplicationManager(
            zk, paths, store_ctime=settings.auditor.store_system_time_as_ledger_underreplicated_mark_time)
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
    if settings is None:
        return await _build_placement({}, zk, watch=watch)
    explicit = settings.sources.get("reppDnsResolverClass", "default") != "default"
    return await _build_placement({}, zk, config=settings.placement, explicit_resolver=explicit,
                                  policy_name=settings.placement.ensemble_placement_policy, watch=watch)


async def all_bookies(ctx: AdminContext) -> set[str]:
    """Every bookie that has a cookie (upstream ``getAllBookies``), plus any registered one."""
    try:
        cookies = set(await ctx.zk.get_children(ctx.paths.cookies))
    except NoNodeError:
        cookies = set()
    w = await ctx.get_watcher()
    return cookies | set(w.writable) | set(w.readonly)


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
