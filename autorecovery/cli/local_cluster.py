"""``autorecovery local-cluster up|down|status``: a real cluster of processes on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import click

from autorecovery.testing.local_cluster import LocalCluster


@click.group("local-cluster")
def local_cluster() -> None:
    """Start, inspect and stop a local cluster (ZooKeeper + bookies on 127.0.0.x)."""


@local_cluster.command("up")
@click.option("--bookies", default=3, show_default=True, help="number of bookies")
@click.option("--racks", default=1, show_default=True, help="number of racks (bookies assigned round robin)")
@click.option("--dir", "base_dir", default=".cluster", show_default=True, type=click.Path(path_type=Path))
@click.option("--ledgers-root", default="/ledgers", show_default=True)
def up(bookies: int, racks: int, base_dir: Path, ledgers_root: str) -> None:
    """Start ZooKeeper and BOOKIES bookies; prints the ZooKeeper connect string."""
    if (base_dir / "cluster.json").exists():
        old = LocalCluster.load(base_dir)
        if any(old.status().values()):
            raise click.ClickException(f"a cluster is already running from {base_dir} (local-cluster down first)")
    c = LocalCluster(base_dir, bookies=bookies, racks=racks, ledgers_root=ledgers_root)
    try:
        c.up()
    except Exception as exc:
        c.down()
        raise click.ClickException(f"cluster failed to start: {exc}") from exc
    for i in sorted(c.bookies):
        click.echo(f"bookie {c.bookie_id(i)}\t{c.rack_of(i)}\tpid {c.bookies[i].pid}")
    click.echo(c.zk_connect)


@local_cluster.command("down")
@click.option("--dir", "base_dir", default=".cluster", show_default=True, type=click.Path(path_type=Path))
def down(base_dir: Path) -> None:
    """Stop every process that `up` started (by pid), and nothing else."""
    try:
        c = LocalCluster.load(base_dir)
    except FileNotFoundError as exc:
        raise click.ClickException(f"no cluster state at {base_dir / 'cluster.json'}") from exc
    stopped = c.down()
    click.echo(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@local_cluster.command("status")
@click.option("--dir", "base_dir", default=".cluster", show_default=True, type=click.Path(path_type=Path))
def status(base_dir: Path) -> None:
    """Print each process and whether it is alive, as JSON."""
    try:
        c = LocalCluster.load(base_dir)
    except FileNotFoundError as exc:
        raise click.ClickException(f"no cluster state at {base_dir / 'cluster.json'}") from exc
    click.echo(json.dumps({"zk_connect": c.zk_connect, "processes": c.status(), "racks": c.rack_mapping()}, indent=2))
