"""BookieInfoReader (seed weight-based-placement-design §1.4.3): polls, retries, purges, feeds the
placement policy and exports weight gauges. First against a scripted bookie client (timings in
milliseconds), then against real bookie processes whose disk figures are faked: a free-space change
shows up in the policy's weights within one poll interval."""

from __future__ import annotations

import asyncio
import math

import pytest

from autorecovery import metrics
from autorecovery.bookie.disk import write_fake_disk
from autorecovery.errors import BookieUnavailableError
from autorecovery.placement import PlacementConfig, policy_from_name
from autorecovery.roles.bookie_info import BookieInfoReader, DiskInfo, weights_in_use
from autorecovery.rpc.transport import BookieClient
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.paths import Paths


class FakeBookies:
    """Scripted GET_BOOKIE_INFO: ``free[b]`` bytes, or an exception / a hang for ``broken[b]``."""

    def __init__(self, free: dict[str, int]) -> None:
        self.free = dict(free)
        self.broken: dict[str, str] = {}
        self.calls: list[str] = []

    async def get_bookie_info(self, bookie_id: str, requested: int = 3):
        self.calls.append(bookie_id)
        mode = self.broken.get(bookie_id)
        if mode == "down":
            raise BookieUnavailableError(bookie_id, "UNAVAILABLE", "connection refused")
        if mode == "hang":
            await asyncio.sleep(3600)
        return DiskInfo(total_disk_space=10 * self.free[bookie_id], free_disk_space=self.free[bookie_id])


class FakePolicy:
    def __init__(self) -> None:
        self.updates: list[dict] = []

    def update_bookie_info(self, info) -> None:
        self.updates.append(dict(info))


def gauge(reg, name, bookie):
    m = reg.get(f"autorecovery_{name}", {"bookie_id": bookie})
    return None if m is None else m.value


async def test_polls_feeds_policy_and_exports_gauges():
    reg = metrics.MetricsRegistry()
    bk = FakeBookies({"a:1": 100, "b:1": 300})
    pol = FakePolicy()
    r = BookieInfoReader(bk, consumers=[pol], interval_s=3600, retry_interval_s=3600, timeout_s=1,
                         weighted=True, max_multiple=3, registry=reg)
    r.set_writable({"a:1", "b:1"})
    await r.start()
    try:
        assert await r.wait_for(lambda x: len(x.info) == 2, 2)
        last = pol.updates[-1]
        assert last["a:1"].free_disk_space == 100 and last["b:1"].total_disk_space == 3000
        assert gauge(reg, "bookie_free_disk_bytes", "b:1") == 300
        assert gauge(reg, "placement_weight", "a:1") == 100 and gauge(reg, "placement_weight", "b:1") == 300
        assert gauge(reg, "placement_probability", "b:1") == pytest.approx(0.75)
    finally:
        await r.stop()
    assert gauge(reg, "bookie_free_disk_bytes", "a:1") is None, "stop() drops the gauges"


async def test_new_bookie_polled_at_once_and_leaver_purged():
    reg = metrics.MetricsRegistry()
    bk = FakeBookies({"a:1": 100, "b:1": 200, "c:1": 400})
    pol = FakePolicy()
    r = BookieInfoReader(bk, consumers=[pol], interval_s=3600, retry_interval_s=3600, timeout_s=1, registry=reg)
    r.set_writable({"a:1", "b:1"})
    await r.start()
    try:
        assert await r.wait_for(lambda x: set(x.info) == {"a:1", "b:1"}, 2)
        bk.calls.clear()
        r.set_writable({"a:1", "c:1"})  # b leaves, c joins; the next full scan is an hour away
        assert "b:1" not in r.info and gauge(reg, "bookie_free_disk_bytes", "b:1") is None
        assert await r.wait_for(lambda x: "c:1" in x.info, 1.0), "a joining bookie is polled at once"
        assert bk.calls == ["c:1"], "partial scan: only the bookie without figures"
        assert set(pol.updates[-1]) == {"a:1", "c:1"}
    finally:
        await r.stop()


async def test_failed_poll_drops_figures_and_retries():
    reg = metrics.MetricsRegistry()
    bk = FakeBookies({"a:1": 100, "b:1": 200})
    r = BookieInfoReader(bk, interval_s=3600, retry_interval_s=0.2, timeout_s=0.2, registry=reg)
    r.set_writable({"a:1", "b:1"})
    bk.broken["b:1"] = "hang"
    await r.start()
    try:
        assert await r.wait_for(lambda x: "a:1" in x.info and "b:1" in x.failures, 2)
        assert "no answer within 0.2s" in r.failures["b:1"] and "b:1" not in r.info
        assert math.isnan(gauge(reg, "bookie_free_disk_bytes", "b:1"))
        bk.broken["b:1"] = "down"
        assert await r.wait_for(lambda x: "UNAVAILABLE" in x.failures.get("b:1", ""), 2)
        del bk.broken["b:1"]
        assert await r.wait_for(lambda x: x.info.get("b:1") == DiskInfo(2000, 200), 2), "retried after 0.2 s"
        assert "b:1" not in r.failures
    finally:
        await r.stop()


def test_weights_in_use():
    assert weights_in_use({}, True, 3) == {}
    assert weights_in_use({"a": 5, "b": 10}, False, 3) == {"a": 1.0, "b": 1.0}
    assert weights_in_use({"a": 0, "b": 0}, True, 3) == {"a": 1.0, "b": 1.0}
    w = weights_in_use({"a": 50, "b": 100, "c": 100, "d": 200, "e": 500}, True, 4)
    assert w == {"a": 50, "b": 100, "c": 100, "d": 200, "e": 400}  # capped at 4 x median (seed §1.2)


# -- real bookies ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("bookieinfo"), bookies=3).up()
    yield c
    c.down()


@pytest.mark.integration
async def test_free_space_change_reaches_policy_within_one_interval(cluster):
    free = {b: 1_000_000_000 * (i + 1) for i, b in enumerate(cluster.bookie_ids())}
    for i, b in enumerate(cluster.bookie_ids()):
        # total = 2 x free keeps every bookie below diskUsageThreshold (a full disk turns it read-only)
        write_fake_disk(cluster.bookies[i].data_dir, total_bytes=2 * free[b], free_bytes=free[b])
    zk = await ZkClient(cluster.zk_connect).start()
    watcher = await BookieWatcher(zk, Paths("/ledgers")).start()
    bookies = BookieClient()
    policy = policy_from_name("rackaware", PlacementConfig.from_properties({"diskWeightBasedPlacementEnabled": "true"}))
    policy.on_cluster_changed(set(watcher.writable), set(watcher.readonly))
    reg = metrics.MetricsRegistry()
    interval = 1.0
    reader = BookieInfoReader(bookies, watcher, consumers=[policy], interval_s=interval, retry_interval_s=interval,
                              timeout_s=5, weighted=True, max_multiple=3, registry=reg)
    await reader.start()
    try:
        assert await reader.wait_for(lambda r: len(r.info) == 3, 10)
        for b in cluster.bookie_ids():
            assert policy.weight_of(b) == free[b]
        b0 = cluster.bookie_ids()[0]
        write_fake_disk(cluster.bookies[0].data_dir, total_bytes=2 * 123_456, free_bytes=123_456)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await reader.wait_for(lambda r: policy.weight_of(b0) == 123_456, interval * 2 + 1.0)
        assert loop.time() - t0 <= interval + 1.0, "must be picked up by the next poll"
        assert gauge(reg, "bookie_free_disk_bytes", b0) == 123_456
        weights = {b: gauge(reg, "placement_weight", b) for b in cluster.bookie_ids()}
        assert weights[b0] == 123_456 and weights[cluster.bookie_ids()[2]] == free[cluster.bookie_ids()[2]]

        # a bookie that leaves is purged from the reader and its gauges
        cluster.kill_bookie(2)
        gone = cluster.bookie_id(2)
        assert await watcher.wait_until(lambda w: gone not in w.writable, 30)
        assert await reader.wait_for(lambda r: gone not in r.info, 5)
        assert gauge(reg, "bookie_free_disk_bytes", gone) is None
    finally:
        await reader.stop()
        await watcher.stop()
        await bookies.close()
        await zk.stop()
        for i in cluster.bookies:
            write_fake_disk(cluster.bookies[i].data_dir)
