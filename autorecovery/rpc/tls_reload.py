"""The PEM files of one TLS end, kept in memory and re-read when they change (EDGE, issue 25).

Upstream's ``TLSContextFactory`` re-reads its certificate, key and trust store files when
``tlsCertFilesRefreshDurationSeconds`` (seconds; 0, its default, = never) have passed since the last
look and one of the files changed; a failed re-read keeps the previous context. :class:`PemFiles` does
the same for both ends here: the client credentials of bookie connections
(:class:`~autorecovery.rpc.tls.ChannelCredentialSource`) and the reference bookie's server credentials
(:func:`~autorecovery.rpc.tls.server_credentials`, whose fetcher gRPC calls on each new handshake, from
its own threads: hence the lock).

A file is "changed" when its :class:`~autorecovery.config.files.FileStamp` (inode, size, mtime) is: a
rename over it (how certificate managers rotate) or an in-place rewrite. A new version is taken only
whole: every file readable and PEM, every certificate parsable, and the private key matching the
certificate (a rotation that has renamed the new certificate but not yet its key is *not* taken). A
version that is not whole keeps the previous credentials and logs one WARNING ``TLS files not
reloaded`` naming the key or flag and the path (never the content); the same broken version is not
warned about again.
"""

from __future__ import annotations

import math
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from autorecovery.config.files import FileStamp
from autorecovery.config.tls import read_pem
from autorecovery.errors import ConfigError

log = structlog.get_logger(__name__)

CERT = "cert"
KEY = "key"
TRUST = "trust"


@dataclass(frozen=True)
class PemFile:
    """One file of a TLS end: ``name`` is the key or flag that names it (for messages), ``kind`` one of
    :data:`CERT` (certificate chain), :data:`KEY` (unencrypted private key), :data:`TRUST` (CA
    certificates)."""

    name: str
    path: str
    kind: str


class PemFiles:
    """The bytes of a set of PEM files, re-read by :meth:`refresh` when they changed.

    Args:
        files: the files (at most one of each kind is checked as a certificate/key pair).
        refresh_s: least time between two looks at the files, s; 0 or less = never re-read.
        clock: monotonic clock (s).
        on_rejected: called with the offending file and why, once per version that is not whole
            (default: the WARNING ``TLS files not reloaded`` of the module docstring). Lets another end
            (the admin HTTPS port) keep its own words while sharing the check.

    Attributes:
        data: kind → the bytes of the current version (read at construction).
        generation: 0, then +1 at each version taken.

    Raises:
        ConfigError: (construction) a file cannot be read or is not PEM, naming its key or flag.
    """

    def __init__(self, files: Sequence[PemFile], refresh_s: float, *,
                 clock: Callable[[], float] = time.monotonic,
                 on_rejected: Callable[[PemFile, str], None] | None = None) -> None:
        self.files = tuple(files)
        self._on_rejected = on_rejected or _warn_rejected
        self.refresh_s = float(refresh_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._stamps = self._stamp()
        self.data: dict[str, bytes] = {f.kind: read_pem(f.path, f.name, private_key=f.kind == KEY) for f in self.files}
        self.generation = 0
        self._checked = clock()
        self._warned: tuple[FileStamp, ...] | None = None

    @property
    def reloads(self) -> bool:
        """Whether the files are ever re-read (``refresh_s`` > 0)."""
        return self.refresh_s > 0

    def _stamp(self) -> tuple[FileStamp, ...]:
        return tuple(FileStamp.of(f.path) for f in self.files)

    def refresh(self, *, force: bool = False) -> bool:
        """Look at the files when ``refresh_s`` has passed since the last look (``force``: now), and take
        their new version when one changed and the new version is whole.

        Returns:
            True when a new version was taken (``data`` and ``generation`` changed). Never raises.
        """
        if not self.reloads:
            return False
        with self._lock:
            now = self._clock()
            if not force and now - self._checked < self.refresh_s:
                return False
            self._checked = now
            stamps = self._stamp()
            if stamps == self._stamps:
                return False
            data, problem = self._load()
            if self._stamp() != stamps:  # changed while being read: look again at the next use
                self._checked = -math.inf
                return False
            if problem is not None:
                if stamps != self._warned:
                    self._warned = stamps
                    self._on_rejected(*problem)
                return False
            assert data is not None
            self._stamps, self.data, self._warned = stamps, data, None
            self.generation += 1
            log.info("TLS files reloaded", files=[f.path for f in self.files], generation=self.generation)
            return True

    def _load(self) -> tuple[dict[str, bytes] | None, tuple[PemFile, str] | None]:
        """The files' current version, or the first file that makes it not whole and why."""
        data: dict[str, bytes] = {}
        for f in self.files:
            try:
                data[f.kind] = read_pem(f.path, f.name, private_key=f.kind == KEY)
            except ConfigError as exc:
                return None, (f, str(exc))
            if f.kind in (CERT, TRUST):
                try:
                    ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=data[f.kind].decode("ascii"))
                except (ssl.SSLError, ValueError) as exc:
                    return None, (f, f"bad value for {f.name}: {f.path} holds a certificate that cannot be "
                                     f"parsed ({_reason(exc)})")
        cert = next((f for f in self.files if f.kind == CERT), None)
        key = next((f for f in self.files if f.kind == KEY), None)
        if cert is not None and key is not None:
            try:  # the pair as files: the stamps checked around _load say they are the bytes just read
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert.path, key.path, password=lambda: b"")
            except (ssl.SSLError, OSError) as exc:
                return None, (key, f"bad value for {key.name}: {key.path} is not the private key of the "
                                   f"certificate in {cert.path} ({_reason(exc)})")
        return data, None


def _warn_rejected(f: PemFile, why: str) -> None:
    log.warning("TLS files not reloaded: keeping the previous certificates", key=f.name, path=f.path, error=why)


def _reason(exc: BaseException) -> str:
    """An ssl error's reason (OpenSSL's words, never file content)."""
    return str(getattr(exc, "reason", None) or exc)
