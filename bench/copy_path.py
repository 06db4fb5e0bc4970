"""Benchmark: the CPU our copy path spends per MiB between two stock Java bookies, against a plain relay.

Set-up (not timed): a private ZooKeeper and three stock Apache BookKeeper 4.17.2 bookies
(:class:`~autorecovery.testing.upstream_cluster.JavaCluster`, each its own JVM process). Upstream's Java
client writes one closed ledger per copier run, ``--mib`` MiB of ``--entry-size`` entries (CRC32C,
E2/WQ2/AQ2). For each ledger the bookie outside its ensemble is the target: the second member's
copies are copied from the first member to it, as a heal replacing that member would.

Timed, each copier in its own process (a child of this script, the only thing it does):

* **relay** (the baseline): a plain asyncio relay written here: pipelined v2 READ_ENTRY requests to
  the source (64 in flight), each answer's frame parsed with ``struct``, the body's CRC32C checked,
  the same bytes sent as a v2 recovery add to the target (64 in flight), answers matched by entry id;
* **ours**: the copy the ReplicationWorker runs: the ledger's metadata read from ZooKeeper, a
  :func:`~autorecovery.plan.targets.plan_fragment_copy` plan, :class:`~autorecovery.roles.replicator.
  SegmentReplicator` → :class:`~autorecovery.roles.copier.FragmentCopier` (stream slots, windows, the
  byte bucket, digest checks, metrics) over our upstream protocol client
  (:mod:`autorecovery.rpc.upstream_client`), then the guarded metadata CAS;
* **before** (``--before REV``): ours at git revision ``REV`` (a throwaway worktree in /tmp), the same
  way, to measure a change in the same run.

Printed per copier: CPU ms (user + system of the copying process, ``resource.getrusage``, from just
before its first request to its last answer) per MiB copied, MB/s (10^6 bytes of entry bodies per
second), and the ratios ours/relay (the issue 39 target: ≤ 5 ms/MiB at 4 KiB entries). The Java
bookies run on the same cores: on a shared machine the CPU per MiB is the figure to compare, not
MB/s. ``--profile DIR`` records ours with ``py-spy record`` (``--py-spy PATH``: a py-spy binary, e.g.
from a throwaway venv; it is not a dependency of the project). Not a test.

    .venv/bin/python bench/copy_path.py                  # 64 MiB per copier
    .venv/bin/python bench/copy_path.py --quick          # smoke: 2 MiB
    .venv/bin/python bench/copy_path.py --before HEAD~3  # before/after in one run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PASSWORD = "copy-path"
V2_READ_HEAD = struct.Struct(">iiqq")  # frame length, packet header, ledger id, entry id
V2_ANSWER = struct.Struct(">iiqq")  # packet header, error code, ledger id, entry id
WINDOW = 64


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def sys_s() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


_CALLS = [0]


def count_socket_calls() -> None:
    """Count the socket sends and receives of asyncio's socket transports in this process (a bench-only
    wrapper; ``/proc/self/io`` does not count socket calls)."""
    from asyncio import selector_events as se

    write, read = se._SelectorSocketTransport.write, se._SelectorSocketTransport._read_ready__data_received

    def counted_write(self, data):  # type: ignore[no-untyped-def]
        if not self._buffer:
            _CALLS[0] += 1  # a send now (else appended to the buffer, sent on the next writable event)
        return write(self, data)

    def counted_read(self):  # type: ignore[no-untyped-def]
        _CALLS[0] += 1
        return read(self)

    se._SelectorSocketTransport.write = counted_write  # type: ignore[method-assign]
    se._SelectorSocketTransport._read_ready__data_received = counted_read  # type: ignore[method-assign]


def syscalls() -> int:
    """Socket sends and receives so far (see :func:`count_socket_calls`)."""
    return _CALLS[0]


# -- the relay (baseline) ----------------------------------------------------------------------------
def _v2_header(op: int, flags: int) -> int:
    v = (2 << 24) | (op << 16) | flags
    return v - (1 << 32) if v >= 1 << 31 else v


async def relay(job: dict) -> dict:
    """Copy entries ``first..last`` of the ledger from ``source`` to ``target``: v2 reads, CRC32C
    checks, v2 recovery adds. Returns the bytes and entries copied, the wall and CPU seconds from the
    first request (connections opened before)."""
    import google_crc32c

    from autorecovery.ledger.digest import master_key

    lid, first, last = job["ledger"], job["first"], job["last"]
    mk = master_key(PASSWORD.encode())

    async def connect(bookie: str):
        host, port = bookie.rsplit(":", 1)
        return await asyncio.open_connection(host, int(port))

    (sr, sw), (tr, tw) = await connect(job["source"]), await connect(job["target"])
    t_cpu, t0, calls, t_sys = cpu_s(), time.perf_counter(), syscalls(), sys_s()
    read_head = _v2_header(2, 0)
    add_head = _v2_header(1, 0x0002)
    bodies: asyncio.Queue = asyncio.Queue()
    acked = asyncio.Event()
    state = {"next": first, "reads": 0, "adds": 0, "acked": 0, "bytes": 0}

    def ask() -> None:
        out = []
        while state["reads"] < WINDOW and state["next"] <= last:
            out.append(V2_READ_HEAD.pack(20, read_head, lid, state["next"]))
            state["next"] += 1
            state["reads"] += 1
        if out:
            sw.write(b"".join(out))

    async def reader() -> None:
        buf = bytearray()
        while True:
            chunk = await sr.read(256 * 1024)
            if not chunk:
                raise ConnectionError("source closed")
            buf += chunk
            pos, frames = 0, []
            while len(buf) - pos >= 4:
                (size,) = struct.unpack_from(">i", buf, pos)
                if len(buf) - pos - 4 < size:
                    break
                _h, rc, l_, e = V2_ANSWER.unpack_from(buf, pos + 4)
                if rc != 0 or l_ != lid:
                    raise RuntimeError(f"read of entry {e} failed: rc {rc}")
                body = bytes(buf[pos + 28:pos + 4 + size])
                if google_crc32c.extend(google_crc32c.value(body[:32]), body[36:]) != int.from_bytes(body[32:36], "big"):
                    raise RuntimeError(f"entry {e}: CRC32C mismatch")
                frames.append(body)
                pos += 4 + size
            del buf[:pos]
            state["reads"] -= len(frames)
            for body in frames:
                bodies.put_nowait(body)
            ask()
            if state["next"] > last and state["reads"] == 0:
                return

    async def writer() -> None:
        n_total = last - first + 1
        sent = 0
        while sent < n_total:
            out = []
            body = await bodies.get()
            while True:
                out += (struct.pack(">ii", 4 + 20 + len(body), add_head), mk, body)
                state["bytes"] += len(body)
                sent += 1
                state["adds"] += 1
                if bodies.empty() or state["adds"] >= WINDOW:
                    break
                body = bodies.get_nowait()
            tw.write(b"".join(out))
            while state["adds"] >= WINDOW:
                acked.clear()
                await acked.wait()

    async def acks() -> None:
        buf = bytearray()
        n_total = last - first + 1
        while state["acked"] < n_total:
            chunk = await tr.read(64 * 1024)
            if not chunk:
                raise ConnectionError("target closed")
            buf += chunk
            pos = 0
            while len(buf) - pos >= 28:
                _h, rc, _l, e = V2_ANSWER.unpack_from(buf, pos + 4)
                if rc != 0:
                    raise RuntimeError(f"add of entry {e} failed: rc {rc}")
                pos += 28
                state["acked"] += 1
                state["adds"] -= 1
            del buf[:pos]
            acked.set()

    ask()
    await asyncio.gather(reader(), writer(), acks())
    wall, cpu, calls = time.perf_counter() - t0, cpu_s() - t_cpu, syscalls() - calls
    sw.close()
    tw.close()
    return {"entries": last - first + 1, "bytes": state["bytes"], "wall": wall, "cpu": cpu, "syscalls": calls,
            "sys": sys_s() - t_sys}


# -- ours ----------------------------------------------------------------------------------------------
async def ours(job: dict) -> dict:
    """The worker's copy: metadata read, plan, SegmentReplicator (copier + CAS) over our upstream client."""
    from autorecovery.plan.targets import plan_fragment_copy
    from autorecovery.plan.throttle import StreamCaps, TokenBucket
    from autorecovery.roles.copier import FragmentCopier
    from autorecovery.roles.replicator import SWAPPED, SegmentReplicator
    from autorecovery.rpc.transport import BookieClient
    from autorecovery.zk.bridge import ZkClient
    from autorecovery.zk.ledgers import LedgerStore
    from autorecovery.zk.paths import Paths

    async def stock(_bookie: str) -> tuple[str, ...]:
        return ("bookie-rpc",)

    zk = await ZkClient(job["zk"], session_timeout_ms=10000).start()
    bookies = BookieClient(timeout_s=30, resolve=stock)
    try:
        store = LedgerStore(zk, Paths(job["ledgers_root"]))
        adaptive = None
        if job.get("adaptive"):  # the worker's default adaptive throttle (adaptiveThrottleEnabled=true)
            from autorecovery.plan.adaptive_rate import AdaptiveRates

            adaptive = AdaptiveRates()
        copier = FragmentCopier(bookies, byte_bucket=TokenBucket(0, time.monotonic), caps=StreamCaps(0, 0),
                                caps_changed=asyncio.Condition(), **({"adaptive": adaptive} if adaptive else {}))
        rep = SegmentReplicator(store, copier)
        await bookies.transport_name(job["source"])
        await bookies.transport_name(job["target"])
        t_cpu, t0, calls, t_sys = cpu_s(), time.perf_counter(), syscalls(), sys_s()
        md, version = await store.read(job["ledger"])
        seg = md.segments[0]
        ens = tuple(seg.ensemble)
        idx = ens.index(job["replaced"])
        plan = plan_fragment_copy(ensemble=ens, write_quorum=md.write_quorum, first=seg.first_entry_id,
                                  last=job["last"], replacements={idx: job["target"]},
                                  readable=[b for b in ens if b != job["replaced"]])
        res = await rep.replicate(job["ledger"], md, seg.first_entry_id, plan,
                                  registered=lambda: {*ens, job["target"]}, version=version)
        wall, cpu, calls, t_sys = time.perf_counter() - t0, cpu_s() - t_cpu, syscalls() - calls, sys_s() - t_sys
        if res.status != SWAPPED:
            raise RuntimeError(f"copy of ledger {job['ledger']}: {res.status} {res.detail}")
        assert res.copy is not None
        out = {"entries": res.copy.entries_written, "bytes": res.copy.bytes_written, "wall": wall, "cpu": cpu,
               "syscalls": calls, "sys": t_sys}
        if adaptive is not None:
            out["limited"] = {b: st.decisions for b, st in adaptive.bookies.items()}
            out["cuts"] = sum(1 for st in adaptive.bookies.values() if st.peak_rate and st.limit is not None)
            out["rate_limits"] = adaptive.snapshot()
        return out
    finally:
        await bookies.close()
        await zk.stop()


def child(job: dict) -> None:
    count_socket_calls()
    out = asyncio.run(relay(job) if job["kind"] == "relay" else ours(job))
    print("RESULT " + json.dumps(out), flush=True)


# -- the driver ----------------------------------------------------------------------------------------
def worktree(rev: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="copy-path-before-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True,
                   capture_output=True)
    return path


def run_child(job: dict, tree: Path, profile: Path | None, py_spy: str) -> dict:
    cmd = [sys.executable, str(tree / "bench" / "copy_path.py"), "--child", json.dumps(job)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        cmd = [py_spy, "record", "--format", "raw", "-r", "250", "-o",
               str(profile / f"{job['kind']}.txt"), "--", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=tree)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{job['kind']} copier failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n"
                         f"{done.stderr[-3000:]}")
    return json.loads(lines[-1][7:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=float, default=64, help="MiB per copier run (default 64)")
    ap.add_argument("--entry-size", type=int, default=4096, help="payload bytes per entry (default 4096)")
    ap.add_argument("--rounds", type=int, default=1, help="runs of every copier, interleaved (default 1)")
    ap.add_argument("--before", metavar="REV", help="also run ours at git revision REV (same run)")
    ap.add_argument("--profile", type=Path, metavar="DIR", help="py-spy record ours (raw collapsed stacks)")
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "/tmp/pyspy/bin/py-spy")
    ap.add_argument("--adaptive", action="store_true",
                    help="ours with the worker's default adaptive throttle (prints its final limits)")
    ap.add_argument("--quick", action="store_true", help="smoke: 2 MiB, one round")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(json.loads(a.child))
        return
    if a.quick:
        a.mib, a.rounds = 2, 1
    from autorecovery.testing.upstream_cluster import JavaCluster
    from autorecovery.testing.zk_server import ZooKeeperServer

    kinds = ["relay", "ours"] + (["before"] if a.before else [])
    trees = {"relay": ROOT, "ours": ROOT}
    if a.before:
        trees["before"] = worktree(a.before)
    entries = max(16, int(a.mib * 2**20 // a.entry_size))
    base = Path(tempfile.mkdtemp(prefix="copy-path-"))
    zk = ZooKeeperServer(base / "zk").start()
    results: dict[str, list[dict]] = {k: [] for k in kinds}
    try:
        c = JavaCluster(base / "cluster", zk.connect_string, bookies=3, racks=1)
        with c:
            t = time.perf_counter()
            w = c.writer(ledgers=len(kinds) * a.rounds + 1, entries=entries, entry_size=a.entry_size, ensemble=2,
                         wq=2, aq=2, digest="CRC32C", password=PASSWORD, timeout_s=900)
            print(f"set-up: 3 Java bookies, {len(w['ledgers'])} ledgers of {entries} x {a.entry_size} B written "
                  f"in {time.perf_counter() - t:.1f} s", flush=True)
            todo = iter(w["ledgers"])

            def job_of(kind: str, lg: dict) -> dict:
                ens = lg["ensembles"][0]
                target = next(b for b in c.bookie_ids if b not in ens)
                # the first segment (a loaded machine may have made the writer change its ensemble)
                later = [f for f in lg["ensembles"] if f > 0]
                last = min(later) - 1 if later else lg["last_acked"]
                return {"kind": kind, "ledger": lg["ledger"], "first": 0, "last": last,
                        "source": ens[0], "replaced": ens[1], "target": target,
                        "zk": c.daemon_properties()["zkServers"], "ledgers_root": "/ledgers"}

            run_child(job_of("relay", next(todo)), ROOT, None, a.py_spy)  # warm-up (the bookies' JIT), untimed
            for rnd in range(a.rounds):
                for kind in (kinds if rnd % 2 == 0 else kinds[::-1]):
                    lg = next(todo)
                    job = {**job_of(kind, lg), "adaptive": a.adaptive and kind == "ours"}
                    prof = a.profile / f"r{rnd}" if a.profile and kind != "relay" else None
                    r = run_child(job, trees[kind], prof, a.py_spy)
                    results[kind].append(r)
                    print(f"round {rnd} {kind:<6} {r['entries']} entries, {r['bytes'] / 2**20:.1f} MiB in "
                          f"{r['wall']:.2f} s, CPU {r['cpu'] * 1000:.0f} ms", flush=True)
                    if "rate_limits" in r:
                        print(f"  adaptive throttle at the end: {json.dumps(r['rate_limits'])}", flush=True)
    finally:
        zk.stop()
        if a.before:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees["before"])],
                           capture_output=True)
        shutil.rmtree(base, ignore_errors=True)

    def med(kind: str, f) -> float:
        xs = sorted(f(r) for r in results[kind])
        return xs[len(xs) // 2]

    def ms_per_mib(r: dict) -> float:
        return r["cpu"] * 1000 / (r["bytes"] / 2**20)

    def mbps(r: dict) -> float:
        return r["bytes"] / r["wall"] / 1e6

    def calls_per_mib(r: dict) -> float:
        return r.get("syscalls", 0) / (r["bytes"] / 2**20)

    def sys_per_mib(r: dict) -> float:
        return r.get("sys", 0.0) * 1000 / (r["bytes"] / 2**20)

    print(f"\n{'copier':<8} {'CPU ms/MiB':>11} {'of it system':>13} {'MB/s':>8} {'socket calls/MiB':>17}   ({a.entry_size} B entries, medians of {a.rounds}; "
          f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores)")
    for kind in kinds:
        print(f"{kind:<8} {med(kind, ms_per_mib):>11.2f} {med(kind, sys_per_mib):>13.2f} {med(kind, mbps):>8.1f} {med(kind, calls_per_mib):>17.0f}")
    relay_ms = med("relay", ms_per_mib)
    print(f"ratio: CPU per MiB ours / relay = {med('ours', ms_per_mib) / relay_ms:.2f}  "
          f"(rate ours / relay = {med('ours', mbps) / med('relay', mbps):.2f})")
    if a.before:
        print(f"ratio: CPU per MiB ours / before ({a.before}) = "
              f"{med('ours', ms_per_mib) / med('before', ms_per_mib):.2f}")


if __name__ == "__main__":
    main()
