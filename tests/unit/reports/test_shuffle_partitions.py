"""Shuffle partitions of the report (``build.shuffle_partitions``): a partition is one cached block of the
ledger view, read back whole onto the JVM heap after a spill, so its size must not grow with the
snapshot (10M ledgers at 500k per partition ran a 2 GiB heap out of memory)."""

from autorecovery.reports.spark_io import LEDGERS_PER_PARTITION, shuffle_partitions


def manifest(ledgers: int | None) -> dict:
    return {"counts": {"ledgers": ledgers}} if ledgers is not None else {}


def test_small_snapshots_get_eight_partitions():
    assert [shuffle_partitions(manifest(n)) for n in (None, 0, 1, 1_000_000)] == [8, 8, 8, 8]


def test_no_partition_holds_more_than_a_million_ledger_snapshot_does():
    assert LEDGERS_PER_PARTITION <= 1_000_000 // 8
    for n in (1_000_001, 4_000_000, 10_000_000, 123_456_789):
        parts = shuffle_partitions(manifest(n))
        assert -(-n // parts) <= LEDGERS_PER_PARTITION, n
    assert shuffle_partitions(manifest(10_000_000)) == 80


def test_snapshots_over_a_million_ledgers_keep_their_blocks_on_disk():
    # a memory level reads a spilled block back whole onto the heap (OutOfMemoryError at 10M ledgers)
    from autorecovery.reports.spark_io import storage_level

    assert storage_level(manifest(None)) == "MEMORY_AND_DISK"
    assert storage_level(manifest(1_000_000)) == "MEMORY_AND_DISK"
    assert storage_level(manifest(1_000_001)) == "DISK_ONLY"
    assert storage_level(manifest(10_000_000)) == "DISK_ONLY"
