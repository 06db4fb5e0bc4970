"""The ledger tree's shared state and plumbing (pure parts: no ZooKeeper is reached here).

The watcher composed of these parts runs against a real ZooKeeper in
tests/integration/test_zk_persistent_watch.py, test_auditor.py and test_auditor_reconnect.py.
"""

from __future__ import annotations

from typing import Any, cast

from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledger_tree.tree_state import MAX_BATCH, TreePlumbing, TreeState, leaf_path
from autorecovery.zk.paths import Paths

NO_ZK = cast(ZkClient, None)  # the pure parts below never touch the client


async def _no_rearm() -> None:
    raise AssertionError("nothing was lost: no re-arm expected")


def _plumbing(concurrency: int = 500) -> tuple[TreeState, TreePlumbing]:
    state = TreeState(NO_ZK, Paths("/ledgers"), BookieLedgerIndex(), concurrency=concurrency)
    return state, TreePlumbing(state, _no_rearm)


def test_batches_follow_the_concurrency() -> None:
    s, _ = _plumbing(500)
    assert s.batch == 125 and s.batch_sem._value == 4  # 500 reads in flight: 4 batches of 125
    s, _ = _plumbing(2)
    assert s.batch == 1 and s.batch_sem._value == 2
    s, _ = _plumbing(100_000)
    assert s.batch == MAX_BATCH and s.batch_sem._value == 100


def test_split_skips_reserved_names_at_the_root_and_keeps_leaves_below() -> None:
    _, p = _plumbing()
    subdirs, leaves = p.split(["00", "underreplication", "LAYOUT", "available", "L0001"], 0)
    assert subdirs == ["00"] and leaves == []  # a leaf name at the root is not a ledger
    subdirs, leaves = p.split(["0000", "L0001", "L12", "junk"], 1)
    assert subdirs == ["0000"] and leaves == ["L0001"]


def test_depth_and_leaf_id() -> None:
    _, p = _plumbing()
    assert p.depth("/ledgers") == 0 and p.depth("/ledgers/00") == 1 and p.depth("/ledgers/00/0000") == 2
    assert p.leaf_id("/ledgers/00/0000/L0007") == 7
    assert p.leaf_id("/ledgers/underreplication/ledgers") is None
    assert leaf_path("/ledgers/00/0000/L0007") and not leaf_path("/ledgers/00/0000")


def test_malformed_metadata_is_counted_once_and_left_out() -> None:
    s, p = _plumbing()
    path = "/ledgers/00/0000/L0007"
    p.apply_data(7, b"not ledger metadata", 5, path)
    p.apply_data(7, b"still not", 6, path)
    assert s.malformed == 1 and s.malformed_ids == {7} and len(s.index) == 0
    assert not s.changed.is_set()


def test_watch_counts_by_mode() -> None:
    s, p = _plumbing()
    s.persistent = True
    s.tops = cast(dict[str, Any], {"/ledgers/00": object()})
    s.root_armed = True
    assert p.watches_held() == 2
    s.watch_lost = True
    assert p.watches_held() == 0 and p.lost_watches() == 1
    s.persistent, s.watch_lost = False, False
    s.dir_armed, s.armed = {"/ledgers", "/ledgers/00"}, {1, 2, 3}
    assert p.watches_held() == 5 and p.lost_watches() == 0
