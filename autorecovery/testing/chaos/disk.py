"""A size-limited data dir for one bookie of a chaos campaign, filled and freed on demand (EDGE; root).

:func:`mount_tmpfs` mounts a ``tmpfs`` of ``size_mb`` MiB on the bookie's data dir before the bookie
starts (``mount -t tmpfs -o size=<n>m tmpfs DIR``; needs root or CAP_SYS_ADMIN). :func:`fill` writes a
filler file until the filesystem is filled to a given fraction (past the bookie's ``diskUsageThreshold``:
it turns read-only) or answers ENOSPC (the journal dir: the bookie's next journal write fails);
:func:`free` deletes it. :func:`unmount` runs after the bookie is stopped.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

FILLER = "chaos-filler.bin"


def mount_tmpfs(directory: Path, size_mb: int) -> str | None:
    """Mount a tmpfs of ``size_mb`` MiB on ``directory`` (created if missing). Returns None on success,
    else the reason it could not (the command and its exact error), for the report's skipped list."""
    directory.mkdir(parents=True, exist_ok=True)
    cmd = ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(directory)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except OSError as exc:
        return f"{' '.join(cmd)}: {exc}"
    if r.returncode != 0:
        return f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}"
    return None


def unmount(directory: Path) -> None:
    """Unmount ``directory`` (lazily, so a leftover open file cannot keep it mounted)."""
    subprocess.run(["umount", "-l", str(directory)], capture_output=True, timeout=30)


def fill(directory: Path, chunk: int = 1 << 20, to_fraction: float = 1.0) -> int:
    """Write ``directory/chaos-filler.bin`` until the file system's used fraction reaches ``to_fraction``
    (1.0: until ENOSPC, then bytes of 4 KiB, to the last block). Returns the bytes written.

    Raises:
        ValueError: ``to_fraction`` not in (0, 1].
        OSError: any error other than ENOSPC.
    """
    if not 0.0 < to_fraction <= 1.0:
        raise ValueError(f"to_fraction must be in (0, 1], got {to_fraction}")
    st = os.statvfs(directory)
    keep = 0 if to_fraction >= 1.0 else int(st.f_blocks * st.f_frsize * (1.0 - to_fraction))
    written = 0
    fd = os.open(directory / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (chunk, 4096):
            block = b"\0" * size
            while True:
                free_b = os.statvfs(directory).f_bavail * st.f_frsize
                if keep and free_b - size < keep:
                    break
                try:
                    written += os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return written


def free(directory: Path) -> None:
    """Delete the filler file (the space is back at once on tmpfs)."""
    (directory / FILLER).unlink(missing_ok=True)
