"""``autorecovery workload write|verify``: write ledgers of known content and verify every entry."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from autorecovery import logs
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.workload import Manifest, verify_ledgers, write_ledgers


@click.group("workload")
@click.option("--log-level", default="WARNING", show_default=True)
def workload(log_level: str) -> None:
    """Client-side workload tools."""
    logs.configure(log_level)


@workload.command("write")
@click.option("--zk", "zk_hosts", required=True, help="ZooKeeper connect string")
@click.option("--ledgers-root", default="/ledgers", show_default=True)
@click.option("--ledgers", default=10, show_default=True)
@click.option("--entries", default=100, show_default=True)
@click.option("--entry-size", default=1024, show_default=True, help="bytes")
@click.option("--ensemble", "-e", default=3, show_default=True)
@click.option("--write-quorum", "-w", default=2, show_default=True)
@click.option("--ack-quorum", "-a", default=2, show_default=True)
@click.option("--seed", default=1, show_default=True)
@click.option("--mixed", is_flag=True, help="mixed entry sizes (1 B .. 2 x entry-size)")
@click.option("--manifest", default="workload.json", show_default=True, type=click.Path(path_type=Path))
def write(zk_hosts, ledgers_root, ledgers, entries, entry_size, ensemble, write_quorum, ack_quorum, seed, mixed, manifest):
    """Write LEDGERS ledgers x ENTRIES entries and record them in a manifest."""

    async def go() -> Manifest:
        bk = await BookKeeper.connect(zk_hosts, ledgers_root)
        try:
            return await write_ledgers(bk, ledgers=ledgers, entries=entries, size=entry_size, ensemble=ensemble,
                                       write_quorum=write_quorum, ack_quorum=ack_quorum, seed=seed, mixed=mixed)
        finally:
            await bk.close()

    m = asyncio.run(go())
    m.save(manifest)
    click.echo(f"wrote {len(m.ledgers)} ledgers, {m.total_entries} entries; manifest {manifest}")


@workload.command("verify")
@click.option("--zk", "zk_hosts", required=True)
@click.option("--ledgers-root", default="/ledgers", show_default=True)
@click.option("--manifest", default="workload.json", show_default=True, type=click.Path(path_type=Path, exists=True))
def verify(zk_hosts, ledgers_root, manifest):
    """Read back every entry in the manifest and compare it byte for byte; exits 1 on any difference."""

    async def go():
        bk = await BookKeeper.connect(zk_hosts, ledgers_root)
        try:
            return await verify_ledgers(bk, Manifest.load(manifest))
        finally:
            await bk.close()

    rep = asyncio.run(go())
    click.echo(f"verified {rep.ledgers} ledgers, {rep.entries_ok} entries, {rep.bytes_ok} bytes; "
               f"{len(rep.errors)} errors, {rep.digest_errors} digest errors (recovered from other replicas)")
    for e in rep.errors[:20]:
        click.echo(f"  {e}")
    if not rep.ok:
        raise SystemExit(1)
