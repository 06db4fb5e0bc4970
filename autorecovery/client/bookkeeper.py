"""The ledger client entry point: create, open (with or without recovery), delete (EDGE).

Source: upstream ``BookKeeper`` client (``createLedger``, ``openLedger``, ``openLedgerNoRecovery``,
``deleteLedger``). It owns a ZooKeeper session (or shares one), the bookie watcher that feeds the
placement policy, and the gRPC bookie client.
"""

from __future__ import annotations

import os

from autorecovery.client.batcher import AddBatcher
from autorecovery.client.handle import LedgerHandle
from autorecovery.client.lac import read_last_add_confirmed
from autorecovery.client.reader import ReadHandle
from autorecovery.client.recovery import recover_ledger
from autorecovery.config.settings import ZkSecurity
from autorecovery.ledger.credentials import DEFAULT_CREDENTIALS, RecoveryCredentials
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment
from autorecovery.rpc.transport import BookieClient
from autorecovery.config.tls import BookieTls
from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.bridge import NodeExistsError, ZkClient
from autorecovery.zk.ledgers import LedgerStore, now_ms, read_layout
from autorecovery.zk.paths import Paths
from autorecovery.zk.topology_source import RackInfoWatcher, build_placement


class BookKeeper:
    """A BookKeeper ledger client.

    Args:
        zk: a started ZkClient (not owned unless ``own_zk``).
        paths: cluster znode paths.
        policy: placement policy (``autorecovery.placement`` interface). :meth:`connect` builds the
            configured one (upstream default: rack-aware, racks from Pulsar's ``/bookies``).
        bookies: gRPC bookie client; created (and owned) when None.

    Use :meth:`connect` to build one from a connect string.
    """

    def __init__(self, zk: ZkClient, paths: Paths, *, policy=None, bookies: BookieClient | None = None,
                 own_zk: bool = False, credentials: RecoveryCredentials = DEFAULT_CREDENTIALS) -> None:
        #: ``digestType``/``passwd``: opens a ledger whose metadata stores no password (format v1;
        #: upstream ``LedgerOpenOp``'s administrative open); other ledgers use their own
        self.credentials = credentials
        self.zk = zk
        self.paths = paths
        self.ledgers = LedgerStore(zk, paths)
        if policy is None:
            from autorecovery.placement import DefaultPolicy

            policy = DefaultPolicy()
        self.policy = policy
        self.racks: RackInfoWatcher | None = None
        self._own_bookies = bookies is None
        self.bookies = bookies or BookieClient()
        self.bookies_timeout_s = getattr(self.bookies, "timeout_s", 10.0)
        self.adds = AddBatcher(self.bookies)
        self.watcher: BookieWatcher | None = None
        self._own_zk = own_zk

    @classmethod
    async def connect(cls, zk_hosts: str, ledgers_root: str = "/ledgers", *, policy=None,
                      placement_properties: dict[str, str] | None = None,
                      session_timeout_ms: int = 10000, security: ZkSecurity | None = None,
                      tls: BookieTls | None = None, connect_timeout_s: float = 30.0) -> BookKeeper:
        """Open a ZooKeeper session (within ``connect_timeout_s`` seconds) and start watching bookies.

        Args:
            policy: a ready placement policy; when None one is built from ``placement_properties``
                (upstream keys, e.g. ``ensemblePlacementPolicy``, ``minNumRacksPerWriteQuorum``) with
                racks from ``/bookies``, kept current by a watch.
            security: ZooKeeper identity and ACL (``zkEnableSecurity``): ledger metadata znodes are
                then created with ``CREATOR_ALL_ACL``; default open and unauthenticated.
            tls: TLS (mTLS) to the bookies (``Settings.tls``); default plaintext.

        Raises:
            ZooKeeperError: naming the connect string and the cause (refused, cannot resolve host, timed
                out...; :mod:`autorecovery.zk.probe`) when ZooKeeper cannot be reached.
            NoClusterError / CompatibilityError: no ``LAYOUT`` under ``ledgers_root``, or a ledger manager
                this version does not lay out (ledger paths follow ``LAYOUT``: hierarchical or long).
            ConfigError: a bad placement key.
        """
        zk = await ZkClient(zk_hosts, session_timeout_ms=session_timeout_ms, security=security).start(
            timeout_s=connect_timeout_s)
        racks = None
        if policy is None:
            setup = await build_placement(placement_properties or {}, zk)
            policy = setup.policy
            racks = RackInfoWatcher(zk, setup)
        try:
            paths = Paths(ledgers_root).with_layout(await read_layout(zk, Paths(ledgers_root)))
        except Exception:
            await zk.stop()
            raise
        bk = cls(zk, paths, policy=policy, own_zk=True,
                 bookies=BookieClient(tls=tls) if tls is not None and tls.enabled else None)
        bk._own_bookies = True
        bk.racks = racks
        await bk.start()
        return bk

    async def start(self) -> BookKeeper:
        self.watcher = BookieWatcher(self.zk, self.paths)
        self.watcher.add_listener(lambda w, r: self.policy.on_cluster_changed(set(w), set(r)))
        await self.watcher.start()
        if self._own_bookies and getattr(self.bookies, "resolve", False) is None:
            self.bookies.resolve = self.watcher.advertised  # stock bookies take upstream's transport
        if self.racks is not None:
            await self.racks.start()
        return self

    async def close(self) -> None:
        """Close the add streams, the watchers, and the bookie client and ZooKeeper session if owned."""
        await self.adds.close()
        if self.racks:
            await self.racks.stop()
        if self.watcher:
            await self.watcher.stop()
        if self._own_bookies:
            await self.bookies.close()
        if self._own_zk:
            await self.zk.stop()

    async def create_ledger(self, ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2, *,
                            digest: str = "CRC32C", password: bytes = b"", custom_metadata: dict[str, bytes] | None = None
                            ) -> LedgerHandle:
        """Create a ledger whose ensemble comes from the placement policy.

        ``digest`` is upstream's client ``DigestType`` name: ``CRC32C``, ``CRC32``, ``MAC`` (also spelt
        ``HMAC``) or ``DUMMY``; entries are packed as upstream's ``DigestManager`` of that type does.

        Raises:
            NotEnoughBookiesError: fewer writable bookies than ``ensemble_size``.
            ValueError: bad quorum sizes or digest name.
        """
        name = digest.upper()
        digest_type = DigestType.HMAC if name == "MAC" else DigestType.__members__.get(name)
        if digest_type is None:
            raise ValueError(f"unsupported digest {digest!r}: use CRC32C, CRC32, MAC or DUMMY")
        result = self.policy.new_ensemble(ensemble_size, write_quorum, ack_quorum, frozenset(), custom_metadata)
        md = LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            segments=(Segment(0, tuple(result.ensemble)),),
            state=LedgerState.OPEN,
            digest_type=digest_type,
            password=password or os.urandom(16),
            ctime=now_ms(),
            custom_metadata=dict(custom_metadata or {}),
        )
        for _ in range(10):
            ledger_id = await self.ledgers.new_ledger_id()
            try:
                version = await self.ledgers.create(ledger_id, md)
                return LedgerHandle(self, ledger_id, md, version)
            except NodeExistsError:
                continue
        raise RuntimeError("could not allocate a free ledger id after 10 attempts")

    async def open_ledger(self, ledger_id: int, *, recovery: bool = False) -> ReadHandle:
        """Open a ledger for reading.

        Without recovery an open ledger is readable up to the LAC reported by its last ensemble's
        bookies. With ``recovery=True`` the ledger is fenced, its tail recovered, and it is closed
        (upstream openLedger vs openLedgerNoRecovery).

        Raises:
            NoSuchLedgerError, LedgerRecoveryError.
        """
        if recovery:
            md, version = await recover_ledger(self, ledger_id)
            return ReadHandle(self, ledger_id, md, version, md.last_entry_id)
        md, version = await self.ledgers.read(ledger_id)
        if md.state == LedgerState.CLOSED:
            return ReadHandle(self, ledger_id, md, version, md.last_entry_id)
        return ReadHandle(self, ledger_id, md, version, await self.read_lac(ledger_id, md))

    async def read_lac(self, ledger_id: int, md: LedgerMetadata) -> int:
        """Highest LAC of the last ensemble (:func:`autorecovery.client.lac.read_last_add_confirmed`).

        Raises:
            LacUnknownError: too few of its bookies answered to cover every write quorum.
        """
        return await read_last_add_confirmed(self.bookies, ledger_id, md)

    async def delete_ledger(self, ledger_id: int) -> None:
        """Delete the ledger's metadata (bookies garbage-collect the data later).

        Raises:
            NoSuchLedgerError.
        """
        await self.ledgers.delete(ledger_id)


__all__ = ["BookKeeper", "LedgerHandle", "ReadHandle"]
