"""Znode paths of the BookKeeper metadata layout under the ledgers root (PURE).

Source: upstream ZKMetadataDriverBase, HierarchicalLedgerManager, ZkLedgerUnderreplicationManager,
ZkLedgerAuditorManager. ``root`` is ``zkLedgersRootPath`` (default ``/ledgers``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autorecovery.ledger.ids import ledger_path, ur_leaf_name, ur_marker_path
from autorecovery.ledger.layout import Layout, layout_data

#: ``LAYOUT`` of a cluster formatted with upstream's default manager (see ``ledger.layout.layout_data``)
LAYOUT_DATA = layout_data()
UR_LAYOUT_TEXT = b'type: "BASIC"\nversion: 1\n'


@dataclass(frozen=True)
class Paths:
    """All the znode paths of one BookKeeper cluster, derived from its ledgers root.

    Attributes:
        root: the ledgers root (``zkLedgersRootPath``).
        long_hierarchical: the cluster's ``LAYOUT`` names ``LongHierarchicalLedgerManagerFactory``, so
            every ledger path is split 3-4-4-4-4 (see :func:`~autorecovery.ledger.ids.ledger_path`).
            Set it from the layout read from ZooKeeper (:meth:`with_layout`), never from a guess.
    """

    root: str = "/ledgers"
    long_hierarchical: bool = False

    def __post_init__(self) -> None:
        if not self.root.startswith("/") or self.root.endswith("/") or "//" in self.root:
            raise ValueError(f"bad zkLedgersRootPath {self.root!r}: expected an absolute path like /ledgers")

    def with_layout(self, layout: Layout) -> Paths:
        """These paths laid out for ``layout`` (the parsed, validated ``LAYOUT`` znode)."""
        return replace(self, long_hierarchical=layout.long_paths)

    @property
    def layout(self) -> str:
        return f"{self.root}/LAYOUT"

    @property
    def instance_id(self) -> str:
        return f"{self.root}/INSTANCEID"

    @property
    def idgen(self) -> str:
        return f"{self.root}/idgen"

    @property
    def idgen_long(self) -> str:
        return f"{self.root}/idgen-long"

    @property
    def available(self) -> str:
        return f"{self.root}/available"

    @property
    def readonly(self) -> str:
        return f"{self.root}/available/readonly"

    @property
    def cookies(self) -> str:
        return f"{self.root}/cookies"

    def available_bookie(self, bookie_id: str) -> str:
        return f"{self.available}/{bookie_id}"

    def readonly_bookie(self, bookie_id: str) -> str:
        return f"{self.readonly}/{bookie_id}"

    def cookie(self, bookie_id: str) -> str:
        return f"{self.cookies}/{bookie_id}"

    def ledger(self, ledger_id: int) -> str:
        return ledger_path(self.root, ledger_id, self.long_hierarchical)

    # under-replication
    @property
    def underreplication(self) -> str:
        return f"{self.root}/underreplication"

    @property
    def ur_layout(self) -> str:
        return f"{self.underreplication}/LAYOUT"

    @property
    def ur_ledgers(self) -> str:
        return f"{self.underreplication}/ledgers"

    @property
    def ur_locks(self) -> str:
        return f"{self.underreplication}/locks"

    @property
    def ur_disable(self) -> str:
        return f"{self.underreplication}/disable"

    @property
    def lost_bookie_recovery_delay(self) -> str:
        return f"{self.underreplication}/lostBookieRecoveryDelay"

    @property
    def auditor_election(self) -> str:
        return f"{self.underreplication}/auditorelection"

    @property
    def check_all_ledgers_ctime(self) -> str:
        return f"{self.underreplication}/checkallledgersctime"

    @property
    def placement_policy_check_ctime(self) -> str:
        return f"{self.underreplication}/placementpolicycheckctime"

    @property
    def replicas_check_ctime(self) -> str:
        return f"{self.underreplication}/replicascheckctime"

    def ur_marker(self, ledger_id: int) -> str:
        return ur_marker_path(self.ur_ledgers, ledger_id)

    def ur_lock(self, ledger_id: int) -> str:
        return f"{self.ur_locks}/{ur_leaf_name(ledger_id)}"

    # ours (documented in README as autorecovery additions)
    @property
    def unrecoverable(self) -> str:
        """``underreplication/unrecoverable/urL<id>``: ledgers with entries no replica holds (ours)."""
        return f"{self.underreplication}/unrecoverable"

    @property
    def maintenance(self) -> str:
        """``underreplication/maintenance/<kind>:<target>``: maintenance windows and rack-loss guard
        overrides, JSON records (ours, see ``audit.maintenance``)."""
        return f"{self.underreplication}/maintenance"

    @property
    def guard_state(self) -> str:
        """``underreplication/maintenance-state``: what the auditor holds back right now, JSON (ours;
        written by the auditor on change so every node's progress and the shell can show it)."""
        return f"{self.underreplication}/maintenance-state"

    @property
    def history(self) -> str:
        """``underreplication/history``: heal history (ours). Its data is the auditor's published state
        (JSON: lost bookies and since when, last check times, under-replicated figures); its children
        ``e-<seq>`` are the heal episodes, JSON (``audit.episodes``)."""
        return f"{self.underreplication}/history"

    @property
    def racks(self) -> str:
        """Pulsar's rack-info znode (``/bookies``, JSON ``{"group": {"host:port": {"rack": ...}}}``).

        It sits at the ZooKeeper (chroot) root, not under the ledgers root, exactly where Pulsar keeps it.
        """
        return "/bookies"
