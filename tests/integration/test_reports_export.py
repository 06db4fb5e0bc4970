"""``autorecovery export`` of a real local cluster (ZooKeeper + bookie processes + ledgers written with the
client), then ``autorecovery report placement``: its per-ledger verdicts equal the daemon's placement check
(admin ops, the same code the auditor runs) on the same cluster, and the bookies table carries the racks
and GET_BOOKIE_INFO figures."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import sys

import pandas as pd
import pytest

from autorecovery.admin import ops
from autorecovery.audit.episodes import Episode
from autorecovery.config.load import load_settings
from autorecovery.zk.history import HistoryStore

from test_worker_support import open_env

pytestmark = pytest.mark.integration


def read_pty(fd: int) -> str:
    """Everything written to a pty until its last writer closes it."""
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed it
            break
        if not chunk:
            break
        out += chunk
    os.close(fd)
    return out.decode(errors="replace")


async def test_export_and_placement_report_agree_with_the_daemon(cluster_factory, tmp_path):
    cluster = await asyncio.to_thread(cluster_factory, bookies=6, racks=3)  # bookie i in /rack{1 + i % 3}
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        spread = [await env.write([b[0], b[1], b[2]], 3, 2, 2, 20) for _ in range(3)]   # three racks
        one_rack = [await env.write([b[0], b[3]], 2, 2, 2, 20) for _ in range(2)]      # both in /rack1
        two_of_three = await env.write([b[1], b[4], b[2]], 3, 2, 2, 20)                 # (b1, b4) in /rack2
        left_open = await env.write([b[2], b[5], b[0]], 3, 2, 2, 5, close=False)
    finally:
        await env.close()
    # a heal episode in the cluster's history (as the auditor records one): 6 MB healed in 4 s by 2 daemons
    settings = load_settings(None, env={}, overrides={"zkServers": cluster.zk_connect,
                                                       "zkLedgersRootPath": cluster.ledgers_root})
    async with ops.open_admin(settings) as ctx:
        await HistoryStore(ctx.zk, ctx.paths).create(Episode(
            kind="bookie-lost", subject=b[5], detected_ms=1_000, ledgers_marked=3, bytes_marked=6_000_000,
            state="healed", updated_ms=5_000, closed_ms=5_000, last_heal_ms=5_000, ledgers_healed=3,
            bytes_healed=6_000_000, workers={"d1": 2, "d2": 1}))
    snap, out = tmp_path / "snap", tmp_path / "out"
    # stderr on a terminal (a pty): the progress line; stdout: the result
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "autorecovery", "export", "--zk", cluster.zk_connect,
                             "--ledgers-root", cluster.ledgers_root, "--out", str(snap)],
                            stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    shown = await asyncio.to_thread(read_pty, master)
    stdout, _ = await asyncio.to_thread(proc.communicate, timeout=120)
    assert proc.returncode == 0, shown[-2000:]
    assert "export: 7/7 ledgers (100.0%)" in shown and "snapshot of" in stdout
    ledgers = pd.read_parquet(snap / "ledgers.parquet").set_index("ledger_id")
    assert len(ledgers) == 7 and ledgers.loc[left_open.ledger_id, "state"] == "OPEN"
    assert (ledgers.loc[spread[0].ledger_id, ["ensemble_size", "write_quorum", "ack_quorum", "last_entry_id"]]
            .tolist() == [3, 2, 2, 19])
    bookies = pd.read_parquet(snap / "bookies.parquet").set_index("bookie_id")
    assert set(bookies.index) == set(b) and set(bookies["state"]) == {"writable"}
    assert bookies.loc[b[3], "rack"] == "rack1" and bookies.loc[b[4], "rack"] == "rack2"
    assert (bookies["total_bytes"] > 0).all() and (bookies["free_bytes"] > 0).all()

    # the open ledger's last add confirmed, read from its bookies at export (5 entries of 100 bytes were
    # acknowledged; a bookie knows the LAC the later entries carried), with the length its header records
    lac, lac_length = ledgers.loc[left_open.ledger_id, ["lac", "lac_length"]].tolist()
    assert lac in (3, 4) and lac_length == (lac + 1) * 100
    assert pd.isna(ledgers.loc[spread[0].ledger_id, "lac"])
    manifest = json.loads((snap / "manifest.json").read_text())
    assert manifest["throttles"]["replicationMaxStreamsPerSourceBookie"] == "4"  # the heal model's keys
    assert manifest["counts"]["open_lac_read"] == 1
    # the heal history is in the snapshot, and the report's copy rate is the one it measures
    history = json.loads((snap / "history.json").read_text())
    assert manifest["counts"]["heal_episodes"] == 1 and history["episodes"][0]["bytes_healed"] == 6_000_000

    r = subprocess.run([sys.executable, "-m", "autorecovery", "report", "all", "--snapshot", str(snap),
                        "--out", str(out), "--master", "local[1]", "--decommission", b[5], "--no-k-bookies"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "BP-54 repair:" in r.stdout and r.stderr == ""  # not a terminal: no progress, no Spark log lines
    # b5 holds only the open ledger (index 1 of [b2, b5, b0], WQ 2): its entries up to the LAC must move
    summary = json.loads((out / "summary.json").read_text())
    hm = summary["risk"]["heal_model"]
    assert hm["rate_assumed"] is False and hm["rate_source"].startswith("measured")
    assert hm["daemon_rate_bytes_per_s"] == pytest.approx(6_000_000 / (4.0 * 2))
    on_b5 = sum(1 for e in range(int(lac) + 1) if 1 in ((e % 3), (e + 1) % 3))
    dec = summary["what_if_decommission"]
    assert dec["segments_to_move"] == 1 and dec["bytes_to_move"] == pytest.approx(on_b5 * 100)
    report = pd.read_parquet(out / "placement_ledgers.parquet").set_index("ledger_id")["current"].to_dict()

    async with ops.open_admin(settings) as ctx:
        daemon = await ops.placement_check(ctx)
    daemon_verdicts = {lid: "MEETS_STRICT" for lid in report if report[lid] != "OPEN_SKIPPED"}
    for bad in daemon.not_adhering:
        daemon_verdicts[bad.ledger_id] = bad.adherence
    assert daemon.open_skipped == 1 and report[left_open.ledger_id] == "OPEN_SKIPPED"
    assert {k: v for k, v in report.items() if v != "OPEN_SKIPPED"} == daemon_verdicts
    assert {lid for lid, v in report.items() if v == "FAIL"} == \
        {lh.ledger_id for lh in one_rack} | {two_of_three.ledger_id}
