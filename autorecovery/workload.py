"""Client-side workload: write ledgers of known content, then verify every entry (EDGE).

Used by ``autorecovery workload write|verify``, the demo, the benchmarks and end-to-end tests. Entry
payloads are derived from ``(seed, ledger_id, entry_id)`` so a verifier needs only the manifest (ledger
ids, entry counts, sizes and the seed) to check every byte.

The *ack log* (ours) records every acknowledged entry as it is acknowledged, one line each::

    # autorecovery-acks v1
    <ledger id> <entry id> <payload length in bytes> <blake2b-128 of the payload, hex>

A line is written only after the client got the add's acknowledgement (AQ bookies), so the log never
claims more than was acknowledged; :func:`verify_acks` then proves that every claimed entry is still
readable with the same bytes, and names each one that is not (a lost acknowledged entry).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from collections.abc import Callable

import structlog

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.errors import AutoRecoveryError

log = structlog.get_logger("autorecovery.workload")

ACK_LOG_HEADER = "# autorecovery-acks v1"

#: ``autorecovery local-cluster``'s default directory: when the current directory has one, the workload's
#: manifest and ack log default into it (beside the cluster they describe, gitignored) instead of littering
#: the working directory
LOCAL_CLUSTER_DIR = ".cluster"
MANIFEST_NAME = "workload.json"
ACK_LOG_NAME = "workload.acks"


def default_workload_dir(cwd: Path | None = None) -> Path:
    """Where ``workload write`` puts its manifest and ack log by default: ``<cwd>/.cluster`` when that
    directory exists (``local-cluster up``'s default ``--dir``), else ``cwd`` (default: the current
    directory)."""
    base = Path() if cwd is None else cwd  # relative: messages name .cluster/workload.json
    cluster = base / LOCAL_CLUSTER_DIR
    return cluster if cluster.is_dir() else base


def default_verify_inputs(cwd: Path | None = None) -> tuple[Path | None, Path | None]:
    """What ``workload verify`` checks when given neither ``--manifest`` nor ``--acks``: ``(manifest,
    None)`` for the first ``workload.json`` found in :func:`default_workload_dir` then ``cwd`` (where
    older versions wrote it), else ``(None, ack log)`` for the first ``workload.acks`` there, else
    ``(None, None)``."""
    base = Path() if cwd is None else cwd  # relative: messages name .cluster/workload.json
    dirs = list(dict.fromkeys([default_workload_dir(base), base]))
    for d in dirs:
        if (d / MANIFEST_NAME).is_file():
            return d / MANIFEST_NAME, None
    for d in dirs:
        if (d / ACK_LOG_NAME).is_file():
            return None, d / ACK_LOG_NAME
    return None, None


def payload(seed: int, ledger_id: int, entry_id: int, size: int) -> bytes:
    """Deterministic payload of ``size`` bytes for one entry."""
    block = hashlib.blake2b(f"{seed}/{ledger_id}/{entry_id}".encode(), digest_size=64).digest()
    reps = size // len(block) + 1
    return (block * reps)[:size]


def entry_size(base: int, entry_id: int, mixed: bool) -> int:
    """Entry size in bytes: ``base``, or with ``mixed`` a spread from 1 byte to 2×base."""
    if not mixed:
        return base
    return 1 + (entry_id * 7919) % (2 * base)


@dataclass
class Manifest:
    """What a workload wrote: ``ledgers`` maps ledger id → entry count; ``closed`` lists closed ones."""

    seed: int
    entry_size: int
    mixed: bool
    ledgers: dict[int, int] = field(default_factory=dict)
    closed: list[int] = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"seed": self.seed, "entry_size": self.entry_size, "mixed": self.mixed,
                                    "ledgers": {str(k): v for k, v in self.ledgers.items()}, "closed": self.closed}))

    @classmethod
    def load(cls, path: Path) -> Manifest:
        d = json.loads(path.read_text())
        return cls(d["seed"], d["entry_size"], d["mixed"], {int(k): v for k, v in d["ledgers"].items()}, d["closed"])

    @property
    def total_entries(self) -> int:
        return sum(self.ledgers.values())


def payload_hash(data: bytes) -> str:
    """Hex blake2b-128 of an entry payload (the ack log's hash)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class AckLog:
    """Appends one line per acknowledged entry to ``path`` (format in the module docstring).

    Each line is flushed to the OS when written, so a writer killed with SIGKILL loses at most the
    line being written, never claims an entry that was not acknowledged.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._f: IO[str] = open(self.path, "a", encoding="ascii")  # noqa: SIM115 - held while the process/object lives, closed when it stops
        if new:
            self._f.write(ACK_LOG_HEADER + "\n")
            self._f.flush()
        self.count = 0

    def record(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        self._f.write(f"{ledger_id} {entry_id} {len(data)} {payload_hash(data)}\n")
        self._f.flush()
        self.count += 1

    def close(self) -> None:
        self._f.close()


@dataclass(frozen=True)
class AckRecord:
    """One acknowledged entry from an ack log: ``length`` in bytes, ``digest`` hex blake2b-128; ``line`` 1-based."""

    ledger_id: int
    entry_id: int
    length: int
    digest: str
    line: int


def read_ack_log(path: Path) -> list[AckRecord]:
    """Parse an ack log.

    Raises:
        ValueError: naming the file and line of the first malformed record (or a missing header).
    """
    out: list[AckRecord] = []
    with open(path, encoding="ascii", errors="replace") as f:
        for n, raw in enumerate(f, 1):
            text = raw.strip()
            if n == 1:
                if text != ACK_LOG_HEADER:
                    raise ValueError(f"{path}:1: not an ack log (expected {ACK_LOG_HEADER!r})")
                continue
            if not text or text.startswith("#"):
                continue
            parts = text.split()
            try:
                if len(parts) != 4 or len(parts[3]) != 32:
                    raise ValueError
                int(parts[3], 16)
                rec = AckRecord(int(parts[0]), int(parts[1]), int(parts[2]), parts[3], n)
                if rec.ledger_id < 0 or rec.entry_id < 0 or rec.length < 0:
                    raise ValueError
            except ValueError:
                raise ValueError(f"{path}:{n}: malformed ack record {text!r} "
                                 "(expected: ledger-id entry-id length blake2b-hex)") from None
            out.append(rec)
    return out


async def write_ledgers(bk: BookKeeper, *, ledgers: int, entries: int, size: int, ensemble: int = 3,
                        write_quorum: int = 2, ack_quorum: int = 2, seed: int = 1, mixed: bool = False,
                        close: bool = True, window: int = 32, ack_log: AckLog | None = None) -> Manifest:
    """Write ``ledgers`` ledgers of ``entries`` entries of ``size`` bytes; returns the manifest.

    Up to ``window`` adds per ledger are in flight at once; ledgers are written concurrently. With
    ``ack_log`` every acknowledged entry is recorded as its acknowledgement arrives.
    """
    m = Manifest(seed, size, mixed)

    async def one() -> None:
        lh = await bk.create_ledger(ensemble, write_quorum, ack_quorum)
        sem = asyncio.Semaphore(window)
        tasks = []
        # tasks start in creation order and add_entry takes its entry id before its first await,
        # so the payload computed for id e is the one stored under e
        for e in range(entries):
            await sem.acquire()
            data = payload(seed, lh.ledger_id, e, entry_size(size, e, mixed))
            t = asyncio.ensure_future(lh.add_entry(data))
            t.add_done_callback(lambda _t: sem.release())
            if ack_log is not None:
                t.add_done_callback(_recorder(ack_log, lh.ledger_id, e, data))
            tasks.append(t)
        got = await asyncio.gather(*tasks)
        if got != list(range(entries)):
            raise AssertionError(f"ledger {lh.ledger_id}: entry ids out of order")
        if close:
            await lh.close()
            m.closed.append(lh.ledger_id)
        m.ledgers[lh.ledger_id] = entries

    await asyncio.gather(*(one() for _ in range(ledgers)))
    return m


def _recorder(ack_log: AckLog, ledger_id: int, entry_id: int, data: bytes) -> Callable[[asyncio.Future], None]:
    def done(t: asyncio.Future) -> None:
        if not t.cancelled() and t.exception() is None:
            if t.result() != entry_id:  # pragma: no cover - add_entry assigns ids in call order
                raise AssertionError(f"ledger {ledger_id}: entry id {t.result()} != {entry_id}")
            ack_log.record(ledger_id, entry_id, data)
    return done


@dataclass
class ContinuousStats:
    """What :func:`write_continuous` did: counts of entries, ledgers and failed adds; ``elapsed_s`` (s)."""

    acked: int = 0
    failed: int = 0
    ledgers: list[int] = field(default_factory=list)
    elapsed_s: float = 0.0


async def write_continuous(bk: BookKeeper, ack_log: AckLog, stop: asyncio.Event, *, rate: float,
                           duration_s: float | None = None, ledgers: int = 4, entries_per_ledger: int = 1000,
                           size: int = 1024, ensemble: int = 3, write_quorum: int = 2, ack_quorum: int = 2,
                           seed: int = 1, mixed: bool = False, window: int = 64) -> ContinuousStats:
    """Add entries at ``rate`` entries/s (all ledgers together) until ``stop`` is set or ``duration_s`` passes.

    ``ledgers`` ledgers are open at once, written round robin; a ledger is closed and replaced after
    ``entries_per_ledger`` entries, and abandoned (closed if possible, replaced) after a failed add, as a
    Pulsar broker rolls a ledger on errors. Every acknowledged entry is recorded in ``ack_log``; failed
    adds are counted and never recorded. Up to ``window`` adds are in flight at once. On stop no new add
    starts, in-flight adds are awaited and the open ledgers are closed.

    Raises:
        ValueError: ``rate`` <= 0 or ``ledgers`` < 1.
    """
    if rate <= 0:
        raise ValueError(f"--rate must be > 0 entries/s, got {rate}")
    if ledgers < 1:
        raise ValueError(f"--ledgers must be >= 1, got {ledgers}")
    stats = ContinuousStats()
    sem = asyncio.Semaphore(window)
    inflight: set[asyncio.Task] = set()
    slots: list = [None] * ledgers  # (handle, next entry id, broken flag holder)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    deadline = t0 + duration_s if duration_s is not None else None

    async def fresh(k: int) -> None:
        while not stop.is_set():
            try:
                lh = await bk.create_ledger(ensemble, write_quorum, ack_quorum)
            except AutoRecoveryError as exc:
                log.warning("cannot create a ledger; retrying", error=str(exc))
                if await _wait(stop, 0.5):
                    return
                continue
            slots[k] = [lh, 0, False]
            stats.ledgers.append(lh.ledger_id)
            return

    async def retire(slot) -> None:
        lh = slot[0]
        try:
            await lh.close()
        except AutoRecoveryError as exc:
            log.warning("cannot close ledger", ledger_id=lh.ledger_id, error=str(exc))

    async def add(slot, e: int, data: bytes) -> None:
        lh = slot[0]
        try:
            got = await lh.add_entry(data)
        except AutoRecoveryError as exc:
            stats.failed += 1
            if not slot[2]:
                log.warning("add failed; rolling the ledger", ledger_id=lh.ledger_id, entry_id=e, error=str(exc))
            slot[2] = True
            return
        finally:
            sem.release()
        if got != e:  # pragma: no cover - add_entry assigns ids in call order
            raise AssertionError(f"ledger {lh.ledger_id}: entry id {got} != {e}")
        ack_log.record(lh.ledger_id, e, data)
        stats.acked += 1

    n = 0
    retiring: set[asyncio.Task] = set()
    try:
        while not stop.is_set():
            due = t0 + n / rate
            now = loop.time()
            if deadline is not None and due >= deadline:
                break
            if due > now and await _wait(stop, due - now):
                break
            k = n % ledgers
            slot = slots[k]
            if slot is None or slot[2] or slot[1] >= entries_per_ledger:
                if slot is not None:
                    retiring.add(asyncio.ensure_future(retire(slot)))
                slots[k] = None
                await fresh(k)
                slot = slots[k]
                if slot is None:
                    break
            await sem.acquire()
            e = slot[1]
            slot[1] += 1
            data = payload(seed, slot[0].ledger_id, e, entry_size(size, e, mixed))
            t = asyncio.ensure_future(add(slot, e, data))
            inflight.add(t)
            t.add_done_callback(inflight.discard)
            n += 1
        if inflight:
            await asyncio.gather(*inflight)
        for slot in slots:
            if slot is not None:
                retiring.add(asyncio.ensure_future(retire(slot)))
        if retiring:
            await asyncio.gather(*retiring)
    finally:
        for t in inflight | retiring:
            t.cancel()
    stats.elapsed_s = loop.time() - t0
    return stats


async def _wait(stop: asyncio.Event, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``stop``; True if it was set (pacing, interruptible)."""
    try:
        await asyncio.wait_for(stop.wait(), timeout_s)
        return True
    except TimeoutError:
        return False


@dataclass
class AckVerifyReport:
    """Result of :func:`verify_acks`: ``lost`` names every acknowledged entry that is gone or differs."""

    records: int = 0
    ledgers: int = 0
    entries_ok: int = 0
    bytes_ok: int = 0
    lost: list[str] = field(default_factory=list)
    digest_errors: int = 0

    @property
    def ok(self) -> bool:
        return not self.lost


async def verify_acks(bk: BookKeeper, records: list[AckRecord], *, recovery: bool = True,
                      chunk: int = 500) -> AckVerifyReport:
    """Check that every acknowledged entry in ``records`` is readable with the recorded length and hash.

    Ledgers still open are opened with recovery (fenced and closed, upstream ``openLedger``) unless
    ``recovery`` is False, so entries acknowledged after the last LAC update are found too. Each lost
    entry is named: ``ledger L entry E: <reason>`` (ledger gone, entry unreadable, or content differs).
    """
    rep = AckVerifyReport(records=len(records))
    by_ledger: dict[int, dict[int, AckRecord]] = {}
    for r in records:
        by_ledger.setdefault(r.ledger_id, {})[r.entry_id] = r
    for ledger_id, want in sorted(by_ledger.items()):
        rep.ledgers += 1
        ids = sorted(want)
        try:
            rh = await bk.open_ledger(ledger_id, recovery=recovery)
        except AutoRecoveryError as exc:
            rep.lost.extend(f"ledger {ledger_id} entry {e}: lost (ledger cannot be opened: {exc})" for e in ids)
            continue
        got: dict[int, bytes] = {}
        readable = [e for e in ids if e <= rh.last_add_confirmed]
        for e in ids:
            if e > rh.last_add_confirmed:
                rep.lost.append(f"ledger {ledger_id} entry {e}: lost (beyond the last entry "
                                f"{rh.last_add_confirmed} of the ledger)")
        for i in range(0, len(readable), chunk):
            part = readable[i:i + chunk]
            try:
                for ent in await rh.read_entries(part[0], part[-1]):
                    got[ent.entry_id] = ent.payload
            except AutoRecoveryError:
                for e in part:  # find exactly which entries are unreadable
                    try:
                        got[e] = (await rh.read_entry(e)).payload
                    except AutoRecoveryError as exc:
                        rep.lost.append(f"ledger {ledger_id} entry {e}: lost (unreadable: {exc})")
        for e in readable:
            if e not in got:
                continue
            r, data = want[e], got[e]
            if len(data) != r.length or payload_hash(data) != r.digest:
                rep.lost.append(f"ledger {ledger_id} entry {e}: content differs from the acknowledged entry "
                                f"(ack log line {r.line}: {r.length} bytes, hash {r.digest}; read {len(data)} bytes, "
                                f"hash {payload_hash(data)})")
            else:
                rep.entries_ok += 1
                rep.bytes_ok += len(data)
        rep.digest_errors += len(rh.digest_errors)
    return rep


@dataclass
class VerifyReport:
    """Result of :func:`verify_ledgers`: counts and the first problems found."""

    ledgers: int = 0
    entries_ok: int = 0
    bytes_ok: int = 0
    errors: list[str] = field(default_factory=list)
    digest_errors: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors


async def verify_ledgers(bk: BookKeeper, manifest: Manifest, *, recovery: bool = False) -> VerifyReport:
    """Read every entry of every ledger in ``manifest`` and compare it byte for byte."""
    rep = VerifyReport()
    for ledger_id, count in sorted(manifest.ledgers.items()):
        rep.ledgers += 1
        try:
            rh = await bk.open_ledger(ledger_id, recovery=recovery)
            if rh.last_add_confirmed < count - 1:
                rep.errors.append(f"ledger {ledger_id}: only {rh.last_add_confirmed + 1} of {count} entries readable")
                continue
            if count == 0:
                continue
            for e in await rh.read_entries(0, count - 1):
                want = payload(manifest.seed, ledger_id, e.entry_id, entry_size(manifest.entry_size, e.entry_id, manifest.mixed))
                if e.payload != want:
                    rep.errors.append(f"ledger {ledger_id} entry {e.entry_id}: content differs")
                else:
                    rep.entries_ok += 1
                    rep.bytes_ok += len(e.payload)
            rep.digest_errors += len(rh.digest_errors)
        except AutoRecoveryError as exc:
            rep.errors.append(f"ledger {ledger_id}: {exc}")
    return rep
