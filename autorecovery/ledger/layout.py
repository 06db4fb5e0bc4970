"""The cluster's ledger layout: the ``<ledgers root>/LAYOUT`` znode (PURE).

Upstream ``LedgerLayout`` writes two lines: the layout format version, then
``<ledger manager factory class>:<manager version>``, e.g.
``2\\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1``. Format version 1 (before 4.2)
named the manager by type (``flat:1``, ``hierarchical:1``). Every process that reads or writes ledger
metadata must agree on the manager, because it decides the znode path of every ledger: a process that
guessed wrong would see no ledgers at all (and an auditor would audit nothing). So an unknown or
unsupported layout is refused, naming the znode, instead of guessed.

Supported managers (all keep metadata in ZooKeeper):

* ``HierarchicalLedgerManagerFactory`` (upstream's default; type name ``hierarchical``): ids below
  2^31-1 split 2-4-4, larger ids 3-4-4-4-4;
* ``LongHierarchicalLedgerManagerFactory`` (``longhierarchical``): every id split 3-4-4-4-4;
* ``LegacyHierarchicalLedgerManagerFactory`` (``legacyhierarchical``): 2-4-4 only (it cannot hold larger
  ids, so its paths are the hierarchical ones);
* a format-1 layout (before 4.2) naming the ``hierarchical`` type, as upstream reads it.

The flat manager and any other class are refused. A configuration that names a manager
(``metadataServiceUri``'s ``zk+<type>`` scheme, ``ledgerManagerFactoryClass``, ``ledgerManagerType``)
must agree with ``LAYOUT`` (upstream ``AbstractZkLedgerManagerFactory.newLedgerManagerFactory``:
"Configured layout ... does not match existing layout ..."); see :func:`require_matches`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autorecovery.errors import CompatibilityError

#: Highest layout format version upstream writes (LedgerLayout.LAYOUT_FORMAT_VERSION).
LAYOUT_FORMAT_VERSION = 2
HIERARCHICAL = "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"
LONG_HIERARCHICAL = "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory"
LEGACY_HIERARCHICAL = "org.apache.bookkeeper.meta.LegacyHierarchicalLedgerManagerFactory"
#: Manager factories whose ledger paths this version lays out (and the manager version it knows).
SUPPORTED: dict[str, int] = {HIERARCHICAL: 1, LONG_HIERARCHICAL: 1, LEGACY_HIERARCHICAL: 1}
#: Upstream's short type names (``NAME`` of each factory; the ``zk+<type>`` URI scheme part).
TYPE_NAMES: dict[str, str] = {"hierarchical": HIERARCHICAL, "longhierarchical": LONG_HIERARCHICAL,
                              "legacyhierarchical": LEGACY_HIERARCHICAL}


@dataclass(frozen=True)
class Layout:
    """A parsed ``LAYOUT``: format version, manager factory class (fully qualified), manager version."""

    format_version: int
    manager_factory: str
    manager_version: int

    @property
    def long_paths(self) -> bool:
        """True when every ledger path is split 3-4-4-4-4 (``LongHierarchicalLedgerManagerFactory``)."""
        return self.manager_factory == LONG_HIERARCHICAL

    @property
    def type_name(self) -> str:
        """Upstream's short name of the manager (``hierarchical``, ``longhierarchical``...)."""
        for name, cls in TYPE_NAMES.items():
            if cls == self.manager_factory:
                return name
        return self.manager_factory


def layout_data(manager_factory: str = HIERARCHICAL) -> bytes:
    """The ``LAYOUT`` bytes upstream ``LedgerLayout.serialize`` writes for a new cluster.

    Raises:
        CompatibilityError: ``manager_factory`` is not one of :data:`SUPPORTED`.
    """
    if manager_factory not in SUPPORTED:
        raise CompatibilityError(f"cannot format a cluster with ledger manager {manager_factory} "
                                 f"(supported: {', '.join(SUPPORTED)})")
    return f"{LAYOUT_FORMAT_VERSION}\n{manager_factory}:{SUPPORTED[manager_factory]}".encode()


def manager_from_config(name: str | None, key: str) -> str | None:
    """The manager factory class a configuration value asks for, or None for "whatever LAYOUT says".

    ``name`` is a fully qualified factory class (``ledgerManagerFactoryClass``), an upstream type name
    (``hierarchical``, ``longhierarchical``, ``legacyhierarchical``; ``ledgerManagerType`` or the
    ``zk+<type>`` URI scheme), or ``null``/empty (no preference, upstream ``zk+null``).

    Raises:
        CompatibilityError: naming ``key`` when it names a manager this version does not lay out
            (``flat``, ``ms``, another class).
    """
    if name is None or not name.strip() or name.strip().lower() == "null":
        return None
    n = name.strip()
    if n in SUPPORTED:
        return n
    if n.lower() in TYPE_NAMES:
        return TYPE_NAMES[n.lower()]
    raise CompatibilityError(f"{key}={name}: ledger manager {name!r} is not supported "
                             f"(supported: {', '.join(TYPE_NAMES)} or their factory classes)")


def require_matches(layout: Layout, configured: str | None, key: str, path: str) -> Layout:
    """Return ``layout`` when the configured manager (if any) is the one ``LAYOUT`` names.

    Raises:
        CompatibilityError: "Configured layout <key> ... does not match existing layout ..." naming the
            key, the value and the znode (upstream refuses the same way; a guess would show an empty
            cluster).
    """
    if configured is not None and configured != layout.manager_factory:
        raise CompatibilityError(
            f"configured ledger manager {configured} ({key}) does not match the existing layout "
            f"{layout.manager_factory} in {path}; fix {key} (e.g. zk+{layout.type_name}://...)")
    return layout


#: a LAYOUT number: ASCII decimal digits, at most 18 (fits a Java long, as upstream parses it)
_DECIMAL = re.compile(r"[0-9]{1,18}")


def parse_layout(data: bytes, path: str) -> Layout:
    """Parse the ``LAYOUT`` znode's data (upstream ``LedgerLayout.parseLayout``).

    Raises:
        CompatibilityError: not UTF-8, not two lines, a format version newer than
            :data:`LAYOUT_FORMAT_VERSION`, or a manager line without ``class:version``; names ``path``.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CompatibilityError(f"{path}: LAYOUT is not UTF-8 text ({exc})") from exc
    lines = [ln.strip() for ln in text.strip().split("\n")]
    # ASCII digits only and a bounded length: str.isdigit() also accepts "²" or "١", which int()
    # refuses, and int() refuses more than 4300 digits (both used to escape as ValueError)
    if len(lines) != 2 or not _DECIMAL.fullmatch(lines[0]):
        raise CompatibilityError(f"{path}: cannot parse LAYOUT {text[:200]!r} (expected '<format version>\\n"
                                 f"<ledger manager factory>:<version>')")
    fmt = int(lines[0])
    if fmt > LAYOUT_FORMAT_VERSION:
        raise CompatibilityError(f"{path}: LAYOUT format version {fmt} is newer than this version understands "
                                 f"({LAYOUT_FORMAT_VERSION})")
    name, sep, ver = lines[1].rpartition(":")
    if not sep or not name or not _DECIMAL.fullmatch(ver):
        raise CompatibilityError(f"{path}: cannot parse the ledger manager {lines[1][:200]!r} in LAYOUT "
                                 f"(expected '<class>:<version>')")
    return Layout(fmt, name, int(ver))


def require_supported(layout: Layout, path: str) -> Layout:
    """Return ``layout`` when its ledger manager is one this version lays out ledger paths for.

    Raises:
        CompatibilityError: a format-1 layout (pre-4.2 manager types), or another manager factory or
            manager version than :data:`SUPPORTED`; names ``path`` and what was found.
    """
    if layout.format_version < 2:
        # pre-4.2 layouts name the manager by type; upstream maps "hierarchical" to its factory
        if layout.manager_factory == "hierarchical":
            return Layout(layout.format_version, HIERARCHICAL, layout.manager_version)
        raise CompatibilityError(f"{path}: LAYOUT format version {layout.format_version} names the "
                                 f"{layout.manager_factory!r} ledger manager; only 'hierarchical' is supported "
                                 "(the flat manager is not)")
    want = SUPPORTED.get(layout.manager_factory)
    if want is None:
        raise CompatibilityError(f"{path}: ledger manager {layout.manager_factory} is not supported by this version "
                                 f"(supported: {', '.join(SUPPORTED)}); refusing to guess ledger paths")
    if layout.manager_version != want:
        raise CompatibilityError(f"{path}: {layout.manager_factory} version {layout.manager_version} is not "
                                 f"supported (expected {want})")
    return layout
