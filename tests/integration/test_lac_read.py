"""The one LAC read of the last ensemble against real reference bookies over gRPC."""

from __future__ import annotations

import pytest

from autorecovery.bookie.server import BookieConfig, BookieServer
from autorecovery.client.lac import LacUnknownError, read_last_add_confirmed
from autorecovery.ledger.digest import pack_entry
from autorecovery.ledger.metadata import LedgerMetadata, Segment
from autorecovery.testing.bookie_proc import format_test_cluster

pytestmark = pytest.mark.integration

MK = b"master-key"


@pytest.fixture
async def bookies(zk_server, tmp_path):
    cluster = await format_test_cluster(zk_server.connect_string)
    started = []
    for i in range(3):
        srv = BookieServer(BookieConfig(zk=cluster, data_dir=tmp_path / f"b{i}", port=0))
        await srv.start()
        started.append(srv)
    yield started
    for srv in started:
        await srv.stop()


def md_of(ensemble: list[str], wq: int, aq: int) -> LedgerMetadata:
    return LedgerMetadata(len(ensemble), wq, aq, (Segment(0, tuple(ensemble)),), password=b"pw")


async def test_highest_answer_while_quorums_covered_then_refused(bookies, client) -> None:
    ids = [b.bookie_id for b in bookies]
    # entry e carries LAC e-1; bookie i holds entries up to 3 + i → reports LAC 2 + i
    for i, b in enumerate(ids):
        for e in range(4 + i):
            await client.add_entry(b, 7, e, MK, pack_entry(7, e, e - 1, 0, b"x"))
    md = md_of(ids, 3, 2)
    assert await read_last_add_confirmed(client, 7, md, 2.0) == 4
    await bookies[2].stop()  # E - AQ + 1 = 2 bookies still answer: covered, the highest of them wins
    assert await read_last_add_confirmed(client, 7, md, 2.0) == 3
    await bookies[1].stop()  # one answer cannot rule out an entry acked by bookies 1 and 2
    with pytest.raises(LacUnknownError) as ei:
        await read_last_add_confirmed(client, 7, md, 2.0)
    assert set(ei.value.failed) == {ids[1], ids[2]} and "ledger 7" in str(ei.value)
    # AQ = 1 would need every bookie; the same single answer is refused there too
    with pytest.raises(LacUnknownError):
        await read_last_add_confirmed(client, 7, md_of(ids, 3, 1), 2.0)


async def test_unknown_ledger_counts_as_an_empty_answer(bookies, client) -> None:
    ids = [b.bookie_id for b in bookies]
    await client.add_entry(ids[0], 9, 0, MK, pack_entry(9, 0, -1, 0, b"x"))
    await client.add_entry(ids[0], 9, 1, MK, pack_entry(9, 1, 0, 0, b"x"))
    # bookies 1 and 2 answer ENOLEDGER: known, LAC -1; bookie 0's LAC 0 wins
    assert await read_last_add_confirmed(client, 9, md_of(ids, 3, 3), 2.0) == 0
    assert await read_last_add_confirmed(client, 10, md_of(ids, 3, 3), 2.0) == -1
