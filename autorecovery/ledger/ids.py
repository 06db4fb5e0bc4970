"""Bookie ids and ledger-id ↔ znode path mapping (PURE).

Source: upstream ``HierarchicalLedgerManager`` / ``LongHierarchicalLedgerManager`` and
``ZkLedgerUnderreplicationManager``. Paths are relative to the ledgers root (``/ledgers`` by default,
``zkLedgersRootPath``).
"""

from __future__ import annotations

import re

#: Ledger ids below this use the legacy 2-4-4 split; ids at or above use the long 3-4-4-4-4 split.
LONG_ID_THRESHOLD = 2**31 - 1
MAX_LEDGER_ID = 2**63 - 1

_BOOKIE_ID_RE = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:(\d{1,5})$")
_UR_LEAF_RE = re.compile(r"urL(\d+)$")


def validate_bookie_id(bookie_id: str) -> str:
    """Return ``bookie_id`` if it looks like ``host:port``.

    Raises:
        ValueError: naming the bookie id when it is not ``host:port`` with a port in 1..65535.
    """
    m = _BOOKIE_ID_RE.match(bookie_id or "")
    if not m or not (0 < int(m.group(1)) < 65536):
        raise ValueError(f"bad bookie id {bookie_id!r}: expected host:port")
    return bookie_id


def bookie_host(bookie_id: str) -> str:
    """The host part of a ``host:port`` bookie id."""
    return bookie_id.rsplit(":", 1)[0]


def validate_ledger_id(ledger_id: int) -> int:
    """Return ``ledger_id`` if it is a valid non-negative 63-bit id.

    Raises:
        ValueError: naming the ledger id otherwise.
    """
    if not isinstance(ledger_id, int) or ledger_id < 0 or ledger_id > MAX_LEDGER_ID:
        raise ValueError(f"bad ledger id {ledger_id!r}: expected 0..2^63-1")
    return ledger_id


def ledger_path(root: str, ledger_id: int, long_only: bool = False) -> str:
    """Znode path of a ledger's metadata.

    ``HierarchicalLedgerManager`` (``long_only`` false, upstream ``getHybridHierarchicalLedgerPath``):
    ``id < 2^31-1`` is padded to 10 digits and split 2-4-4 (ledger 1 → ``/ledgers/00/0000/L0001``),
    larger ids are padded to 19 digits and split 3-4-4-4-4. ``LongHierarchicalLedgerManager``
    (``long_only`` true, upstream ``getLongHierarchicalLedgerPath``): every id is split 3-4-4-4-4
    (ledger 1 → ``/ledgers/000/0000/0000/0000/L0001``).

    Raises:
        ValueError: naming the ledger id when it is not 0..2^63-1.
    """
    validate_ledger_id(ledger_id)
    if ledger_id < LONG_ID_THRESHOLD and not long_only:
        d = f"{ledger_id:010d}"
        return f"{root}/{d[0:2]}/{d[2:6]}/L{d[6:10]}"
    d = f"{ledger_id:019d}"
    return f"{root}/{d[0:3]}/{d[3:7]}/{d[7:11]}/{d[11:15]}/L{d[15:19]}"


def ledger_id_from_path(root: str, path: str) -> int:
    """Inverse of :func:`ledger_path`.

    Raises:
        ValueError: naming the path when it is not a ledger metadata path under ``root``.
    """
    if not path.startswith(root + "/"):
        raise ValueError(f"{path!r} is not under ledgers root {root!r}")
    parts = path[len(root) + 1 :].split("/")
    if not parts[-1].startswith("L"):
        raise ValueError(f"{path!r} is not a ledger metadata znode")
    parts[-1] = parts[-1][1:]
    lens = [len(p) for p in parts]
    if lens not in ([2, 4, 4], [3, 4, 4, 4, 4]) or not all(p.isdigit() for p in parts):
        raise ValueError(f"{path!r} is not a hierarchical ledger path")
    return int("".join(parts))


def is_ledger_level_name(name: str) -> bool:
    """True for an intermediate level of the ledger tree (2, 3 or 4 decimal digits)."""
    return name.isdigit() and len(name) in (2, 3, 4)


def is_ledger_leaf_name(name: str) -> bool:
    """True for a ledger metadata leaf (``L`` + 4 digits)."""
    return len(name) == 5 and name[0] == "L" and name[1:].isdigit()


def ur_marker_path(ur_ledgers_root: str, ledger_id: int) -> str:
    """Under-replication marker path, upstream ZkLedgerUnderreplicationManager.getUrLedgerZnode.

    Four lowercase 4-hex-digit levels of the 64-bit id, then ``urL`` + the decimal id padded to 10
    digits: ledger 1 → ``<root>/0000/0000/0000/0001/urL0000000001``.
    """
    validate_ledger_id(ledger_id)
    return (
        f"{ur_ledgers_root}/{(ledger_id >> 48) & 0xFFFF:04x}/{(ledger_id >> 32) & 0xFFFF:04x}"
        f"/{(ledger_id >> 16) & 0xFFFF:04x}/{ledger_id & 0xFFFF:04x}/{ur_leaf_name(ledger_id)}"
    )


def ur_leaf_name(ledger_id: int) -> str:
    """``urL`` + decimal ledger id zero-padded to 10 digits (the marker and lock leaf name)."""
    return f"urL{ledger_id:010d}"


def ledger_id_from_ur_leaf(name: str) -> int:
    """Parse a ``urL<digits>`` leaf (marker or lock) back to the ledger id.

    Raises:
        ValueError: naming the leaf when it does not match ``urL(\\d+)$``.
    """
    m = _UR_LEAF_RE.search(name)
    if not m:
        raise ValueError(f"{name!r} is not an under-replication leaf (urL<id>)")
    return int(m.group(1))
