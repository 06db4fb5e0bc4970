"""Benchmark: one lost Java bookie healed by upstream's AutoRecoveryMain and by our daemons, same cluster.

The cluster is stock Apache BookKeeper 4.17.2 (``make upstream``): 4 Java bookies in 2 racks on
127.0.0.x (:class:`~autorecovery.testing.upstream_cluster.JavaCluster`, DbLedgerStorage), one ZooKeeper.
Every side of every round gets a fresh cluster on a fresh metadata root of that ZooKeeper, so the sides
share nothing but the machine. Per side (not timed): the cluster comes up, 4 recovery processes start
(one per bookie host, each its own process, waited for until ready: upstream's Auditor has run its
start-up bookie check, ours answer ``/readyz`` with one Auditor elected), then upstream's Java client
(our Java tool) writes ``--ledgers`` closed ledgers of ``--entries`` entries of ``--entry-size`` bytes
at E3/WQ2/AQ2, and dirty pages are synced. Then bookie ``--victim`` is killed (SIGKILL) and the bench
watches ZooKeeper (kazoo data watches: each time is taken when its notification arrives) until healed.

Variants (alternated within each round, the order rotated from round to round):

* ``defaults``: upstream ``AutoRecoveryMain`` x4 with upstream's defaults (``lostBookieRecoveryDelay=0``,
  which is also upstream's default, ``rereplicationEntryBatchSize=10``...);
* ``tuned``: the same with upstream's documented replication tuning keys (:data:`UPSTREAM_TUNED`);
* ``ours``: ``python -m autorecovery run`` x4 with our defaults (``lostBookieRecoveryDelay=0``);
* ``ours-fast``: the same with ``localBookieLossDetectionEnabled=true``: the victim's own daemon (alive
  unless ``--kill-host``) sees its bookie's process gone and deletes the registration it left, so
  detection is not the session expiry (docs/operators.md).

Every recovery process, ours or upstream's, gets the same ``zkTimeout`` as the bookies and
rack-aware placement. ``journalSyncData`` is one flag for the (shared kind of) Java bookies.

Timed from the kill, per side:

* **detect**: the victim's registration (``available/<id>``) leaves ZooKeeper: the bookie's session
  expiry, the same fixed cost for every side (``zkTimeout``), except ``ours-fast``, whose victim's own
  daemon deletes it once the bookie's port refuses connections;
* **first marker** and **all marked**: every affected ledger (its ensembles name the victim, computed
  from the writer's metadata before the kill) has been seen with an under-replication marker, or was
  already healed when its metadata changed (a marker created and deleted between two reads still counts);
* **healed**: no affected ledger's metadata names the victim and no marker is left (confirmed at the
  end by a walk of the whole marker tree).

Then upstream's Java reader reads every entry of every ledger back (digest checked, content compared)
with the victim still down: OK or FAILED. Also printed: the bytes to heal (entry payloads whose write
set held the victim), the heal rate counted from the kill, the CPU used by the recovery processes and the
surviving bookies from the kill to healed, and the machine's own limits measured first: an fdatasync
write rate (256 MiB in 1 MiB writes and one fdatasync in the work dir, what ``dd ... conv=fdatasync``
measures) and a loopback TCP rate (a Python
socket copy of 256 MiB), with the fraction of each the heal rate reached; the whole machine's busy CPU
and the part of it outside this bench's process tree (other work on a shared machine skews a run).
Ratios are upstream / ours (above 1: ours is faster). Medians over rounds. Not a test.

Caveats: the data has the same shape on every side, but upstream's client places ensembles at random,
so the affected ledgers and bytes differ a little from side to side (hence the rate ratio too). The
reader reads one replica of each entry (not necessarily the new one). The Java bookies get upstream's
default DbLedgerStorage caches for their memory (``--bookie-caches fixture``: the fixture's small ones).

    .venv/bin/python bench/vs_upstream.py --quick           # smoke run, small data, one round
    .venv/bin/python bench/vs_upstream.py                   # 40 ledgers x 2000 x 4 KiB, 2 rounds (~5 min)
    .venv/bin/python bench/vs_upstream.py --jit full        # JVMs with C2 and G1 (their compiles land in the heal)
    .venv/bin/python bench/vs_upstream.py --rounds 3 --variants defaults,ours
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import NoNodeError  # noqa: E402
from kazoo.recipe.watchers import DataWatch  # noqa: E402

from autorecovery.cli.demo_checks import daemons_ready  # noqa: E402
from autorecovery.ledger import formats  # noqa: E402
from autorecovery.ledger.ids import ur_marker_path  # noqa: E402
from autorecovery.ledger.striping import index_stores  # noqa: E402
from autorecovery.testing.upstream_cluster import JavaAutoRecovery, JavaCluster  # noqa: E402
from autorecovery.testing.daemon_proc import DaemonProcess  # noqa: E402
from autorecovery.testing.upstream_java import tail, wait_until  # noqa: E402
from autorecovery.testing.zk_server import ZooKeeperServer  # noqa: E402
from autorecovery.zk.paths import Paths  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
import limits  # noqa: E402  (bench/limits.py: the machine's own ceilings, shared by the benches)

VARIANTS = ("defaults", "tuned", "ours", "ours-fast")
#: upstream's documented replication tuning keys (bk_server.conf "Replication Worker settings" and
#: ServerConfiguration 4.17.2): entries copied in parallel per fragment (default 10), no replication
#: throttle (default -1 already), a shorter back-off after a failed attempt (default 5000 ms) and a
#: shorter hold of a failed ledger's lock (default 300000 ms). openLedgerRereplicationGracePeriod only
#: matters for open ledgers (the data here is closed).
UPSTREAM_TUNED = {
    "rereplicationEntryBatchSize": 500,
    "replicationRateByBytes": -1,
    "rwRereplicateBackoffMs": 500,
    "lockReleaseOfFailedLedgerGracePeriod": 10000,
}
#: JVM flags of every Java bookie and AutoRecoveryMain with ``--jit full``: tiered C1+C2 and G1, as
#: upstream's bin/common.sh runs them (later flags override the fixture's). The default, ``--jit c1``,
#: keeps the fixture's fast-start flags (C1 only, serial GC): these JVMs are minutes old, and with C2
#: on 2 cores the heal itself paid for the C2 compiles of 7 JVMs' copy paths (the surviving bookies
#: spent about 3 times the CPU, every side took about twice as long), a cost a long-running
#: production JVM paid long before.
FULL_JIT = ["-XX:TieredStopAtLevel=4", "-XX:-UseSerialGC", "-XX:+UseG1GC"]

_children: list[subprocess.Popen] = []


@atexit.register
def _kill_children() -> None:
    for p in _children:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


# -- cluster and recovery processes --------------------------------------------------------------
def bookie_caches(a: argparse.Namespace) -> dict[str, int]:
    """DbLedgerStorage cache keys: ``upstream`` = upstream's defaults for the bookie's direct memory
    (= ``--heap``): write cache 25 %, read-ahead cache 25 %, RocksDB block cache 10 %; ``fixture`` =
    the test fixture's small caches (16 MB, 16 MB, 8 MB), which make DbLedgerStorage flush (and fsync
    its entry log) every 8 MB written."""
    if a.bookie_caches == "fixture":
        return {}
    num, unit = int(a.heap[:-1]), a.heap[-1].lower()
    mb = num * {"k": 1 / 1024, "m": 1, "g": 1024}[unit]
    return {"dbStorage_writeCacheMaxSizeMb": int(mb * 0.25), "dbStorage_readAheadCacheMaxSizeMb": int(mb * 0.25),
            "dbStorage_rocksDB_blockCacheSize": int(mb * 2**20 / 10)}


def start_upstream(c: JavaCluster, node: int, conf: dict[str, object]) -> JavaAutoRecovery:
    """Upstream's ``AutoRecoveryMain`` as bookie ``node``'s AutoRecovery
    (:meth:`JavaCluster.start_autorecovery`, ``lostBookieRecoveryDelay=0``, the cluster's JVM flags) with
    ``conf`` on top. Does not wait."""
    return c.start_autorecovery(node, wait=False, **conf)


def upstream_ready(c: JavaCluster, timeout_s: float) -> None:
    """Every AutoRecoveryMain has voted and the Auditor finished its start-up bookie check."""
    wait_until(lambda: len(c.election_votes()) == len(c.autorecoveries), timeout_s, "AutoRecoveryMain votes")
    logs = [ar.process.log_path for ar in c.autorecoveries]
    wait_until(lambda: any("Completed auditBookies" in tail(p, 10**6) for p in logs), timeout_s,
               "the upstream Auditor's start-up bookie check")


def start_ours(c: JavaCluster, node: int, props: dict[str, object]) -> DaemonProcess:
    """Our daemon next to bookie ``node`` (bk_server.conf from ``props``); does not wait."""
    d = DaemonProcess(c.workdir, f"ours-{node}", props).spawn()
    assert d.proc is not None
    _children.append(d.proc)
    return d


def ours_ready(daemons: dict[int, DaemonProcess], timeout_s: float) -> None:
    """Every daemon printed its ready line; then ``/readyz`` everywhere and exactly one Auditor."""
    for i, d in daemons.items():
        try:
            d.wait_ready(timeout_s)
        except RuntimeError as exc:
            raise SystemExit(f"our daemon {i}: {exc}") from None
    daemons_ready({i: d.http_port for i, d in daemons.items()}, "bench set-up", timeout_s)


def stop_ours(daemons: dict[int, DaemonProcess]) -> None:
    """SIGTERM to all at once (a clean drain), then wait; SIGKILL whoever is still there after 15 s."""
    live = [d.proc for d in daemons.values() if d.proc is not None and d.proc.poll() is None]
    for p in live:
        os.killpg(p.pid, signal.SIGTERM)
    for p in live:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def log_problems(path: Path, n: int = 25) -> str:
    """The last ``n`` WARN/ERROR/Traceback lines of a log (or its tail when there are none)."""
    lines = [ln for ln in tail(path, 4 * 10**6).splitlines()
             if re.search(r"\b(WARN|ERROR|error|warning|Traceback|Exception)\b", ln)]
    return "\n".join(lines[-n:]) if lines else tail(path, 1500)


# -- the heal, watched on ZooKeeper ---------------------------------------------------------------
def affected(ledgers: list[dict], victim: str, entry_size: int, wq: int) -> tuple[set[int], int]:
    """Ledgers whose ensembles name ``victim``, and the payload bytes whose write set holds it."""
    hit, nbytes = set(), 0
    for lg in ledgers:
        segs = sorted(lg["ensembles"].items())
        for k, (first, ens) in enumerate(segs):
            if victim not in ens:
                continue
            hit.add(lg["ledger"])
            last = segs[k + 1][0] - 1 if k + 1 < len(segs) else lg["last_acked"]
            idx = ens.index(victim)
            nbytes += entry_size * sum(1 for e in range(first, last + 1) if index_stores(idx, e, len(ens), wq))
    return hit, nbytes


def count_markers(kz: KazooClient, root: str) -> int:
    """Every ``urL*`` znode under the marker tree ``root`` (a full walk)."""
    try:
        children = kz.get_children(root)
    except NoNodeError:
        return 0
    return sum(1 if ch.startswith("urL") else count_markers(kz, f"{root}/{ch}") for ch in children)


@dataclass
class Heal:
    detect: float | None = None
    first_marker: float | None = None
    all_marked: float | None = None
    healed: float | None = None
    max_markers: int = 0
    stray_markers: set[int] = field(default_factory=set)  # markers on ledgers that did not hold the victim
    left: str = ""


class HealWatch:
    """ZooKeeper watched from before the kill until healed; the times of :class:`Heal` are seconds from the kill.

    A kazoo ``DataWatch`` on each of the victim's two registrations, on every ledger's marker and on every
    affected ledger's metadata, all set (and read once) before the kill; each time is taken when the
    notification that changed the state arrives, not at a poll, and a marker counts as seen even when it
    was deleted before its read.
    """

    def __init__(self, kz: KazooClient, paths: Paths, victim: str, ids: list[int], hit: set[int]) -> None:
        self.victim, self.hit, self.paths = victim, hit, paths
        self.cond = threading.Condition()
        self.at: dict[str, float] = {}  # event -> time.perf_counter() when first seen
        self.stray: set[int] = set()  # markers on ledgers that did not hold the victim
        self.max_markers = 0
        reg = [paths.available_bookie(victim), paths.readonly_bookie(victim)]
        self.regs_up = dict.fromkeys(reg, True)
        self.present: dict[int, bool] = dict.fromkeys(ids, False)
        self.marked: set[int] = set()
        self.healed: set[int] = set()
        self.errors: list[str] = []
        self.done = False
        for p in reg:
            DataWatch(kz, p, self._on_reg(p))
        for i in ids:
            DataWatch(kz, ur_marker_path(paths.ur_ledgers, i), self._on_marker(i))
        for i in hit:
            DataWatch(kz, paths.ledger(i), self._on_metadata(i))

    def _update(self) -> None:  # under cond, after any change
        now, at = time.perf_counter(), self.at
        if "detect" not in at and not any(self.regs_up.values()):
            at["detect"] = now
        if "first_marker" not in at and self.marked:
            at["first_marker"] = now
        self.max_markers = max(self.max_markers, sum(self.present.values()))
        if "all_marked" not in at and self.marked | self.healed >= self.hit:
            at["all_marked"] = now
        if "healed" not in at and self.healed >= self.hit and not any(self.present.values()):
            at["healed"] = now
        self.cond.notify_all()

    def _on_reg(self, path: str):
        def fired(data: bytes | None, stat: object, event: object = None) -> bool:
            with self.cond:
                self.regs_up[path] = stat is not None
                self._update()
                return not self.done and stat is not None
        return fired

    def _on_marker(self, lid: int):
        def fired(data: bytes | None, stat: object, event: object = None) -> bool:
            with self.cond:
                self.present[lid] = stat is not None
                if stat is not None or getattr(event, "type", None) == "CREATED":
                    (self.marked if lid in self.hit else self.stray).add(lid)
                self._update()
                return not self.done
        return fired

    def _on_metadata(self, lid: int):
        def fired(data: bytes | None, stat: object, event: object = None) -> bool:
            with self.cond:
                try:
                    if data is not None and not any(self.victim in seg.ensemble for seg in
                                                    formats.deserialize(data, self.paths.ledger(lid)).segments):
                        self.healed.add(lid)
                except Exception as exc:  # noqa: BLE001 - reported as the reason the heal was not seen
                    self.errors.append(f"ledger {lid}: {exc}")
                self._update()
                return not self.done and lid not in self.healed
        return fired

    def wait(self, t0: float, timeout_s: float) -> Heal:
        """Wait until healed or ``timeout_s`` after the kill at ``t0`` (``time.perf_counter()``)."""
        with self.cond:
            self.cond.wait_for(lambda: "healed" in self.at or self.errors,
                               max(0.0, t0 + timeout_s - time.perf_counter()))
            self.done = True
            h = Heal(max_markers=self.max_markers, stray_markers=set(self.stray))
            for k, v in self.at.items():
                setattr(h, k, v - t0)
            if h.healed is None:
                h.left = "; ".join(self.errors) or (
                    f"after {time.perf_counter() - t0:.0f} s: {len(self.hit - self.healed)} of {len(self.hit)} "
                    f"affected ledgers still name {self.victim}, {sum(self.present.values())} markers, "
                    f"{len(self.marked)} ever marked")
        return h


def cpu_s(procs: dict[str, psutil.Process]) -> dict[str, float]:
    """User + system CPU seconds of each process so far (a process gone since is left out)."""
    out = {}
    for k, p in procs.items():
        try:
            t = p.cpu_times()
            out[k] = t.user + t.system
        except psutil.Error:
            pass
    return out


def delta(c0: dict[str, float], c1: dict[str, float], prefix: str = "") -> float:
    return sum(c1[k] - c0[k] for k in c1 if k in c0 and k.startswith(prefix))


def bench_tree() -> dict[str, psutil.Process]:
    """This bench and every process under it (ZooKeeper, bookies, recovery processes, tools)."""
    me = psutil.Process()
    return {f"tree-{p.pid}": p for p in [me, *me.children(recursive=True)]}


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy so far (all cores; idle and iowait excluded)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


# -- one side of one round ------------------------------------------------------------------------
@dataclass
class Side:
    variant: str
    round: int
    ok: bool = False
    verified: str = "-"
    heal: Heal = field(default_factory=Heal)
    hit: int = 0
    ledgers: int = 0
    to_heal: int = 0
    phases: dict[str, float] = field(default_factory=dict)  # untimed set-up and check steps, seconds
    cpu_recovery: float = 0.0
    cpu_bookies: float = 0.0
    cpu_machine: float = 0.0  # every process on the machine (busy = not idle, not iowait), core-s
    cpu_others: float = 0.0  # the machine's busy time not spent by this bench and its children, core-s
    cache: str = "page cache warm"  # what --cold-cache did before the kill


def run_side(a: argparse.Namespace, zk: ZooKeeperServer, base: Path, variant: str, rnd: int) -> Side:
    s = Side(variant, rnd)
    workdir = base / f"r{rnd}-{variant}"
    c = JavaCluster(workdir, zk.connect_string, bookies=4, racks=2, zk_timeout_ms=a.zk_timeout_ms, heap=a.heap,
                    bookie_conf={"journalSyncData": a.journal_sync_data, **bookie_caches(a)}, jvm_opts=a.jvm_opts)
    daemons: dict[int, DaemonProcess] = {}
    kz = KazooClient(zk.connect_string, timeout=10.0)
    failed = True
    try:
        t = time.perf_counter()
        c.up()
        s.phases["cluster up"] = time.perf_counter() - t
        kz.start(15)
        paths = Paths(c.ledgers_root)
        victim = c.bookies[a.victim].bookie_id
        t = time.perf_counter()
        if variant.startswith("ours"):
            fast = {"localBookieLossDetectionEnabled": "true"} if variant == "ours-fast" else {}
            for i, b in enumerate(c.bookies):
                daemons[i] = start_ours(c, i, {
                    **c.daemon_properties(), "bookieId": b.bookie_id, "zkTimeout": c.zk_timeout_ms,
                    "ensemblePlacementPolicy": "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy",
                    "lostBookieRecoveryDelay": 0, "httpServerPort": 0, **fast})
            ours_ready(daemons, 90)
        else:
            for i in range(len(c.bookies)):
                start_upstream(c, i, UPSTREAM_TUNED if variant == "tuned" else {})
            upstream_ready(c, 90)
        s.phases["recovery ready"] = time.perf_counter() - t

        t = time.perf_counter()
        w = c.writer(ledgers=a.ledgers, entries=a.entries, entry_size=a.entry_size, ensemble=3, wq=2, aq=2,
                     digest=a.digest, password=a.password, timeout_s=a.timeout)
        s.phases["write"] = time.perf_counter() - t
        ids = [lg["ledger"] for lg in w["ledgers"]]
        hit, s.to_heal = affected(w["ledgers"], victim, a.entry_size, 2)
        s.hit, s.ledgers = len(hit), len(ids)
        os.sync()  # the load's dirty pages are not flushed during the heal

        procs = {f"bookie-{i}": psutil.Process(b.process.pid) for i, b in enumerate(c.bookies) if i != a.victim}
        rec = ({f"rec-{i}": psutil.Process(d.proc.pid) for i, d in daemons.items()} if daemons else
               {f"rec-{i}": psutil.Process(ar.process.pid) for i, ar in enumerate(c.autorecoveries)})
        procs.update(rec)
        procs.update(bench_tree())
        watch = HealWatch(kz, paths, victim, ids, hit)
        cpu0, m0 = cpu_s(procs), machine_busy()
        s.cache = limits.cold(a.cold_cache)
        t0 = time.perf_counter()
        c.bookies[a.victim].kill()
        if a.kill_host:
            if daemons:
                os.killpg(daemons[a.victim].proc.pid, signal.SIGKILL)
            else:
                c.autorecoveries[a.victim].kill()
        s.heal = watch.wait(t0, a.timeout)
        cpu1, s.cpu_machine = cpu_s(procs), machine_busy() - m0
        s.cpu_recovery, s.cpu_bookies = delta(cpu0, cpu1, "rec-"), delta(cpu0, cpu1, "bookie-")
        s.cpu_others = max(0.0, s.cpu_machine - delta(cpu0, cpu1, "tree-"))
        if s.heal.healed is not None:
            left = count_markers(kz, paths.ur_ledgers)
            if left:
                s.heal.healed, s.heal.left = None, f"{left} markers left in the marker tree"
        if s.heal.healed is None:
            print(f"  {variant} round {rnd}: NOT HEALED ({s.heal.left}); recovery logs in {workdir}:")
            logs = [d.log for d in daemons.values()] or [ar.process.log_path for ar in c.autorecoveries]
            for p in logs:
                print(f"  --- {p}:\n" + "\n".join("    " + ln for ln in log_problems(p).splitlines()))
        t = time.perf_counter()
        r = c.reader(ids, digest=a.digest, password=a.password, timeout_s=a.timeout)
        s.phases["read back"] = time.perf_counter() - t
        bad = [lg for lg in r.get("ledgers", []) if lg.get("errors") or lg.get("bad_entries")
               or lg.get("entries_read") != a.entries]
        s.verified = "OK" if r.get("ok") and not bad and len(r.get("ledgers", [])) == len(ids) else \
            f"FAILED ({len(bad)} ledgers: {str(bad[:2])[:400]})"
        s.ok = s.heal.healed is not None and s.verified == "OK"
        failed = not s.ok
        return s
    finally:
        stop_ours(daemons)
        c.down()
        kz.stop()
        kz.close()
        if not a.keep and not failed:
            shutil.rmtree(workdir, ignore_errors=True)
        elif failed:
            print(f"  kept {workdir}")


# -- report ----------------------------------------------------------------------------------------
def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def med(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def side_line(s: Side) -> str:
    h = s.heal
    rate = s.to_heal / h.healed / 1e6 if h.healed else None
    stray = f", {len(h.stray_markers)} stray markers" if h.stray_markers else ""
    return (f"round {s.round} {s.variant:9s}: {s.hit}/{s.ledgers} ledgers held the victim, "
            f"{s.to_heal / 2**20:.1f} MiB to heal; detect {fmt(h.detect)} s, "
            f"first marker {fmt(h.first_marker)} s, all marked {fmt(h.all_marked)} s, healed {fmt(h.healed)} s "
            f"({fmt(rate, '.1f')} MB/s from the kill), max {h.max_markers} markers{stray}; CPU kill->healed: "
            f"recovery {s.cpu_recovery:.1f} core-s, surviving bookies {s.cpu_bookies:.1f} core-s, machine "
            f"{s.cpu_machine:.1f} of {(os.cpu_count() or 1) * (h.healed or 0):.1f} core-s of which outside this "
            f"bench {s.cpu_others:.1f}; read back: "
            f"{s.verified}; {s.cache} (untimed: {', '.join(f'{k} {v:.1f} s' for k, v in s.phases.items())})")


def report(sides: list[Side], variants: list[str], dd: float, tcp: float) -> None:
    by = {v: [s for s in sides if s.variant == v] for v in variants}

    def m(v: str, f) -> float | None:
        return med([f(s) for s in by[v] if s.ok])

    rows = [
        ("detect: kill -> registration gone (s)", lambda s: s.heal.detect, ".2f"),
        ("kill -> first marker (s)", lambda s: s.heal.first_marker, ".2f"),
        ("kill -> all affected marked (s)", lambda s: s.heal.all_marked, ".2f"),
        ("  of which after detection (s)", lambda s: s.heal.all_marked - s.heal.detect, ".2f"),
        ("kill -> healed (s)", lambda s: s.heal.healed, ".2f"),
        ("  of which after detection (s)", lambda s: s.heal.healed - s.heal.detect, ".2f"),
        ("bytes to heal (MiB)", lambda s: s.to_heal / 2**20, ".1f"),
        ("heal rate from the kill (MB/s)", lambda s: s.to_heal / s.heal.healed / 1e6, ".1f"),
        ("heal rate after detection (MB/s)", lambda s: s.to_heal / (s.heal.healed - s.heal.detect) / 1e6, ".1f"),
        ("  fraction of fdatasync write rate", lambda s: s.to_heal / s.heal.healed / 1e6 / dd, ".3f"),
        ("  fraction of loopback TCP rate", lambda s: s.to_heal / s.heal.healed / 1e6 / tcp, ".3f"),
        ("CPU recovery processes (core-s)", lambda s: s.cpu_recovery, ".1f"),
        ("CPU surviving bookies (core-s)", lambda s: s.cpu_bookies, ".1f"),
        ("CPU whole machine (core-s)", lambda s: s.cpu_machine, ".1f"),
        ("  fraction of all cores busy", lambda s: s.cpu_machine / (os.cpu_count() or 1) / s.heal.healed, ".2f"),
        ("CPU outside this bench (core-s)", lambda s: s.cpu_others, ".1f"),
    ]
    ok = {v: sum(s.ok for s in by[v]) for v in variants}
    print(f"\nmedians of the rounds that healed and read back OK ({', '.join(f'{v} {ok[v]}/{len(by[v])}' for v in variants)}):")
    print(f"{'':40s}" + "".join(f"{v:>10s}" for v in variants))
    for name, f, spec in rows:
        print(f"{name:40s}" + "".join(f"{fmt(m(v, f), spec):>10s}" for v in variants))
    for o in [v for v in variants if v.startswith("ours")]:
        for v in [v for v in variants if not v.startswith("ours")]:
            parts = []
            for label, f in (("all marked", lambda s: s.heal.all_marked), ("healed", lambda s: s.heal.healed),
                             ("healed after detection", lambda s: s.heal.healed - s.heal.detect)):
                up, us = m(v, f), m(o, f)
                parts.append(f"{label} {fmt(up / us if up and us else None)}")
            up, us = (m(v, lambda s: s.to_heal / s.heal.healed), m(o, lambda s: s.to_heal / s.heal.healed))
            parts.append(f"heal rate from the kill ours/upstream {fmt(us / up if up and us else None)}")
            mark = [m(x, lambda s: s.heal.all_marked - s.heal.detect) for x in (v, o)]
            parts.append(f"(marking after detection: {fmt(mark[0])} s vs {fmt(mark[1])} s)")
            print(f"ratio upstream {v} / {o} (time; > 1: ours faster): " + ", ".join(parts)
                  + " (issue 29 target: healed from the kill >= 10)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="rounds; each runs every variant once (default 2)")
    ap.add_argument("--ledgers", type=int, default=40, help="ledgers written per side (default 40)")
    ap.add_argument("--entries", type=int, default=2000, help="entries per ledger (default 2000)")
    ap.add_argument("--entry-size", type=int, default=4096, help="bytes per entry (default 4096)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"comma-separated, from {','.join(VARIANTS)} (default all, alternated in each round)")
    ap.add_argument("--victim", type=int, choices=range(4), default=1, help="index of the bookie killed (default 1)")
    ap.add_argument("--kill-host", action="store_true",
                    help="also kill the recovery process next to the victim (default: the bookie only)")
    ap.add_argument("--digest", default="CRC32C", help="digest type of the ledgers (default CRC32C)")
    ap.add_argument("--password", default="", help="ledger password (default empty)")
    ap.add_argument("--journal-sync-data", action="store_true",
                    help="journalSyncData=true on the Java bookies (default false, the fixture's setting)")
    ap.add_argument("--zk-timeout-ms", type=int, default=5000,
                    help="zkTimeout of every bookie and recovery process (default 5000; the victim's registration "
                         "leaves ZooKeeper this long after the kill)")
    ap.add_argument("--jit", choices=("c1", "full"), default="c1",
                    help="JVM flags of the Java bookies and AutoRecoveryMain: c1 = the test fixture's (C1 only, "
                         "serial GC; default); full = C1+C2 and G1 as upstream's scripts run them, whose C2 "
                         "compiles then land in the heal")
    ap.add_argument("--heap", default="512m", help="-Xmx (and direct memory) of every Java bookie and "
                    "AutoRecoveryMain (default 512m)")
    ap.add_argument("--bookie-caches", choices=("upstream", "fixture"), default="upstream",
                    help="DbLedgerStorage caches of the Java bookies: upstream = upstream's defaults for --heap "
                         "(default); fixture = the test fixture's 16 MB ones")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per heal (and per write/read; default 300)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 8 ledgers x 500 entries x 4 KiB, one round, 120 s timeout")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (failed sides are always kept)")
    ap.add_argument("--cold-cache", action="store_true",
                    help="drop the page cache (sync; echo 3 > /proc/sys/vm/drop_caches, needs root) before each kill")
    a = ap.parse_args()
    if a.quick:
        a.ledgers, a.entries, a.entry_size, a.rounds, a.timeout = 8, 500, 4096, 1, 120
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    if not variants or any(v not in VARIANTS for v in variants):
        ap.error(f"--variants: choose from {','.join(VARIANTS)}")
    a.jvm_opts = FULL_JIT if a.jit == "full" else []
    if not re.fullmatch(r"\d+[kKmMgG]", a.heap):
        ap.error(f"--heap {a.heap!r}: expected a size like 512m or 1g")

    base = Path(tempfile.mkdtemp(prefix="bench-vs-upstream-"))
    t_start = time.perf_counter()
    zk = ZooKeeperServer(base / "zookeeper")
    try:
        lim = limits.measure(base)
        dd, tcp = lim.disk, lim.loopback
        zk.start()
        size = a.ledgers * a.entries * a.entry_size
        caches = bookie_caches(a)
        cache_txt = (f"write {caches['dbStorage_writeCacheMaxSizeMb']} MB, read-ahead "
                     f"{caches['dbStorage_readAheadCacheMaxSizeMb']} MB, RocksDB block "
                     f"{caches['dbStorage_rocksDB_blockCacheSize'] // 2**20} MB (upstream's defaults for -Xmx{a.heap})"
                     if caches else "write 16 MB, read-ahead 16 MB, RocksDB block 8 MB (the test fixture's)")
        print(f"vs_upstream: stock Apache BookKeeper 4.17.2, 4 Java bookies in 2 racks, a fresh cluster per side; "
              f"DbLedgerStorage caches {cache_txt}; journalSyncData={str(a.journal_sync_data).lower()}; zkTimeout "
              f"{a.zk_timeout_ms} ms; JVMs (bookies, AutoRecoveryMain): "
              f"{'tiered C1+C2, G1' if a.jit == 'full' else 'C1 only, serial GC'}, -Xmx{a.heap}")
        print(lim.line(base) + ("; page cache dropped before each kill (--cold-cache)" if a.cold_cache else ""))
        print(f"data per side: {a.ledgers} ledgers x {a.entries} entries x {a.entry_size} B = {size / 2**20:.0f} MiB, "
              f"E3/WQ2/AQ2, {a.digest}, written by upstream's Java client; victim bookie {a.victim} "
              f"({'bookie and its recovery process' if a.kill_host else 'the bookie only'}), SIGKILL")
        print("variants: " + "; ".join({
            "defaults": "defaults = AutoRecoveryMain x4, upstream defaults (lostBookieRecoveryDelay=0, "
                        "rereplicationEntryBatchSize=10, auditorPeriodicBookieCheckInterval=86400)",
            "tuned": "tuned = AutoRecoveryMain x4, " + ", ".join(f"{k}={v}" for k, v in UPSTREAM_TUNED.items()),
            "ours": "ours = python -m autorecovery run x4, our defaults (lostBookieRecoveryDelay=0)",
            "ours-fast": "ours-fast = the same with localBookieLossDetectionEnabled=true (each daemon deletes the "
                         "registration its own bookie's dead process left, instead of waiting for the expiry)"}[v]
            for v in variants))
        print(f"{a.rounds} round(s), variant order rotated each round; times from ZooKeeper watch notifications\n",
              flush=True)
        sides: list[Side] = []
        for rnd in range(1, a.rounds + 1):
            k = (rnd - 1) % len(variants)
            for v in variants[k:] + variants[:k]:
                s = run_side(a, zk, base, v, rnd)
                sides.append(s)
                print(side_line(s), flush=True)
        report(sides, variants, dd, tcp)
        print(f"\ntotal {time.perf_counter() - t_start:.0f} s")
    finally:
        zk.stop()
        if a.keep:
            print(f"kept {base}")
        elif base.exists():  # failed sides' directories (r<round>-<variant>) stay, with a note where they are
            failed = [p for p in base.iterdir() if p.is_dir() and p.name.startswith("r")]
            for p in base.iterdir():
                if p not in failed:
                    if p.is_dir():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink(missing_ok=True)
            if not failed:
                base.rmdir()


if __name__ == "__main__":
    main()
