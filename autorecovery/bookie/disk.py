"""Disk space of a bookie's data directory and the writable/read-only decision.

Upstream: ``LedgerDirsMonitor`` checks every ``diskCheckInterval`` ms (default 10000) whether ledger
dirs are fuller than ``diskUsageThreshold`` (default 0.95); a full bookie turns read-only (it
re-registers under ``available/readonly``) and turns writable again once usage falls below
``diskUsageLwmThreshold`` (default 0.90). ``GET_BOOKIE_INFO`` reports total and free bytes of the
ledger dirs. We add an absolute floor, ``readonly_free_bytes`` (ours): read-only while fewer than that
many bytes are free.

Test hook (ours): disk figures can be faked so tests can "fill" a disk without filling it.

* ``--fake-disk-total`` / ``--fake-disk-free`` (bytes) fix the figures for the process' lifetime.
* A JSON file ``<data_dir>/fake-disk.json``, e.g. ``{"total_bytes": 1000000, "free_bytes": 10}``, read
  on every probe, overrides both (either key may be left out). Rewrite it atomically (write a temporary
  file, then ``os.replace``); delete it to return to the real figures. A file that does not parse is
  ignored (the real figures are used) rather than crashing the bookie.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

FAKE_DISK_FILE = "fake-disk.json"


@dataclass(frozen=True, slots=True)
class DiskUsage:
    """Space of the file system holding the data directory, in bytes."""

    total_bytes: int
    free_bytes: int

    @property
    def used_fraction(self) -> float:
        """Fraction of the total in use (0.0 when the total is unknown/zero)."""
        if self.total_bytes <= 0:
            return 0.0
        return max(0.0, min(1.0, 1.0 - self.free_bytes / self.total_bytes))


class DiskProbe:
    """Measures a data directory's disk space: ``os.statvfs`` unless faked (see the module docstring).

    Args:
        data_dir: the bookie's data directory.
        fake_total_bytes: fixed total in bytes instead of the real one (None = real).
        fake_free_bytes: fixed free bytes instead of the real ones (None = real).

    ``probe()`` does a syscall and may read a small file: call it off the event loop
    (``asyncio.to_thread``).
    """

    def __init__(self, data_dir: Path, fake_total_bytes: int | None = None, fake_free_bytes: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.fake_total_bytes = fake_total_bytes
        self.fake_free_bytes = fake_free_bytes

    def probe(self) -> DiskUsage:
        """Current total and free bytes (free = bytes available to unprivileged users, as Java's
        ``File.getUsableSpace`` that upstream uses).

        Raises:
            OSError: when the data directory cannot be stat'ed.
        """
        total = self.fake_total_bytes
        free = self.fake_free_bytes
        fake = self._read_fake_file()
        total = fake.get("total_bytes", total)
        free = fake.get("free_bytes", free)
        if total is None or free is None:
            st = os.statvfs(self.data_dir)
            if total is None:
                total = st.f_blocks * st.f_frsize
            if free is None:
                free = st.f_bavail * st.f_frsize
        return DiskUsage(int(total), int(free))

    def _read_fake_file(self) -> dict[str, int]:
        path = self.data_dir / FAKE_DISK_FILE
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(raw, dict):
            return {}
        return {k: int(v) for k, v in raw.items() if k in ("total_bytes", "free_bytes") and isinstance(v, int)}


def write_fake_disk(data_dir: Path, *, total_bytes: int | None = None, free_bytes: int | None = None) -> None:
    """Atomically write ``<data_dir>/fake-disk.json`` (the test hook); both None removes the file."""
    path = Path(data_dir) / FAKE_DISK_FILE
    if total_bytes is None and free_bytes is None:
        path.unlink(missing_ok=True)
        return
    doc = {}
    if total_bytes is not None:
        doc["total_bytes"] = int(total_bytes)
    if free_bytes is not None:
        doc["free_bytes"] = int(free_bytes)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


@dataclass(frozen=True, slots=True)
class DiskThresholds:
    """When a bookie turns read-only and back (upstream ``diskUsageThreshold``/``diskUsageLwmThreshold``).

    Attributes:
        usage_threshold: turn read-only when the used fraction reaches this (0 < x <= 1; upstream 0.95).
        usage_lwm_threshold: turn writable again only when the used fraction is below this
            (upstream 0.90; must be <= ``usage_threshold``).
        readonly_free_bytes: ours: also read-only while fewer than this many bytes are free (0 = off).
        force_readonly: always read-only (upstream ``forceReadOnlyBookie``).
    """

    usage_threshold: float = 0.95
    usage_lwm_threshold: float = 0.90
    readonly_free_bytes: int = 0
    force_readonly: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.usage_threshold <= 1.0:
            raise ValueError(f"diskUsageThreshold must be in (0, 1], got {self.usage_threshold}")
        if not 0.0 < self.usage_lwm_threshold <= self.usage_threshold:
            raise ValueError(
                f"diskUsageLwmThreshold must be in (0, diskUsageThreshold={self.usage_threshold}], "
                f"got {self.usage_lwm_threshold}"
            )
        if self.readonly_free_bytes < 0:
            raise ValueError(f"readonly free bytes must be >= 0, got {self.readonly_free_bytes}")

    def readonly(self, usage: DiskUsage, currently_readonly: bool) -> bool:
        """The read-only decision for ``usage`` given the current state (hysteresis between the two
        usage thresholds; the free-bytes floor has none)."""
        if self.force_readonly:
            return True
        if usage.free_bytes < self.readonly_free_bytes:
            return True
        if currently_readonly:
            return usage.used_fraction >= self.usage_lwm_threshold
        return usage.used_fraction >= self.usage_threshold
