"""Placement configuration, parsed from upstream BookKeeper key names (PURE).

:meth:`PlacementConfig.from_properties` takes a mapping of **upstream key names** (``minNumRacksPerWriteQuorum``,
``reppRegionsToWrite`` ...) to values (``str``, ``int``, ``bool`` or ``float``; strings are parsed like
upstream's commons-configuration: ``true``/``false``/``yes``/``no``/``on``/``off`` for booleans). Missing keys
take upstream's defaults (upstream ``ClientConfiguration`` / ``AbstractConfiguration`` /
``RegionAwareEnsemblePlacementPolicy``; the two BP-54 server keys come from ``ServerConfiguration``).
An unknown key or a value of the wrong type raises :class:`~autorecovery.errors.ConfigError` naming the key.

Units: keys ending in ``Seconds``/``Secs`` are seconds, ``MSec`` milliseconds, as upstream.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

from autorecovery.config.keys import KEY_BY_NAME
from autorecovery.errors import ConfigError

__all__ = ["PlacementConfig", "PLACEMENT_KEYS"]

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _parse_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
    raise ConfigError(f"config key {key}: expected a boolean, got {value!r}")


def _parse_int(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"config key {key}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ConfigError(f"config key {key}: expected an integer, got {value!r}")


def _parse_float(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"config key {key}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ConfigError(f"config key {key}: expected a number, got {value!r}")


def _parse_str(key: str, value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    raise ConfigError(f"config key {key}: expected a string, got {value!r}")


def _parse_opt_str(key: str, value: Any) -> str | None:
    s = _parse_str(key, value)
    return s or None


def _parse_regions(key: str, value: Any) -> tuple[str, ...] | None:
    """``reppRegionsToWrite``: regions separated by ``;`` (upstream format), e.g. ``region1;region2``."""
    if isinstance(value, (list, tuple)):
        parts = [str(v).strip() for v in value]
    elif isinstance(value, str):
        parts = [p.strip() for p in value.split(";")]
    else:
        raise ConfigError(f"config key {key}: expected regions separated by ';', got {value!r}")
    parts = [p for p in parts if p]
    return tuple(parts) or None


def _non_negative(key: str, value: int) -> int:
    if value < 0:
        raise ConfigError(f"config key {key}: must be >= 0, got {value}")
    return value


# upstream key -> (dataclass field, parser, checker or None)
_KEYS: dict[str, tuple[str, Callable[[str, Any], Any], Callable[[str, Any], Any] | None]] = {
    "ensemblePlacementPolicy": ("ensemble_placement_policy", _parse_str, None),
    "reppDnsResolverClass": ("repp_dns_resolver_class", _parse_str, None),
    "networkTopologyScriptFileName": ("network_topology_script_file_name", _parse_opt_str, None),
    "networkTopologyScriptNumberArgs": ("network_topology_script_number_args", _parse_int, None),
    "minNumRacksPerWriteQuorum": ("min_num_racks_per_write_quorum", _parse_int, _non_negative),
    "enforceMinNumRacksPerWriteQuorum": ("enforce_min_num_racks_per_write_quorum", _parse_bool, None),
    "enforceMinNumFaultDomainsForWrite": ("enforce_min_num_fault_domains_for_write", _parse_bool, None),
    "ignoreLocalNodeInPlacementPolicy": ("ignore_local_node_in_placement_policy", _parse_bool, None),
    "useHostnameResolveLocalNodePlacementPolicy": ("use_hostname_resolve_local_node", _parse_bool, None),
    "ensembleRandomReadReordering": ("ensemble_random_read_reordering", _parse_bool, None),
    "readReorderThresholdPendingRequests": ("read_reorder_threshold_pending_requests", _parse_int, None),
    "reorderReadSequenceEnabled": ("reorder_read_sequence_enabled", _parse_bool, None),
    "enableBookieFailureTracking": ("enable_bookie_failure_tracking", _parse_bool, None),
    "bookieFailureHistoryExpirationMSec": ("bookie_failure_history_expiration_ms", _parse_int, _non_negative),
    "networkTopologyStabilizePeriodSeconds": ("network_topology_stabilize_period_s", _parse_int, _non_negative),
    "diskWeightBasedPlacementEnabled": ("disk_weight_based_placement_enabled", _parse_bool, None),
    "bookieMaxMultipleForWeightBasedPlacement": ("bookie_max_multiple_for_weight_based_placement", _parse_float, None),
    "getBookieInfoIntervalSeconds": ("get_bookie_info_interval_s", _parse_int, _non_negative),
    "getBookieInfoRetryIntervalSeconds": ("get_bookie_info_retry_interval_s", _parse_int, _non_negative),
    "getBookieInfoTimeoutSecs": ("get_bookie_info_timeout_s", _parse_int, _non_negative),
    "minNumZonesPerWriteQuorum": ("min_num_zones_per_write_quorum", _parse_int, _non_negative),
    "desiredNumZonesPerWriteQuorum": ("desired_num_zones_per_write_quorum", _parse_int, _non_negative),
    "enforceStrictZoneawarePlacement": ("enforce_strict_zoneaware_placement", _parse_bool, None),
    "reppRegionsToWrite": ("repp_regions_to_write", _parse_regions, None),
    "reppMinimumRegionsForDurability": ("repp_minimum_regions_for_durability", _parse_int, _non_negative),
    "reppEnableDurabilityEnforcementInReplace": ("repp_enable_durability_enforcement_in_replace", _parse_bool, None),
    "reppDisableDurabilityFeatureName": ("repp_disable_durability_feature_name", _parse_str, None),
    "reppDisallowBookiePlacementInRegionFeatureName": (
        "repp_disallow_bookie_placement_in_region_feature_name", _parse_opt_str, None),
    "reppEnableValidation": ("repp_enable_validation", _parse_bool, None),
    # ours: static presets of upstream's two region-aware feature switches (see placement/features.py)
    "reppDisallowedRegions": ("repp_disallowed_regions", _parse_regions, None),
    "reppDisableDurability": ("repp_disable_durability", _parse_bool, None),
    "delayEnsembleChange": ("delay_ensemble_change", _parse_bool, None),
    "disableEnsembleChangeFeatureName": ("disable_ensemble_change_feature_name", _parse_str, None),
    "stickyReadSEnabled": ("sticky_reads_enabled", _parse_bool, None),
    "auditorPeriodicPlacementPolicyCheckInterval": (
        "auditor_periodic_placement_policy_check_interval_s", _parse_int, _non_negative),
    "repairedPlacementPolicyNotAdheringBookieEnabled": (
        "repaired_placement_policy_not_adhering_bookie_enabled", _parse_bool, None),
}

#: Every upstream key :meth:`PlacementConfig.from_properties` accepts.
PLACEMENT_KEYS: frozenset[str] = frozenset(_KEYS)


@dataclass(frozen=True)
class PlacementConfig:
    """Frozen placement settings. Field defaults are upstream's defaults; build it with :meth:`from_properties`.

    Fields map one to one to upstream keys (see ``PLACEMENT_KEYS``); the upstream key is given per field.
    """

    ensemble_placement_policy: str = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
    """``ensemblePlacementPolicy``: policy class. NB upstream's client default is rack-aware."""
    repp_dns_resolver_class: str = "org.apache.bookkeeper.net.ScriptBasedMapping"
    """``reppDnsResolverClass``: bookie -> network location resolver class."""
    network_topology_script_file_name: str | None = None
    """``networkTopologyScriptFileName``: the script of ``ScriptBasedMapping``."""
    network_topology_script_number_args: int = 100
    """``networkTopologyScriptNumberArgs``: max hostnames per script call."""
    min_num_racks_per_write_quorum: int = 2
    """``minNumRacksPerWriteQuorum``: racks wanted per write set; effective ``min(WQ, this)``."""
    enforce_min_num_racks_per_write_quorum: bool = False
    """``enforceMinNumRacksPerWriteQuorum``: hard requirement; also excludes default-rack bookies."""
    enforce_min_num_fault_domains_for_write: bool = False
    """``enforceMinNumFaultDomainsForWrite``: acks count only when the acked bookies adhere."""
    ignore_local_node_in_placement_policy: bool = False
    """``ignoreLocalNodeInPlacementPolicy``: do not prefer the client's own rack."""
    use_hostname_resolve_local_node: bool = False
    """``useHostnameResolveLocalNodePlacementPolicy``."""
    ensemble_random_read_reordering: bool = False
    """``ensembleRandomReadReordering``: shuffle inside read-order classes."""
    read_reorder_threshold_pending_requests: int = 0
    """``readReorderThresholdPendingRequests``: move the least-loaded replica first (0 = off)."""
    reorder_read_sequence_enabled: bool = True
    """``reorderReadSequenceEnabled``."""
    enable_bookie_failure_tracking: bool = True
    """``enableBookieFailureTracking``."""
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
    delay_ensemble_change: bool = False
    """``delayEnsembleChange`` (used by the client)."""
    disable_ensemble_change_feature_name: str = "disable_ensemble_change"
    """``disableEnsembleChangeFeatureName`` (used by the client)."""
    sticky_reads_enabled: bool = False
    """``stickyReadSEnabled`` (used by the client)."""
    auditor_periodic_placement_policy_check_interval_s: int = 0
    """``auditorPeriodicPlacementPolicyCheckInterval`` (s, server key, BP-34/BP-54; 0 = off)."""
    repaired_placement_policy_not_adhering_bookie_enabled: bool = False
    """``repairedPlacementPolicyNotAdheringBookieEnabled`` (server key, BP-54)."""

    @classmethod
    def from_properties(cls, props: Mapping[str, str | int | bool | float] | None = None) -> "PlacementConfig":
        """Build a config from upstream key names; missing keys take upstream defaults.

        Raises:
            ConfigError: a key is not a placement key, or its value cannot be parsed (the message names
                the key and the value).
        """
        kwargs: dict[str, Any] = {}
        for key, value in (props or {}).items():
            spec = _KEYS.get(key)
            if spec is None:
                raise ConfigError(f"unknown placement config key {key!r}")
            attr, parse, check = spec
            parsed = parse(key, value)
            if check is not None:
                parsed = check(key, parsed)
            kwargs[attr] = parsed
        return cls(**kwargs)

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
        by_attr = {attr: key for key, (attr, _p, _c) in _KEYS.items()}
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
