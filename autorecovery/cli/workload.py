"""``autorecovery workload write|verify``: write ledgers of known content and verify every entry.

``write`` records every acknowledged entry (ledger id, entry id, length, payload hash) in an ack log
(``--acks``, default ``.cluster/workload.acks`` when ``./.cluster`` exists, i.e. beside the local cluster,
else ``./workload.acks``) as the acknowledgement arrives; ``verify --acks`` proves that no
acknowledged entry was lost and names each one that was. ``-D key=value`` passes client placement
settings (upstream keys, e.g. ``-D ensemblePlacementPolicy=rackaware -D minNumRacksPerWriteQuorum=2``);
racks come from the cluster's ``/bookies`` document, as for a Pulsar broker.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from autorecovery import logs
from autorecovery.cli.local_cluster import parse_defines
from autorecovery.cli.params import INT64_MAX, INT64_MIN, FiniteFloatRange
from autorecovery.config.keys.model import INT_MAX, YEAR_S
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.errors import ConfigError, ZooKeeperError
from autorecovery.placement.config import PlacementConfig
from autorecovery.workload import (
    ACK_LOG_NAME,
    MANIFEST_NAME,
    AckLog,
    Manifest,
    default_verify_inputs,
    default_workload_dir,
    read_ack_log,
    verify_acks,
    verify_ledgers,
    write_continuous,
    write_ledgers,
)

T = TypeVar("T")

#: seconds to wait for a ZooKeeper session (upstream's default zkTimeout) before explaining why not
CONNECT_TIMEOUT_S = 10.0


@click.group("workload")
@click.option("--log-level", default="WARNING", show_default=True)
def workload(log_level: str) -> None:
    """Client-side workload tools."""
    logs.configure(log_level)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``; a failed ZooKeeper connection (or another of our errors) is one ``ERROR:``
    line on stderr and exit code 1, not a traceback (issue 28)."""
    try:
        return asyncio.run(coro)
    except ZooKeeperError as exc:
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(1)


def _placement(defines: tuple[str, ...]) -> dict[str, str]:
    props = parse_defines(defines)
    try:
        PlacementConfig.from_properties(props)
    except ConfigError as exc:
        raise click.BadParameter(f"{exc} (only client placement keys are accepted)", param_hint="-D") from exc
    return props


@workload.command("write")
@click.option("--zk", "zk_hosts", required=True, help="ZooKeeper connect string")
@click.option("--ledgers-root", default="/ledgers", show_default=True)
@click.option("--ledgers", default=10, show_default=True, type=click.IntRange(1, 1_000_000),
              help="ledgers to write (with --continuous: ledgers open at once)")
@click.option("--entries", default=100, show_default=True, type=click.IntRange(0, INT_MAX),
              help="entries per ledger (with --continuous: entries before a ledger is rolled)")
@click.option("--entry-size", default=1024, show_default=True, type=click.IntRange(0, 64 * 1024 * 1024),
              help="bytes (at most 64 MiB)")
@click.option("--ensemble", "-e", default=3, show_default=True, type=click.IntRange(1, 1024))
@click.option("--write-quorum", "-w", default=2, show_default=True, type=click.IntRange(1, 1024))
@click.option("--ack-quorum", "-a", default=2, show_default=True, type=click.IntRange(1, 1024))
@click.option("--seed", default=1, show_default=True, type=click.IntRange(INT64_MIN, INT64_MAX))
@click.option("--mixed", is_flag=True, help="mixed entry sizes (1 B .. 2 x entry-size)")
@click.option("--manifest", default=None, type=click.Path(path_type=Path),
              help="manifest of a batch write [default: .cluster/workload.json when ./.cluster exists "
                   "(local-cluster's directory), else ./workload.json]")
@click.option("--acks", "acks_path", default=None, type=click.Path(path_type=Path),
              help="ack log: every acknowledged entry is appended here [default: .cluster/workload.acks when "
                   "./.cluster exists, else ./workload.acks]")
@click.option("-D", "defines", multiple=True, metavar="KEY=VALUE",
              help="client placement setting (upstream key), repeatable")
@click.option("--continuous", is_flag=True, help="write until SIGINT/SIGTERM or --duration")
@click.option("--rate", default=100.0, show_default=True, type=FiniteFloatRange(0, 1e9, min_open=True), help="with --continuous: entries/s, all ledgers together")
@click.option("--duration", default=None, type=FiniteFloatRange(0, YEAR_S, min_open=True), help="with --continuous: stop after this many seconds")
def write(zk_hosts, ledgers_root, ledgers, entries, entry_size, ensemble, write_quorum, ack_quorum, seed, mixed,
          manifest, acks_path, defines, continuous, rate, duration):
    """Write LEDGERS ledgers x ENTRIES entries and record them in a manifest and the ack log; with
    --continuous, write at --rate entries/s until stopped (the ack log is the record)."""
    props = _placement(defines)
    where = default_workload_dir()
    manifest = manifest if manifest is not None else where / MANIFEST_NAME
    acks_path = acks_path if acks_path is not None else where / ACK_LOG_NAME
    if not continuous and duration is not None:
        raise click.BadParameter("--duration needs --continuous", param_hint="--duration")
    if continuous and rate <= 0:
        raise click.BadParameter(f"must be > 0 entries/s, got {rate}", param_hint="--rate")
    ack_log = AckLog(acks_path)

    async def go():
        bk = await BookKeeper.connect(zk_hosts, ledgers_root, placement_properties=props,
                                      connect_timeout_s=CONNECT_TIMEOUT_S)
        try:
            if not continuous:
                return await write_ledgers(bk, ledgers=ledgers, entries=entries, size=entry_size, ensemble=ensemble,
                                           write_quorum=write_quorum, ack_quorum=ack_quorum, seed=seed, mixed=mixed,
                                           ack_log=ack_log)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            click.echo(f"writing {rate:g} entries/s to {ledgers} ledgers; acks to {acks_path}; "
                       "SIGINT/SIGTERM stops", err=True)
            try:
                return await write_continuous(bk, ack_log, stop, rate=rate, duration_s=duration, ledgers=ledgers,
                                              entries_per_ledger=entries, size=entry_size, ensemble=ensemble,
                                              write_quorum=write_quorum, ack_quorum=ack_quorum, seed=seed,
                                              mixed=mixed)
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
        finally:
            await bk.close()

    try:
        result = _run(go())
    finally:
        ack_log.close()
    if continuous:
        click.echo(f"acknowledged {result.acked} entries in {len(result.ledgers)} ledgers in "
                   f"{result.elapsed_s:.1f}s; {result.failed} adds failed (not recorded); ack log {acks_path}")
        return
    result.save(manifest)
    click.echo(f"wrote {len(result.ledgers)} ledgers, {result.total_entries} entries; manifest {manifest}; "
               f"ack log {acks_path}")


@workload.command("verify")
@click.option("--zk", "zk_hosts", required=True)
@click.option("--ledgers-root", default="/ledgers", show_default=True)
@click.option("--manifest", default=None, type=click.Path(path_type=Path, exists=True),
              help="check every entry of a batch write's manifest")
@click.option("--acks", "acks_path", default=None, type=click.Path(path_type=Path, exists=True),
              help="check every acknowledged entry of an ack log")
@click.option("--recovery/--no-recovery", default=True, show_default=True,
              help="with --acks: open ledgers still open with recovery (fences them; run after the writer stopped)")
def verify(zk_hosts, ledgers_root, manifest, acks_path, recovery):
    """Read back every entry and compare it byte for byte (manifest) or by length and hash (ack log);
    exits 1 on any difference and names every lost entry. Without --manifest/--acks: workload.json
    (in ./.cluster when it exists, then in the current directory), else workload.acks (same order)."""
    if manifest is None and acks_path is None:
        manifest, acks_path = default_verify_inputs()
        if manifest is None and acks_path is None:
            raise click.UsageError("nothing to verify: give --manifest or --acks (no workload.json or "
                                   "workload.acks in ./.cluster or the current directory)")
    records = None
    if acks_path is not None:
        try:
            records = read_ack_log(acks_path)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc

    async def go():
        bk = await BookKeeper.connect(zk_hosts, ledgers_root, connect_timeout_s=CONNECT_TIMEOUT_S)
        try:
            rep = await verify_ledgers(bk, Manifest.load(manifest)) if manifest is not None else None
            arep = await verify_acks(bk, records, recovery=recovery) if records is not None else None
            return rep, arep
        finally:
            await bk.close()

    rep, arep = _run(go())
    ok = True
    if rep is not None:
        click.echo(f"verified {rep.ledgers} ledgers, {rep.entries_ok} entries, {rep.bytes_ok} bytes; "
                   f"{len(rep.errors)} errors, {rep.digest_errors} digest errors (recovered from other replicas)")
        for e in rep.errors[:20]:
            click.echo(f"  {e}")
        ok = ok and rep.ok
    if arep is not None:
        click.echo(f"verified {arep.records} acknowledged entries in {arep.ledgers} ledgers: {arep.entries_ok} ok, "
                   f"{arep.bytes_ok} bytes; {len(arep.lost)} lost; {arep.digest_errors} digest errors "
                   "(recovered from other replicas)")
        for e in arep.lost:
            click.echo(f"  LOST {e}")
        ok = ok and arep.ok
    if not ok:
        raise SystemExit(1)
