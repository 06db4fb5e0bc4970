"""Ledger metadata in ZooKeeper: cluster format, id generation, read, create, CAS update, scan (EDGE).

Source: upstream ``HierarchicalLedgerManager``, ``ZkLedgerIdGenerator``/``LongZkLedgerIdGenerator``,
``MetadataUpdateLoop`` and the ``metaformat`` shell command. Every update is a read-modify-write on the
znode version: never a blind overwrite. A malformed znode raises :class:`MalformedMetadataError` naming
its path; :meth:`LedgerStore.scan` skips it and counts it in ``malformed``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from autorecovery.errors import BadVersionError as _OurBadVersion
from autorecovery.errors import MalformedMetadataError, NoClusterError, NoSuchLedgerError, ZooKeeperError
from autorecovery.ledger import formats
from autorecovery.ledger.ids import (
    LONG_ID_THRESHOLD,
    is_ledger_leaf_name,
    is_ledger_level_name,
    ledger_id_from_path,
)
from autorecovery.ledger.layout import HIERARCHICAL, Layout, layout_data, parse_layout, require_supported
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.zk.bridge import BadVersionError, NodeExistsError, NoNodeError, Op, RolledBackError, RuntimeInconsistency, ZkClient
from autorecovery.zk.paths import Paths

#: Znodes directly under the ledgers root that are not part of the ledger tree.
RESERVED = {"LAYOUT", "INSTANCEID", "available", "cookies", "idgen", "idgen-long", "underreplication", "ledgers"}

Versioned = tuple[LedgerMetadata, int]


async def read_layout(zk: ZkClient, paths: Paths) -> Layout:
    """Read and validate the cluster's ``LAYOUT`` (upstream ``LedgerLayout``); lay ledger paths out with
    ``paths.with_layout(layout)``.

    Raises:
        NoClusterError: ``LAYOUT`` does not exist (wrong ledgers root, or not formatted), naming the
            connect string and the znode.
        CompatibilityError: a layout this version cannot lay ledger paths out for (names the znode).
    """
    try:
        data, _stat = await zk.get(paths.layout)
    except NoNodeError:
        raise NoClusterError(f"no BookKeeper cluster at {zk.hosts}: {paths.layout} does not exist"
                             " (wrong --ledgers-root / zkLedgersRootPath, or the cluster is not formatted)") from None
    return require_supported(parse_layout(data, paths.layout), paths.layout)


async def init_cluster(zk: ZkClient, paths: Paths, manager_factory: str = HIERARCHICAL) -> bool:
    """Format the cluster metadata if it is not yet: exactly the znodes upstream 4.17's
    ``initnewcluster`` creates (``ZKRegistrationManager.initNewCluster``).

    One transaction creates the root, ``available``, ``available/readonly`` and ``INSTANCEID`` (a random
    UUID), then ``LAYOUT`` names ``manager_factory`` (hierarchical by default, as upstream). Nothing else:
    ``cookies`` is created by the first bookie that writes a cookie, ``underreplication`` with its
    ``LAYOUT``, ``ledgers`` and ``locks`` by the first auditor, worker or admin command that uses it
    (``UnderreplicationManager.init``, as upstream's ``ZkLedgerUnderreplicationManager``), ``idgen``
    by the first ledger created. Ours, where upstream refuses: the root's parents are created when
    missing, and a root that exists without ``LAYOUT`` is completed instead of refused.

    Returns True when it formatted, False when ``LAYOUT`` already existed (nothing is overwritten).

    Raises:
        CompatibilityError: ``manager_factory`` is not a manager this version lays out.
        ZooKeeperError: the transaction failed for another reason than a concurrent format.
    """
    data = layout_data(manager_factory)
    if await zk.exists(paths.layout) is not None:
        return False
    parent = paths.root.rsplit("/", 1)[0]
    if parent:
        await zk.ensure_path(parent)
    if await zk.exists(paths.root) is None:
        ops = [Op("create", paths.root), Op("create", paths.available), Op("create", paths.readonly),
               Op("create", paths.instance_id, str(uuid.uuid4()).encode())]
        results = await zk.multi(ops)
        failed = [r for r in results if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))]
        if failed and not isinstance(failed[0], NodeExistsError):
            raise ZooKeeperError(f"formatting {paths.root} failed: {type(failed[0]).__name__} {failed[0]}")
    for p in (paths.available, paths.readonly):
        await zk.ensure_path(p)
    with contextlib.suppress(NodeExistsError):
        await zk.create(paths.instance_id, str(uuid.uuid4()).encode())
    try:
        await zk.create(paths.layout, data)
    except NodeExistsError:
        return False
    return True


class LedgerStore:
    """Ledger metadata CRUD on ZooKeeper, hierarchical layout under ``paths.root``.

    Args:
        zk: a started :class:`ZkClient`.
        paths: the cluster's znode paths.
    """

    def __init__(self, zk: ZkClient, paths: Paths) -> None:
        self.zk = zk
        self.paths = paths
        self.malformed = 0

    async def new_ledger_id(self) -> int:
        """Allocate a new ledger id (upstream ZkLedgerIdGenerator: the sequence number of an
        ephemeral-sequential ``idgen/ID-`` znode, deleted right after)."""
        created = await self.zk.create(f"{self.paths.idgen}/ID-", b"", ephemeral=True, sequence=True, makepath=True)
        with contextlib.suppress(NoNodeError):
            await self.zk.delete(created)
        ledger_id = int(created.rsplit("ID-", 1)[1])
        if ledger_id >= LONG_ID_THRESHOLD:  # pragma: no cover - needs 2^31 ids
            raise RuntimeError("ledger id space of idgen exhausted; long id generator not configured")
        return ledger_id

    async def create(self, ledger_id: int, md: LedgerMetadata) -> int:
        """Create the metadata znode; returns its version (0).

        Raises:
            NodeExistsError: the ledger id is taken.
        """
        await self.zk.create(self.paths.ledger(ledger_id), formats.serialize(md), makepath=True)
        return 0

    async def read(self, ledger_id: int) -> Versioned:
        """Read ``(metadata, znode version)``.

        Raises:
            NoSuchLedgerError: naming the ledger id and path.
            MalformedMetadataError: naming the path.
        """
        path = self.paths.ledger(ledger_id)
        try:
            data, stat = await self.zk.get(path)
        except NoNodeError as exc:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist ({path})") from exc
        return formats.deserialize(data, path), stat.version

    def decode(self, ledger_id: int, data: bytes, stat: Any) -> Versioned:
        """``(metadata, znode version)`` of ``ledger_id`` from its znode's data and stat read elsewhere
        (e.g. with the lock's ``multiRead``).

        Raises:
            MalformedMetadataError: naming the path.
        """
        return formats.deserialize(data, self.paths.ledger(ledger_id)), stat.version

    async def write(self, ledger_id: int, md: LedgerMetadata, version: int) -> int:
        """Write ``md`` if the znode is still at ``version``; returns the new version.

        Raises:
            autorecovery.errors.BadVersionError: the znode changed since ``version`` was read.
            NoSuchLedgerError: the ledger was deleted.
        """
        path = self.paths.ledger(ledger_id)
        try:
            stat = await self.zk.set(path, formats.serialize(md), version)
        except BadVersionError as exc:
            raise _OurBadVersion(f"metadata of ledger {ledger_id} at {path} changed (expected version {version})") from exc
        except NoNodeError as exc:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist ({path})") from exc
        return stat.version

    async def update(
        self,
        ledger_id: int,
        transform: Callable[[LedgerMetadata], LedgerMetadata | None],
        *,
        current: Versioned | None = None,
        max_attempts: int = 50,
    ) -> Versioned:
        """Read-modify-CAS loop (upstream MetadataUpdateLoop).

        ``transform(md)`` returns the new metadata, or None when no update is needed any more (the
        predicate of upstream's loop). On a version race the metadata is re-read and ``transform`` runs
        again on the latest value. Returns the final ``(metadata, version)``.

        Raises:
            NoSuchLedgerError, MalformedMetadataError, and BadVersionError after ``max_attempts`` races.
        """
        md, version = current if current is not None else await self.read(ledger_id)
        for _ in range(max_attempts):
            new = transform(md)
            if new is None:
                return md, version
            try:
                version = await self.write(ledger_id, new, version)
                return new, version
            except _OurBadVersion:
                md, version = await self.read(ledger_id)
        raise _OurBadVersion(f"gave up updating ledger {ledger_id} after {max_attempts} version races")

    async def delete(self, ledger_id: int, version: int = -1) -> None:
        """Delete the ledger's metadata znode.

        Raises:
            NoSuchLedgerError: it does not exist.
        """
        path = self.paths.ledger(ledger_id)
        try:
            await self.zk.delete(path, version)
        except NoNodeError as exc:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist ({path})") from exc

    async def list_ledger_ids(self) -> list[int]:
        """All ledger ids, ascending, from a walk of the hierarchy (short tree, then long tree).

        Costs one ``getChildren`` per intermediate znode; no metadata reads.
        """
        out: list[int] = []

        async def walk(path: str, depth: int) -> None:
            try:
                children = await self.zk.get_children(path)
            except NoNodeError:
                return
            for name in sorted(children):
                if depth == 0 and name in RESERVED:
                    continue
                child = f"{path}/{name}"
                if is_ledger_leaf_name(name):
                    try:
                        out.append(ledger_id_from_path(self.paths.root, child))
                    except ValueError:
                        continue
                elif is_ledger_level_name(name) and depth < 4:
                    await walk(child, depth + 1)

        await walk(self.paths.root, 0)
        return sorted(out)

    async def scan(self) -> AsyncIterator[tuple[int, LedgerMetadata, int]]:
        """Yield ``(ledger_id, metadata, version)`` for every readable ledger, ascending.

        Deleted-while-scanning ledgers are skipped; malformed znodes are skipped and counted in
        ``self.malformed``.
        """
        for ledger_id in await self.list_ledger_ids():
            try:
                md, version = await self.read(ledger_id)
            except NoSuchLedgerError:
                continue
            except MalformedMetadataError:
                self.malformed += 1
                continue
            yield ledger_id, md, version


def now_ms() -> int:
    """Wall-clock time in ms since the epoch (metadata ctime)."""
    return int(time.time() * 1000)
