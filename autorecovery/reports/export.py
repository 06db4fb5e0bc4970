"""``autorecovery export``: a metadata snapshot of a live cluster, read-only (EDGE: ZooKeeper, gRPC).

Reads every ledger's metadata with at most ``concurrency`` ZooKeeper reads in flight (the same bound
as ``auditorMaxNumberOfConcurrentOpenLedgerOperations``), in id order, streaming rows into Parquet row
groups: memory stays bounded and the session's request queue stays short at a million ledgers. It
writes nothing to ZooKeeper. Bookie locations come from the configured resolver (the placement policy
the daemon would build), disk figures from GET_BOOKIE_INFO. For each open or in-recovery ledger the
last add confirmed is read from the last segment's bookies (:func:`read_lac`, inside the same bound).
The heal episodes the auditor recorded (``underreplication/history``) are copied to ``history.json``,
so the report can use the copy rate the cluster showed (``reports/healrate.py``).
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autorecovery.admin import ops
from autorecovery.errors import AutoRecoveryError, NoSuchLedgerError
from autorecovery.ledger.metadata import LedgerState
from autorecovery.reports.snapshot import BOOKIES, LEDGERS, MARKERS, SEGMENTS, TableWriter, write_manifest
from autorecovery.zk.bridge import NoNodeError

#: the worker keys the heal-time model reads (``reports/build.py`` ``throttles``; docs/reports.md)
THROTTLE_KEYS = ("replicationRateByBytes", "rereplicationEntryBatchSize", "replicationWorkerConcurrentLedgers",
                 "replicationMaxStreamsPerSourceBookie", "replicationMaxStreamsPerTargetBookie")


def _split_location(loc: str | None) -> tuple[str, str, str]:
    """``(rack, zone, region)`` from a network location: ``/region/rack`` (region-aware), ``/zone/ud``
    (zone-aware) or ``/rack``; the last component is the rack, the first the region and zone."""
    parts = [p for p in (loc or "/default-rack").split("/") if p]
    rack = parts[-1] if parts else "default-rack"
    first = parts[0] if len(parts) > 1 else "default"
    return rack, first, first


async def export(ctx: ops.AdminContext, out: Path, *, concurrency: int = 500,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Write a snapshot of the cluster behind ``ctx`` to ``out``; returns the manifest.

    Raises:
        ZooKeeperError: ZooKeeper failed (the snapshot has no manifest, so it is never mistaken for a
            complete one).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = int(time.time() * 1000)
    layout, _ = await ctx.zk.get(ctx.paths.layout)
    try:
        instance = (await ctx.zk.get(ctx.paths.root + "/INSTANCEID"))[0].decode("utf-8", "replace")
    except NoNodeError:
        instance = ""
    ids = await ctx.ledgers.list_ledger_ids()
    lw = TableWriter(out / "ledgers.parquet", LEDGERS)
    sw = TableWriter(out / "segments.parquet", SEGMENTS)
    sem = asyncio.Semaphore(concurrency)
    done = unreadable = 0

    bookies = ctx.get_bookies()
    lac_timeout = ctx.settings.bookie_info.timeout_s if ctx.settings else 5.0
    lac_read = lac_unknown = 0

    async def read(lid: int):
        async with sem:
            try:
                md = (await ctx.ledgers.read(lid))[0]
            except NoSuchLedgerError:
                return lid, None, (None, None)
            except AutoRecoveryError:
                return lid, False, (None, None)
            if md.state == LedgerState.CLOSED or not md.segments:
                return lid, md, (None, None)
            return lid, md, await read_lac(bookies, lid, md, lac_timeout)

    window = max(1, concurrency * 4)
    for i in range(0, len(ids), window):  # in id order, a bounded window of reads at a time
        for lid, md, (lac, lac_length) in await asyncio.gather(*(read(lid) for lid in ids[i:i + window])):
            done += 1
            if md is False:
                unreadable += 1
                continue
            if md is None:
                continue
            if md.state != LedgerState.CLOSED:
                lac_read += lac is not None
                lac_unknown += lac is None
            custom = dict(md.custom_metadata)
            ml = custom.get("pulsar/managed-ledger", b"")
            lw.add({"ledger_id": lid, "state": md.state.name, "ensemble_size": md.ensemble_size,
                    "write_quorum": md.write_quorum, "ack_quorum": md.ack_quorum,
                    "last_entry_id": md.last_entry_id if md.state == LedgerState.CLOSED else -1,
                    "length": md.length, "ctime": md.ctime, "digest_type": md.digest_type.name,
                    "managed_ledger": ml.decode("utf-8", "replace") if isinstance(ml, bytes) else str(ml),
                    "custom_metadata": [(k, bytes(v)) for k, v in custom.items()],
                    "lac": lac, "lac_length": lac_length})
            for j, seg in enumerate(md.segments):
                last = md.segment_end(j) if md.state == LedgerState.CLOSED or j + 1 < len(md.segments) else -1
                sw.add({"ledger_id": lid, "first_entry_id": seg.first_entry_id, "last_entry_id": last,
                        "ensemble": list(seg.ensemble)})
        if progress:
            progress(done, len(ids))
    lw.close()
    sw.close()

    watcher = await ctx.get_watcher()
    policy = await ctx.get_policy()
    info = await ops.bookie_info(ctx)
    try:
        cookies = await ctx.zk.get_children(ctx.paths.cookies)
    except NoNodeError:
        cookies = []
    bw = TableWriter(out / "bookies.parquet", BOOKIES)
    for b in sorted(set(cookies) | set(watcher.writable) | set(watcher.readonly)):
        state = "writable" if b in watcher.writable else "readonly" if b in watcher.readonly else "gone"
        loc = ops._location(policy, b) or "/default-rack"
        rack, zone, region = _split_location(loc)
        free, total = info.infos.get(b, (-1, -1))
        bw.add({"bookie_id": b, "state": state, "location": loc, "rack": rack, "zone": zone, "region": region,
                "free_bytes": free, "total_bytes": total})
    bw.close()

    mw = TableWriter(out / "markers.parquet", MARKERS)
    for lid in sorted(await ctx.urm.list_marked_ids()):
        m = await ctx.urm.get_marker(lid)
        if m is not None:
            mw.add({"ledger_id": lid, "kind": "underreplicated", "replicas": list(m.replicas), "ctime": m.ctime or 0})
    try:
        records = await ctx.zk.get_children(ctx.paths.unrecoverable)
    except NoNodeError:
        records = []
    for name in sorted(records):
        try:
            doc = json.loads((await ctx.zk.get(f"{ctx.paths.unrecoverable}/{name}"))[0])
            mw.add({"ledger_id": int(doc.get("ledger", -1)), "kind": "unrecoverable",
                    "replicas": [str(b) for b in doc.get("bookies", [])], "ctime": int(doc.get("time", 0))})
        except (NoNodeError, ValueError, TypeError):
            continue
    mw.close()

    # the heal history (underreplication/history), for the measured copy rate (reports/healrate.py)
    from autorecovery.zk.history import HistoryStore

    listing = await HistoryStore(ctx.zk, ctx.paths).listing()
    (out / "history.json").write_text(json.dumps({"episodes": [e.as_dict() for e in listing.episodes],
                                                  "errors": listing.errors}, indent=1))

    s = ctx.settings
    from autorecovery.placement.config import PlacementConfig

    placement = {k: str(s.get(k)) for k in PlacementConfig.KEY_FIELDS if s is not None and s.get(k) is not None}
    throttle = {k: str(s.get(k)) for k in THROTTLE_KEYS if s is not None and s.get(k) is not None}
    manifest = {"time_ms": started, "instance_id": instance, "ledgers_root": ctx.paths.root,
                "layout": layout.decode("utf-8", "replace"), "placement": placement, "throttles": throttle,
                "counts": {"ledgers": lw.count, "segments": sw.count, "bookies": bw.count, "markers": mw.count,
                           "unreadable": unreadable, "open_lac_read": lac_read, "open_lac_unknown": lac_unknown,
                           "heal_episodes": len(listing.episodes)},
                "source": f"zookeeper {ctx.zk.hosts}"}
    write_manifest(out, manifest)
    return manifest


async def read_lac(bookies, ledger_id: int, md, timeout_s: float) -> tuple[int | None, int | None]:
    """The last add confirmed of an open or in-recovery ledger and the ledger's length at that entry.

    Asks every bookie of the last segment's ensemble (upstream ``readLastAddConfirmed``: the highest
    answer wins; read-only, no fencing), then reads entry LAC from its write set for the cumulative
    length in the entry's header (``ledger/digest.py``: ledger id, entry id, LAC, length). Returns
    ``(None, None)`` when no bookie answered, ``(lac, None)`` when the entry could not be read, and
    ``(-1, 0)`` when nothing is confirmed yet. Each call is bounded by ``timeout_s``.
    """
    from autorecovery.ledger.striping import write_set

    from autorecovery.client.lac import LacUnknownError, read_last_add_confirmed

    ens = list(md.segments[-1].ensemble)
    try:
        lac = await read_last_add_confirmed(bookies, ledger_id, md, timeout_s)
    except LacUnknownError:
        return None, None
    if lac < 0:
        return -1, 0
    for j in write_set(lac, len(ens), md.write_quorum):
        try:
            r = await asyncio.wait_for(bookies.read_entry(ens[j], ledger_id, lac), timeout_s)
            _lid, _eid, _lac, length = struct.unpack(">qqqq", bytes(r.body[:32]))
            return lac, int(length)
        except Exception:  # noqa: BLE001 - try the entry's next copy
            continue
    return lac, None

