"""enforceMinNumFaultDomainsForWrite in our client's add path (client/handle.py), as upstream PendingAddOp:
an add is acknowledged only once its acked bookies span the placement policy's fault domains
(areAckedBookiesAdheringToPlacementPolicy), with a real rack-aware policy and a scripted batcher."""

import asyncio
import random

import pytest

from autorecovery.client.handle import LedgerHandle
from autorecovery.errors import WriteError
from autorecovery.ledger.metadata import LedgerMetadata, Segment
from autorecovery.placement import PlacementConfig, RackawarePolicy, StaticResolver
from autorecovery.aio import wait_for

# a and b share a rack; c is in another: entry 0 goes to (a, b, c) with WQ=3, AQ=2
RACKS = {"a:1": "/r1", "b:1": "/r1", "c:1": "/r2"}
ENSEMBLE = ("a:1", "b:1", "c:1")


class ScriptedAdds:
    def __init__(self) -> None:
        self.writes: dict[tuple[str, int], asyncio.Future] = {}

    def submit(self, bookie, ledger_id, entry_id, master_key, body, *, recovery=False):
        fut = asyncio.get_running_loop().create_future()
        self.writes[(bookie, entry_id)] = fut
        return fut


class FakeBK:
    def __init__(self, enforce: bool) -> None:
        self.adds = ScriptedAdds()
        cfg = PlacementConfig.from_properties({"enforceMinNumFaultDomainsForWrite": str(enforce).lower(),
                                               "minNumRacksPerWriteQuorum": "2"})
        self.policy = RackawarePolicy(cfg, StaticResolver(RACKS), None, random.Random(1))
        self.policy.on_cluster_changed(set(RACKS), set())


def _handle(enforce: bool) -> tuple[LedgerHandle, ScriptedAdds]:
    bk = FakeBK(enforce)
    return LedgerHandle(bk, 7, LedgerMetadata(3, 3, 2, (Segment(0, ENSEMBLE),), password=b"k"), 0), bk.adds


@pytest.mark.parametrize("enforce", [False, True])
def test_two_acks_in_one_rack_complete_the_add_only_without_enforcement(enforce):
    async def go():
        lh, adds = _handle(enforce)
        add = asyncio.ensure_future(lh.add_entry(b"x"))
        assert await wait_for(lambda: len(adds.writes) == 3, 5)
        adds.writes[("a:1", 0)].set_result(None)
        adds.writes[("b:1", 0)].set_result(None)  # AQ=2 reached, both in /r1
        if not enforce:
            assert await add == 0 and lh.lac == 0
            return
        assert await wait_for(lambda: lh._pending[0].acked == {0, 1}, 5)
        assert not add.done() and lh.lac == -1  # delayed: one fault domain only
        adds.writes[("c:1", 0)].set_result(None)  # /r2 answers: two racks
        assert await add == 0 and lh.lac == 0

    asyncio.run(go())


def test_when_every_write_set_member_answered_in_too_few_domains_the_add_fails_saying_why():
    async def go():
        bk = FakeBK(True)
        racks = {"a:1": "/r1", "b:1": "/r1", "c:1": "/r1"}
        bk.policy = RackawarePolicy(bk.policy.config, StaticResolver(racks), None, random.Random(1))
        bk.policy.on_cluster_changed(set(racks), set())
        lh = LedgerHandle(bk, 7, LedgerMetadata(3, 3, 2, (Segment(0, ENSEMBLE),), password=b"k"), 0)
        add = asyncio.ensure_future(lh.add_entry(b"x"))
        assert await wait_for(lambda: len(bk.adds.writes) == 3, 5)
        for b in ENSEMBLE:
            bk.adds.writes[(b, 0)].set_result(None)
        with pytest.raises(WriteError, match=r"ledger 7 entry 0: .*too few fault domains.*enforceMinNumFaultDomainsForWrite"):
            await add

    asyncio.run(go())
