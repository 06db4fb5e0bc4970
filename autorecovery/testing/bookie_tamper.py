"""Test aid: damage a stopped or running reference bookie's stored entries in place (EDGE, file I/O).

Used by tests that prove a corrupt or missing replica is detected and never copied. Works on the
schema-2 store of ``bookie/storage.py``: the SQLite index says where each body lives in the entry logs.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from autorecovery.bookie.entrylog import ENTRYLOG_DIR, log_name
from autorecovery.bookie.storage import CURRENT_DIR, DB_FILENAME


def flip_entry_bytes(data_dir: Path | str, ledger_id: int, entry_ids: list[int], *, at: int = -1,
                     count: int = 1) -> int:
    """XOR ``count`` bytes of each entry's stored body with 0xFF, starting at byte ``at`` of the body
    (negative: from its end); the length is unchanged. Returns how many entries were found and damaged.

    Raises:
        ValueError: the bytes to flip are not inside the entry's body.
    """
    db = sqlite3.connect(Path(data_dir) / CURRENT_DIR / DB_FILENAME, timeout=30)
    try:
        hit = 0
        for e in entry_ids:
            row = db.execute("SELECT log_id, offset, length FROM entries WHERE ledger_id=? AND entry_id=?",
                             (ledger_id, e)).fetchone()
            if row is None:
                continue
            log_id, offset, length = row
            start = at if at >= 0 else length + at
            if not 0 <= start <= length - count:
                raise ValueError(f"entry {ledger_id}/{e} is {length} bytes: cannot flip {count} bytes at {at}")
            path = Path(data_dir) / CURRENT_DIR / ENTRYLOG_DIR / log_name(log_id)
            fd = os.open(path, os.O_RDWR)
            try:
                old = os.pread(fd, count, offset + start)
                os.pwrite(fd, bytes(b ^ 0xFF for b in old), offset + start)
                os.fsync(fd)
            finally:
                os.close(fd)
            hit += 1
        return hit
    finally:
        db.close()
