"""Benchmark: one lost Java bookie healed by upstream's AutoRecoveryMain and by our daemons, same cluster.

The cluster is stock Apache BookKeeper 4.17.2 (``make upstream``): 4 Java bookies in 2 racks on
127.0.0.x (:class:`~autorecovery.testing.upstream_cluster.JavaCluster`, DbLedgerStorage), one ZooKeeper.
Every side of every round gets a fresh cluster on a fresh metadata root of that ZooKeeper, so the sides
share nothing but the machine. The JVMs (bookies, AutoRecoveryMain, upstream's client) run with the flags
upstream's ``bin/common.sh`` gives a bookie (G1, ``MaxGCPauseMillis=10``, tiered C1+C2, ``-Xms`` = ``-Xmx``;
``--jit c1``: the test fixture's C1-only serial-GC flags instead). Per side (not timed): the cluster comes
up, 4 recovery processes start (one per bookie host, each its own process, waited for until ready:
upstream's Auditor has run its start-up bookie check, ours answer ``/readyz`` with one Auditor elected),
then upstream's Java client (our Java tool) writes the data shape at E3/WQ2/AQ2 and closes the ledgers,
and dirty pages are synced. Then bookie ``--victim`` is killed (SIGKILL) and the bench watches ZooKeeper
(kazoo data watches: each time is taken when its notification arrives) until healed.

Shapes (``--shape``): ``small`` (default): ``--ledgers`` x ``--entries`` x ``--entry-size`` (40 x 2000 x
4 KiB); ``pulsar``: about 1,500 ledgers holding 2.4 GiB, each ledger's entry size drawn (seeded,
``--seed``) from 1, 2, 4 ... 64 KiB as a Pulsar topic's ledger carries one producer's batches, about
1.2 GiB of it on the victim (above 1 GiB to heal).

Variants (alternated within each round, the order rotated from round to round):

* ``defaults``: upstream ``AutoRecoveryMain`` x4 with upstream's defaults (``lostBookieRecoveryDelay=0``,
  which is also upstream's default, ``rereplicationEntryBatchSize=10``...);
* ``tuned``: the same with upstream's documented replication tuning keys (:data:`UPSTREAM_TUNED`);
* ``ours``: ``python -m autorecovery run`` x4 with our DEFAULT settings (``lostBookieRecoveryDelay=0``,
  upstream's default too); no opt-in key;
* ``ceiling``: no recovery process: after the kill, upstream's bookie client (``BkTool copyceiling``)
  reads every entry the victim held from the survivor that has it and writes the stored bytes to a live
  bookie outside the segment's ensemble, 64 MiB in flight, no metadata work, no digest work: the
  cluster's own copy ceiling; timed from its first read to its last write's ack;
* ``tuned+w``, ``ours+w``: ``tuned`` and ``ours`` with a foreground writer: upstream's Java client
  (``BkTool ratewriter``) adding ``--writer-rate`` x 1 KiB entries/s over 4 open E3/WQ2/AQ2 ledgers from
  before the kill to the end of the heal; its add latency (counted from each add's due time) is reported
  for ``--idle`` s before the kill ("idle") and from the kill to healed ("heal").

Every recovery process, ours or upstream's, and every bookie gets the same ``zkTimeout`` and rack-aware
placement. ``journalSyncData`` is one flag for the (shared kind of) Java bookies.

Timed from the kill, per side:

* **detect**: the victim's registration (``available/<id>``) leaves ZooKeeper: the bookie's session
  expiry (``zkTimeout``) unless a recovery process removes it first (ours: the local bookie watch, on by
  default, deletes it once the bookie's port refuses connections and its process is gone);
* **first marker** and **all marked**: every affected ledger (its ensembles name the victim, computed
  from the writer's metadata before the kill) has been seen with an under-replication marker, or was
  already healed when its metadata changed (a marker created and deleted between two reads still counts);
* **healed**: no affected ledger's metadata names the victim and no marker is left on them (confirmed at
  the end by a walk of the whole marker tree; markers on the foreground writer's own ledgers are counted
  apart).

Then upstream's Java reader reads every entry of every ledger back (digest checked, content compared)
with the victim still down: OK or FAILED. Also printed: the bytes to heal (entry payloads whose write
set held the victim), the heal rate counted from the kill and after detection, the CPU of each process
group (recovery processes, surviving bookies, the ceiling's client) from the kill to healed, per MiB
healed, and the machine's own limits measured first: an fdatasync write rate (256 MiB in 1 MiB writes and
one fdatasync in the work dir) and a loopback TCP rate (a Python socket copy of 256 MiB), with the
fraction of each the heal rate reached; the whole machine's busy CPU and the part of it outside this
bench's process tree (other work on a shared machine skews a run). Medians over rounds, then the targets
as ratios with met / not met. Not a test.

Caveats: the data has the same shape on every side, but upstream's client places ensembles at random,
so the affected ledgers and bytes differ a little from side to side (rates are compared, not times). The
reader reads one replica of each entry (not necessarily the new one). The Java bookies get upstream's
default DbLedgerStorage caches for their memory (``--bookie-caches fixture``: the fixture's small ones).

    .venv/bin/python bench/vs_upstream.py --quick           # smoke run, small data, one round
    .venv/bin/python bench/vs_upstream.py                   # small shape, 3 rounds, every variant
    .venv/bin/python bench/vs_upstream.py --shape pulsar --rounds 1 --variants tuned,ours,ceiling
    .venv/bin/python bench/vs_upstream.py --rounds 3 --variants defaults,ours --jit c1
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import random
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
from autorecovery.testing.upstream_java import TOOL_CLASS, JavaProcess, java_cmd, tail, wait_until, write_properties  # noqa: E402
from autorecovery.testing.zk_server import ZooKeeperServer  # noqa: E402
from autorecovery.zk.paths import Paths  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
import limits  # noqa: E402  (bench/limits.py: the machine's own ceilings, shared by the benches)

VARIANTS = ("defaults", "tuned", "ours", "ceiling", "tuned+w", "ours+w")
#: upstream's documented replication tuning keys (bk_server.conf "Replication Worker settings",
#: ServerConfiguration and ClientConfiguration 4.17.2; AutoRecoveryMain's client reads the same file):
#: entries copied in parallel per fragment (default 10), no replication throttle (default -1 already), a
#: shorter back-off after a failed attempt (default 5000 ms), a shorter hold of a failed ledger's lock
#: (default 300000 ms), the v2 wire protocol (default false: protobuf v3), and reads ordered away from
#: failed bookies (reorderReadSequenceEnabled, which bk_server.conf ships set). openLedgerRereplication-
#: GracePeriod only matters for open ledgers (the data healed here is closed).
UPSTREAM_TUNED: dict[str, object] = {
    "rereplicationEntryBatchSize": 500,
    "replicationRateByBytes": -1,
    "rwRereplicateBackoffMs": 500,
    "lockReleaseOfFailedLedgerGracePeriod": 10000,
    "useV2WireProtocol": True,
    "reorderReadSequenceEnabled": True,
}
#: the pulsar shape: each ledger's entry size is one of these (seeded draw), its entry count gives it
#: about PULSAR_LEDGER_BYTES
PULSAR_SIZES = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
PULSAR_LEDGERS = 1500
PULSAR_LEDGER_BYTES = 5 * 2**20 // 3  # 1.67 MiB: 1,500 ledgers hold 2.4 GiB, about half of it on the victim
#: targets of the table (issue 39), each compared to a ratio the bench measures in the same run
TARGET_RATE_VS_TUNED, TARGET_CEILING, TARGET_RATE_W, TARGET_DETECT_S = 3.0, 0.8, 2.0, 1.0

_children: list[subprocess.Popen] = []


@atexit.register
def _kill_children() -> None:
    for p in _children:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


# -- data shapes -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Group:
    """Ledgers written by one writer call: ``ledgers`` x ``entries`` x ``entry_size`` bytes."""
    ledgers: int
    entries: int
    entry_size: int


def shape_groups(a: argparse.Namespace) -> list[Group]:
    """The data of one side as writer calls: one group for ``small``; for ``pulsar``, one per entry size."""
    if a.shape == "small":
        return [Group(a.ledgers, a.entries, a.entry_size)]
    rng = random.Random(a.seed)
    counts = dict.fromkeys(PULSAR_SIZES, 0)
    for _ in range(a.ledgers):
        counts[rng.choice(PULSAR_SIZES)] += 1
    return [Group(n, max(1, PULSAR_LEDGER_BYTES // size), size) for size, n in counts.items() if n]


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
def affected(ledgers: list[dict], victim: str, wq: int) -> tuple[set[int], int]:
    """Ledgers whose ensembles name ``victim``, and the payload bytes whose write set holds it (each
    ledger record carries its ``entry_size``)."""
    hit, nbytes = set(), 0
    for lg in ledgers:
        segs = sorted(lg["ensembles"].items())
        for k, (first, ens) in enumerate(segs):
            if victim not in ens:
                continue
            hit.add(lg["ledger"])
            last = segs[k + 1][0] - 1 if k + 1 < len(segs) else lg["last_acked"]
            idx = ens.index(victim)
            nbytes += lg["entry_size"] * sum(1 for e in range(first, last + 1)
                                             if index_stores(idx, e, len(ens), wq))
    return hit, nbytes


def marked_ledgers(kz: KazooClient, root: str) -> set[int]:
    """The ledger id of every ``urL<id>`` znode under the marker tree ``root`` (a full walk)."""
    try:
        children = kz.get_children(root)
    except NoNodeError:
        return set()
    out: set[int] = set()
    for ch in children:
        if ch.startswith("urL"):
            out.add(int(ch[3:]))
        else:
            out |= marked_ledgers(kz, f"{root}/{ch}")
    return out


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


# -- the foreground writer -------------------------------------------------------------------------
class ForegroundWriter:
    """``BkTool ratewriter`` (upstream's client at a fixed add rate) on cluster ``c``; see the module doc."""

    def __init__(self, c: JavaCluster, workdir: Path, rate: float, production: bool) -> None:
        self.out, self.stop_file = workdir / "ratewriter.lat", workdir / "ratewriter.stop"
        log = workdir / "ratewriter.log"
        cmd = java_cmd(TOOL_CLASS, ["ratewriter", "--conf", str(c.conf_path), "--out", str(self.out),
                                    "--stop-file", str(self.stop_file), "--rate", str(rate)],
                       "256m", log_file=log, production=production)
        self.proc = JavaProcess(cmd, "ratewriter", workdir / "ratewriter.stdout", workdir / "ratewriter.err", log)
        self.rate = rate

    def start(self, warmup_s: float, idle_s: float, timeout_s: float) -> float:
        """Start it; return (epoch s) where its idle window begins, once ``warmup_s + idle_s`` s of adds
        are in its log."""
        self.proc.start()
        assert self.proc.proc is not None
        _children.append(self.proc.proc)
        first: list[float] = []

        def enough() -> bool:
            lines = self.samples()
            if lines and not first:
                first.append(lines[0][0])
            return bool(first) and bool(lines) and lines[-1][0] >= first[0] + warmup_s + idle_s
        wait_until(enough, timeout_s, "the foreground writer's idle window", self.proc, interval_s=0.2)
        return first[0] + warmup_s

    def samples(self) -> list[tuple[float, float, int]]:
        """(due time epoch s, latency ms, rc) of every add completed so far."""
        out = []
        try:
            text = self.out.read_text()
        except OSError:
            return []
        for ln in text.splitlines():
            parts = ln.split()
            if len(parts) == 3 and not ln.startswith("#"):
                out.append((int(parts[0]) / 1e6, int(parts[1]) / 1e3, int(parts[2])))
        return out

    def ledger_ids(self) -> set[int]:
        try:
            return {int(ln.split()[2]) for ln in self.out.read_text().splitlines() if ln.startswith("# ledger ")}
        except OSError:
            return set()

    def stop(self, timeout_s: float = 60.0) -> dict:
        """Ask it to stop (the stop file), wait for it to exit; its summary line (``{}`` if none)."""
        self.stop_file.touch()
        try:
            wait_until(lambda: not self.proc.alive, timeout_s, "the foreground writer stopping")
        except Exception:  # noqa: BLE001 - killed below, the summary then says nothing
            self.proc.kill()
        lines = [ln for ln in tail(self.proc.out_path, 10**6).splitlines() if ln.startswith("{")]
        return json.loads(lines[-1]) if len(lines) >= 2 else {}


def window_stats(samples: list[tuple[float, float, int]], t0: float, t1: float) -> dict[str, float]:
    """Adds due in [t0, t1) (epoch s): count, failed, p50 / p99 / max latency (ms)."""
    lat = sorted(s[1] for s in samples if t0 <= s[0] < t1)
    if not lat:
        return {"n": 0}

    def q(f: float) -> float:
        return lat[min(len(lat) - 1, int(f * len(lat)))]
    return {"n": len(lat), "failed": sum(1 for s in samples if t0 <= s[0] < t1 and s[2] != 0),
            "p50": q(0.50), "p99": q(0.99), "max": lat[-1]}


# -- the copy ceiling ------------------------------------------------------------------------------
def run_ceiling(c: JavaCluster, workdir: Path, victim: str, hit: set[int], a: argparse.Namespace) -> tuple[dict, float]:
    """``BkTool copyceiling`` over the affected ledgers with the tuned client keys; (its JSON result,
    its process's CPU core-s from rusage)."""
    conf = write_properties(workdir / "ceiling-client.conf", {
        "metadataServiceUri": c.metadata_uri, "zkTimeout": c.zk_timeout_ms, **c.placement_properties(),
        "useV2WireProtocol": True})
    live = [b.bookie_id for b in c.bookies if b.bookie_id != victim]
    log = workdir / "ceiling.log"
    cmd = java_cmd(TOOL_CLASS, ["copyceiling", "--conf", str(conf), "--victim", victim, "--bookies", ",".join(live),
                                "--password", a.password, *map(str, sorted(hit))],
                   a.heap, log_file=log, production=a.jit == "full")
    with open(workdir / "ceiling.out", "wb") as out, open(workdir / "ceiling.err", "wb") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        _children.append(p)
        deadline = time.monotonic() + a.timeout
        while True:  # wait4 gives the child's own rusage
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.killpg(p.pid, signal.SIGKILL)
                raise SystemExit(f"copyceiling: not done within {a.timeout:g} s (log {log})")
            time.sleep(0.1)  # polling the child's exit with a deadline
    lines = [ln for ln in (workdir / "ceiling.out").read_text().splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"copyceiling gave no result (exit {p.returncode}): {tail(workdir / 'ceiling.err', 1500)}")
    return json.loads(lines[-1]), ru.ru_utime + ru.ru_stime


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
    cpu_recovery: float = 0.0  # recovery processes (ceiling: the copy tool), core-s
    cpu_bookies: float = 0.0
    cpu_machine: float = 0.0  # every process on the machine (busy = not idle, not iowait), core-s
    cpu_others: float = 0.0  # the machine's busy time not spent by this bench and its children, core-s
    cache: str = "page cache warm"  # what --cold-cache did before the kill
    copy_s: float | None = None  # ceiling: first timed read to last ack (s)
    copy_frac: float = 1.0  # ceiling: the timed share of the bytes (after the warm-up copies)
    idle: dict[str, float] = field(default_factory=dict)  # foreground writer, idle window
    during: dict[str, float] = field(default_factory=dict)  # foreground writer, kill -> healed
    writer_note: str = ""

    @property
    def rate(self) -> float | None:
        """MB/s from the kill (ceiling: over its copy time)."""
        if self.variant == "ceiling":
            return self.to_heal * self.copy_frac / self.copy_s / 1e6 if self.copy_s else None
        return self.to_heal / self.heal.healed / 1e6 if self.heal.healed else None

    @property
    def rate_after_detect(self) -> float | None:
        h = self.heal
        if self.variant == "ceiling":
            return self.rate
        return self.to_heal / (h.healed - h.detect) / 1e6 if h.healed and h.detect is not None else None


def run_side(a: argparse.Namespace, zk: ZooKeeperServer, base: Path, variant: str, rnd: int) -> Side:
    s = Side(variant, rnd)
    workdir = base / f"r{rnd}-{variant.replace('+', '-')}"
    production = a.jit == "full"
    c = JavaCluster(workdir, zk.connect_string, bookies=4, racks=2, zk_timeout_ms=a.zk_timeout_ms, heap=a.heap,
                    bookie_conf={"journalSyncData": a.journal_sync_data, **bookie_caches(a)},
                    production_jvm=production)
    daemons: dict[int, DaemonProcess] = {}
    kz = KazooClient(zk.connect_string, timeout=10.0)
    writer: ForegroundWriter | None = None
    failed = True
    kind = variant.removesuffix("+w")
    try:
        t = time.perf_counter()
        c.up()
        s.phases["cluster up"] = time.perf_counter() - t
        kz.start(15)
        paths = Paths(c.ledgers_root)
        victim = c.bookies[a.victim].bookie_id
        t = time.perf_counter()
        if kind == "ours":
            for i, b in enumerate(c.bookies):
                daemons[i] = start_ours(c, i, {
                    **c.daemon_properties(), "bookieId": b.bookie_id, "zkTimeout": c.zk_timeout_ms,
                    "ensemblePlacementPolicy": "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy",
                    "lostBookieRecoveryDelay": 0, "httpServerPort": 0})
            ours_ready(daemons, 90)
        elif kind in ("defaults", "tuned"):
            for i in range(len(c.bookies)):
                start_upstream(c, i, UPSTREAM_TUNED if kind == "tuned" else {})
            upstream_ready(c, 90)
        s.phases["recovery ready"] = time.perf_counter() - t

        t = time.perf_counter()
        records: list[dict] = []

        def write(g) -> None:
            w = c.writer(ledgers=g.ledgers, entries=g.entries, entry_size=g.entry_size, ensemble=3, wq=2, aq=2,
                         digest=a.digest, password=a.password, timeout_s=a.timeout)
            for lg in w["ledgers"]:
                lg["entry_size"], lg["entries"] = g.entry_size, g.entries
            records.extend(w["ledgers"])

        groups = shape_groups(a)
        for g in groups:
            write(g)
        hit, s.to_heal = affected(records, victim, 2)
        # A small load (the smoke run's 2 ledgers on 4 bookies, E3) can miss the victim altogether (1 in 16):
        # then there is nothing to heal and no heal to time, so write again, bounded, until it holds some.
        for _ in range(8):
            if hit:
                break
            write(groups[0])
            hit, s.to_heal = affected(records, victim, 2)
        if not hit:
            raise RuntimeError(f"no ledger of {len(records)} written has victim bookie {victim} in its ensembles")
        s.phases["write"] = time.perf_counter() - t
        ids = [lg["ledger"] for lg in records]
        s.hit, s.ledgers = len(hit), len(ids)
        os.sync()  # the load's dirty pages are not flushed during the heal

        idle_from = 0.0
        if variant.endswith("+w"):
            writer = ForegroundWriter(c, workdir, a.writer_rate, production)
            t = time.perf_counter()
            idle_from = writer.start(3.0, a.idle, 120)
            s.phases["writer idle"] = time.perf_counter() - t

        procs = {f"bookie-{i}": psutil.Process(b.process.pid) for i, b in enumerate(c.bookies) if i != a.victim}
        rec = ({f"rec-{i}": psutil.Process(d.proc.pid) for i, d in daemons.items()} if daemons else
               {f"rec-{i}": psutil.Process(ar.process.pid) for i, ar in enumerate(c.autorecoveries)})
        procs.update(rec)
        procs.update(bench_tree())
        watch = HealWatch(kz, paths, victim, ids, hit)
        cpu0, m0 = cpu_s(procs), machine_busy()
        s.cache = limits.cold(a.cold_cache)
        kill_epoch = time.time()
        t0 = time.perf_counter()
        c.bookies[a.victim].kill()
        if a.kill_host:
            if daemons:
                os.killpg(daemons[a.victim].proc.pid, signal.SIGKILL)
            elif c.autorecoveries:
                c.autorecoveries[a.victim].kill()
        if kind == "ceiling":
            res, tool_cpu = run_ceiling(c, workdir, victim, hit, a)
            s.copy_s = res.get("seconds")
            if res.get("bytes"):
                s.copy_frac = res.get("timed_bytes", 0) / res["bytes"]
            if not res.get("ok"):
                s.heal.left = f"copyceiling failed: {str(res)[:500]}"
            elif res.get("planned") != res.get("entries"):
                s.heal.left = f"copyceiling copied {res.get('entries')} of {res.get('planned')} entries"
            s.heal.healed = time.perf_counter() - t0 if not s.heal.left else None
            watch.done = True
        else:
            s.heal = watch.wait(t0, a.timeout)
        heal_end_epoch = time.time()
        cpu1, s.cpu_machine = cpu_s(procs), machine_busy() - m0
        s.cpu_recovery, s.cpu_bookies = delta(cpu0, cpu1, "rec-"), delta(cpu0, cpu1, "bookie-")
        if kind == "ceiling":
            s.cpu_recovery = tool_cpu
        s.cpu_others = max(0.0, s.cpu_machine - delta(cpu0, cpu1, "tree-") - (tool_cpu if kind == "ceiling" else 0))
        if writer is not None:
            summary = writer.stop()
            samples = writer.samples()
            s.idle = window_stats(samples, idle_from, kill_epoch)
            s.during = window_stats(samples, kill_epoch, heal_end_epoch)
            s.writer_note = f"{summary.get('adds', '?')} adds, {summary.get('failed', '?')} failed"
        if kind != "ceiling" and s.heal.healed is not None:
            left = marked_ledgers(kz, paths.ur_ledgers)
            own = writer.ledger_ids() if writer is not None else set()
            if left - own:
                s.heal.healed, s.heal.left = None, f"{len(left - own)} markers left in the marker tree"
            if left & own:
                s.writer_note += f", {len(left & own)} of its ledgers still marked"
        if s.heal.healed is None:
            print(f"  {variant} round {rnd}: NOT HEALED ({s.heal.left}); logs in {workdir}:")
            logs = [d.log for d in daemons.values()] or [ar.process.log_path for ar in c.autorecoveries]
            for p in logs:
                print(f"  --- {p}:\n" + "\n".join("    " + ln for ln in log_problems(p).splitlines()))
        t = time.perf_counter()
        r = c.reader(ids, digest=a.digest, password=a.password, timeout_s=a.timeout)
        s.phases["read back"] = time.perf_counter() - t
        want = {lg["ledger"]: lg["entries"] for lg in records}
        bad = [lg for lg in r.get("ledgers", []) if lg.get("errors") or lg.get("bad_entries")
               or lg.get("entries_read") != want.get(lg.get("ledger"))]
        s.verified = "OK" if r.get("ok") and not bad and len(r.get("ledgers", [])) == len(ids) else \
            f"FAILED ({len(bad)} ledgers: {str(bad[:2])[:400]})"
        s.ok = s.heal.healed is not None and s.verified == "OK"
        failed = not s.ok
        return s
    finally:
        if writer is not None and writer.proc.alive:
            writer.proc.kill()
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
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def side_line(s: Side) -> str:
    h = s.heal
    stray = f", {len(h.stray_markers)} stray markers" if h.stray_markers else ""
    head = (f"round {s.round} {s.variant:8s}: {s.hit}/{s.ledgers} ledgers held the victim, "
            f"{s.to_heal / 2**20:.1f} MiB to heal; ")
    if s.variant == "ceiling":
        body = (f"copied {s.copy_frac:.0%} of it (after the warm-up copies) in {fmt(s.copy_s)} s "
                f"({fmt(s.rate if s.heal.healed is not None else None, '.1f')} MB/s); "
                f"CPU copy client {s.cpu_recovery:.1f} core-s")
    else:
        body = (f"detect {fmt(h.detect)} s, first marker {fmt(h.first_marker)} s, all marked {fmt(h.all_marked)} s, "
                f"healed {fmt(h.healed)} s ({fmt(s.rate, '.1f')} MB/s from the kill), max {h.max_markers} markers"
                f"{stray}; CPU kill->healed: recovery {s.cpu_recovery:.1f} core-s")
    body += (f", surviving bookies {s.cpu_bookies:.1f} core-s, machine {s.cpu_machine:.1f} of "
             f"{(os.cpu_count() or 1) * (h.healed or 0):.1f} core-s of which outside this bench {s.cpu_others:.1f}")
    if s.idle or s.during:
        body += (f"; writer p50/p99 idle {fmt(s.idle.get('p50'), '.1f')}/{fmt(s.idle.get('p99'), '.1f')} ms, "
                 f"during heal {fmt(s.during.get('p50'), '.1f')}/{fmt(s.during.get('p99'), '.1f')} ms "
                 f"(max {fmt(s.during.get('max'), '.0f')} ms, {s.during.get('n', 0)} adds; {s.writer_note})")
    return (head + body + f"; read back: {s.verified}; {s.cache} (untimed: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in s.phases.items()) + ")")


def report(sides: list[Side], variants: list[str], dd: float, tcp: float) -> None:
    by = {v: [s for s in sides if s.variant == v] for v in variants}

    def m(v: str, f) -> float | None:
        if v not in by:
            return None
        vals = []
        for s in by[v]:
            if not s.ok:
                continue
            with contextlib.suppress(TypeError, ZeroDivisionError):
                vals.append(f(s))
        return med(vals)

    def per_mib(cpu: float, s: Side) -> float:
        return 1000 * cpu / (s.to_heal / 2**20)

    rows = [
        ("detect: kill -> registration gone (s)", lambda s: s.heal.detect, ".2f"),
        ("kill -> first marker (s)", lambda s: s.heal.first_marker, ".2f"),
        ("kill -> all affected marked (s)", lambda s: s.heal.all_marked, ".2f"),
        ("kill -> healed (s)", lambda s: s.heal.healed if s.variant != "ceiling" else None, ".2f"),
        ("  of which after detection (s)", lambda s: s.heal.healed - s.heal.detect, ".2f"),
        ("ceiling: copy time (s)", lambda s: s.copy_s, ".2f"),
        ("bytes healed (MiB)", lambda s: s.to_heal / 2**20, ".1f"),
        ("heal rate from the kill (MB/s)", lambda s: s.rate, ".1f"),
        ("heal rate after detection (MB/s)", lambda s: s.rate_after_detect, ".1f"),
        ("  fraction of fdatasync write rate", lambda s: s.rate / dd, ".3f"),
        ("  fraction of loopback TCP rate", lambda s: s.rate / tcp, ".3f"),
        ("CPU recovery procs / copy tool (core-s)", lambda s: s.cpu_recovery, ".1f"),
        ("  per MiB healed (ms)", lambda s: per_mib(s.cpu_recovery, s), ".1f"),
        ("CPU surviving bookies (core-s)", lambda s: s.cpu_bookies, ".1f"),
        ("  per MiB healed (ms)", lambda s: per_mib(s.cpu_bookies, s), ".1f"),
        ("CPU whole machine (core-s)", lambda s: s.cpu_machine, ".1f"),
        ("  fraction of all cores busy", lambda s: s.cpu_machine / (os.cpu_count() or 1) / s.heal.healed, ".2f"),
        ("CPU outside this bench (core-s)", lambda s: s.cpu_others, ".1f"),
        ("writer add p50 idle (ms)", lambda s: s.idle.get("p50"), ".1f"),
        ("writer add p99 idle (ms)", lambda s: s.idle.get("p99"), ".1f"),
        ("writer add p50 during heal (ms)", lambda s: s.during.get("p50"), ".1f"),
        ("writer add p99 during heal (ms)", lambda s: s.during.get("p99"), ".1f"),
        ("writer add max during heal (ms)", lambda s: s.during.get("max"), ".0f"),
    ]
    ok = {v: sum(s.ok for s in by[v]) for v in variants}
    print(f"\nmedians of the rounds that healed and read back OK ({', '.join(f'{v} {ok[v]}/{len(by[v])}' for v in variants)}):")
    print(f"{'':40s}" + "".join(f"{v:>10s}" for v in variants))
    for name, f, spec in rows:
        cells = [m(v, f) for v in variants]
        if any(x is not None for x in cells):
            print(f"{name:40s}" + "".join(f"{fmt(x, spec):>10s}" for x in cells))

    def ratio(x: float | None, y: float | None) -> float | None:
        return x / y if x is not None and y else None

    rate = {v: m(v, lambda s: s.rate) for v in variants}
    healed_mib = m("ours", lambda s: s.to_heal / 2**20) if "ours" in by else None
    print("\ntargets (ratios of the medians above; ours with its default settings):")
    targets: list[tuple[str, float | None, str, bool | None]] = []
    if "ours" in by and "tuned" in by:
        r = ratio(rate["ours"], rate["tuned"])
        big = healed_mib is not None and healed_mib >= 1024
        targets.append((f"heal rate from the kill, ours / tuned (at {fmt(healed_mib, '.0f')} MiB"
                        f"{'' if big else '; the target is set at >= 1 GiB'})", r, f">= {TARGET_RATE_VS_TUNED:g}",
                        None if r is None else r >= TARGET_RATE_VS_TUNED))
    if "ours" in by and "ceiling" in by:
        r = ratio(rate["ours"], rate["ceiling"])
        targets.append(("heal rate from the kill, ours / the cluster's copy ceiling", r, f">= {TARGET_CEILING:g}",
                        None if r is None else r >= TARGET_CEILING))
        r2 = ratio(m("ours", lambda s: s.rate_after_detect), rate["ceiling"])
        targets.append(("  (after detection, ours / ceiling; not a target)", r2, "", None))
    if "tuned" in by and "ceiling" in by:
        targets.append(("  (tuned / ceiling; not a target)", ratio(rate["tuned"], rate["ceiling"]), "", None))
    if "ours+w" in by and "tuned+w" in by:
        r = ratio(rate["ours+w"], rate["tuned+w"])
        targets.append(("with the foreground writer: heal rate, ours / tuned", r, f">= {TARGET_RATE_W:g}",
                        None if r is None else r >= TARGET_RATE_W))
        p_o, p_t = (m(v, lambda s: s.during.get("p99")) for v in ("ours+w", "tuned+w"))
        r = ratio(p_o, p_t)
        targets.append((f"writer p99 during the heal, ours / tuned ({fmt(p_o, '.1f')} vs {fmt(p_t, '.1f')} ms)", r,
                        "<= 1", None if r is None else r <= 1.0))
    for v in ("ours", "ours+w"):
        if v in by:
            worst = max((s.heal.detect for s in by[v] if s.ok and s.heal.detect is not None), default=None)
            d = m(v, lambda s: s.heal.detect)
            targets.append((f"detection, {v}: median (s), worst {fmt(worst)} s", d, f"< {TARGET_DETECT_S:g}",
                            None if d is None else (worst or d) < TARGET_DETECT_S))
    for name, value, target, met in targets:
        verdict = "" if not target else ("met" if met else "NOT MET" if met is not None else "not measured")
        print(f"  {name:78s} {fmt(value):>7s}  {target:>6s}  {verdict}")
    for o in [v for v in variants if v == "ours"]:
        for v in [v for v in variants if v in ("defaults", "tuned")]:
            parts = []
            for label, f in (("all marked", lambda s: s.heal.all_marked), ("healed", lambda s: s.heal.healed)):
                parts.append(f"{label} {fmt(ratio(m(v, f), m(o, f)))}")
            parts.append(f"heal rate from the kill ours/upstream {fmt(ratio(rate[o], rate[v]))}")
            print(f"ratio upstream {v} / {o} (time; > 1: ours faster): " + ", ".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each runs every variant once (default 3)")
    ap.add_argument("--shape", choices=("small", "pulsar"), default="small",
                    help="data per side: small = --ledgers x --entries x --entry-size (default); pulsar = about "
                         f"{PULSAR_LEDGERS} ledgers (--ledgers) of 1-64 KiB entries, 2.4 GiB, over 1 GiB to heal")
    ap.add_argument("--ledgers", type=int, default=None,
                    help=f"ledgers written per side (default 40; pulsar {PULSAR_LEDGERS})")
    ap.add_argument("--entries", type=int, default=None, help="small shape: entries per ledger (default 2000)")
    ap.add_argument("--entry-size", type=int, default=4096, help="small shape: bytes per entry (default 4096)")
    ap.add_argument("--seed", type=int, default=39, help="pulsar shape: seed of the entry-size draw (default 39)")
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
                    help="zkTimeout of every bookie and recovery process (default 5000; a killed bookie's "
                         "registration leaves ZooKeeper this long after the kill unless removed first)")
    ap.add_argument("--jit", choices=("c1", "full"), default="full",
                    help="JVM flags of the Java bookies, AutoRecoveryMain and client tools: full = upstream's "
                         "bin/common.sh (G1, C1+C2; default); c1 = the test fixture's (C1 only, serial GC)")
    ap.add_argument("--heap", default="512m", help="-Xmx (and direct memory) of every Java bookie and "
                    "AutoRecoveryMain (default 512m)")
    ap.add_argument("--bookie-caches", choices=("upstream", "fixture"), default="upstream",
                    help="DbLedgerStorage caches of the Java bookies: upstream = upstream's defaults for --heap "
                         "(default); fixture = the test fixture's 16 MB ones")
    ap.add_argument("--writer-rate", type=float, default=300,
                    help="+w variants: foreground adds per second of 1 KiB (default 300)")
    ap.add_argument("--idle", type=float, default=10, help="+w variants: seconds of idle writer latency before "
                    "the kill (default 10, after 3 s of warm-up)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per heal (and per write/read; default 300, pulsar 1800)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 8 ledgers x 500 entries x 4 KiB (unless given), one round, 120 s timeout, "
                         "3 s idle window")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (failed sides are always kept)")
    ap.add_argument("--cold-cache", action="store_true",
                    help="drop the page cache (sync; echo 3 > /proc/sys/vm/drop_caches, needs root) before each kill")
    a = ap.parse_args()
    if a.quick:
        a.shape, a.rounds, a.idle = "small", 1, 3
        a.ledgers, a.entries, a.timeout = a.ledgers or 8, a.entries or 500, a.timeout or 120
    a.ledgers = a.ledgers or (PULSAR_LEDGERS if a.shape == "pulsar" else 40)
    a.entries = a.entries or 2000
    a.timeout = a.timeout or (1800 if a.shape == "pulsar" else 300)
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    if not variants or any(v not in VARIANTS for v in variants):
        ap.error(f"--variants {a.variants!r}: choose from {','.join(VARIANTS)}")
    if not re.fullmatch(r"\d+[kKmMgG]", a.heap):
        ap.error(f"--heap {a.heap!r}: expected a size like 512m or 1g")
    if a.ledgers < 1 or a.entries < 1 or a.entry_size < 1 or a.rounds < 1 or a.writer_rate <= 0 or a.idle <= 0:
        ap.error("--ledgers, --entries, --entry-size, --rounds, --writer-rate and --idle must be positive")

    base = Path(tempfile.mkdtemp(prefix="bench-vs-upstream-"))
    t_start = time.perf_counter()
    zk = ZooKeeperServer(base / "zookeeper")
    try:
        lim = limits.measure(base)
        dd, tcp = lim.disk, lim.loopback
        zk.start()
        groups = shape_groups(a)
        size = sum(g.ledgers * g.entries * g.entry_size for g in groups)
        caches = bookie_caches(a)
        cache_txt = (f"write {caches['dbStorage_writeCacheMaxSizeMb']} MB, read-ahead "
                     f"{caches['dbStorage_readAheadCacheMaxSizeMb']} MB, RocksDB block "
                     f"{caches['dbStorage_rocksDB_blockCacheSize'] // 2**20} MB (upstream's defaults for -Xmx{a.heap})"
                     if caches else "write 16 MB, read-ahead 16 MB, RocksDB block 8 MB (the test fixture's)")
        print(f"vs_upstream: stock Apache BookKeeper 4.17.2, 4 Java bookies in 2 racks, a fresh cluster per side; "
              f"DbLedgerStorage caches {cache_txt}; journalSyncData={str(a.journal_sync_data).lower()}; zkTimeout "
              f"{a.zk_timeout_ms} ms on every side; JVMs (bookies, AutoRecoveryMain, client tools): "
              f"{'upstream bin/common.sh: G1, MaxGCPauseMillis=10, C1+C2' if a.jit == 'full' else 'C1 only, serial GC'}"
              f", -Xmx{a.heap}")
        print(lim.line(base) + ("; page cache dropped before each kill (--cold-cache)" if a.cold_cache else ""))
        mix = ", ".join(f"{g.ledgers} x {g.entries} x {g.entry_size // 1024} KiB" for g in groups)
        print(f"data per side ({a.shape} shape): {sum(g.ledgers for g in groups)} ledgers ({mix}) = "
              f"{size / 2**20:.0f} MiB, E3/WQ2/AQ2, {a.digest}, written by upstream's Java client; victim bookie "
              f"{a.victim} ({'bookie and its recovery process' if a.kill_host else 'the bookie only'}), SIGKILL")
        print("variants: " + "; ".join({
            "defaults": "defaults = AutoRecoveryMain x4, upstream defaults (lostBookieRecoveryDelay=0, "
                        "rereplicationEntryBatchSize=10, auditorPeriodicBookieCheckInterval=86400)",
            "tuned": "tuned = AutoRecoveryMain x4, " + ", ".join(f"{k}={v}" for k, v in UPSTREAM_TUNED.items()),
            "ours": "ours = python -m autorecovery run x4, our defaults (lostBookieRecoveryDelay=0, no opt-in key)",
            "ceiling": "ceiling = no recovery process; upstream's bookie client relays the victim's entries "
                       "survivor -> outside bookie, 64 MiB in flight, v2 protocol, no metadata work",
            "tuned+w": f"tuned+w = tuned with the foreground writer ({a.writer_rate:g} x 1 KiB adds/s, E3/WQ2/AQ2)",
            "ours+w": f"ours+w = ours with the foreground writer ({a.writer_rate:g} x 1 KiB adds/s, E3/WQ2/AQ2)",
        }[v] for v in variants))
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
