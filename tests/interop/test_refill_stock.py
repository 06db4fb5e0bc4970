"""The segment upstream's AutoRecoveryMain does not heal, on stock Java bookies: a dead member and a live
member lacking entries in one E5 segment, with one spare bookie.

It arises for real: upstream's Java client writes an E5/WQ3/AQ2 ledger on a cluster of 6 bookies; one
member (index 0) hangs in the middle of the write and is killed, the client replaces it (the new segment starts
after the last add confirmed, so the entries it acknowledged without that bookie stay in the old
segment) and the bookie is started again on its data; then another member of the old segment (index 2)
dies. The old segment's only spare is the bookie the client took in. Our worker used to give that spare
to index 0 (bad indexes in index order) and report ``no target bookie for ensemble index 2``; now the
dead member gets the spare and the live one is refilled in place. Upstream's shell and Java reader judge
the result, and each bookie is read for its whole share.
"""

from __future__ import annotations

import asyncio

import pytest

from interop_support import PW, healed, metadata, no_errors, our_daemons, wait_until

from autorecovery.ledger.digest import ledger_digest
from autorecovery.ledger.striping import index_stores
from autorecovery.aio import wait_for

pytestmark = pytest.mark.integration

ENTRIES = 20000


def _ledgers(c) -> list[int]:
    """Ledger ids under the cluster's hierarchical tree (``<root>/00/0000/L0000`` ...)."""
    out: list[int] = []
    root = c.ledgers_root
    for top in c.kz.get_children(root):
        if not (len(top) == 2 and top.isdigit()):
            continue
        for mid in c.kz.get_children(f"{root}/{top}"):
            for leaf in c.kz.get_children(f"{root}/{top}/{mid}"):
                if leaf.startswith("L") and leaf[1:].isdigit():
                    out.append(int(top + mid + leaf[1:]))
    return sorted(out)


async def _missing(client, bookie: str, lid: int, first: int, last: int, index: int, e: int, wq: int,
                   digest) -> list[int]:
    """Entry ids of ``[first, last]`` that ensemble index ``index`` stores but ``bookie`` does not hold;
    every copy it does hold is checked with the ledger's digest."""
    from autorecovery.errors import BookieError

    gone = []
    async for r in client.read_entries(bookie, lid, first, last, ensemble_size=e, write_quorum=wq,
                                       bookie_index=index):
        if isinstance(r, BookieError):
            gone.append(r.entry_id)  # type: ignore[attr-defined]
        else:
            digest.verify(r.body, lid, r.entry_id, source=bookie)
    return gone


async def _lac_at_least(client, bookie: str, lid: int, n: int) -> bool:
    from autorecovery.errors import BookieError

    try:
        return await client.read_lac(bookie, lid) >= n
    except BookieError:
        return False


async def test_dead_member_and_live_member_lacking_entries_with_one_spare_heal(java_cluster):
    from autorecovery.rpc.upstream_client import UpstreamBookieClient

    c = java_cluster(bookies=6, racks=3)
    client = UpstreamBookieClient(timeout_s=10)
    daemons: dict = {}
    try:
        write = asyncio.create_task(asyncio.to_thread(
            c.writer, ledgers=1, entries=ENTRIES, entry_size=512, ensemble=5, wq=3, aq=2, digest="CRC32C",
            password=PW, window=200, check=False))
        lid = (await _wait(lambda: _ledgers(c), 60, "the writer's ledger"))[0]
        first_ensemble = metadata(c, lid).segments[0].ensemble
        restarted, victim = first_ensemble[0], first_ensemble[2]
        ri, vi = c.bookie_ids.index(restarted), c.bookie_ids.index(victim)
        # index 0 hangs in the middle of the write (SIGSTOP) while the others acknowledge, then crashes
        # (kill -9: what it had not journaled is gone); it is started again once the client replaced it
        assert await wait_for(lambda: _lac_at_least(client, restarted, lid, 1000), 60, interval_s=0.02), \
            "the write never reached entry 1000"
        await asyncio.to_thread(c.bookies[ri].sigstop)
        witness = first_ensemble[1]
        hung_at = await client.read_lac(witness, lid)
        assert await wait_for(lambda: _lac_at_least(client, witness, lid, hung_at + 300), 30, interval_s=0.02), \
            "the write made no progress without the hung bookie"
        await asyncio.to_thread(c.bookies[ri].kill)
        await _wait(lambda: len(metadata(c, lid).segments) > 1, 60, "the client's ensemble change")
        await asyncio.to_thread(c.bookies[ri].start)
        res = await write
        assert res["ok"] and res["ledgers"][0]["closed"], res
        assert res["ledgers"][0]["last_acked"] == ENTRIES - 1, res
        md = metadata(c, lid)
        seg0 = md.segments[0]
        assert seg0.ensemble == first_ensemble and restarted not in md.segments[1].ensemble, md
        spare = (set(c.bookie_ids) - set(first_ensemble)).pop()
        digest = ledger_digest(md)
        end0 = md.segment_end(0)
        lacking = await _missing(client, restarted, lid, seg0.first_entry_id, end0, 0, 5, 3, digest)
        assert lacking and lacking[-1] == max(e for e in range(end0 + 1) if index_stores(0, e, 5, 3)), \
            (restarted, end0, lacking[:3], lacking[-3:])  # its last entry of the segment: the checker's sample
        await client.forget(restarted)

        daemons = our_daemons(c, range(6))
        await asyncio.to_thread(c.bookies[vi].kill)  # index 2 of the old segment dies, with its host
        await asyncio.to_thread(daemons.pop(vi).kill)
        await _wait(lambda: healed(c, [lid], victim), 120, f"ledger {lid} healed (lacking {lacking[:5]}...)")

        md = metadata(c, lid)
        assert list(md.segments[0].ensemble) == [restarted, *first_ensemble[1:2], spare, *first_ensemble[3:]], md
        # each member holds its whole share, every copy's digest checked: all of the old segment (the
        # refilled one included) and the new segment's member that replaced the dead one. (The bookie the
        # client took in at the ensemble change may lack the adds that had met their ack quorum before it:
        # the client does not send those to it. That gap is not this case; it is left out here.)
        checked = [(0, i) for i in range(5)] + [(s_i, seg.ensemble.index(restarted)) for s_i, seg in
                                                enumerate(md.segments[1:], 1) if restarted in seg.ensemble]
        assert len(checked) >= 6, md  # the new segment's dead member was replaced by the restarted bookie
        for s_i, idx in checked:
            seg = md.segments[s_i]
            bookie = seg.ensemble[idx]
            gone = await _missing(client, bookie, lid, seg.first_entry_id, md.segment_end(s_i), idx, 5, 3, digest)
            assert gone == [], (s_i, seg.first_entry_id, idx, bookie, gone[:10])
        ur = await asyncio.to_thread(c.shell, "listunderreplicated")
        assert ur.returncode == 0 and "Under replicated ledger count: 0" in ur.stdout, ur.stdout + ur.stderr
        r = await asyncio.to_thread(c.reader, [lid], password=PW, digest="CRC32C")
        assert r["ok"], r
        assert [(lg["entries_read"], lg["bad_entries"], lg["errors"]) for lg in r["ledgers"]] == [(ENTRIES, 0, [])]
        no_errors(daemons)
    finally:
        for d in daemons.values():
            await asyncio.to_thread(d.stop)
        await client.close()


async def _wait(pred, timeout_s: float, what: str):
    return await asyncio.to_thread(wait_until, pred, timeout_s, what)
