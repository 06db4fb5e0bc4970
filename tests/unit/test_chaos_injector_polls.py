"""Issue 26: the chaos runner's own ZooKeeper polls treat a retriable error (ConnectionLoss while the
other lane holds a ZooKeeper fault) as "not known yet", so a wait polls again instead of failing the fault
(the full campaign's faults #864 and #873 failed so); anything else still raises."""

from __future__ import annotations

import pytest

from autorecovery.errors import ZooKeeperError
from autorecovery.testing.chaos.faults import Injector
from autorecovery.zk.paths import Paths


class ZkRaising:
    """A ZooKeeper session stand-in whose reads raise ``exc``."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def get_children(self, path: str) -> list[str]:
        raise self.exc


def injector(exc: BaseException) -> Injector:
    return Injector(cluster=None, zk=ZkRaising(exc), paths=Paths("/ledgers"), proxies={},  # type: ignore[arg-type]
                    daemon_session_s=3.0, on_bookie_lost=lambda b, t: None)


async def test_a_connection_loss_reads_as_not_registered_and_no_auditor():
    inj = injector(ZooKeeperError("ZooKeeper operation on /ledgers/available failed: ConnectionLoss"))
    assert await inj.registered("127.0.0.11:3181") is False
    assert await inj.auditor_index() is None


async def test_a_bug_still_raises():
    inj = injector(TypeError("not a ZooKeeper failure"))
    with pytest.raises(TypeError):
        await inj.registered("127.0.0.11:3181")
