"""Policy construction by upstream class name (``ensemblePlacementPolicy``). PURE."""

from __future__ import annotations

import random
from typing import Any

from autorecovery.errors import ConfigError

from .config import PlacementConfig
from .default import DefaultPolicy
from .policy import PlacementPolicy
from .rackaware import RackawarePolicy
from .regionaware import RegionawarePolicy
from .resolvers import Resolver
from .zoneaware import ZoneawarePolicy

__all__ = ["policy_from_name", "POLICY_CLASSES"]

_PKG = "org.apache.bookkeeper.client."

#: Accepted names (upstream class names, their simple names, our class names, short forms) -> class.
POLICY_CLASSES: dict[str, type[PlacementPolicy]] = {}
for _cls, _shorts in (
    (DefaultPolicy, ("default", "random", "DefaultEnsemblePlacementPolicy")),
    (RackawarePolicy, ("rackaware", "rack", "RackawareEnsemblePlacementPolicy",
                       "RackawareEnsemblePlacementPolicyImpl")),
    (RegionawarePolicy, ("regionaware", "region", "RegionAwareEnsemblePlacementPolicy")),
    (ZoneawarePolicy, ("zoneaware", "zone", "ZoneawareEnsemblePlacementPolicy",
                       "ZoneawareEnsemblePlacementPolicyImpl")),
):
    POLICY_CLASSES[_cls.upstream_class] = _cls
    POLICY_CLASSES[_cls.__name__] = _cls
    for _s in _shorts:
        POLICY_CLASSES[_s] = _cls
        if _s[0].isupper():
            POLICY_CLASSES[_PKG + _s] = _cls


def policy_from_name(name: str | None, config: PlacementConfig | None = None, resolver: Resolver | None = None,
                     local_location: str | None = None, rng: random.Random | None = None,
                     **kwargs: Any) -> PlacementPolicy:
    """Build the policy named by an upstream class name (``org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy``
    ...), its simple name, our class name or a short form (``rackaware``, ``regionaware``, ``zoneaware``,
    ``default``; case-insensitive). ``None`` uses ``config.ensemble_placement_policy`` (upstream default:
    rack-aware). Extra keyword args go to the policy constructor (``clock``, ``default_rack`` ...).

    Raises:
        ConfigError: unknown policy name (names the ``ensemblePlacementPolicy`` key).
    """
    config = config or PlacementConfig()
    key = (name or config.ensemble_placement_policy).strip()
    cls = POLICY_CLASSES.get(key)
    if cls is None:
        lowered = {k.lower(): v for k, v in POLICY_CLASSES.items()}
        cls = lowered.get(key.lower())
    if cls is None:
        raise ConfigError(f"config key ensemblePlacementPolicy: unknown placement policy {key!r}")
    return cls(config, resolver, local_location, rng, **kwargs)
