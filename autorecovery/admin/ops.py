"""One async function per admin command, shared by the shell (``autorecovery shell``) and the HTTP API.

The commands live in modules of one idea each: :mod:`~autorecovery.admin.ops_autorecovery` (AutoRecovery's
state), :mod:`~autorecovery.admin.ops_ledgers` (ledger metadata), :mod:`~autorecovery.admin.ops_placement`
(``placementcheck``) and this module (bookies and the cluster); every command resolves from here.
The context they work on and the admin errors are in :mod:`autorecovery.admin.op_context`; ``recover``
and ``decommissionbookie`` are :mod:`autorecovery.admin.recover` / :mod:`autorecovery.admin.decommission`
(callers import them directly: this module imports neither); the shell's text renderings are in
:mod:`autorecovery.cli.formatting`.

Each function takes an :class:`AdminContext` (a ZooKeeper session and the stores built on it) and
returns plain data; the shell renders upstream's wording, the HTTP layer upstream's JSON. Errors are
:class:`~autorecovery.errors.AutoRecoveryError` subclasses with a message that names what they are
about; :func:`http_status` maps them to status codes and the shell prints them and exits non-zero.

Upstream sources: ``BookieShell`` and ``tools/cli/commands/{autorecovery,bookies,client}/*`` for the
commands, ``server/http/service/*`` for the endpoints (see docs/operators.md for the mapping).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

# the context, the errors and the argument checks live in admin/op_context.py; re-exported here because
# every command and its callers use them through ``ops``
from autorecovery.admin.op_context import (  # noqa: F401 (re-exported)
    AdminContext,
    AdminError,
    BadRequestError,
    OpProgress,
    all_bookies,
    build_placement,
    check_bookie_id,
    check_cluster,
    http_status,
    open_admin,
)
from autorecovery.admin.ops_autorecovery import (
    autorecovery_enabled,
    force_audit_checks,
    get_lost_bookie_recovery_delay,
    list_underreplicated,
    query_autorecovery_status,
    set_autorecovery,
    set_lost_bookie_recovery_delay,
    trigger_audit,
    who_is_auditor,
    worker_progress,
)
from autorecovery.admin.ops_ledgers import (
    ledger_metadata,
    ledger_metadata_bytes,
    ledgers_containing,
    metadata_json,
    metadata_upstream_json,
    restore_ledger_metadata,
)
from autorecovery.admin.ops_placement import bookie_location, placement_check
from autorecovery.config.settings import Settings
from autorecovery.errors import ConfigError, IllegalOpError  # noqa: F401 (NoClusterError re-exported)
from autorecovery.zk.topology_source import PlacementSetup  # noqa: F401
from autorecovery.zk.ur.formats import UNASSIGNED_CTIME

log = structlog.get_logger("autorecovery.admin")



# -- bookies --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BookieRow:
    """One bookie: id, ``writable``/``readonly``/``unavailable`` (cookie only), rack (None = unknown)."""

    bookie_id: str
    state: str
    rack: str | None = None




async def list_bookies(ctx: AdminContext, with_racks: bool = True) -> list[BookieRow]:
    """Writable, read-only and unavailable bookies with their racks, sorted by state then id."""
    w = await ctx.get_watcher()
    everyone = await all_bookies(ctx)
    racks: dict[str, str | None] = {}
    if with_racks and everyone:
        try:
            policy = await ctx.get_policy()
            for b in everyone:
                racks[b] = bookie_location(policy, b)
        except (ConfigError, ImportError) as exc:
            log.warning("racks unavailable", error=str(exc))
    rows = []
    for b in everyone:
        state = "writable" if b in w.writable else "readonly" if b in w.readonly else "unavailable"
        rows.append(BookieRow(b, state, racks.get(b)))
    order = {"writable": 0, "readonly": 1, "unavailable": 2}
    return sorted(rows, key=lambda r: (order[r.state], r.bookie_id))


#: older private name of :func:`~autorecovery.admin.ops_placement.bookie_location` (reports.export uses it)
_location = bookie_location

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
        except (TimeoutError, Exception):  # noqa: BLE001 - a slow resolver must not hang the shell
            host, _sep, port = b.rpartition(":")
            if not port.isdigit():
                return UNKNOWN, 0, UNKNOWN
            host = host.strip("[]")
            try:
                ipaddress.ip_address(host)
                return host, int(port), host  # an IP literal without a reverse name
            except ValueError:
                return UNKNOWN, int(port), host  # a host name that did not resolve

    return dict(zip(ids, await asyncio.gather(*(one(b) for b in ids)), strict=True))




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
        except TimeoutError:
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


async def cluster_instance_id(ctx: AdminContext) -> str:
    """The cluster's instance id, ``<root>/INSTANCEID`` (upstream ``InstanceIdCommand``, shell
    ``whatisinstanceid``).

    Raises:
        ClusterNotFormattedError: the znode is missing (the cluster was never formatted), naming it.
    """
    from autorecovery.bookie.cookie import read_instance_id

    return await read_instance_id(ctx.zk, ctx.paths)


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


__all__ = [
    "AdminContext",
    "AdminError",
    "BadRequestError",
    "open_admin",
    "http_status",
    "list_underreplicated",
    "who_is_auditor",
    "trigger_audit",
    "autorecovery_enabled",
    "set_autorecovery",
    "get_lost_bookie_recovery_delay",
    "set_lost_bookie_recovery_delay",
    "query_autorecovery_status",
    "force_audit_checks",
    "list_bookies",
    "bookie_info",
    "cluster_info",
    "cluster_instance_id",
    "ledger_metadata",
    "placement_check",
    "worker_progress",
    "bookie_addresses",
    "server_config",
    "metadata_upstream_json",
    "ledger_metadata_bytes",
    "restore_ledger_metadata",
    "ledgers_containing",
    "build_placement",
    "UNASSIGNED_CTIME",
    "OpProgress",
    "BookieRow",
    "BookieInfoReport",
    "UNKNOWN",
    "metadata_json",
]
