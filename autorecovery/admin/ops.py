"""One async function per admin command, shared by the shell (``autorecovery shell``) and the HTTP API.

The context they work on and the admin errors are in :mod:`autorecovery.admin.context`; ``recover``
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
import base64
import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

# the context, the errors and the argument checks live in admin/context.py; re-exported here because
# every command and its callers use them through ``ops``
from autorecovery.admin.context import (  # noqa: F401 (re-exported)
    AdminContext,
    AdminError,
    BadRequestError,
    OpProgress,
    all_bookies,
    build_placement,
    check_bookie_id,
    check_cluster,
    check_ledger_id,
    http_status,
    open_admin,
)
from autorecovery.admin import params
from autorecovery.config.load import Settings
from autorecovery.errors import (  # noqa: F401 (NoClusterError re-exported)
    AutoRecoveryError,
    ConfigError,
    IllegalOpError,
    NoClusterError,
    NoSuchLedgerError,
    UnavailableError,
)
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.zk.bridge import NoNodeError
from autorecovery.zk.election import current_auditor
from autorecovery.zk.topology_source import PlacementSetup, read_pulsar_racks  # noqa: F401
from autorecovery.zk.underreplication import UNASSIGNED_CTIME

log = structlog.get_logger("autorecovery.admin")


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
    """Write a new delay (seconds, 0 .. a year: the config key's range); the auditor reacts at once
    (upstream semantics).

    Raises:
        BadRequestError: not an integer in that range (:func:`autorecovery.admin.params.recovery_delay`).
    """
    try:
        value = params.recovery_delay(seconds)
    except ValueError as exc:
        raise BadRequestError(str(exc)) from None
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




#: What stands for the ledger password when it is not asked for (upstream ``toSafeString``'s word).
PASSWORD_OMITTED = "OMITTED"


def metadata_upstream_json(ledger_id: int, md: LedgerMetadata, *, with_password: bool = False) -> dict[str, Any]:
    """One ledger's metadata as upstream's HTTP ``/api/v1/ledger/metadata`` serialises it (Jackson on
    ``LedgerMetadataImpl``'s getters): bookies as ``{"id": "host:port"}`` objects, custom metadata
    values in base64, ``lastEntryId`` -1 and ``length`` 0 while open. The password is
    ``"OMITTED"`` (upstream's ``toSafeString`` word; upstream's HTTP prints it, issue 25) unless
    ``with_password`` (an authenticated admin's ``?withPassword=true``), then base64 as upstream."""
    return {
        "ledgerId": ledger_id,
        "allEnsembles": {str(s.first_entry_id): [{"id": b} for b in s.ensemble] for s in md.segments},
        "ensembleSize": md.ensemble_size,
        "writeQuorumSize": md.write_quorum,
        "ackQuorumSize": md.ack_quorum,
        "ctime": md.ctime,
        "password": _b64(md.password) if with_password else PASSWORD_OMITTED,
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


__all__ = [
    "AdminContext",
    "AdminError",
    "BadRequestError",
    "NoClusterError",
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
    "ledger_metadata",
    "placement_check",
    "worker_progress",
    "bookie_addresses",
    "server_config",
    "metadata_upstream_json",
    "ledger_metadata_bytes",
    "restore_ledger_metadata",
    "ledgers_containing",
    "upstream_digest_name",
    "build_placement",
    "UNASSIGNED_CTIME",
    "OpProgress",
]
