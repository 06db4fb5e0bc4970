"""The metadata snapshot: Parquet tables and a manifest, written by ``autorecovery export`` (EDGE, files).

A snapshot directory holds::

    manifest.json        time (ms), cluster instance id, ledgers root, LAYOUT, placement config, counts
    ledgers.parquet      one row per ledger
    segments.parquet     one row per segment (ensemble as a list of bookie ids)
    bookies.parquet      one row per bookie (registered or only known by its cookie)
    markers.parquet      under-replication markers and unrecoverable records
    history.json         optional: the heal episodes of ``underreplication/history`` (``reports/healrate.py``)

Column meanings follow upstream's ``LedgerMetadataFormat`` (quorumSize = WQ ...). Writers append in
row groups (:class:`TableWriter`), so an export of a million ledgers never holds them all in memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from autorecovery.errors import AutoRecoveryError

LEDGERS = pa.schema([
    ("ledger_id", pa.int64()),
    ("state", pa.string()),            # OPEN | IN_RECOVERY | CLOSED
    ("ensemble_size", pa.int32()),
    ("write_quorum", pa.int32()),
    ("ack_quorum", pa.int32()),
    ("last_entry_id", pa.int64()),
    ("length", pa.int64()),            # bytes
    ("ctime", pa.int64()),             # ms since the epoch; 0 when the metadata has none (format v2)
    ("digest_type", pa.string()),
    ("managed_ledger", pa.string()),   # Pulsar's pulsar/managed-ledger custom metadata, "" when absent
    ("custom_metadata", pa.map_(pa.string(), pa.binary())),
    # OPEN / IN_RECOVERY only (null otherwise, and in snapshots written before these columns): the
    # highest last-add-confirmed the last segment's bookies answered at export, and the cumulative
    # length (bytes) recorded in that entry's header; null when no bookie answered
    ("lac", pa.int64()),
    ("lac_length", pa.int64()),
])
#: LEDGERS columns a snapshot may lack (written before they existed): read as null
OPTIONAL_LEDGER_COLUMNS = ("lac", "lac_length")
SEGMENTS = pa.schema([
    ("ledger_id", pa.int64()),
    ("first_entry_id", pa.int64()),
    ("last_entry_id", pa.int64()),     # inclusive; < first when the segment holds nothing
    ("ensemble", pa.list_(pa.string())),
])
BOOKIES = pa.schema([
    ("bookie_id", pa.string()),
    ("state", pa.string()),            # writable | readonly | gone
    ("location", pa.string()),         # network location as the configured resolver maps it
    ("rack", pa.string()),
    ("zone", pa.string()),
    ("region", pa.string()),
    ("free_bytes", pa.int64()),        # GET_BOOKIE_INFO; -1 when unknown
    ("total_bytes", pa.int64()),
])
MARKERS = pa.schema([
    ("ledger_id", pa.int64()),
    ("kind", pa.string()),             # underreplicated | unrecoverable
    ("replicas", pa.list_(pa.string())),
    ("ctime", pa.int64()),
])
TABLES = {"ledgers": LEDGERS, "segments": SEGMENTS, "bookies": BOOKIES, "markers": MARKERS}


class SnapshotError(AutoRecoveryError):
    """A snapshot directory is missing a table or its manifest, or a table has the wrong columns."""


class TableWriter:
    """Append rows (dicts) to one Parquet table, flushing a row group every ``batch_rows`` rows."""

    def __init__(self, path: Path, schema: pa.Schema, batch_rows: int = 65536) -> None:
        self.path = Path(path)
        self.schema = schema
        self.batch_rows = batch_rows
        self._rows: list[dict[str, Any]] = []
        self._writer = pq.ParquetWriter(self.path, schema, compression="zstd")
        self.count = 0

    def add(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.batch_rows:
            self.flush()

    def add_table(self, table: pa.Table) -> None:
        """Append a whole Arrow table with this writer's schema (columns it lacks are written as nulls)."""
        self.flush()
        for f in self.schema:
            if f.name not in table.column_names:
                table = table.append_column(f.name, pa.nulls(table.num_rows, f.type))
        self._writer.write_table(table.select(self.schema.names).cast(self.schema))
        self.count += table.num_rows

    def flush(self) -> None:
        if self._rows:
            self._writer.write_table(pa.Table.from_pylist(self._rows, schema=self.schema))
            self.count += len(self._rows)
            self._rows = []

    def close(self) -> None:
        self.flush()
        self._writer.close()


#: The snapshot format this version writes and reads (``format`` in manifest.json); a manifest without
#: the field is format 1 (written before the field existed). Raise it when a table's schema changes in a
#: way an older reader cannot take.
SNAPSHOT_FORMAT = 1


def write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` last (atomically), so a snapshot with a manifest is complete; it carries
    ``format`` = :data:`SNAPSHOT_FORMAT`."""
    tmp = Path(out) / "manifest.json.tmp"
    tmp.write_text(json.dumps({"format": SNAPSHOT_FORMAT, **manifest}, indent=2, sort_keys=True))
    tmp.replace(Path(out) / "manifest.json")


def read_manifest(snapshot: Path) -> dict[str, Any]:
    """The snapshot's manifest.

    Raises:
        SnapshotError: no ``manifest.json`` (an interrupted export) or a table file missing; names the path.
    """
    p = Path(snapshot) / "manifest.json"
    if not p.exists():
        raise SnapshotError(f"{p} does not exist: not a snapshot, or the export did not finish")
    for name in TABLES:
        t = Path(snapshot) / f"{name}.parquet"
        if not t.exists():
            raise SnapshotError(f"snapshot {snapshot} has no {t.name}")
    return json.loads(p.read_text())
