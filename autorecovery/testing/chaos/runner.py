"""A seeded fault campaign over a real local cluster, ending with a report (EDGE; issue 26).

:func:`run_campaign` starts a :class:`LocalCluster` (ZooKeeper — a 3-member ensemble by default —
``bookies`` bookie processes and one autorecovery daemon process per bookie, each daemon reaching
ZooKeeper through its own :class:`TcpProxy`; bookie 0 in its own network namespace with nftables and tc
on its links, the last bookie on a size-limited tmpfs, when the machine allows), writes continuously
with the project's ledger client (:func:`autorecovery.workload.write_continuous`, E3/WQ3/AQ2, every
acknowledged entry in an ack log), injects the faults of
:func:`autorecovery.testing.chaos.schedule.schedule` one after another (waiting before each until every
process is up, every bookie registered and the ZooKeeper quorum serving; with ``lanes=2`` the network
faults run in a second lane at the same time), then stops the faults and the writer and checks (see
:class:`Report`). A kind the machine refuses is reported as skipped with the exact error and its
scheduled faults become ``bookie_kill9`` (the schedule keeps its length). ``bench/chaos.py`` is the
command; docs/chaos.md the manual. Units: seconds for every duration, bytes for RSS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.testing.chaos import disk as chaos_disk
from autorecovery.testing.chaos.checks import Sampler, bound_episodes, copies_missing, error_lines, queue_dump, queue_state
from autorecovery.testing.chaos.faults import Injector, until
from autorecovery.testing.chaos.trend import FDS_FLAT_PER_H, MIN_SPAN_S, RSS_FLAT_MIB_PER_H, WARMUP_S
from autorecovery.testing.chaos.schedule import CHEAP_KINDS, LIGHT_KINDS, Fault, schedule, usable_kinds
from autorecovery.testing.chaos.cluster import ChaosCluster
from autorecovery.testing.chaos.stock import (StockChaosCluster, StockWriter, read_stock_acks, upstream_placement_violations,
                                              upstream_under_replicated,
                                              verify_stock_acks)
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.testing.tcp_proxy import TcpProxy
from autorecovery.workload import AckLog, read_ack_log, verify_acks, write_continuous
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

#: seconds between the auditor's replicas checks in a campaign
REPLICAS_CHECK_S = 10

#: daemon settings: react in seconds (as the integration tests' FAST settings)
DAEMON_PROPS = {
    "lostBookieRecoveryDelay": "0",
    "openLedgerRereplicationGracePeriod": "1000",
    "rwRereplicateBackoffMs": "200",
    "lockReleaseOfFailedLedgerGracePeriod": "2000",
    "zkTimeout": "3000",
    "auditorPeriodicCheckInterval": "0",
    "auditorPeriodicBookieCheckInterval": "0",
    "getBookieInfoIntervalSeconds": "1",
    "getBookieInfoRetryIntervalSeconds": "1",
    "httpServerPort": "0",
    "shutdownTimeoutSeconds": "15",
    # the replicas check finds entries a write left at fewer than WQ copies (an add acknowledged by AQ
    # bookies whose ensemble could not be changed, e.g. no writable bookie to replace a full one) and
    # marks them for the workers; the settle phase waits for two of its runs after the faults
    "auditorReplicasCheckInterval": str(REPLICAS_CHECK_S),
    "auditorReplicasCheckMarkUnderReplicated": "true",
}

#: seconds between the auditor's placement policy checks on the stock cluster
PLACEMENT_CHECK_S = 20

#: the stock cluster's daemons, ours and AutoRecoveryMain alike, run the placement policy check and BP-54's
#: repair (both off by default, upstream's and ours): under partitions and kills upstream's client places new
#: ensembles best-effort (``enforceMinNumRacksPerWriteQuorum`` off), and a heal with no adhering bookie left
#: takes the best there is, so only the repair brings such ensembles back to the policy that upstream's
#: placement check judges at the end
STOCK_PLACEMENT_PROPS = {
    "auditorPeriodicPlacementPolicyCheckInterval": str(PLACEMENT_CHECK_S),
    "repairedPlacementPolicyNotAdheringBookieEnabled": "true",
}


@dataclass
class CampaignConfig:
    """A campaign: ``seed``; ``faults`` budget; ``duration_s`` cap on the fault phase (s); ``bookies``
    (one daemon each); ``zk_members`` (1, or 3 for the ensemble faults); ``disk_full_mb`` size (MiB) of the last
    bookie's tmpfs data dir (0: none, and no disk-full fault); writer ``rate`` (entries/s) and ``entry_size`` (bytes); hold bounds (s) of each
    fault; ``settle_s`` bound on the wait for an empty queue after the faults; ``kinds`` to draw from (a kind
    repeated is weighted); ``witness`` a node no fault kills (see :attr:`Injector.witness`)."""

    base_dir: Path
    seed: int = 1
    faults: int = 30
    duration_s: float = 300.0
    bookies: int = 5
    rate: float = 100.0
    entry_size: int = 512
    min_hold_s: float = 0.5
    max_hold_s: float = 3.0
    settle_s: float = 120.0
    kinds: tuple[str, ...] = CHEAP_KINDS
    zk_members: int = 3
    disk_full_mb: int = 128
    #: the soak witness node (its bookie and daemon are never killed: their RSS and fds trends span
    #: the whole run), or None
    witness: int | None = None
    #: 1: one fault at a time; 2: the network faults (:data:`LIGHT_KINDS`) run in a second lane,
    #: concurrently with the process, ZooKeeper and disk faults
    lanes: int = 1
    #: "ours" (our reference bookies, our client writing) or "stock" (Java bookies, upstream's client
    #: writing, AutoRecoveryMain on ``java_nodes``: :mod:`autorecovery.testing.chaos.stock`)
    cluster: str = "ours"
    #: stock cluster: nodes whose daemon is upstream's AutoRecoveryMain; racks of the bookies; writer threads
    java_nodes: tuple[int, ...] = (5,)
    racks: int = 3
    writers: int = 4
    #: seconds a ledger may stay under-replicated after the end of the last fault before its heal,
    #: unless a blocked reason is named for it throughout (:func:`bound_episodes`)
    bound_s: float = 60.0


@dataclass
class Report:
    """What a campaign did and found. Fields named in :data:`MUST_BE_ZERO` must be 0 for a pass, and
    ``entries_read_back`` must equal ``entries_acked``."""

    seed: int
    schedule: list[str]
    skipped_kinds: dict[str, str]
    faults_by_kind: dict[str, int] = field(default_factory=dict)
    fault_log: list[str] = field(default_factory=list)
    fault_errors: list[str] = field(default_factory=list)
    fault_phase_s: float = 0.0
    entries_acked: int = 0
    entries_read_back: int = 0
    entries_lost: int = 0
    lost_sample: list[str] = field(default_factory=list)
    digest_errors: int = 0
    adds_failed: int = 0
    ledgers_written: int = 0
    ledgers_marked: int = 0
    ledgers_healed: int = 0
    settle_s: float = 0.0
    settle_timeouts: list[str] = field(default_factory=list)
    markers_left: int = 0
    locks_left: int = 0
    ledgers_checked: int = 0
    copies_missing: int = 0
    copies_missing_ledgers: dict[int, str] = field(default_factory=dict)
    daemons_alive: int = 0
    daemons_total: int = 0
    daemons_dead: int = 0
    error_lines: int = 0
    error_sample: list[str] = field(default_factory=list)
    longest_under_replicated_s: float = 0.0
    longest_under_replicated_ledger: int | None = None
    #: name → :meth:`Trends.summary` (RSS and fds of every bookie and daemon over the run)
    procs: dict[str, dict[str, float | int | str]] = field(default_factory=dict)
    #: the ZooKeeper servers (``host:port``) and the soak witness node (None: none)
    zk_members: list[str] = field(default_factory=list)
    witness: int | None = None
    cluster: str = "ours"
    #: the bound (s) and the episodes past it with no reason named throughout (must be none)
    bound_s: float = 60.0
    over_bound: list[str] = field(default_factory=list)
    #: the ten longest under-replication episodes, with their reasons
    longest_episodes: list[str] = field(default_factory=list)
    #: stock cluster: what upstream's shell ``listunderreplicated`` reported when not empty (must be none)
    upstream_under_replicated: list[str] = field(default_factory=list)
    #: stock cluster: segments of closed ledgers that upstream's placement check FAILs (must be none)
    upstream_placement_violations: list[str] = field(default_factory=list)
    #: stock cluster: ack-log lines whose hash is not the payload's (must be none)
    ack_hash_errors: list[str] = field(default_factory=list)
    #: stock cluster: AutoRecoveryMain restarts by the campaign's supervisor after it exited on its own session
    #: expiry (upstream's ExitCode.ZK_EXPIRED), one line each (reported; upstream's documented behaviour)
    supervisor_restarts: list[str] = field(default_factory=list)
    #: stock cluster: the Java writer's summary (acked, adds failed, ledgers created...)
    writer: dict[str, object] = field(default_factory=dict)

    def must_be_zero(self) -> dict[str, int]:
        """Each :data:`MUST_BE_ZERO` field → its count (a list's length); all 0 for a pass."""
        return {k: len(v) if isinstance(v, list) else int(v) for k, v in asdict(self).items() if k in MUST_BE_ZERO}

    @property
    def passed(self) -> bool:
        """True when every :meth:`must_be_zero` figure is 0 and every acknowledged entry was read back."""
        return not any(self.must_be_zero().values()) and self.entries_read_back == self.entries_acked

    def to_json(self) -> str:
        """The report as indented JSON (every field, plus ``passed``), keys sorted."""
        return json.dumps({**asdict(self), "passed": self.passed}, indent=2, sort_keys=True)

    def to_text(self) -> str:
        """The report as text, one figure a line, each must-be-zero figure marked so; then the RSS/fd trend
        per process, the skipped kinds with their reasons and samples (at most 10) of what failed."""
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.faults_by_kind.items())) or "none"
        lines = [
            f"chaos campaign, seed {self.seed}, {self.cluster} cluster: {'PASS' if self.passed else 'FAIL'}",
            f"  faults injected       {sum(self.faults_by_kind.values())} in {self.fault_phase_s:.0f}s: {kinds}",
            f"  fault errors          {len(self.fault_errors)} (must be 0)",
            f"  ZooKeeper             {len(self.zk_members)} server(s) {','.join(self.zk_members)}; soak witness "
            f"{'none' if self.witness is None else f'node {self.witness} (never killed)'}",
            f"  entries acknowledged  {self.entries_acked} ({self.adds_failed} adds failed, never acknowledged)",
            f"  read back, digest ok  {self.entries_read_back} (must be all); lost {self.entries_lost}, "
            f"digest errors {self.digest_errors}",
            f"  ledgers written       {self.ledgers_written}; marked {self.ledgers_marked}, healed {self.ledgers_healed}",
            f"  left after settle     markers {self.markers_left}, locks {self.locks_left} (must be 0; "
            f"settled in {self.settle_s:.1f}s)",
            f"  settle waits timed out {len(self.settle_timeouts)} (must be 0) {'; '.join(self.settle_timeouts)}",
            f"  copies missing        {self.copies_missing} of {self.ledgers_checked} closed ledgers (must be 0)",
            f"  daemons alive         {self.daemons_alive}/{self.daemons_total}",
            f"  ERROR lines           {self.error_lines} (must be 0)",
            f"  longest under-repl.   {self.longest_under_replicated_s:.1f}s after its bookie was lost "
            f"(ledger {self.longest_under_replicated_ledger})",
            f"  past the {self.bound_s:.0f}s bound  {len(self.over_bound)} episodes with no reason named (must be 0)",
        ]
        if self.cluster == "stock":
            lines += [f"  upstream listunderrep. {len(self.upstream_under_replicated)} (must be 0) "
                      f"{'; '.join(self.upstream_under_replicated)[:400]}",
                      f"  upstream placement    {len(self.upstream_placement_violations)} failing segments (must be 0) "
                      f"{'; '.join(self.upstream_placement_violations)[:400]}",
                      f"  ack-log hash errors   {len(self.ack_hash_errors)} (must be 0)",
                      f"  supervisor restarts   {len(self.supervisor_restarts)} (AutoRecoveryMain exited on its session "
                      f"expiry, as upstream does)",
                      f"  Java writer           {json.dumps(self.writer, sort_keys=True)[:400]}"]
        verdicts = [p["verdict"] for p in self.procs.values()]
        lines.append(f"  RSS and fds trend     {verdicts.count('flat')} flat, {verdicts.count('growing')} growing, "
                     f"{verdicts.count('too short')} too short (flat: slope of the longest life <= {RSS_FLAT_MIB_PER_H:g} "
                     f"MiB/h and <= {FDS_FLAT_PER_H:g} fds/h over >= {MIN_SPAN_S:.0f}s after {WARMUP_S:.0f}s warm-up)")
        for name, p in sorted(self.procs.items()):
            mib = {k: float(p[k]) / 2**20 for k in ("rss_start", "rss_peak", "rss_end")}
            lines.append(f"  {name:<10} RSS {mib['rss_start']:.0f}/{mib['rss_peak']:.0f}/{mib['rss_end']:.0f} MiB "
                         f"(start/peak/end) {float(p['rss_slope_mib_h']):+.1f} MiB/h; fds {p['fds_start']}/{p['fds_peak']}/"
                         f"{p['fds_end']} {float(p['fds_slope_h']):+.1f}/h; longest life {float(p['span_s']):.0f}s of "
                         f"{p['incarnations']}: {p['verdict']}")
        for kind, why in sorted(self.skipped_kinds.items()):
            lines.append(f"  skipped {kind}: {why}")
        lines += [f"  fault error: {e}" for e in self.fault_errors[:10]]
        lines += [f"  lost: {e}" for e in self.lost_sample]
        lines += [f"  copies missing: ledger {lid}: {why}" for lid, why in sorted(self.copies_missing_ledgers.items())[:10]]
        lines += [f"  error line: {e[:300]}" for e in self.error_sample]
        lines += [f"  over the bound: {e}" for e in self.over_bound[:10]]
        lines += [f"  longest episode: {e}" for e in self.longest_episodes]
        return "\n".join(lines)


MUST_BE_ZERO = ("fault_errors", "settle_timeouts", "entries_lost", "digest_errors", "markers_left", "locks_left", "copies_missing",
                "daemons_dead", "error_lines", "over_bound", "upstream_under_replicated", "upstream_placement_violations",
                "ack_hash_errors")


def print_schedule(plan: list[Fault], skipped: dict[str, str]) -> list[str]:
    """The schedule's printed lines: one per fault (:meth:`Fault.describe`), then ``skipped <kind>: <reason>``
    per kind that will not run."""
    return [f.describe() for f in plan] + [f"skipped {k}: {why}" for k, why in sorted(skipped.items())]


async def run_campaign(cfg: CampaignConfig, *, echo=print) -> Report:
    """Run one campaign (see the module docstring); ``echo`` gets progress lines. Stops every process
    it started before returning.

    Raises:
        ValueError: from :func:`schedule` for a bad budget, cluster size or kind.
    """
    base = Path(cfg.base_dir)
    if cfg.lanes not in (1, 2):
        raise ValueError(f"--lanes must be 1 or 2, got {cfg.lanes}")
    if cfg.witness is not None and not 0 <= cfg.witness < cfg.bookies:
        raise ValueError(f"--witness must be a node in 0..{cfg.bookies - 1}, got {cfg.witness}")
    if cfg.cluster not in ("ours", "stock"):
        raise ValueError(f"--cluster must be ours or stock, got {cfg.cluster!r}")
    stock = cfg.cluster == "stock"
    refused: dict[str, str] = {}
    tmpfs: Path | None = None
    if "disk_full_during_copy" in cfg.kinds and not stock:
        if cfg.disk_full_mb <= 0:
            refused["disk_full_during_copy"] = "no size-limited data dir (disk_full_mb = 0)"
        else:
            tmpfs = base / f"bookie-{cfg.bookies - 1}"
            why = chaos_disk.mount_tmpfs(tmpfs, cfg.disk_full_mb)
            if why is not None:
                refused["disk_full_during_copy"] = f"cannot mount a tmpfs data dir: {why}"
                tmpfs = None
    kinds, skipped = usable_kinds(cfg.kinds, cfg.zk_members, refused, stock=stock)
    try:
        plan = schedule(cfg.seed, cfg.faults, cfg.bookies, kinds, min_hold_s=cfg.min_hold_s, max_hold_s=cfg.max_hold_s)
    except ValueError:
        if tmpfs is not None:
            chaos_disk.unmount(tmpfs)
        raise
    rep = Report(seed=cfg.seed, schedule=print_schedule(plan, skipped), skipped_kinds=skipped, witness=cfg.witness,
                 cluster=cfg.cluster, bound_s=cfg.bound_s)
    for line in rep.schedule:
        echo(f"schedule {line}")
    cluster: ChaosCluster
    if stock:
        cluster = StockChaosCluster(base, bookies=cfg.bookies, racks=cfg.racks, zk_members=cfg.zk_members,
                                    java_nodes=cfg.java_nodes, disk_mb=cfg.disk_full_mb)
    else:
        cluster = ChaosCluster(base, bookies=cfg.bookies, racks=1, zk_members=cfg.zk_members)
        cluster.bookie_session_timeout_ms = 2000
    proxies: dict[int, list[TcpProxy]] = {}
    try:
        base.mkdir(parents=True, exist_ok=True)
        await _settled(cluster.start_zookeeper)
        await _settled(cluster.format)
        if isinstance(cluster, StockChaosCluster) and cluster.disk_bookie is None:
            why = cluster.disk_refused or "no size-limited ledger and journal dirs (--disk-mb 0)"
            plan = _refuse(plan, rep, skipped, tuple(k for k in ("ledger_dir_full", "journal_dir_full") if k in kinds),
                           why, echo) if any(k in kinds for k in ("ledger_dir_full", "journal_dir_full")) else plan
        servers = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in cluster.zk_connect.split(","))]
        rep.zk_members = cluster.zk_connect.split(",")
        for why, ruled_out in await asyncio.to_thread(cluster.setup_namespaces, kinds, servers):
            plan = _refuse(plan, rep, skipped, ruled_out, why, echo)
        await _settled(cluster.start_bookies)
        # on the stock cluster AutoRecoveryMain votes first: the first auditor_kill9 kills upstream's auditor,
        # the next one ours (the vote order then rotates)
        for i in sorted(range(cfg.bookies), key=lambda n: not (stock and n in cfg.java_nodes)):
            # one proxy per ZooKeeper server: zk_conn_cut cuts them all
            dns = cluster.daemon_ns
            proxies[i] = dns[1].zk_proxies if dns and dns[0] == i else [TcpProxy(srv).start() for srv in servers]
            zk_servers = ",".join(p.address for p in proxies[i])
            await _settled(cluster.start_daemon, i, {**DAEMON_PROPS, **(STOCK_PLACEMENT_PROPS if stock else {}),
                                                     "zkServers": zk_servers})
        if isinstance(cluster, StockChaosCluster):
            echo(f"stock cluster up: {cfg.bookies} Java bookies in {cfg.racks} racks, AutoRecoveryMain on nodes "
                 f"{list(cfg.java_nodes)}, our daemon on {cluster.our_daemons()}, zk {cluster.zk_connect}"
                 + (f"; bookie {cluster.disk_bookie}'s ledger and journal dirs on {cfg.disk_full_mb} MiB tmpfs"
                    if cluster.disk_bookie is not None else ""))
        else:
            echo(f"cluster up: {cfg.bookies} bookies, {cfg.bookies} daemons, zk {cluster.zk_connect}"
                 + (f"; bookie {cfg.bookies - 1} on a {cfg.disk_full_mb} MiB tmpfs" if tmpfs else ""))
        await _campaign(cfg, cluster, proxies, plan, rep, echo, disk_full_bookie=cfg.bookies - 1 if tmpfs else None)
    finally:
        await asyncio.to_thread(cluster.down)
        await asyncio.to_thread(cluster.teardown_namespaces)
        if tmpfs is not None:
            chaos_disk.unmount(tmpfs)
        for ps in proxies.values():
            for p in ps:
                p.close()
    return rep


async def _settled(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread (a blocking start step); if the campaign is stopped meanwhile (a
    SIGTERM, a cancel), wait for the step to end before going on, so that the teardown sees what it
    started (a ZooKeeper whose start was under way when the bench was stopped was left running)."""
    # an executor future, not a task: stopping the loop cancels every task, and a cancelled to_thread
    # task stops waiting while its thread runs on
    fut = asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args))
    try:
        return await asyncio.shield(fut)
    except BaseException:
        with contextlib.suppress(BaseException):  # the step's own failure is the one raised below
            await fut
        raise


async def _campaign(cfg: CampaignConfig, cluster: ChaosCluster, proxies: dict[int, list[TcpProxy]], plan: list[Fault],
                    rep: Report, echo, disk_full_bookie: int | None = None) -> None:
    paths = Paths(cluster.ledgers_root)
    zk = await ZkClient(cluster.zk_connect).start()
    urm = UnderreplicationManager(zk, paths)
    await urm.init()
    bk = await BookKeeper.connect(cluster.zk_connect, cluster.ledgers_root)
    sampler = Sampler(cluster, urm)
    stock = cluster if isinstance(cluster, StockChaosCluster) else None
    if stock is not None:
        sampler.progress_nodes = stock.our_daemons()
    sampler.start()
    inj = Injector(cluster, zk, paths, proxies, int(DAEMON_PROPS["zkTimeout"]) / 1000, sampler.timeline.bookie_lost)
    inj.disk_full_bookie = disk_full_bookie
    inj.on_fault = sampler.timeline.fault
    inj.urm = urm
    inj.bk = bk
    inj.netns = cluster.netns
    inj.link_faults = cluster.bookie_links
    inj.daemon_ns = cluster.daemon_ns
    inj.witness = cfg.witness
    ack_path = Path(cfg.base_dir) / "acks.log"
    acks = AckLog(ack_path)
    stop = asyncio.Event()
    java_writer: StockWriter | None = None
    writer: asyncio.Future[Any]
    if stock is not None:
        acks.close()
        java_writer = StockWriter(stock, ack_path, Path(cfg.base_dir) / "writer.stop", writers=cfg.writers, roll_entries=500,
                                  rate=cfg.rate / cfg.writers, entry_size=cfg.entry_size).start()
        writer = asyncio.ensure_future(stop.wait())
    else:
        writer = asyncio.ensure_future(write_continuous(
            bk, acks, stop, rate=cfg.rate, ledgers=4, entries_per_ledger=500, size=cfg.entry_size, ensemble=3,
            write_quorum=3, ack_quorum=2, seed=cfg.seed, mixed=True))
    supervisor = asyncio.ensure_future(_supervise(stock, inj, rep, echo, time.monotonic())) if stock is not None else None
    try:
        t0 = time.monotonic()
        if cfg.lanes == 2:
            light = [f for f in plan if f.kind in LIGHT_KINDS]
            heavy = [f for f in plan if f.kind not in LIGHT_KINDS]
            echo(f"two lanes: {len(heavy)} process/ZooKeeper/disk faults and, at the same time, {len(light)} network faults")
            await asyncio.gather(_lane(heavy, cfg, inj, rep, echo, t0, inj.healthy),
                                 _lane(light, cfg, inj, rep, echo, t0, None))
        else:
            await _lane(plan, cfg, inj, rep, echo, t0, inj.healthy)
        rep.fault_phase_s = time.monotonic() - t0
        # faults stop: every process back, writer stops, the queue must drain
        await _heal_all(cluster, inj, rep)
        stop.set()
        if java_writer is not None:
            await writer
            rep.writer = await asyncio.to_thread(java_writer.stop)
            rep.adds_failed = int(str(rep.writer.get("adds_failed", 0)))
            rep.ledgers_written = int(str(rep.writer.get("ledgers_created", 0)))
            if not rep.writer.get("ok"):
                rep.fault_errors.append(f"the Java writer: {json.dumps(rep.writer)[:500]}")
            echo(f"faults over after {rep.fault_phase_s:.0f}s; Java writer stopped ({rep.writer.get('acked')} "
                 f"acknowledged); settling")
        else:
            stats = await writer
            acks.close()
            rep.adds_failed, rep.ledgers_written = stats.failed, len(stats.ledgers)
            echo(f"faults over after {rep.fault_phase_s:.0f}s; writer stopped ({stats.acked} acknowledged); settling")
        t1 = time.monotonic()
        try:
            faults_over_ms = int(time.time() * 1000)
            await _checks_after(urm, "replicascheck", faults_over_ms, 2, cfg.settle_s)
            if stock is not None:  # a placement check started after the faults: its repairs are in the queue
                await _checks_after(urm, "placementpolicycheck", faults_over_ms, 2,
                                    max(1.0, cfg.settle_s - (time.monotonic() - t1)))
            await until(lambda: _queue_empty(zk, paths, urm), max(1.0, cfg.settle_s - (time.monotonic() - t1)),
                        "an empty under-replication queue", 0.5)
        except TimeoutError as exc:
            rep.settle_timeouts.append(str(exc))
            echo(f"settle: {exc}")
            for line in await queue_dump(zk, paths, urm):
                echo(f"  left: {line}")
                rep.settle_timeouts.append(line)
        rep.settle_s = time.monotonic() - t1
        await sampler.sample_once()
        sampler.sample_procs(time.monotonic())
        # every acknowledged entry reads back with its digest (open ledgers are recovered and closed)
        if stock is not None and stock.java is not None:
            sacks = read_stock_acks(ack_path, cfg.entry_size)
            rep.ack_hash_errors = sacks.bad_hashes[:20]
            sv = await asyncio.to_thread(verify_stock_acks, stock.java, sacks)
            rep.entries_acked, rep.entries_read_back = sacks.count, sv.read_back
            rep.entries_lost, rep.lost_sample, rep.digest_errors = sv.lost, sv.lost_sample, sv.bad_entries
            rep.upstream_under_replicated = await asyncio.to_thread(upstream_under_replicated, stock.java)
            rep.upstream_placement_violations = await asyncio.to_thread(upstream_placement_violations, stock.java)
            echo(f"upstream's reader: {sv.read_back} of {sacks.count} acknowledged entries read back; "
                 f"listunderreplicated: {rep.upstream_under_replicated or 'empty'}; placement check: "
                 f"{len(rep.upstream_placement_violations)} failing segments")
        else:
            records = read_ack_log(ack_path)
            v = await verify_acks(bk, records)
            rep.entries_acked, rep.entries_read_back = len(records), v.entries_ok
            rep.entries_lost, rep.lost_sample, rep.digest_errors = len(v.lost), v.lost[:10], v.digest_errors
        copies = await copies_missing(bk)
        rep.ledgers_checked, rep.copies_missing, rep.copies_missing_ledgers = copies.checked, len(copies.not_ok), copies.not_ok
        rep.markers_left, rep.locks_left = await queue_state(zk, paths, urm)
    finally:
        stop.set()
        if supervisor is not None:
            supervisor.cancel()
            await asyncio.gather(supervisor, return_exceptions=True)
        if not writer.done():
            writer.cancel()
        if java_writer is not None:
            java_writer.kill()
        await sampler.stop()
        await bk.close()
        await urm.close()
        await zk.stop()
    tl = sampler.timeline
    rep.ledgers_marked, rep.ledgers_healed = len(tl.marked), tl.healed
    now = time.monotonic()
    span, rep.longest_under_replicated_ledger = tl.longest(now)
    rep.longest_under_replicated_s = round(span, 1)
    episodes = bound_episodes(tl, now, cfg.bound_s)
    t0 = tl.faults[0][0] if tl.faults else 0.0
    rep.over_bound = [e.describe(t0) for e in episodes if e.over_s > 0 and not e.excused]
    rep.longest_episodes = [e.describe(t0) for e in episodes[:10]]
    rep.procs = sampler.trends.summaries()
    rep.daemons_total = len(cluster.daemons)
    rep.daemons_alive = sum(1 for i in cluster.daemons if cluster.daemon_alive(i))
    rep.daemons_dead = rep.daemons_total - rep.daemons_alive
    ours = stock.our_daemons() if stock is not None else sorted(cluster.daemons)
    errors = [ln for i in ours for ln in error_lines(Path(cluster.daemons[i].log))]
    rep.error_lines, rep.error_sample = len(errors), errors[:5]


async def _supervise(stock: StockChaosCluster, inj: Injector, rep: Report, echo, t0: float) -> None:
    """Every second, start again each AutoRecoveryMain that shut itself down on its ZooKeeper session's
    expiry (upstream's session-state listener: it leaves the restart to systemd or a pod's restart policy, as
    an operator runs it), recording it in ``rep.supervisor_restarts``; a failed restart is a fault error.
    Runs until cancelled."""
    while True:
        await asyncio.sleep(1.0)  # a poll period, not a synchronisation: nothing waits for this loop
        for i in await asyncio.to_thread(stock.expired_autorecoveries):
            try:
                async with inj.proxy_locks[i]:  # not into the other lane's blackhole of its proxies
                    if not await asyncio.to_thread(stock.restart_if_expired, i):
                        continue  # the fault lane started it meanwhile
            except RuntimeError as exc:
                rep.fault_errors.append(f"supervisor: {str(exc)[-500:]}")
                echo(f"supervisor FAILED: {str(exc)[-500:]}")
                continue
            line = (f"AutoRecoveryMain on node {i} shut itself down on its ZooKeeper session's expiry (as upstream's "
                    f"does), restarted by the supervisor")
            rep.supervisor_restarts.append(f"{time.monotonic() - t0:.1f}s {line}")
            echo(f"supervisor: {line}")


async def _lane(plan: list[Fault], cfg: CampaignConfig, inj: Injector, rep: Report, echo, t0: float,
                ready: Callable[[], Awaitable[bool]] | None) -> None:
    """Apply ``plan``'s faults one after another until ``cfg.duration_s`` after ``t0``; before each, wait
    (90 s bound) for ``ready`` when given. A fault that fails is recorded in ``rep.fault_errors`` (the
    report fails); in the lane given ``ready`` (the one that stops and starts processes) whatever it left
    down is started again (:func:`_heal_all`), so one failure does not fail every later fault."""
    for f in plan:
        if time.monotonic() - t0 >= cfg.duration_s:
            echo(f"duration {cfg.duration_s}s reached before fault #{f.seq}")
            break
        try:
            if ready is not None:
                try:
                    await until(ready, 90, "every process up and every bookie registered")
                except TimeoutError as exc:
                    why = await inj.unhealthy()
                    raise TimeoutError(f"{exc}: {why or 'all ready again at the deadline'}") from None
            began = time.monotonic()
            try:
                what = await inj.apply(f)
            finally:
                inj.on_fault(began, time.monotonic(), f"#{f.seq} {f.kind}")
            rep.faults_by_kind[f.kind] = rep.faults_by_kind.get(f.kind, 0) + 1
            rep.fault_log.append(f"#{f.seq} {what}")
            echo(f"fault #{f.seq} {f.kind}: {what}")
        except Exception as exc:  # noqa: BLE001 - a fault that cannot be applied or healed is a finding
            rep.fault_errors.append(f"#{f.seq} {f.kind}: {type(exc).__name__}: {str(exc)[-500:]}")
            echo(f"fault #{f.seq} {f.kind} FAILED: {str(exc)[-500:]}")
            if ready is not None:  # the lane that starts and stops processes brings back what the failure left down
                await _heal_all(inj.cluster, inj, rep, f"after fault #{f.seq} failed")


def _refuse(plan: list[Fault], rep: Report, skipped: dict[str, str], kinds: tuple[str, ...], why: str,
            echo) -> list[Fault]:
    """Mark ``kinds`` skipped with ``why`` (printed) and turn their scheduled faults into ``bookie_kill9``
    (the schedule keeps its length and seed)."""
    for k in kinds:
        skipped[k] = why
    rep.skipped_kinds = skipped
    echo(f"skipping {', '.join(kinds)}: {why}")
    echo("  (their scheduled faults become bookie_kill9)")
    return [Fault(f.seq, "bookie_kill9", f.target, f.hold_s) if f.kind in kinds else f for f in plan]


async def _checks_after(urm: UnderreplicationManager, which: str, since_ms: int, runs: int, timeout_s: float) -> None:
    """Wait until the auditor's ``which`` check (``replicascheck``, ``placementpolicycheck``: its ctime
    znode) completed ``runs`` times after ``since_ms`` (wall ms): with 2 the second run started after the
    first ended, so after the faults stopped.

    Raises:
        TimeoutError: not within ``timeout_s`` s (naming the check).
    """
    seen: list[int] = []

    async def advanced() -> bool:
        """Record a ctime newer than the last one seen; True once ``runs`` were seen."""
        c = await urm.get_check_ctime(which)
        if c > since_ms and (not seen or c > seen[-1]):
            seen.append(c)
        return len(seen) >= runs

    await until(advanced, timeout_s, f"{runs} {which} runs after the faults", 0.5)


async def _queue_empty(zk: ZkClient, paths: Paths, urm: UnderreplicationManager) -> bool:
    return await queue_state(zk, paths, urm) == (0, 0)


async def _heal_all(cluster: LocalCluster, inj: Injector, rep: Report, when: str = "when the faults stopped") -> None:
    """Start whatever a failed fault left down, each recorded as a fault error naming ``when``; a start
    that fails is recorded too (the campaign goes on: the next fault finds it down and waits)."""
    for kind, procs, alive in (("bookie", cluster.bookies, cluster.bookie_alive),
                               ("daemon", cluster.daemons, cluster.daemon_alive)):
        for i in list(procs):
            if not alive(i):
                rep.fault_errors.append(f"{kind} {i} was down {when}")
                try:
                    if kind == "bookie":
                        await asyncio.to_thread(cluster.start_bookie, i)
                    else:
                        await inj._restart_daemon(i)  # not while the other lane holds its proxies faulted
                except Exception as exc:  # noqa: BLE001 - recorded; the report fails on it
                    rep.fault_errors.append(f"{kind} {i} did not start again {when}: {str(exc)[-300:]}")
    try:
        await until(inj.healthy, 60, "every process up and every bookie registered")
    except TimeoutError as exc:
        rep.fault_errors.append(str(exc))
