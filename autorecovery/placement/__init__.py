"""Ensemble placement: topology, rack/region/zone-aware policies, disk weights, adherence, minimum-swap repair.

PURE library (lowest floor) shared by the client, the Auditor and the ReplicationWorker (no I/O; the script
resolver is the only ``subprocess`` user). It may import only the PURE core (``ledger``, ``errors``,
``config.keys``); ``.importlinter`` fails anything higher. Everything below is importable from ``autorecovery.placement``:

* :class:`PlacementConfig` (``from_properties`` with upstream key names), :class:`ConfigError`;
* resolvers :class:`StaticResolver`, :class:`PulsarRackResolver`, :class:`ScriptResolver`;
* policies :class:`DefaultPolicy`, :class:`RackawarePolicy`, :class:`RegionawarePolicy`, :class:`ZoneawarePolicy`
  and :func:`policy_from_name`;
* :class:`PlacementResult`, :class:`Adherence` (``FAIL < MEETS_SOFT < MEETS_STRICT``), :class:`BookieInfo`,
  :class:`BookiesHealthInfo`, :class:`NotEnoughBookiesError`;
* :func:`write_set` / :func:`bookie_has_entry` (round-robin schedule) and :class:`WeightedRandomSelection`.
"""

from autorecovery.errors import ConfigError, NotEnoughBookiesError

from .config import PLACEMENT_KEYS, PlacementConfig
from .default import DefaultPolicy
from .factory import POLICY_CLASSES, policy_from_name
from .policy import Adherence, BookieInfo, BookiesHealthInfo, PlacementPolicy, PlacementResult
from .rackaware import RackawarePolicy
from .regionaware import RegionawarePolicy, region_of_location
from .repair import DEFAULT_MAX_NODES, RepairOutcome, SearchBudgetExceeded, solve_min_swaps
from .resolvers import (
    DefaultRackResolver,
    PulsarRackResolver,
    Resolver,
    ScriptResolver,
    StaticResolver,
    resolver_from_config,
)
from .schedule import bookie_has_entry, ensemble_write_sets, write_set
from .topology import (
    DEFAULT_RACK,
    DEFAULT_REGION,
    DEFAULT_REGION_AND_RACK,
    DEFAULT_UPGRADEDOMAIN,
    DEFAULT_ZONE,
    DEFAULT_ZONE_AND_UPGRADEDOMAIN,
    NetworkTopology,
    normalize_location,
)
from .topology_aware import TopologyAwarePolicy
from autorecovery.placement.read_order import UNKNOWN_REGION
from .weights import WeightedRandomSelection, effective_weights
from .zoneaware import ZoneawarePolicy

__all__ = [
    "Adherence",
    "BookieInfo",
    "BookiesHealthInfo",
    "ConfigError",
    "DEFAULT_MAX_NODES",
    "DEFAULT_RACK",
    "DEFAULT_REGION",
    "DEFAULT_REGION_AND_RACK",
    "DEFAULT_UPGRADEDOMAIN",
    "DEFAULT_ZONE",
    "DEFAULT_ZONE_AND_UPGRADEDOMAIN",
    "DefaultPolicy",
    "DefaultRackResolver",
    "NetworkTopology",
    "NotEnoughBookiesError",
    "PLACEMENT_KEYS",
    "POLICY_CLASSES",
    "PlacementConfig",
    "PlacementPolicy",
    "PlacementResult",
    "PulsarRackResolver",
    "RackawarePolicy",
    "RegionawarePolicy",
    "RepairOutcome",
    "Resolver",
    "ScriptResolver",
    "SearchBudgetExceeded",
    "StaticResolver",
    "TopologyAwarePolicy",
    "UNKNOWN_REGION",
    "WeightedRandomSelection",
    "ZoneawarePolicy",
    "bookie_has_entry",
    "effective_weights",
    "ensemble_write_sets",
    "normalize_location",
    "policy_from_name",
    "region_of_location",
    "resolver_from_config",
    "solve_min_swaps",
    "write_set",
]
