"""Placement configuration, by upstream BookKeeper key names (PURE).

Every key is in :data:`autorecovery.config.keys.KEYS` (type, bounds, default); this module only maps
them to :class:`PlacementConfig` fields. The loader parses each value once with
:meth:`~autorecovery.config.keys.Key.parse` and builds ``Settings.placement`` with
:meth:`PlacementConfig.from_values`; :meth:`PlacementConfig.from_properties` takes upstream key names
to raw strings (parsed by the same :meth:`Key.parse`: ``true``/``false``/``yes``/``no``/``on``/``off``
for booleans, as commons-configuration) or typed values (``2``, ``True``). Unset keys take the table's
default (upstream ``ClientConfiguration`` / ``AbstractConfiguration`` / ``RegionAwareEnsemblePlacementPolicy``
defaults unless the table documents otherwise). An unknown key or a bad value raises
:class:`~autorecovery.errors.ConfigError` naming the key.

Units: keys ending in ``Seconds``/``Secs`` are seconds, ``MSec`` milliseconds, as upstream.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any
from collections.abc import Callable, Mapping

from autorecovery.config.keys.sections import Section, typed_value
from autorecovery.config.keys.table import KEY_BY_NAME, LIBRARY_KEY_BY_NAME
from autorecovery.errors import ConfigError

__all__ = ["PlacementConfig", "PLACEMENT_KEYS"]


def _opt_str(value: str | None) -> str | None:
    return (value or "").strip() or None


def _regions(value: Any) -> tuple[str, ...] | None:
    """``reppRegionsToWrite``: regions separated by ``;`` (upstream format), e.g. ``region1;region2``."""
    if value is None:
        return None
    parts = [str(v).strip() for v in value] if isinstance(value, (list, tuple)) else [p.strip() for p in str(value).split(";")]
    parts = [p for p in parts if p]
    return tuple(parts) or None


#: upstream key -> PlacementConfig field
_FIELDS: dict[str, str] = {
    "ensemblePlacementPolicy": "ensemble_placement_policy",
    "reppDnsResolverClass": "repp_dns_resolver_class",
    "networkTopologyScriptFileName": "network_topology_script_file_name",
    "networkTopologyScriptNumberArgs": "network_topology_script_number_args",
    "minNumRacksPerWriteQuorum": "min_num_racks_per_write_quorum",
    "enforceMinNumRacksPerWriteQuorum": "enforce_min_num_racks_per_write_quorum",
    "enforceMinNumFaultDomainsForWrite": "enforce_min_num_fault_domains_for_write",
    "networkTopologyStabilizePeriodSeconds": "network_topology_stabilize_period_s",
    "diskWeightBasedPlacementEnabled": "disk_weight_based_placement_enabled",
    "bookieMaxMultipleForWeightBasedPlacement": "bookie_max_multiple_for_weight_based_placement",
    "getBookieInfoIntervalSeconds": "get_bookie_info_interval_s",
    "getBookieInfoRetryIntervalSeconds": "get_bookie_info_retry_interval_s",
    "getBookieInfoTimeoutSecs": "get_bookie_info_timeout_s",
    "minNumZonesPerWriteQuorum": "min_num_zones_per_write_quorum",
    "desiredNumZonesPerWriteQuorum": "desired_num_zones_per_write_quorum",
    "enforceStrictZoneawarePlacement": "enforce_strict_zoneaware_placement",
    "reppRegionsToWrite": "repp_regions_to_write",
    "reppMinimumRegionsForDurability": "repp_minimum_regions_for_durability",
    "reppEnableDurabilityEnforcementInReplace": "repp_enable_durability_enforcement_in_replace",
    "reppDisableDurabilityFeatureName": "repp_disable_durability_feature_name",
    "reppDisallowBookiePlacementInRegionFeatureName": "repp_disallow_bookie_placement_in_region_feature_name",
    "reppEnableValidation": "repp_enable_validation",
    # ours: static presets of upstream's two region-aware feature switches (see placement/features.py)
    "reppDisallowedRegions": "repp_disallowed_regions",
    "reppDisableDurability": "repp_disable_durability",
    "auditorPeriodicPlacementPolicyCheckInterval": "auditor_periodic_placement_policy_check_interval_s",
    "repairedPlacementPolicyNotAdheringBookieEnabled": "repaired_placement_policy_not_adhering_bookie_enabled",
}

#: upstream key -> field, for the keys only the library reads (:data:`~autorecovery.config.keys.
#: LIBRARY_PLACEMENT_KEYS`: upstream's read ordering and local node, which the daemon does not use; in a
#: bk_server.conf they have no effect). :meth:`PlacementConfig.from_properties` accepts them; the loader
#: never fills them.
_LIBRARY_FIELDS: dict[str, str] = {
    "ignoreLocalNodeInPlacementPolicy": "ignore_local_node_in_placement_policy",
    "ensembleRandomReadReordering": "ensemble_random_read_reordering",
    "readReorderThresholdPendingRequests": "read_reorder_threshold_pending_requests",
    "bookieFailureHistoryExpirationMSec": "bookie_failure_history_expiration_ms",
}

#: typed value -> field value, for the keys whose field is not the parsed value itself
_CONVERT: dict[str, Callable[[Any], Any]] = {
    "reppDnsResolverClass": _opt_str,
    "networkTopologyScriptFileName": _opt_str,
    "reppDisallowBookiePlacementInRegionFeatureName": _opt_str,
    "reppRegionsToWrite": _regions,
    "reppDisallowedRegions": _regions,
    "bookieMaxMultipleForWeightBasedPlacement": float,
}

#: Every upstream key :meth:`PlacementConfig.from_properties` accepts.
PLACEMENT_KEYS: frozenset[str] = frozenset(_FIELDS) | frozenset(_LIBRARY_FIELDS)


@dataclass(frozen=True)
class PlacementConfig(Section):
    """Frozen placement settings. Field defaults equal the key table's (tests/unit/config/test_settings_tree.py);
    the loader builds it with :meth:`from_values`, tests and tools with :meth:`from_properties`.

    Fields map one to one to upstream keys (see ``PLACEMENT_KEYS``); the upstream key is given per field.
    """

    ensemble_placement_policy: str = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
    """``ensemblePlacementPolicy``: policy class. NB upstream's client default is rack-aware."""
    repp_dns_resolver_class: str | None = None
    """``reppDnsResolverClass``: bookie -> network location resolver class. None (unset): the daemon uses
    Pulsar's ``/bookies`` rack info when present, else the default rack; :func:`~autorecovery.placement.
    resolvers.resolver_from_config` takes None as upstream's default ``ScriptBasedMapping``."""
    network_topology_script_file_name: str | None = None
    """``networkTopologyScriptFileName``: the script of ``ScriptBasedMapping``."""
    network_topology_script_number_args: int = 100
    """``networkTopologyScriptNumberArgs``: max hostnames per script call."""
    min_num_racks_per_write_quorum: int = 2
    """``minNumRacksPerWriteQuorum``: racks wanted per write set; effective ``min(WQ, this)``."""
    enforce_min_num_racks_per_write_quorum: bool = False
    """``enforceMinNumRacksPerWriteQuorum``: hard requirement; also excludes default-rack bookies."""
    enforce_min_num_fault_domains_for_write: bool = False
    """``enforceMinNumFaultDomainsForWrite``: an add of our client is acknowledged only once its acked
    bookies pass :meth:`~autorecovery.placement.policy.PlacementPolicy.are_acked_bookies_adhering`
    (upstream ``PendingAddOp``; the placement policies themselves never read it, upstream neither)."""
    ignore_local_node_in_placement_policy: bool = False
    """``ignoreLocalNodeInPlacementPolicy``: do not prefer the client's own rack."""
    ensemble_random_read_reordering: bool = False
    """``ensembleRandomReadReordering``: shuffle inside read-order classes."""
    read_reorder_threshold_pending_requests: int = 0
    """``readReorderThresholdPendingRequests``: move the least-loaded replica first (0 = off)."""
    bookie_failure_history_expiration_ms: int = 60000
    """``bookieFailureHistoryExpirationMSec`` (ms): expiry of the slow-bookie cache."""
    network_topology_stabilize_period_s: int = 0
    """``networkTopologyStabilizePeriodSeconds`` (s): delayed removal of departed bookies (0 = off)."""
    disk_weight_based_placement_enabled: bool = False
    """``diskWeightBasedPlacementEnabled``: weighted random selection by free disk space."""
    bookie_max_multiple_for_weight_based_placement: float = 3.0
    """``bookieMaxMultipleForWeightBasedPlacement``: weight cap as a multiple of the median; <= 0 disables."""
    get_bookie_info_interval_s: int = KEY_BY_NAME["getBookieInfoIntervalSeconds"].default
    """``getBookieInfoIntervalSeconds`` (s); default from the key table (60, upstream 86400)."""
    get_bookie_info_retry_interval_s: int = KEY_BY_NAME["getBookieInfoRetryIntervalSeconds"].default
    """``getBookieInfoRetryIntervalSeconds`` (s); default from the key table."""
    get_bookie_info_timeout_s: int = KEY_BY_NAME["getBookieInfoTimeoutSecs"].default
    """``getBookieInfoTimeoutSecs`` (s); default from the key table."""
    min_num_zones_per_write_quorum: int = 2
    """``minNumZonesPerWriteQuorum``."""
    desired_num_zones_per_write_quorum: int = 3
    """``desiredNumZonesPerWriteQuorum``; effective ``min(WQ, this)``."""
    enforce_strict_zoneaware_placement: bool = True
    """``enforceStrictZoneawarePlacement``."""
    repp_regions_to_write: tuple[str, ...] | None = None
    """``reppRegionsToWrite``: ``;``-separated regions."""
    repp_minimum_regions_for_durability: int = 2
    """``reppMinimumRegionsForDurability``: only read when ``reppRegionsToWrite`` is set (else 0)."""
    repp_enable_durability_enforcement_in_replace: bool = True
    """``reppEnableDurabilityEnforcementInReplace``."""
    repp_disable_durability_feature_name: str = "repp_disable_durability_enforcement"
    """``reppDisableDurabilityFeatureName``: root-scope feature that turns region durability off (features.py)."""
    repp_disallow_bookie_placement_in_region_feature_name: str | None = None
    """``reppDisallowBookiePlacementInRegionFeatureName``: per-region feature that keeps a region out of placement."""
    repp_disallowed_regions: tuple[str, ...] | None = None
    """``reppDisallowedRegions`` (ours): ``;``-separated regions whose disallow feature starts on."""
    repp_disable_durability: bool = False
    """``reppDisableDurability`` (ours): the disable-durability feature starts on."""
    repp_enable_validation: bool = True
    """``reppEnableValidation``: region-aware final ensemble validation."""
    auditor_periodic_placement_policy_check_interval_s: int = 0
    """``auditorPeriodicPlacementPolicyCheckInterval`` (s, server key, BP-34/BP-54; 0 = off)."""
    repaired_placement_policy_not_adhering_bookie_enabled: bool = False
    """``repairedPlacementPolicyNotAdheringBookieEnabled`` (server key, BP-54)."""

    KEY_FIELDS = _FIELDS
    LIBRARY_FIELDS = _LIBRARY_FIELDS
    CONVERT = _CONVERT
    SECTION = "placement"
    STRICT = True  # from_properties refuses a key that is not a placement key (a typo would be ignored)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None) -> PlacementConfig:
        """As :meth:`Section.from_properties`, also accepting the library-only keys (``_LIBRARY_FIELDS``).

        Raises:
            ConfigError: naming every key with a bad value, or an unknown placement key.
        """
        props = dict(props or {})
        library = {name: props.pop(name) for name in [n for n in props if n in _LIBRARY_FIELDS]}
        config = super().from_properties(props)
        if not library:
            return config
        typed: dict[str, Any] = {}
        errors: list[str] = []
        for name, value in library.items():
            try:
                typed[_LIBRARY_FIELDS[name]] = typed_value(LIBRARY_KEY_BY_NAME[name], value)
            except ConfigError as exc:
                errors.append(str(exc))
        if errors:
            raise ConfigError("; ".join(errors))
        return replace(config, **typed)

    @staticmethod
    def known_keys() -> frozenset[str]:
        """The upstream keys accepted by :meth:`from_properties` (to filter a full client config)."""
        return PLACEMENT_KEYS

    @classmethod
    def select(cls, props: Mapping[str, Any]) -> dict[str, Any]:
        """The subset of ``props`` whose keys are placement keys (for configs that mix other keys)."""
        return {k: v for k, v in props.items() if k in PLACEMENT_KEYS}

    def to_properties(self) -> dict[str, Any]:
        """The config as upstream key -> value (round-trips through :meth:`from_properties`)."""
        by_attr = {attr: key for key, attr in {**_FIELDS, **_LIBRARY_FIELDS}.items()}
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if isinstance(v, tuple):
                v = ";".join(v)
            out[by_attr[f.name]] = v
        return out

    @property
    def effective_min_regions_for_durability(self) -> int:
        """Region-aware durability d: ``reppMinimumRegionsForDurability`` when regions are configured, else 0."""
        return self.repp_minimum_regions_for_durability if self.repp_regions_to_write else 0
