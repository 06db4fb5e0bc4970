"""Reading the small files configuration keys name (secrets, tokens, PEM certificates and keys), bounded,
and noticing when they change (config layer, issue 25).

A key that points at ``/dev/zero`` must not grow memory without end, and one that points at a FIFO must
not hang start-up: only a regular file of at most :data:`MAX_SECRET_FILE_BYTES` is read, else a
:class:`~autorecovery.errors.ConfigError` names the key and the path (never the content).

:class:`FileStamp` is what the reloaders (HTTP token and certificates, bookie TLS;
``tlsCertFilesRefreshDurationSeconds``) compare to decide that a file changed: inode, size and mtime.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from autorecovery.errors import ConfigError

#: largest secret, token or PEM file read (bytes): a certificate chain of a dozen certificates is ~20 KiB
MAX_SECRET_FILE_BYTES = 1 << 20


def read_bounded(path: str, key: str, *, max_bytes: int = MAX_SECRET_FILE_BYTES) -> bytes:
    """The whole content of the regular file ``path`` that configuration key ``key`` names.

    Args:
        path: the file.
        key: the configuration key or command-line flag that named it (for messages).
        max_bytes: the size cap (bytes).

    Returns:
        The file's bytes (at most ``max_bytes``).

    Raises:
        ConfigError: ``bad value for <key>: ...`` when the path cannot be opened, is not a regular file
            (a FIFO, a device such as ``/dev/zero``, a directory), or is larger than ``max_bytes``. The
            file is opened non-blocking, so a FIFO without a writer does not hang; a file that grows
            while it is read is cut at ``max_bytes + 1`` and refused.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(f"bad value for {key}: cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, TypeError) as exc:  # a NUL byte in the path
        raise ConfigError(f"bad value for {key}: cannot read {path!r}: {exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"bad value for {key}: {path} is not a regular file "
                              f"({_kind(st.st_mode)}); point it at a file")
        if st.st_size > max_bytes:
            raise ConfigError(f"bad value for {key}: {path} is {st.st_size} bytes, over the "
                              f"{max_bytes}-byte limit for a secret or certificate file")
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, min(65536, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise ConfigError(f"bad value for {key}: {path} grew past the {max_bytes}-byte limit "
                              f"while being read")
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"bad value for {key}: cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_first_line(path: str, key: str) -> str:
    """The first line of a UTF-8 secret file (a token, a password, ``user:password``), without its line
    end. Same bounds and errors as :func:`read_bounded`; also ConfigError when it is not UTF-8."""
    data = read_bounded(path, key)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"bad value for {key}: {path} is not UTF-8 text") from None
    return text.splitlines()[0] if text else ""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


@dataclass(frozen=True)
class FileStamp:
    """What identifies one version of a file for reloading: inode, size (bytes) and mtime (ns).

    A rename over the file (how certificate managers rotate) changes the inode; an in-place rewrite
    changes size or mtime. ``missing`` when it cannot be stat'ed (a rotation in progress keeps the old
    content; see the reloaders).
    """

    inode: int = 0
    size: int = -1
    mtime_ns: int = 0
    missing: bool = False

    @staticmethod
    def of(path: str) -> FileStamp:
        """The stamp of ``path`` now (``missing=True`` when it cannot be stat'ed). Never raises."""
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return FileStamp(missing=True)
        return FileStamp(st.st_ino, st.st_size, st.st_mtime_ns)


def secret_first_line(key: str, path: str, errors: list[str]) -> str | None:
    """The first line of the file ``key`` names (a digest, password or token file), or None after
    appending why it cannot be read to ``errors``: naming ``key`` and the path, never the content. Only
    a regular file under the size cap is read (:func:`read_first_line`): a
    FIFO, ``/dev/zero`` or a huge file is an error naming the key, not a hang or a memory blow-up."""
    try:
        return read_first_line(path, key) + "\n"
    except ConfigError as exc:
        errors.append(str(exc))
    return None
