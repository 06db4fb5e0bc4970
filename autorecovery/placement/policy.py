"""The placement-policy interface shared by the client, the Auditor and the ReplicationWorker (PURE).

Upstream ``EnsemblePlacementPolicy``. Shapes and terms: an *ensemble* is a list of bookie ids
(``host:port``) of length E; entry ``e`` is stored on its *write set*, WQ consecutive ensemble indexes
from ``e mod E`` (see :mod:`.schedule`); a write needs AQ acknowledgements. *Adherence* says whether every
write set satisfies the policy's fault-domain rules.
"""

from __future__ import annotations

import abc
import enum
import random
import time
from dataclasses import dataclass
from typing import Any, ClassVar
from collections.abc import Callable, Iterable, Mapping, Sequence

from autorecovery.errors import ConfigError, NotEnoughBookiesError

from .config import PlacementConfig
from .resolvers import DefaultRackResolver, Resolver
from .weights import WeightedRandomSelection

__all__ = [
    "Adherence",
    "PlacementResult",
    "BookieInfo",
    "BookiesHealthInfo",
    "PlacementPolicy",
    "NotEnoughBookiesError",
]


class Adherence(enum.IntEnum):
    """How well an ensemble follows the policy (upstream ``PlacementPolicyAdherence``).

    Ordered: ``FAIL < MEETS_SOFT < MEETS_STRICT``, so ``min()`` over write sets gives an ensemble's level.
    """

    FAIL = 0
    MEETS_SOFT = 1
    MEETS_STRICT = 2

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class BookieInfo:
    """Disk space a bookie reported (upstream ``BookieInfoReader.BookieInfo``), in bytes.

    The placement weight is ``free_disk_space`` (upstream ``getWeight``).
    """

    total_disk_space: int = 0
    free_disk_space: int = 0

    @property
    def weight(self) -> int:
        return max(0, int(self.free_disk_space))


class BookiesHealthInfo:
    """Per-bookie health used to order reads (upstream ``BookiesHealthInfo``).

    Args:
        failures: bookie -> id of the last entry that failed on it (absent = no failure, reported as -1).
        pending: bookie -> number of outstanding requests (absent = 0).
    """

    def __init__(self, failures: Mapping[str, int] | None = None, pending: Mapping[str, int] | None = None) -> None:
        self.failures = dict(failures or {})
        self.pending = dict(pending or {})

    def failure_history(self, bookie: str) -> int:
        """Last failed entry id on ``bookie``, or -1."""
        return self.failures.get(bookie, -1)

    def pending_requests(self, bookie: str) -> int:
        return self.pending.get(bookie, 0)


@dataclass
class PlacementResult:
    """Result of a placement call (upstream ``PlacementResult``).

    Attributes:
        ensemble: the (new) ensemble; for ``replace_bookie`` the ensemble after the replacement; for
            ``replace_to_adhere`` the repaired ensemble, or the unchanged one when no fix exists.
        adherence: adherence of ``ensemble``.
        bookie: for ``replace_bookie``, the chosen bookie.
        replaced: ensemble indexes whose bookie changed (``replace_bookie`` / ``replace_to_adhere``).
        exact: False only if ``replace_to_adhere`` gave up because its search budget ran out (it then returns
            the ensemble unchanged with FAIL rather than a possibly non-minimal repair).
    """

    ensemble: list[str]
    adherence: Adherence
    bookie: str | None = None
    replaced: tuple[int, ...] = ()
    exact: bool = True

    @property
    def swaps(self) -> int:
        """Number of replaced positions."""
        return len(self.replaced)


@dataclass
class RepairJob:
    """A BP-54 repair split so that its expensive part can run off the event loop.

    :meth:`PlacementPolicy.plan_replace_to_adhere` does everything that reads the policy's live state
    (membership, racks, weights) and returns either a finished ``result`` or a ``solve`` function that
    works only on a snapshot of that state (plain data): the caller may run :meth:`run` in a worker
    thread while the policy keeps changing on the loop.

    Attributes:
        result: the answer when no search is needed (already adheres, impossible shape).
        solve: ``() -> outcome`` on the snapshot (may raise the search's budget error), or None.
        finish: ``outcome -> PlacementResult`` (pure).
    """

    result: PlacementResult | None = None
    solve: Callable[[], Any] | None = None
    finish: Callable[[Any], PlacementResult] | None = None

    @property
    def needs_search(self) -> bool:
        return self.result is None

    def run(self) -> PlacementResult:
        """The repair's result (runs ``solve`` when needed; safe in a worker thread)."""
        if self.result is not None:
            return self.result
        assert self.solve is not None and self.finish is not None
        return self.finish(self.solve())


class PlacementPolicy(abc.ABC):
    """Base of every placement policy. PURE: no I/O; time comes from the injected ``clock``.

    Args:
        config: placement settings (upstream defaults when None).
        resolver: bookie -> network location (every bookie in the default rack when None).
        local_location: network location of the client itself (upstream "local node"), or None.
        rng: random source (seed it for reproducible placement).
        clock: monotonic seconds; used for the slow-bookie cache and the stabilize period.
    """

    #: Upstream class name of the policy.
    upstream_class: ClassVar[str] = ""

    def __init__(self, config: PlacementConfig | None = None, resolver: Resolver | None = None,
                 local_location: str | None = None, rng: random.Random | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or PlacementConfig()
        if not isinstance(self.config, PlacementConfig):
            raise ConfigError(f"config must be a PlacementConfig, got {type(config).__name__}")
        self.resolver: Resolver = resolver if resolver is not None else DefaultRackResolver()
        self.local_location = local_location
        self.rng = rng or random.Random()
        self.clock = clock
        self._writable: set[str] = set()
        self._readonly: set[str] = set()
        self._bookie_info: dict[str, BookieInfo] = {}
        self._slow: dict[str, tuple[int, float]] = {}
        self._selector: WeightedRandomSelection | None = None
        self._version = 0

    # -- cluster membership -------------------------------------------------------------------------
    @property
    def writable_bookies(self) -> frozenset[str]:
        """Bookies the policy may place data on (writable and known)."""
        return frozenset(self._writable)

    @property
    def readonly_bookies(self) -> frozenset[str]:
        return frozenset(self._readonly)

    @property
    def weighted(self) -> bool:
        return self.config.disk_weight_based_placement_enabled

    def on_cluster_changed(self, writable: set[str], readonly: set[str]) -> set[str]:
        """Take a new view of the cluster; returns the dead bookies (upstream ``onClusterChanged``).

        Only writable bookies become placement candidates; read-only bookies never do. Dead bookies are the
        bookies that left the writable set and are not read-only now (upstream: a read-only bookie that
        disappears entirely is not reported dead).
        """
        writable = set(writable)
        readonly = set(readonly)
        left = self._writable - writable
        joined = writable - self._writable
        self._readonly = readonly
        self._handle_left(left)
        self._handle_joined(joined)
        self._writable = writable
        self._selector = None
        self._version += 1
        return left - readonly

    def _handle_left(self, left: set[str]) -> None:  # noqa: B027 - an optional hook: by default nothing
        """Hook: bookies that left the writable set."""

    def _handle_joined(self, joined: set[str]) -> None:  # noqa: B027 - an optional hook: by default nothing
        """Hook: bookies that joined the writable set."""

    # -- weights --------------------------------------------------------------------------------------
    def update_bookie_info(self, info: Mapping[str, BookieInfo]) -> None:
        """Take free/total disk space per bookie (bytes); used only when disk-weight placement is on.

        Default policy: merged into the known map (upstream). Topology-aware policies override it to rebuild
        the map from scratch (bookies missing from the update get weight 0, as upstream).
        """
        self._bookie_info.update(info)
        self._selector = None
        self._version += 1

    @property
    def bookie_info(self) -> Mapping[str, BookieInfo]:
        """The disk info known per bookie (bytes; read-only view)."""
        return dict(self._bookie_info)

    def spread_pool(self) -> frozenset[str]:
        """Bookies this policy may place a replacement on, before the ensemble's own rules
        (:mod:`.spread`): every writable bookie here; topology-aware policies narrow it."""
        return frozenset(self._writable)

    def weight_of(self, bookie: str) -> int:
        """Raw placement weight of a bookie: its free disk space in bytes, 0 when unknown."""
        info = self._bookie_info.get(bookie)
        return info.weight if info is not None else 0

    def _selection(self, bookies: Iterable[str]) -> WeightedRandomSelection:
        return WeightedRandomSelection({b: self.weight_of(b) for b in bookies},
                                       self.config.bookie_max_multiple_for_weight_based_placement, self.rng)

    def _draw_distinct(self, candidates: Iterable[str], n: int, selection: WeightedRandomSelection | None = None
                       ) -> list[str]:
        """``n`` distinct bookies from ``candidates``: uniform, or by capped disk weight when weights are on
        (``selection`` defaults to one over the candidates; upstream WeightedRandomSelectionImpl).

        Raises:
            NotEnoughBookiesError: fewer than ``n`` candidates.
        """
        cands = sorted(candidates)
        if len(cands) < n:
            raise NotEnoughBookiesError(f"need {n} bookies, only {len(cands)} writable and not excluded")
        if not self.weighted:
            return self.rng.sample(cands, n)
        sel = selection or self._selection(cands)
        out: list[str] = []
        left = set(cands)
        for _ in range(n):
            b = sel.select(sorted(left))
            out.append(b)
            left.discard(b)
        return out

    def _cluster_selection(self) -> WeightedRandomSelection:
        if self._selector is None:
            self._selector = self._selection(sorted(self._writable))
        return self._selector

    # -- placement ------------------------------------------------------------------------------------
    @abc.abstractmethod
    def new_ensemble(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                     exclude: Iterable[str] = frozenset(), custom_metadata: Mapping[str, bytes] | None = None
                     ) -> PlacementResult:
        """Choose ``ensemble_size`` bookies (upstream ``newEnsemble``).

        Raises:
            NotEnoughBookiesError: not enough eligible bookies (upstream BKNotEnoughBookiesException).
        """

    @abc.abstractmethod
    def replace_bookie(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                       current_ensemble: Sequence[str], bookie_to_replace: str, exclude: Iterable[str] = frozenset(),
                       custom_metadata: Mapping[str, bytes] | None = None) -> PlacementResult:
        """Choose a bookie to replace ``bookie_to_replace`` (upstream ``replaceBookie``).

        Raises:
            NotEnoughBookiesError: no eligible bookie.
        """

    @abc.abstractmethod
    def is_ensemble_adhering(self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        """Adherence of an ensemble (upstream ``isEnsembleAdheringToPlacementPolicy``)."""

    def placement_adherence(self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        """Adherence of where an ensemble's members *are*, whether each is writable now or not: what the
        placement check (the Auditor's, the worker's BP-54 re-check) judges. Ours: upstream's check uses
        ``isEnsembleAdheringToPlacementPolicy``, which gives a down or read-only member no fault domain, so
        every outage FAILs ledgers naming the bookie and BP-54 re-marks them on each check although their
        placement never changed (an outage is the lost-bookie audit's job). Default: :meth:`is_ensemble_adhering`;
        the topology-aware policies count such a member in its last known or resolved location."""
        return self.is_ensemble_adhering(ensemble, write_quorum_size, ack_quorum_size)

    def are_acked_bookies_adhering(self, acked: set[str], write_quorum_size: int, ack_quorum_size: int) -> bool:
        """Whether bookies that acknowledged a write span enough fault domains (default: always True)."""
        return True

    @abc.abstractmethod
    def replace_to_adhere(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                          exclude: Iterable[str], current_ensemble: Sequence[str]) -> PlacementResult:
        """BP-54: a minimum-swap repair of a non-adhering ensemble (upstream ``replaceToAdherePlacementPolicy``)."""

    def plan_replace_to_adhere(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                               exclude: Iterable[str], current_ensemble: Sequence[str]) -> RepairJob:
        """:meth:`replace_to_adhere` as a :class:`RepairJob` (default: computed at once, no search)."""
        return RepairJob(result=self.replace_to_adhere(ensemble_size, write_quorum_size, ack_quorum_size,
                                                       exclude, current_ensemble))

    # -- reads ----------------------------------------------------------------------------------------
    def reorder_read_sequence(self, ensemble: Sequence[str], health: BookiesHealthInfo,
                              write_set: Sequence[int]) -> list[int]:
        """Order in which to read the replicas of an entry; default: the write set unchanged."""
        return list(write_set)

    def reorder_read_lac_sequence(self, ensemble: Sequence[str], health: BookiesHealthInfo,
                                  write_set: Sequence[int]) -> list[int]:
        """As :meth:`reorder_read_sequence`, then the ensemble indexes missing from it in ascending order."""
        seq = self.reorder_read_sequence(ensemble, health, write_set)
        present = set(seq)
        seq.extend(i for i in range(len(ensemble)) if i not in present)
        return seq

    def register_slow_bookie(self, bookie: str, entry_id: int) -> None:  # noqa: B027 - an optional hook: by default nothing
        """Note a bookie that caused a speculative read timeout (no-op unless the policy uses it)."""

    def _is_slow(self, bookie: str) -> bool:
        entry = self._slow.get(bookie)
        if entry is None:
            return False
        if self.clock() >= entry[1]:
            del self._slow[bookie]
            return False
        return True

    def sticky_read_bookie_index(self, metadata: Any, current_index: int | None = None) -> int:
        """Index of the bookie all reads of a ledger go to (upstream ``getStickyReadBookieIndex`` default).

        Args:
            metadata: ledger metadata with ``ensemble_size`` (or an int E).
            current_index: the current sticky index after a read failure, or None for the first choice.

        Returns a random index in ``[0, E)`` first, then ``(current + 1) mod E``.
        """
        e = metadata if isinstance(metadata, int) else getattr(metadata, "ensemble_size", None)
        if e is None:
            e = metadata.ensembleSize
        e = int(e)
        if e <= 0:
            raise ValueError(f"ensemble size must be > 0, got {e}")
        if current_index is None:
            return self.rng.randrange(e)
        return (current_index + 1) % e

    # -- locations ------------------------------------------------------------------------------------
    def location_of(self, bookie_id: str) -> str:
        """Network location the policy uses for ``bookie_id`` (its default rack when unknown)."""
        loc = self.resolver.resolve([bookie_id])[0]
        return loc or self.default_location

    @property
    def default_location(self) -> str:
        """The location given to bookies the resolver does not know."""
        from .topology import DEFAULT_REGION_AND_RACK
        return DEFAULT_REGION_AND_RACK

    # -- helpers --------------------------------------------------------------------------------------
    @staticmethod
    def _not_enough(what: str) -> NotEnoughBookiesError:
        return NotEnoughBookiesError(what)

