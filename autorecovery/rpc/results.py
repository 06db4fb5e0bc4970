"""What a bookie answers, whichever transport carried it (PURE): entries read, pull progress, disk figures.

Shared by the gRPC transport (:mod:`autorecovery.rpc.bookie_client`) and upstream's v3 transport
(:mod:`autorecovery.rpc.upstream_client`), so the roles see the same values from either.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReadResult:
    """One entry read from a bookie.

    Attributes:
        entry_id: the entry's id (for a read of entry -1, the id of the highest entry the bookie has).
        body: the packed entry (``ledger.digest`` format); not verified here.
        lac: the bookie's last-add-confirmed for the ledger (-1 if unknown).
    """

    entry_id: int
    body: bytes
    lac: int


@dataclass(frozen=True)
class PullReport:
    """One progress message of a PullEntries call (see :meth:`BookieClient.pull_entries`).

    Attributes:
        stored: entry ids newly durable on the target since the previous report, ascending.
        bytes_stored: body bytes of those, bytes.
        failed: entry id → why the source did not serve it (a status name such as ``ENOENTRY``, or
            ``DIGEST`` when the source's copy failed its checksum and was not stored).
        source_status: a status name when the source stream itself failed (the rest of the range was
            not read), else ``""``; source_message: its detail.
        done: the last report of the call.
    """

    stored: tuple[int, ...]
    bytes_stored: int
    failed: dict[int, str]
    source_status: str = ""
    source_message: str = ""
    done: bool = False


@dataclass(frozen=True)
class BookieInfo:
    """Disk figures of a bookie's data directory, in bytes (0 when not requested)."""

    total_disk_space: int
    free_disk_space: int


async def flatten(batches: AsyncGenerator[list[Any], None]) -> AsyncGenerator[Any, None]:
    """The items of ``batches`` one by one (a range read's entries from its batches), closing
    ``batches`` when the caller stops early."""
    async with contextlib.aclosing(batches):
        async for batch in batches:
            for item in batch:
                yield item
