"""Append-only entry logs of the reference bookie: where entry bodies live (EDGE, file I/O).

Layout: ``<data_dir>/current/entrylogs/<log id, 8 hex digits>.log``. Bodies are appended back to back;
the SQLite index (``bookie/storage.py``) maps ``(ledger id, entry id)`` to ``(log id, offset, length)``.
This is upstream's split between entry logs and the ledger index (``EntryLogger`` + ``DbLedgerStorage``'s
RocksDB index), with one simplification: the entry log is also the durability point, because the
writer thread ``fdatasync``s it before it commits the index rows of the same group (an add is
acknowledged only after both), so there is nothing to replay on start-up:

* a crash after the log sync and before the index commit leaves unreferenced bytes (the add was not
  acknowledged, and is simply not there after a restart);
* a torn tail (a crash mid-write) is never referenced by the index; new appends go after it.

Bodies are written once, sequentially, instead of through SQLite's B-tree and WAL (which wrote each
byte twice and fsynced page-sized frames): the issue-13 profile put 32-43% of a bookie's time in the
SQLite commit of entry bodies.

Logs are not compacted: the reference bookie never deletes ledgers, and an overwritten entry (a
recovery re-add) leaves its old bytes behind. ``max_log_bytes`` bounds one file, not the total.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

from autorecovery.errors import AutoRecoveryError

ENTRYLOG_DIR = "entrylogs"
DEFAULT_MAX_LOG_BYTES = 1 << 30
#: most bodies one ``writev`` call takes (below Linux's IOV_MAX of 1024)
WRITEV_MAX_BUFFERS = 256
#: a ``writev`` call stops adding bodies past this many bytes (bytes; one body may exceed it)
WRITEV_MAX_BYTES = 4 << 20
#: most bytes one ``pread`` of :meth:`EntryLogs.read_many` takes (one body may exceed it)
READ_RUN_MAX_BYTES = 1 << 20


class EntryLogError(AutoRecoveryError):
    """An entry log could not be written or read; names the file and the offset."""


def log_name(log_id: int) -> str:
    """File name of entry log ``log_id`` (``0000002a.log``)."""
    return f"{log_id:08x}.log"


class EntryLogs:
    """The bookie's entry logs: one file appended to (by the writer thread only), every file readable
    from any thread with ``pread``.

    Args:
        directory: ``<data_dir>/current/entrylogs`` (created on :meth:`open`).
        max_log_bytes: roll to a new file once the current one reaches this size (bytes).
    """

    def __init__(self, directory: Path, *, max_log_bytes: int = DEFAULT_MAX_LOG_BYTES) -> None:
        self.directory = Path(directory)
        self.max_log_bytes = max_log_bytes
        self._log_id = -1
        self._fd = -1
        self._offset = 0
        self._appends = 0  # appends so far; the log is durable up to ``_synced`` of them
        self._synced = 0
        self._sync_lock = threading.Lock()  # a sync never meets a roll closing the file under it
        self._read_fds: dict[int, int] = {}
        self._read_lock = threading.Lock()
        #: bytes appended since open (for tests and benchmarks)
        self.appended = 0
        #: number of fdatasync calls since open
        self.syncs = 0

    # -- lifecycle -----------------------------------------------------------------------------
    def open(self) -> EntryLogs:
        """Create the directory and open the newest log for appending (a new one when there is none).

        Raises:
            EntryLogError: the directory or a log cannot be opened (names the path).
        """
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            ids = self.log_ids()
            self._open_for_append(ids[-1] if ids else 0)
        except OSError as exc:
            raise EntryLogError(f"cannot open entry logs in {self.directory}: {exc}") from exc
        return self

    def log_ids(self) -> list[int]:
        """Ids of the log files present, ascending."""
        out = []
        for p in self.directory.glob("*.log"):
            try:
                out.append(int(p.stem, 16))
            except ValueError:
                continue
        return sorted(out)

    def _open_for_append(self, log_id: int) -> None:
        path = self.directory / log_name(log_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        self._fd, self._log_id = fd, log_id
        self._offset = os.fstat(fd).st_size
        dfd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dfd)  # the new file's directory entry is durable before anything points into it
        finally:
            os.close(dfd)

    def close(self) -> None:
        """Sync and close every file. Idempotent."""
        if self._fd >= 0:
            try:
                if self._appends != self._synced:
                    os.fdatasync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = -1
        with self._read_lock:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()

    # -- writer thread -------------------------------------------------------------------------
    def append(self, body: bytes) -> tuple[int, int]:
        """Append ``body``; returns ``(log id, offset)``. Not durable until :meth:`sync`. Called by one
        thread only (the store's writer); :meth:`sync` may run in another thread meanwhile.

        Raises:
            EntryLogError: the write failed (the caller fails the whole group).
        """
        return self.append_many([body])[0]

    def append_many(self, bodies: Sequence[bytes]) -> list[tuple[int, int]]:
        """Append ``bodies`` back to back with as few ``writev`` calls as possible (at most
        :data:`WRITEV_MAX_BUFFERS` bodies or about :data:`WRITEV_MAX_BYTES` each); returns one
        ``(log id, offset)`` per body. Not durable until :meth:`sync`. Writer thread only.

        One system call per chunk, not per body, because every call gives up the GIL and must win it
        back: with the event loop busy decoding messages, a thread writing 64 KiB bodies one by one
        waited up to the interpreter's 5 ms switch interval after each write (18 MB/s against 207 MB/s
        for 16 bodies per ``writev``, measured beside a busy Python thread). Upstream's ``EntryLogger``
        likewise writes through a buffered channel, so that a system call carries many entries.

        Raises:
            EntryLogError: a write failed (the caller fails the whole group). The append offset is
                re-read from the file, so bytes a failed call did write never shift later offsets.
        """
        out: list[tuple[int, int]] = []
        i, n = 0, len(bodies)
        while i < n:
            if self._offset >= self.max_log_bytes:
                self._roll()
            j, size = i, 0
            while j < n and j - i < WRITEV_MAX_BUFFERS and (j == i or size + len(bodies[j]) <= WRITEV_MAX_BYTES):
                size += len(bodies[j])
                j += 1
            self._write_all(bodies[i:j], size)
            at = self._offset
            for body in bodies[i:j]:
                out.append((self._log_id, at))
                at += len(body)
            self._offset = at
            self.appended += size
            self._appends += j - i
            i = j
        return out

    def _write_all(self, chunk: Sequence[bytes], size: int) -> None:
        try:
            done = os.writev(self._fd, chunk) if len(chunk) > 1 else os.write(self._fd, chunk[0])
            while done < size:  # short writes are rare but legal: write what is left
                rest, skip = [], done
                for body in chunk:
                    if skip >= len(body):
                        skip -= len(body)
                        continue
                    rest.append(memoryview(body)[skip:])
                    skip = 0
                done += os.writev(self._fd, rest)
        except OSError as exc:
            where = self._offset
            try:  # part of the chunk may be in the file: the next append goes after it
                self._offset = os.fstat(self._fd).st_size
            except OSError:
                self._offset = self.max_log_bytes  # cannot tell where the end is: roll before the next append
            raise EntryLogError(f"cannot append to {self.directory / log_name(self._log_id)} at offset "
                                f"{where}: {exc}") from exc

    def sync(self) -> None:
        """``fdatasync`` the current log: every append that returned before this call is durable when it
        returns (a no-op when nothing was appended since the last sync). Safe to call from another
        thread while the writer appends (appends made meanwhile may or may not be covered).

        Raises:
            EntryLogError: the sync failed: nothing appended since the last sync may be acknowledged.
        """
        with self._sync_lock:
            upto = self._appends
            if upto == self._synced:
                return
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                raise EntryLogError(f"cannot sync {self.directory / log_name(self._log_id)}: {exc}") from exc
            self._synced = max(self._synced, upto)
            self.syncs += 1

    def _roll(self) -> None:
        try:
            with self._sync_lock:
                if self._appends != self._synced:
                    os.fdatasync(self._fd)
                    self._synced = self._appends
                os.close(self._fd)
                self._open_for_append(self._log_id + 1)
        except OSError as exc:
            raise EntryLogError(f"cannot roll entry log {self.directory / log_name(self._log_id)}: {exc}") from exc

    # -- any thread ----------------------------------------------------------------------------
    def read(self, log_id: int, offset: int, length: int) -> bytes:
        """The ``length`` bytes at ``offset`` of log ``log_id``.

        Raises:
            EntryLogError: the file is missing or shorter than the index says (names file and offset).
        """
        return self._pread(self._read_fd(log_id), log_id, offset, length)

    def read_many(self, locations: list[tuple[int, int, int]]) -> list[memoryview]:
        """The bodies at ``locations`` (``(log id, offset, length)`` each), in order, as read-only views:
        each run of locations that lie back to back in one log (an AddStream's or a pull's entries, written
        by one ``writev``) is read with one ``pread`` of at most :data:`READ_RUN_MAX_BYTES`, and its bodies
        are views of that one buffer (no copy per body). A range read of 64 KiB entries makes one system
        call per run instead of one per entry: each call gives up the GIL, which a reader thread must then
        win back from the busy event loop (issue 29: 84 futex calls per MiB served).

        Raises:
            EntryLogError: as :meth:`read`.
        """
        out: list[memoryview] = []
        i, n = 0, len(locations)
        while i < n:
            log_id, start, length = locations[i]
            end, j = start + length, i + 1
            while j < n:
                lid2, off2, len2 = locations[j]
                if lid2 != log_id or off2 != end or end + len2 - start > READ_RUN_MAX_BYTES:
                    break
                end += len2
                j += 1
            buf = memoryview(self._pread(self._read_fd(log_id), log_id, start, end - start))
            for _lid, off, ln in locations[i:j]:
                out.append(buf[off - start:off - start + ln])
            i = j
        return out

    def _read_fd(self, log_id: int) -> int:
        fd = self._read_fds.get(log_id)
        if fd is None:
            with self._read_lock:
                fd = self._read_fds.get(log_id)
                if fd is None:
                    path = self.directory / log_name(log_id)
                    try:
                        fd = os.open(path, os.O_RDONLY)
                    except OSError as exc:
                        raise EntryLogError(f"cannot open entry log {path}: {exc}") from exc
                    self._read_fds[log_id] = fd
        return fd

    def _pread(self, fd: int, log_id: int, offset: int, length: int) -> bytes:
        try:
            data = os.pread(fd, length, offset)
        except OSError as exc:
            raise EntryLogError(f"cannot read {self.directory / log_name(log_id)} at offset {offset}: {exc}") from exc
        if len(data) != length:
            raise EntryLogError(f"entry log {self.directory / log_name(log_id)} is short: {len(data)} of {length} "
                                f"bytes at offset {offset}")
        return data
