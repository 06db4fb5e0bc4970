"""Synthetic snapshots for tests and benchmarks (``autorecovery export --synthetic``).

Realistic enough to exercise every report: Pulsar-like topic names in ``pulsar/managed-ledger``
custom metadata (a few tenants, namespaces, many topics with a skewed share of ledgers), skewed ledger
sizes (log-normal), ctime spread over ``--days`` days, rack-aware ensembles (E3/WQ2/AQ2 mostly, some
E2/WQ2/AQ2 and E5/WQ3/AQ2), a fraction of ledgers with a second segment (an ensemble change), a
fraction of open ledgers, and ``--violations`` of closed ensembles placed in a single rack (placement
violations for BP-54).

Every column of a batch is drawn with numpy and handed to Arrow whole (no per-ledger Python): a million
ledgers took 1.6 s of CPU (6.8 s of wall time with a load average of 13 on 2 cores). Batches of ``batch``
ledgers are appended to the Parquet files as they are made (one row group each), so memory is bounded by
the batch, not by ``ledgers`` (peak RSS 260 MB at 200k ledgers, 294 MB at 1M). The same seed and batch
give the same snapshot.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa

from autorecovery.reports.snapshot import BOOKIES, LEDGERS, MARKERS, SEGMENTS, TableWriter, write_manifest

DAY_MS = 86_400_000
SHAPES = np.array([(3, 2, 2), (2, 2, 2), (5, 3, 2)], dtype=np.int64)
SHAPE_P = np.array([0.8, 0.15, 0.05])
#: the custom metadata key Pulsar's managed ledger writes
ML_KEY = "pulsar/managed-ledger"


def bookie_names(bookies: int) -> list[str]:
    """``10.<rack-ish>.<i>.<j>:3181`` style ids, unique."""
    return [f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}:3181" for i in range(bookies)]


def generate(out: Path, *, ledgers: int, bookies: int, racks: int, zones: int = 3, regions: int = 1,
             days: int = 180, violations: float = 0.02, open_fraction: float = 0.01,
             ensemble_changes: float = 0.05, seed: int = 1, now_ms: int = 1_780_000_000_000,
             batch: int = 200_000) -> dict:
    """Write a synthetic snapshot of ``ledgers`` ledgers on ``bookies`` bookies in ``racks`` racks to ``out``.

    Racks are spread round robin over ``zones`` zones and ``regions`` regions; bookie ``i`` is in rack
    ``i mod racks``. Ledgers are made ``batch`` at a time (memory grows with ``batch``, not ``ledgers``).
    Returns the manifest.

    Raises:
        ValueError: fewer racks than 2, or fewer bookies than 5 per the largest ensemble's needs.
    """
    if racks < 2 or bookies < 5 or bookies < racks:
        raise ValueError(f"need at least 2 racks and 5 bookies, and no more racks than bookies "
                         f"(got {racks} racks, {bookies} bookies)")
    if batch < 1:
        raise ValueError(f"batch must be at least 1 ledger (got {batch})")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = bookie_names(bookies)
    rack_of = np.arange(bookies) % racks
    # the bookies of rack r are members[first[r]:first[r] + count[r]]
    members = np.argsort(rack_of, kind="stable")
    count = np.bincount(rack_of, minlength=racks)
    first = np.cumsum(count) - count

    # -- bookies: most writable, a few read-only; disks 4-8 TB, fuller on a few racks
    total = rng.choice([4, 6, 8], size=bookies) * 10**12
    used_frac = np.clip(rng.normal(0.45, 0.12, size=bookies) + (rack_of % 7 == 0) * 0.2, 0.05, 0.97)
    rack = [f"rack-{r:03d}" for r in rack_of]
    region = [f"region-{r % regions}" for r in rack_of]
    bw = TableWriter(out / "bookies.parquet", BOOKIES)
    bw.add_table(pa.table({
        "bookie_id": names, "state": ["readonly" if i % 97 == 5 else "writable" for i in range(bookies)],
        "location": [f"/{g}/{r}" for g, r in zip(region, rack, strict=True)] if regions > 1 else [f"/{r}" for r in rack],
        "rack": rack, "zone": [f"zone-{r % zones}" for r in rack_of], "region": region,
        "free_bytes": (total * (1 - used_frac)).astype(np.int64), "total_bytes": total.astype(np.int64)}))
    bw.close()

    # -- topics: tenants/namespaces/topics with a Zipf-like share of ledgers
    topics = pa.array([f"tenant-{t % 5}/ns-{t % 17}/persistent/topic-{t}" for t in range(max(10, ledgers // 50))])
    weights = 1.0 / np.arange(1, len(topics) + 1) ** 0.8
    weights /= weights.sum()
    topic_bytes = topics.cast(pa.binary())
    name_arr = pa.array(names)

    lw = TableWriter(out / "ledgers.parquet", LEDGERS)
    sw = TableWriter(out / "segments.parquet", SEGMENTS)
    n_violations = n_open = 0
    for start in range(0, ledgers, batch):
        n = min(batch, ledgers - start)
        ids = np.arange(start, start + n, dtype=np.int64)
        shape = SHAPES[rng.choice(len(SHAPES), size=n, p=SHAPE_P)]
        E, WQ, AQ = shape[:, 0], shape[:, 1], shape[:, 2]
        entries = np.maximum(1, rng.lognormal(math.log(2000), 1.2, size=n).astype(np.int64))
        entry_size = rng.choice([512, 1024, 4096, 16384], size=n, p=[0.3, 0.4, 0.2, 0.1])
        ctime = now_ms - (rng.random(n) ** 1.5 * days * DAY_MS).astype(np.int64)
        is_open = rng.random(n) < open_fraction
        bad = (rng.random(n) < violations) & ~is_open
        changed = rng.random(n) < ensemble_changes
        topic = rng.choice(len(topics), size=n, p=weights)
        n_violations += int(bad.sum())
        n_open += int(is_open.sum())
        last = np.where(is_open, -1, entries - 1)
        lw.add_table(pa.table({
            "ledger_id": ids, "state": pa.array(["CLOSED", "OPEN"]).take(is_open.astype(np.int8)),
            "ensemble_size": E.astype(np.int32), "write_quorum": WQ.astype(np.int32),
            "ack_quorum": AQ.astype(np.int32), "last_entry_id": last,
            "length": np.where(is_open, 0, entries * entry_size), "ctime": ctime,
            "digest_type": pa.array(["CRC32C"]).take(np.zeros(n, np.int8)),
            "managed_ledger": topics.take(topic),
            "custom_metadata": pa.MapArray.from_arrays(
                np.arange(n + 1, dtype=np.int32), pa.array([ML_KEY]).take(np.zeros(n, np.int8)),
                topic_bytes.take(topic), type=LEDGERS.field("custom_metadata").type)}))
        sw.add_table(_segments(rng, ids, E, last, changed, bad, members, first, count, name_arr))
    lw.close()
    sw.close()
    mw = TableWriter(out / "markers.parquet", MARKERS)
    mw.close()
    manifest = {
        "time_ms": now_ms, "instance_id": f"synthetic-{seed}", "ledgers_root": "/ledgers",
        "layout": "2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1",
        "placement": {"ensemblePlacementPolicy": "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy",
                      "minNumRacksPerWriteQuorum": "2"},
        "counts": {"ledgers": ledgers, "bookies": bookies, "racks": racks, "open": n_open,
                   "single_rack_violations": n_violations},
        "source": "synthetic",
    }
    write_manifest(out, manifest)
    return manifest


def _segments(rng: np.random.Generator, ids: np.ndarray, E: np.ndarray, last: np.ndarray, changed: np.ndarray,
              bad: np.ndarray, members: np.ndarray, first: np.ndarray, count: np.ndarray,
              names: pa.Array) -> pa.Table:
    """The segments of a batch of ledgers, in ledger order: one each, two for a ``changed`` ledger with
    more than 11 entries (cut at a uniform entry in ``[1, last)``). A ``bad`` ledger's first segment has
    all ``E`` bookies in one random rack (when that rack has ``E`` bookies); every other ensemble is
    rack-aware (:func:`_spread`)."""
    split = changed & (last > 10)
    cut = np.zeros(len(ids), np.int64)
    cut[split] = rng.integers(1, last[split])
    nseg = 1 + split.astype(np.int64)
    head = np.cumsum(nseg) - nseg                    # each ledger's first segment
    seg_ledger = np.repeat(ids, nseg)
    seg_e = np.repeat(E, nseg)
    seg_first = np.zeros(len(seg_ledger), np.int64)
    seg_last = np.repeat(last, nseg)
    seg_first[head[split] + 1] = cut[split]
    seg_last[head[split]] = cut[split] - 1
    ens = np.full((len(seg_ledger), int(SHAPES[:, 0].max())), -1, np.int64)
    spread = np.ones(len(seg_ledger), bool)
    vi = head[bad]
    vr = rng.integers(len(count), size=len(vi))
    fits = count[vr] >= seg_e[vi]
    for e in np.unique(seg_e[vi][fits]):
        at = seg_e[vi] == e
        rows, rs = vi[fits & at], vr[fits & at]
        ens[rows, :e] = members[first[rs][:, None] + _distinct(rng, count[rs], int(e))]
        spread[rows] = False
    for e in np.unique(seg_e[spread]):
        rows = np.flatnonzero(spread & (seg_e == e))
        ens[rows, :e] = _spread(rng, len(rows), int(e), members, first, count)
    flat = ens[ens >= 0]                             # row-major: segment by segment, in ensemble order
    offsets = np.concatenate([[0], np.cumsum(seg_e)]).astype(np.int32)
    return pa.table({"ledger_id": seg_ledger, "first_entry_id": seg_first, "last_entry_id": seg_last,
                     "ensemble": pa.ListArray.from_arrays(offsets, names.take(flat))})


def _spread(rng: np.random.Generator, m: int, e: int, members: np.ndarray, first: np.ndarray,
            count: np.ndarray) -> np.ndarray:
    """``m`` rack-aware ensembles of ``e`` bookies (``m × e`` bookie indexes): ``min(e, racks)`` distinct
    racks, a uniform bookie of each, then (fewer racks than ``e``) uniform bookies not yet chosen."""
    racks, bookies = len(count), len(members)
    rs = _distinct(rng, np.full(m, racks), min(e, racks))
    chosen = members[first[rs] + rng.integers(0, count[rs])]
    if e > racks:
        chosen = np.hstack([chosen, _distinct(rng, np.full(m, bookies), e - racks, chosen)])
    return chosen


def _distinct(rng: np.random.Generator, high: np.ndarray, k: int, fixed: np.ndarray | None = None) -> np.ndarray:
    """``len(high) × k`` integers, row ``i`` uniform in ``[0, high[i])``, distinct within the row and from
    ``fixed[i]`` (uniform among such rows: rows with a repeat are drawn again). Needs ``high[i] ≥ k`` plus
    the width of ``fixed``."""
    m = len(high)
    fixed = np.empty((m, 0), np.int64) if fixed is None else fixed
    got = rng.integers(0, high[:, None], size=(m, k))
    redo = np.arange(m)
    while True:
        both = np.sort(np.hstack([fixed[redo], got[redo]]), axis=1)
        redo = redo[(both[:, 1:] == both[:, :-1]).any(axis=1)]
        if not len(redo):
            return got
        got[redo] = rng.integers(0, high[redo][:, None], size=(len(redo), k))
