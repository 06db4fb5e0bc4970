"""``autorecovery export`` and ``autorecovery report``: offline capacity, placement and failure-domain
reports on PySpark (issue 11). See docs/reports.md."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from autorecovery.cli.config import EXIT_CONFIG, location_options, parse_sets, settings_from_cli
from autorecovery.cli.progress import Progress
from autorecovery.cli.params import INT64_MAX, INT64_MIN, FiniteFloatRange
from autorecovery.config.keys.model import INT_MAX
from autorecovery.errors import AutoRecoveryError, ConfigError

#: exit code of a report or export that started and failed (bad input exits EXIT_CONFIG, 2)
EXIT_FAILED = 1


@click.command("export")
@location_options
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Snapshot directory to write.")
@click.option("--concurrency", type=click.IntRange(1, INT_MAX), default=None,
              help="ZooKeeper reads in flight (default auditorMaxNumberOfConcurrentOpenLedgerOperations, 500).")
@click.option("--synthetic", is_flag=True, help="Generate a synthetic snapshot instead of reading a cluster.")
@click.option("--ledgers", type=click.IntRange(0, 100_000_000), default=100_000, show_default=True, help="--synthetic: ledgers.")
@click.option("--bookies", type=click.IntRange(1, 1_000_000), default=100, show_default=True, help="--synthetic: bookies.")
@click.option("--racks", type=click.IntRange(1, 1_000_000), default=10, show_default=True, help="--synthetic: racks.")
@click.option("--zones", type=click.IntRange(1, 1_000_000), default=3, show_default=True, help="--synthetic: zones (racks spread over them).")
@click.option("--regions", type=click.IntRange(1, 1_000_000), default=1, show_default=True, help="--synthetic: regions.")
@click.option("--violations", type=FiniteFloatRange(0, 1), default=0.02, show_default=True,
              help="--synthetic: fraction of closed ledgers placed in a single rack.")
@click.option("--seed", type=click.IntRange(INT64_MIN, INT64_MAX), default=1, show_default=True, help="--synthetic: random seed.")
def export_command(conf, zk, ledgers_root, sets, out, concurrency, synthetic, ledgers, bookies, racks, zones,
                   regions, violations, seed) -> None:
    """Write a metadata snapshot (Parquet: ledgers, segments, bookies, markers + manifest.json)."""
    if synthetic:
        from autorecovery.reports.synthetic import generate

        bar = Progress("export")
        bar.step(f"generating {ledgers} synthetic ledgers")
        try:
            m = generate(Path(out), ledgers=ledgers, bookies=bookies, racks=racks, zones=zones, regions=regions,
                         violations=violations, seed=seed)
        except ValueError as exc:
            bar.close()
            raise click.UsageError(str(exc)) from exc
        bar.close()
        click.echo(f"synthetic snapshot: {m['counts']} -> {out}")
        return
    try:
        settings = settings_from_cli(conf, zk, ledgers_root, sets)
    except ConfigError as exc:
        click.echo(f"ERROR: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    from autorecovery.admin import ops
    from autorecovery.reports.export import export

    limit = concurrency or settings.auditor.auditor_max_number_of_concurrent_open_ledger_operations

    bar = Progress("export")

    async def go():
        async with ops.open_admin(settings) as ctx:
            bar.step("listing ledgers")
            return await export(ctx, Path(out), concurrency=limit,
                                progress=lambda done, total: bar.count(done, total, "ledgers"))

    try:
        m = asyncio.run(go())
    except AutoRecoveryError as exc:
        bar.close()
        click.echo(f"ERROR: {_one_line(exc)}", err=True)
        sys.exit(EXIT_FAILED)
    bar.close()
    click.echo(f"snapshot of {settings.ledgers_root}: {json.dumps(m['counts'])} -> {out}")


@click.command("report")
@click.argument("which", type=click.Choice(["capacity", "placement", "risk", "all"]))
@click.option("--snapshot", type=click.Path(exists=True, file_okay=False), required=True)
@click.option("--out", "out", type=click.Path(file_okay=False), required=True)
@click.option("--master", default=None, help="Spark master URL (default local[*]); or run under spark-submit.")
@click.option("--what-if", "what_if", multiple=True, metavar="KEY=VALUE",
              help="Placement keys to evaluate instead of the snapshot's (e.g. minNumRacksPerWriteQuorum=3).")
@click.option("--assumed-rate-mbps", type=FiniteFloatRange(0, 1e9, min_open=True), default=None,
              help="One daemon's copy rate (MB/s; bench/heal.py measures it); replicationRateByBytes caps it "
                   "when set. Default: the rate measured from the snapshot's heal history, else 50.")
@click.option("--conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
              help="Spark configuration (e.g. spark.executor.memory=1g), as spark-submit --conf.")
@click.option("--daemons", type=click.IntRange(1, 100_000), default=None,
              help="A separate fleet of N autorecovery daemons (default: one per live bookie, lost with it).")
@click.option("--decommission", default=None, metavar="BOOKIE_ID",
              help="What-if: decommission this bookie (what moves, where, how long, placement after).")
@click.option("--add-bookies", "add_bookies", default=None, metavar="RACK=N",
              help="What-if: add N bookies to RACK (capacity and placement effect).")
@click.option("--no-k-bookies", "no_k_bookies", is_flag=True,
              help="Skip the worst loss of any 1, 2 and 3 bookies (one more pass over the ledgers for 3).")
def report_command(which, snapshot, out, master, what_if, assumed_rate_mbps, spark_conf, daemons, decommission,
                   add_bookies, no_k_bookies) -> None:
    """Capacity, placement (with the BP-54 repair plan) and failure-domain risk from a snapshot.

    Every input is checked before Spark starts; exit 2 (one line on stderr) for a bad one, 1 when the
    run fails (docs/reports.md, "Exit codes").
    """
    from autorecovery.reports.input_checks import BadInput, check_master, check_snapshot, check_what_if

    try:
        overrides = parse_sets(what_if)
        conf = parse_sets(spark_conf)
        check_master(master)
        manifest = check_snapshot(Path(snapshot))
        check_what_if(overrides, manifest.get("placement", {}))
        add = None
        if add_bookies:
            rack, _, n = add_bookies.partition("=")
            if not rack or not n.strip().isdigit() or int(n) < 1:
                raise ConfigError(f"--add-bookies {add_bookies!r}: expected RACK=N with N >= 1")
            add = (rack, int(n))
    except (BadInput, ConfigError, click.BadParameter) as exc:
        click.echo(f"ERROR: {_one_line(exc)}", err=True)
        sys.exit(EXIT_CONFIG)
    from autorecovery.reports.build import run

    bar = Progress("report")
    try:
        summary = run(Path(snapshot), Path(out), which, master=master, what_if=overrides,
                      assumed_rate=None if assumed_rate_mbps is None else assumed_rate_mbps * 1e6, spark_conf=conf, progress=bar.step, daemons=daemons,
                      decommission=decommission, add_bookies=add, k_bookies=not no_k_bookies)
    except BadInput as exc:
        bar.close()
        click.echo(f"ERROR: {_one_line(exc)}", err=True)
        sys.exit(EXIT_CONFIG)
    except (AutoRecoveryError, ConfigError) as exc:
        bar.close()
        click.echo(f"ERROR: {_one_line(exc)}", err=True)
        sys.exit(EXIT_FAILED)
    except Exception as exc:  # noqa: BLE001 - Spark/py4j failures: one line, not a JVM stack trace
        bar.close()
        log = Path(out) / "spark.log"
        click.echo(f"ERROR: the report failed: {_one_line(exc)}" + (f" (Spark's log: {log})" if log.exists() else ""),
                   err=True)
        sys.exit(EXIT_FAILED)
    bar.close()
    _terminal(summary)
    click.echo(f"report: {Path(out) / 'report.html'} (CSV, Parquet and summary.json beside it)")


def _one_line(exc: BaseException) -> str:
    """The first meaningful line of an error (a py4j error's Java message, without its stack trace)."""
    text = getattr(exc, "desc", None) or getattr(exc, "message", None) or str(exc) or type(exc).__name__
    for line in str(text).splitlines():
        line = line.strip()
        if line and not line.startswith(("at ", "Traceback", "File ")):
            return line[:300]
    return type(exc).__name__


def _verdicts(counts: dict) -> str:
    return ", ".join(f"{n:,} {v.replace('_', ' ').lower()}" for v, n in counts.items()) or "no closed ledger"


def _terminal(s: dict) -> None:
    """A short summary on the terminal, in the page's units (binary bytes, s / min / h)."""
    from autorecovery.reports.units import duration, size

    cap = s.get("capacity")
    if cap:
        click.echo(f"capacity: {cap['bookies']} bookies, {size(cap['used_bytes'])} used by ledgers, "
                   f"{size(cap['free_bytes'])} free, growing {size(cap['growth_bytes_per_day'])}/day, "
                   f"bookie imbalance max/mean {cap['imbalance_bookie_max_over_mean'] or 0:.2f}")
    pl = s.get("placement")
    if pl:
        click.echo(f"placement now: {_verdicts(pl['current'])}")
        if pl.get("under_what_if"):
            wi = ", ".join(f"{k}={v}" for k, v in pl["what_if"].items())
            click.echo(f"placement with {wi}: {_verdicts(pl['under_what_if'])}")
        r = pl["repair"]
        click.echo(f"BP-54 repair: {r['ledgers_to_mark']} ledgers to mark, {r['swaps']} swaps, "
                   f"{size(r['bytes_to_copy'])} to copy, about {duration(r['copy_time_s'])} with {r['workers']} daemons"
                   f"{' (assumed rate)' if r['rate_assumed'] else ''}; {r['ledgers_without_fix']} without a fix")
    wb = s.get("what_if_bookies")
    if wb:
        for k in ("k1", "k2", "k3"):
            if wb[k]:
                w = wb[k][0]
                click.echo(f"worst loss of {k[1]} bookie(s) {', '.join(w['bookies'])}: {w['ledgers_data_loss']} ledgers lose "
                           f"data, {w['ledgers_below_ack_quorum']} fall below AQ")
    dc = s.get("what_if_decommission")
    if dc:
        click.echo(f"decommission {dc['bookie']}: {dc['segments_to_move']} segments, {size(dc['bytes_to_move'])} "
                   f"to move, about {duration(dc['move_time_s'])}; {dc['segments_losing_placement']} segments lose "
                   f"placement, {dc['segments_without_target']} without a target")
    rk = s.get("risk")
    if rk and rk.get("worst"):
        w = rk["worst"]
        click.echo(f"risk: worst domain {w['kind']} {w['name']}: {w['ledgers_data_loss']} ledgers lose data, "
                   f"{w['ledgers_below_ack_quorum']} fall below AQ; racks whose loss loses data: "
                   f"{len(rk['racks_whose_loss_loses_data'])}")
        click.echo(f"heal times: {rk['heal_model']['rate_source']}")
