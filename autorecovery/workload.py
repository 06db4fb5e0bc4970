"""Client-side workload: write ledgers of known content, then verify every entry (EDGE).

Used by ``autorecovery workload write|verify``, the demo, the benchmarks and end-to-end tests. Entry
payloads are derived from ``(seed, ledger_id, entry_id)`` so a verifier needs only the manifest (ledger
ids, entry counts, sizes and the seed) to check every byte.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.errors import AutoRecoveryError


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
    def load(cls, path: Path) -> "Manifest":
        d = json.loads(path.read_text())
        return cls(d["seed"], d["entry_size"], d["mixed"], {int(k): v for k, v in d["ledgers"].items()}, d["closed"])

    @property
    def total_entries(self) -> int:
        return sum(self.ledgers.values())


async def write_ledgers(bk: BookKeeper, *, ledgers: int, entries: int, size: int, ensemble: int = 3,
                        write_quorum: int = 2, ack_quorum: int = 2, seed: int = 1, mixed: bool = False,
                        close: bool = True, window: int = 32) -> Manifest:
    """Write ``ledgers`` ledgers of ``entries`` entries of ``size`` bytes; returns the manifest.

    Up to ``window`` adds per ledger are in flight at once; ledgers are written concurrently.
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
            t = asyncio.ensure_future(lh.add_entry(payload(seed, lh.ledger_id, e, entry_size(size, e, mixed))))
            t.add_done_callback(lambda _t: sem.release())
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
