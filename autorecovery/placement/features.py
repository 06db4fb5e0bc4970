"""Feature switches for placement (upstream ``FeatureProvider`` / ``SettableFeature``). PURE.

Upstream's region-aware policy reads two runtime switches from a feature provider:

* the *disable durability* feature, named by ``reppDisableDurabilityFeatureName`` (default
  ``repp_disable_durability_enforcement``), looked up in the root scope: while it is on, new ensembles
  need only one region for durability and ``replace_bookie`` stops enforcing durability;
* the *disallow placement in region* feature, named by ``reppDisallowBookiePlacementInRegionFeatureName``
  (unset by default = never looked up), looked up in each region's scope: while it is on for a region,
  no new bookie is chosen there.

:class:`FeatureSwitches` is the settable provider: ``set(name, on, scope=region)`` flips a switch at run
time and every later placement call sees it (tests and embedding programs use it, as upstream's tests use
``SettableFeatureProvider``). Daemons and the command line build one from the static keys
``reppDisallowedRegions`` and ``reppDisableDurability`` (ours) through :meth:`FeatureSwitches.from_config`.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["FeatureSwitches"]


class FeatureSwitches:
    """On/off switches keyed by ``(scope, name)``; ``scope`` is ``""`` for the root (upstream feature scopes).

    ``version`` grows on every change that flips a value, so policies can drop cached judgements.
    """

    def __init__(self) -> None:
        self._on: set[tuple[str, str]] = set()
        self.version = 0

    def set(self, name: str, on: bool = True, scope: str = "") -> None:
        """Turn the feature ``name`` (in ``scope``; a region name for per-region features) on or off.

        Raises:
            ValueError: ``name`` is empty.
        """
        if not name:
            raise ValueError("feature name must not be empty")
        key = (scope, name)
        if on and key not in self._on:
            self._on.add(key)
            self.version += 1
        elif not on and key in self._on:
            self._on.discard(key)
            self.version += 1

    def is_on(self, name: str | None, scope: str = "") -> bool:
        """Whether the feature is on (upstream ``Feature.isAvailable()``); an unset ``name`` is always off."""
        return bool(name) and (scope, name) in self._on

    def scopes_with(self, name: str | None) -> frozenset[str]:
        """Every scope in which ``name`` is on."""
        if not name:
            return frozenset()
        return frozenset(s for s, n in self._on if n == name)

    @classmethod
    def from_config(cls, disable_durability_name: str, disable_durability: bool,
                    disallow_name: str | None, disallowed_regions: Iterable[str] | None) -> FeatureSwitches:
        """Switches preset from static config (``reppDisableDurability``, ``reppDisallowedRegions``).

        The disallowed regions are set under ``disallow_name`` when that upstream key is configured, else
        under the fixed name ``disallowBookiePlacementInRegion`` (the policy then looks that name up).
        """
        f = cls()
        if disable_durability:
            f.set(disable_durability_name, True)
        for region in disallowed_regions or ():
            f.set(disallow_name or DEFAULT_DISALLOW_FEATURE, True, scope=region)
        f.version = 0
        return f


#: Feature name used for ``reppDisallowedRegions`` when ``reppDisallowBookiePlacementInRegionFeatureName`` is unset.
DEFAULT_DISALLOW_FEATURE = "disallowBookiePlacementInRegion"
