"""Issue 40: a short seeded chaos campaign on a stock cluster (about three minutes of faults): 6 Apache
BookKeeper 4.17.2 Java bookies (DbLedgerStorage) in 3 racks on a 3-member ZooKeeper ensemble, upstream's
Java client writing continuously (E3/WQ2/AQ2 and E5/WQ3/AQ2, CRC32C and MAC, Pulsar's custom metadata and
roll-over), upstream's AutoRecoveryMain on node 5 and our daemon on the five others. The seed draws the
Java-only kinds (ledger dir full until read-only, journal dir full, a restart with an empty ledger dir and
the operator's fix), bookie rolling restart, the ZooKeeper ensemble's faults and the auditor killed.
Bookie 0 is also cut from every worker and client, and loses packets one way, by nftables rules on
loopback. Judged by upstream: its reader reads every acknowledged entry back (recovery open, digests and payloads
checked), its shell's ``listunderreplicated`` is empty; every closed ledger's copies are on the bookies its
metadata names; no ERROR line in our daemons; every ledger healed within 60 s of its last fault's end or
with a reason named throughout."""

from __future__ import annotations

import json

import pytest

from autorecovery.testing.chaos.runner import MUST_BE_ZERO, CampaignConfig, run_campaign
from autorecovery.testing.chaos.cluster import BOOKIE_NETNS_KINDS
from autorecovery.testing.chaos.schedule import DAEMON_NETNS_KINDS, STOCK_KINDS, STOCK_ONLY_KINDS, schedule
from autorecovery.testing.chaos.stock import LOOPBACK_KINDS

pytestmark = pytest.mark.e2e

SEED, FAULTS = 4586, 14
#: the stock cluster runs nothing in a network namespace: of those kinds only the two it injects on
#: loopback are drawn (the others would be skipped)
KINDS = tuple(k for k in STOCK_KINDS if k not in (*BOOKIE_NETNS_KINDS, *DAEMON_NETNS_KINDS) or k in LOOPBACK_KINDS)


# about 3 minutes of faults (cluster start ~25 s, settle and upstream's read-back ~40 s) on the shared 2-core
# machine; the duration cap and the timeout only bound a machine loaded by other jobs
@pytest.mark.timeout(900)
async def test_short_seeded_stock_campaign_loses_nothing_and_upstream_agrees(tmp_path):
    cfg = CampaignConfig(base_dir=tmp_path / "stock", seed=SEED, faults=FAULTS, duration_s=420, bookies=6,
                         rate=80, min_hold_s=0.3, max_hold_s=1.5, settle_s=240, kinds=KINDS, cluster="stock",
                         java_nodes=(5,), disk_full_mb=128)
    printed: list[str] = []
    rep = await run_campaign(cfg, echo=printed.append)
    text = rep.to_text() + "\n" + "\n".join(printed[-40:])
    print(text)  # the report, for -s and for a failure
    plan = schedule(SEED, FAULTS, 6, KINDS, min_hold_s=0.3, max_hold_s=1.5)
    assert [ln for ln in printed if ln.startswith("schedule #")] == [f"schedule {f.describe()}" for f in plan]
    # the seed draws every Java-only kind, the loopback network kinds and a bookie rolling restart
    assert {*STOCK_ONLY_KINDS, *LOOPBACK_KINDS, "bookie_rolling_restart"} <= {f.kind for f in plan}
    assert sum(rep.faults_by_kind.values()) == FAULTS, text
    assert {*STOCK_ONLY_KINDS, *LOOPBACK_KINDS} <= set(rep.faults_by_kind) and not rep.skipped_kinds, text
    assert any("nftables drops every packet to and from its data port on lo" in ln for ln in rep.fault_log), text
    assert rep.must_be_zero() == dict.fromkeys(MUST_BE_ZERO, 0), text
    assert rep.entries_acked > 1000 and rep.entries_read_back == rep.entries_acked, text
    assert int(str(rep.writer["acked"])) >= rep.entries_acked and rep.writer["ok"] is True, text
    assert rep.ledgers_checked >= 5 and rep.daemons_alive == rep.daemons_total == 6, text
    assert rep.ledgers_marked >= 1 and rep.ledgers_healed == rep.ledgers_marked, text
    assert 1 <= len(rep.longest_episodes) <= 10 and rep.over_bound == [], text
    # the bookie with an empty ledger dir was refused for its cookie before the operator's fix
    assert any("ledger dir emptied" in ln and "refused (cookie mismatch)" in ln for ln in rep.fault_log), text
    assert any("ledger dir filled" in ln and "turned read-only" in ln for ln in rep.fault_log), text
    assert any("auditor daemon 5 (autorecoverymain-5) killed" in ln for ln in rep.fault_log), text  # upstream's auditor
    assert set(rep.procs) == {f"{k}-{i}" for k in ("bookie", "daemon") for i in range(6)}, text
    assert all(int(p["samples"]) > 0 and int(p["rss_peak"]) > 0 and int(p["fds_peak"]) > 0 for p in rep.procs.values()), text
    assert rep.passed and json.loads(rep.to_json())["cluster"] == "stock"
