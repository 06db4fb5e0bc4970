"""``autorecovery demo`` (``make demo``): the main job on a real local cluster, as a short story.

Phase 1 (foundation): 6 bookies in 3 racks, 20 ledgers x 500 entries (E3/WQ2/AQ2), kill one bookie
with SIGKILL, read everything back (reads fall back to surviving replicas).
Phase 2 (autorecovery, :mod:`autorecovery.cli.demo_recovery`): one autorecovery daemon per bookie; the
Auditor marks the dead bookie's ledgers, the workers copy them, with a progress line; every entry
verified; then the disaster-recovery scenario of BP-54 (rack down, heal, rack back, placement repair,
other rack down, nothing lost).
Phase 3 (:mod:`autorecovery.cli.demo_stock`): the same disaster-recovery story on stock Apache BookKeeper
4.17 Java bookies, with upstream's Java client writing and reading and our daemons healing.

Every printed line is the result of a check (:mod:`autorecovery.cli.demo_checks`); a failed check
prints the table so far with a FAILED row. The last line is the verdict of those checks
(:mod:`autorecovery.cli.demo_verdict`: ``demo: PASS — N of N checks held`` or ``demo: FAIL — …`` naming
the failed check) and the exit code follows it (0 or 1). The autorecovery half is imported like any
module: a broken installation fails the demo instead of silently skipping half of it.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
import time
import traceback
from pathlib import Path

import click

from autorecovery import logs
from autorecovery.cli import demo_recovery, demo_stock
from autorecovery.cli.demo_checks import (
    DemoStepFailed,
    all_processes_stopped,
    processes_dead,
    require,
    writable_bookies,
)
from autorecovery.cli.demo_verdict import FAILED_STEP, verdict, verdict_exit_code
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.workload import verify_ledgers, write_ledgers


class Table:
    """Rows of (step, result, seconds) printed at the end.

    A step's seconds run from its own start: :meth:`begin` (optionally back-dated with ``at``, e.g. a
    heal that starts when its host dies) to :meth:`add`; a step not begun runs from the previous row.
    Steps may overlap (a heal runs while the demo waits for the dead bookie to be unregistered), so
    the column can add up to more than the total (issue 28: a step's time was credited to the next).
    """

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, float]] = []
        self.t0 = time.monotonic()
        self._last = self.t0
        self._begun: dict[str, float] = {}

    def begin(self, step: str, at: float | None = None) -> str:
        """Start ``step`` now (or at ``at``, a ``time.monotonic()`` value); returns ``step``."""
        self._begun[step] = time.monotonic() if at is None else at
        return step

    def add(self, step: str, result: str, end: float | None = None) -> None:
        """Record ``step``; ``end`` (a ``time.monotonic()`` value) when it ended before now."""
        now = time.monotonic()
        self.rows.append((step, result, (now if end is None else end) - self._begun.pop(step, self._last)))
        self._last = now
        click.echo(f"  [{now - self.t0:6.1f}s] {step}: {result}")

    def failed(self, message: str) -> None:
        """Record the step that failed (printed in the table, which is then rendered)."""
        self.add(FAILED_STEP, message)

    def render(self) -> str:
        w1 = max(len(r[0]) for r in self.rows)
        w2 = max(len(r[1]) for r in self.rows)
        line = f"+{'-' * (w1 + 2)}+{'-' * (w2 + 2)}+{'-' * 9}+"
        out = [line, f"| {'step'.ljust(w1)} | {'result'.ljust(w2)} | {'seconds':>7} |", line]
        out += [f"| {a.ljust(w1)} | {b.ljust(w2)} | {c:7.1f} |" for a, b, c in self.rows]
        out += [line, f"total {time.monotonic() - self.t0:.1f} s"]
        return "\n".join(out)


def run_foundation_demo(base: Path, table: Table) -> None:
    """Phase 1; raises :class:`~autorecovery.cli.demo_checks.DemoStepFailed` when a check fails."""
    cluster = LocalCluster(base / "foundation", bookies=6, racks=3)
    try:
        cluster.up()

        async def go() -> None:
            bk = await BookKeeper.connect(cluster.zk_connect, cluster.ledgers_root)
            try:
                step = "start ZooKeeper + 6 bookies in 3 racks"  # timed from the previous row: set-up above
                writable = await writable_bookies(bk.watcher, 6, step)
                racks = sorted({cluster.rack_of(i) for i in cluster.bookies})
                require(len(racks) == 3, step, f"racks {racks}")
                table.add(step, f"{writable} in {len(racks)} racks, zk {cluster.zk_connect}")
                step = table.begin("write 20 ledgers x 500 entries (E3/WQ2/AQ2)")
                m = await write_ledgers(bk, ledgers=20, entries=500, size=1024, ensemble=3, write_quorum=2, ack_quorum=2)
                require(len(m.ledgers) == 20 and m.total_entries == 20 * 500, step,
                        f"{len(m.ledgers)} ledgers, {m.total_entries} entries acknowledged")
                table.add(step, f"{m.total_entries} entries acknowledged")
                victim = 2
                step = table.begin("kill -9 one bookie")
                dead = cluster.kill_bookie(victim, signal.SIGKILL)
                processes_dead(cluster, [cluster.bookies[victim].name], step)
                table.add(step, f"{dead} (process gone)")
                step = table.begin("read back every entry")
                rep = await verify_ledgers(bk, m)
                require(rep.ok and rep.entries_ok == m.total_entries, step,
                        f"{rep.entries_ok}/{m.total_entries} ok: " + "; ".join(rep.errors[:10]))
                table.add(step, f"{rep.entries_ok}/{m.total_entries} ok, all entries match")
            finally:
                await bk.close()

        asyncio.run(go())
    finally:
        cluster.down()
    table.add("shut the cluster down", all_processes_stopped(cluster))


@click.command("demo")
@click.option("--dir", "base_dir", type=click.Path(path_type=Path), default=None,
              help="working directory (default: a temporary one, removed afterwards)")
@click.option("--foundation-only", is_flag=True, help="only the client/bookie part, without autorecovery")
@click.option("--skip-stock", is_flag=True,
              help="skip part 3 (stock Apache BookKeeper 4.17 Java bookies; needs `make upstream` and Java 17)")
def demo(base_dir: Path | None, foundation_only: bool, skip_stock: bool) -> None:
    """Run the end-to-end demo on a real local cluster, print a summary table and, last, one verdict line
    (``demo: PASS — N of N checks held`` / ``demo: FAIL — …``); exits 0 on PASS, 1 on FAIL."""
    logs.configure("WARNING", fmt="console")  # the story goes to stdout; only problems are logged
    tmp = base_dir or Path(tempfile.mkdtemp(prefix="autorecovery-demo-"))
    table = Table()
    failures: list[str] = []
    try:
        click.echo("autorecovery demo")
        try:
            run_foundation_demo(tmp, table)
            if not foundation_only:
                demo_recovery.run(tmp, table)
                if not skip_stock:
                    demo_stock.run(tmp, table)
        except DemoStepFailed as exc:
            failures.append(f"{exc.step}: {exc.detail}")
            table.failed(exc.format_message())
        except click.ClickException as exc:
            failures.append(exc.format_message())
            table.failed(exc.format_message())
        except Exception as exc:  # noqa: BLE001 - a crash is a failed demo too: its verdict is still printed
            click.echo(traceback.format_exc(), err=True)
            failures.append(f"{type(exc).__name__}: {exc}")
            table.failed(failures[-1])
    finally:
        if base_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    click.echo("")
    click.echo(table.render())
    line = verdict([row[0] for row in table.rows], failures)
    click.echo(line)
    code = verdict_exit_code(line)
    if code:
        raise SystemExit(code)
