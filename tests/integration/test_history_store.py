"""The heal history's ZooKeeper side on a real ZooKeeper: the recorder opens, follows and closes an
episode from marker changes with a write per step (not per ledger), a second recorder (a new auditor)
continues an open episode, the store keeps at most MAX_EPISODES (open ones last to go), and hostile
records or state are named, never raised."""

from __future__ import annotations

import json

import pytest

from autorecovery import metrics
from autorecovery.audit import episodes as E
from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.roles.auditor_history import HealRecorder
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.history import HistoryStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

pytestmark = pytest.mark.integration

PATHS = Paths("/ledgers")
LOST = "10.0.0.3:3181"


@pytest.fixture
async def zk(zk_connect):
    c = await ZkClient(zk_connect, session_timeout_ms=4000).start()
    yield c
    await c.stop()


def _index(n: int) -> BookieLedgerIndex:
    idx = BookieLedgerIndex()
    for lid in range(1, n + 1):
        idx.put(lid, LedgerMetadata(3, 2, 2, (Segment(0, ("10.0.0.1:3181", "10.0.0.2:3181", LOST)),),
                                    state=LedgerState.CLOSED, last_entry_id=9, length=1000 * lid))
    return idx


async def _heal(urm: UnderreplicationManager, lids) -> None:
    for lid in lids:
        assert await urm.acquire(lid)
        assert await urm.mark_replicated(lid)


async def test_recorder_follows_an_episode_and_a_new_auditor_continues_it(zk):
    urm = UnderreplicationManager(zk, PATHS, lock_owner="worker-a")
    await urm.init()
    idx = _index(20)
    reg = metrics.MetricsRegistry()
    rec = HealRecorder(zk, PATHS, urm, idx, bookie_id="auditor-1:3181", registry=reg, min_step_s=0.0)
    await rec.start([])
    marks = {lid: [LOST] for lid in range(1, 21)}
    await urm.mark_many(marks)
    ep = await rec.record("bookie-lost", LOST, marks, before=set())
    assert ep is not None and (ep.ledgers_marked, ep.bytes_marked) == (20, sum(1000 * i for i in range(1, 21)))
    assert await rec.record("bookie-lost", LOST, marks, before=set()) is None  # already claimed: no second one
    await _heal(urm, range(1, 11))
    await rec.step()
    mid = (await HistoryStore(zk, PATHS).listing()).episodes[0]
    assert (mid.state, mid.ledgers_healed, mid.ledgers_left) == ("open", 10, 10)
    assert mid.bytes_healed == sum(1000 * i for i in range(1, 11))
    stat = await zk.exists(f"{PATHS.history}/{ep.name}")
    assert stat.version == 1  # one create, one setData for ten ledgers

    # the auditor moves: a new recorder on another session continues the same episode
    rec.reset()
    rec2 = HealRecorder(zk, PATHS, urm, idx, bookie_id="auditor-2:3181", registry=reg, min_step_s=0.0)
    await rec2.start([LOST])
    assert list(rec2.episodes) == [ep.name]
    await _heal(urm, range(11, 21))
    await rec2.step()
    done = (await HistoryStore(zk, PATHS).listing()).episodes[0]
    assert (done.state, done.ledgers_healed, done.bytes_healed) == ("healed", 20, ep.bytes_marked)
    assert done.auditors == ("auditor-1:3181", "auditor-2:3181")
    assert reg.get("autorecovery_heal_episodes_total", {"kind": "bookie-lost", "state": "healed"}).value == 1
    assert reg.get("autorecovery_heal_last_episode_ledgers").value == 20
    assert reg.get("autorecovery_heal_episodes_open").value == 0
    state = json.loads((await zk.get(PATHS.history))[0])
    assert state["auditor"] == "auditor-2:3181" and LOST in state["lost"] and state["open_episodes"] == []
    await urm.close()


async def test_store_is_bounded_and_names_bad_records(zk):
    store = HistoryStore(zk, PATHS)
    first = await store.create(E.opened("placement", "check", {1: 10}, 1000, "a"))
    for i in range(E.MAX_EPISODES + 4):
        closed, _ = E.advance(E.opened("bookie-lost", f"b{i}", {i: 1}, 1000, "a"), set(), (), (), {}, 2000)
        await store.create(closed)
    gone = await store.trim([first])
    assert len(gone) == 5 and first not in gone
    names = await store.names()
    assert len(names) == E.MAX_EPISODES and names[0] == first
    await zk.create(f"{PATHS.history}/e-9999999999", b'{"v": 1, "kind": "bookie-lost", "state": "open"}')
    listing = await store.listing()
    assert len(listing.episodes) == E.MAX_EPISODES
    assert listing.errors == [f"bad heal episode {PATHS.history}/e-9999999999: field subject must be a string"]
    await zk.set(PATHS.history, b"[1, 2]")
    assert await store.read_state() == ({}, f"bad history state {PATHS.history}: not a JSON object")
    # a recorder starting on this garbage does not raise
    urm = UnderreplicationManager(zk, PATHS)
    await urm.init()
    rec = HealRecorder(zk, PATHS, urm, _index(1), bookie_id="x:1", registry=metrics.MetricsRegistry())
    await rec.start(["10.0.0.9:3181"])
    assert list(rec.episodes) == [first]
    await urm.close()
