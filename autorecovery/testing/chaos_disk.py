"""A size-limited data dir for one bookie of a chaos campaign, filled and freed on demand (EDGE; root).

:func:`mount_tmpfs` mounts a ``tmpfs`` of ``size_mb`` MiB on the bookie's data dir before the bookie
starts (``mount -t tmpfs -o size=<n>m tmpfs DIR``; needs root or CAP_SYS_ADMIN). :func:`fill` writes a
filler file until the filesystem answers ENOSPC, so the bookie's next add fails for want of space;
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


def fill(directory: Path, chunk: int = 1 << 20) -> int:
    """Write ``directory/chaos-filler.bin`` until ENOSPC (then bytes of 4 KiB, to the last block).
    Returns the bytes written.

    Raises:
        OSError: any error other than ENOSPC.
    """
    written = 0
    fd = os.open(directory / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (chunk, 4096):
            block = b"\0" * size
            while True:
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
