"""Network locations and the bookie topology tree (PURE).

Upstream ``NetworkTopologyImpl`` / ``NodeBase`` / ``NetworkTopology`` constants. A network location is a
path such as ``/rack``, ``/region/rack`` or ``/zone/upgradeDomain``. Leaves are bookies; a leaf's parent
path (its full location string) is its *rack*, so racks are compared as full paths, never by their last
component only.

All leaves must sit at the same depth: adding a bookie whose location depth differs from the existing
leaves is refused (upstream logs an error and leaves the bookie out of the topology; so do we, the
caller records it in ``rejected``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator

__all__ = [
    "ROOT",
    "DEFAULT_RACK",
    "DEFAULT_REGION",
    "DEFAULT_REGION_AND_RACK",
    "DEFAULT_ZONE",
    "DEFAULT_UPGRADEDOMAIN",
    "DEFAULT_ZONE_AND_UPGRADEDOMAIN",
    "normalize_location",
    "location_depth",
    "location_parts",
    "NetworkTopology",
]

ROOT = ""
DEFAULT_RACK = "/default-rack"
DEFAULT_REGION = "/default-region"
DEFAULT_REGION_AND_RACK = "/default-region/default-rack"
DEFAULT_ZONE = "/default-zone"
DEFAULT_UPGRADEDOMAIN = "/default-upgradedomain"
DEFAULT_ZONE_AND_UPGRADEDOMAIN = "/default-zone/default-upgradedomain"


def normalize_location(location: str) -> str:
    """Canonical form of a network location: trailing ``/`` stripped (upstream ``NodeBase.normalize``).

    Raises:
        ValueError: a non-empty location that does not start with ``/``.
    """
    loc = location.strip()
    if not loc:
        return ROOT
    if not loc.startswith("/"):
        raise ValueError(f"network location {location!r} does not start with '/'")
    while len(loc) > 1 and loc.endswith("/"):
        loc = loc[:-1]
    return "" if loc == "/" else loc


def location_parts(location: str) -> list[str]:
    """Components of a location: ``/region/rack`` -> ``['region', 'rack']``."""
    return [p for p in location.split("/") if p]


def location_depth(location: str) -> int:
    """Number of components of a location (``/r1`` -> 1, ``/region/rack`` -> 2)."""
    return len(location_parts(location))


def _under(rack: str, scope: str) -> bool:
    return rack == scope or rack.startswith(scope + "/")


class NetworkTopology:
    """Bookies (leaves) grouped by rack (full location path), with O(1) add/remove and random leaf picks.

    Scopes (upstream ``getLeaves``): ``""`` is the whole cluster; a path is every leaf under that inner node
    (a rack, or a region when the path is ``/region``); ``"~a,b"`` is every leaf not under any listed path
    (``"~"`` with an empty list excludes everything, as upstream).
    """

    __slots__ = ("_racks", "_rack_of", "_depth", "_all", "_pos")

    def __init__(self) -> None:
        self._racks: dict[str, list[str]] = {}
        self._rack_of: dict[str, str] = {}
        self._depth: int | None = None
        self._all: list[str] = []
        self._pos: dict[str, int] = {}

    # -- membership -------------------------------------------------------------------------------
    def add(self, bookie: str, rack: str) -> bool:
        """Add (or move) ``bookie`` under ``rack``. Returns False (and changes nothing) on a depth mismatch."""
        depth = location_depth(rack)
        if bookie in self._rack_of:
            if self._rack_of[bookie] == rack:
                return True
            self.remove(bookie)
        if self._depth is not None and self._rack_of and depth != self._depth:
            return False
        self._depth = depth
        self._racks.setdefault(rack, []).append(bookie)
        self._rack_of[bookie] = rack
        self._pos[bookie] = len(self._all)
        self._all.append(bookie)
        return True

    def remove(self, bookie: str) -> bool:
        """Remove ``bookie``; returns False if it was not present."""
        rack = self._rack_of.pop(bookie, None)
        if rack is None:
            return False
        leaves = self._racks[rack]
        leaves.remove(bookie)
        if not leaves:
            del self._racks[rack]
        i = self._pos.pop(bookie)
        last = self._all.pop()
        if last != bookie:
            self._all[i] = last
            self._pos[last] = i
        if not self._rack_of:
            self._depth = None
        return True

    def copy(self) -> NetworkTopology:
        t = NetworkTopology()
        t._racks = {r: list(b) for r, b in self._racks.items()}
        t._rack_of = dict(self._rack_of)
        t._depth = self._depth
        t._all = list(self._all)
        t._pos = dict(self._pos)
        return t

    # -- queries ----------------------------------------------------------------------------------
    def __contains__(self, bookie: object) -> bool:
        return bookie in self._rack_of

    def __len__(self) -> int:
        return len(self._rack_of)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rack_of)

    @property
    def depth(self) -> int | None:
        """Depth of every leaf's rack path, or None when empty."""
        return self._depth

    def rack_of(self, bookie: str) -> str | None:
        return self._rack_of.get(bookie)

    def racks(self) -> list[str]:
        """Racks holding at least one bookie (upstream ``numberOfRacks`` counts these, default rack included)."""
        return list(self._racks)

    @property
    def num_racks(self) -> int:
        return len(self._racks)

    def bookies_in_rack(self, rack: str) -> list[str]:
        """Bookies whose rack is exactly ``rack`` (a live list: do not mutate)."""
        return self._racks.get(rack, [])

    def racks_in_scope(self, scope: str) -> list[str]:
        """Racks selected by a scope string (see the class docstring)."""
        if scope == ROOT:
            return list(self._racks)
        if scope.startswith("~"):
            excluded = [s for s in scope[1:].split(",") if s]
            if not excluded:
                return []
            return [r for r in self._racks if not any(_under(r, s) for s in excluded)]
        return [r for r in self._racks if _under(r, scope)]

    def leaves(self, scope: str = ROOT) -> list[str]:
        """Bookies selected by a scope string (see the class docstring)."""
        out: list[str] = []
        for r in self.racks_in_scope(scope):
            out.extend(self._racks[r])
        return out

    def random_bookie(self, rng: random.Random) -> str | None:
        """A uniformly random bookie of the whole topology, in O(1) (None when empty)."""
        if not self._all:
            return None
        return self._all[rng.randrange(len(self._all))]

    def random_leaf(self, racks: Iterable[str], rng: random.Random) -> str | None:
        """A uniformly random bookie among the given racks (None if they hold none)."""
        racks = [r for r in racks if r in self._racks]
        total = sum(len(self._racks[r]) for r in racks)
        if total == 0:
            return None
        i = rng.randrange(total)
        for r in racks:
            n = len(self._racks[r])
            if i < n:
                return self._racks[r][i]
            i -= n
        return None  # pragma: no cover
