"""The cluster's ledger layout: the ``<ledgers root>/LAYOUT`` znode (PURE).

Upstream ``LedgerLayout`` writes two lines: the layout format version, then
``<ledger manager factory class>:<manager version>``, e.g.
``2\\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1``. Format version 1 (before 4.2)
named the manager by type (``flat:1``, ``hierarchical:1``). Every process that reads or writes ledger
metadata must agree on the manager, because it decides the znode path of every ledger: a process that
guessed wrong would see no ledgers at all (and an auditor would audit nothing). So an unknown or
unsupported layout is refused, naming the znode, instead of guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from autorecovery.errors import CompatibilityError

#: Highest layout format version upstream writes (LedgerLayout.LAYOUT_FORMAT_VERSION).
LAYOUT_FORMAT_VERSION = 2
HIERARCHICAL = "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"
#: Manager factories whose ledger paths this version lays out (and the manager version it knows).
SUPPORTED: dict[str, int] = {HIERARCHICAL: 1}


@dataclass(frozen=True)
class Layout:
    """A parsed ``LAYOUT``: format version, manager factory class (fully qualified), manager version."""

    format_version: int
    manager_factory: str
    manager_version: int


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
    if len(lines) != 2 or not lines[0].isdigit():
        raise CompatibilityError(f"{path}: cannot parse LAYOUT {text!r} (expected '<format version>\\n"
                                 f"<ledger manager factory>:<version>')")
    fmt = int(lines[0])
    if fmt > LAYOUT_FORMAT_VERSION:
        raise CompatibilityError(f"{path}: LAYOUT format version {fmt} is newer than this version understands "
                                 f"({LAYOUT_FORMAT_VERSION})")
    name, sep, ver = lines[1].rpartition(":")
    if not sep or not name or not ver.isdigit():
        raise CompatibilityError(f"{path}: cannot parse the ledger manager {lines[1]!r} in LAYOUT "
                                 f"(expected '<class>:<version>')")
    return Layout(fmt, name, int(ver))


def require_supported(layout: Layout, path: str) -> Layout:
    """Return ``layout`` when its ledger manager is one this version lays out ledger paths for.

    Raises:
        CompatibilityError: a format-1 layout (pre-4.2 manager types), or another manager factory or
            manager version than :data:`SUPPORTED`; names ``path`` and what was found.
    """
    if layout.format_version < 2:
        raise CompatibilityError(f"{path}: LAYOUT format version {layout.format_version} ({layout.manager_factory}) "
                                 f"is a pre-4.2 layout; only {HIERARCHICAL} is supported")
    want = SUPPORTED.get(layout.manager_factory)
    if want is None:
        raise CompatibilityError(f"{path}: ledger manager {layout.manager_factory} is not supported by this version "
                                 f"(supported: {', '.join(SUPPORTED)}); refusing to guess ledger paths")
    if layout.manager_version != want:
        raise CompatibilityError(f"{path}: {layout.manager_factory} version {layout.manager_version} is not "
                                 f"supported (expected {want})")
    return layout
