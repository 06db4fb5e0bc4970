"""One error hierarchy for autorecovery, rooted at :class:`AutoRecoveryError`.

PURE: no I/O. Where users see an error, its class mirrors an upstream ``BKException`` code
(``BKNoSuchLedgerExistsException``, ``BKNotEnoughBookiesException``, ...) and carries that code in
``bk_code`` so log lines and metrics (``exceptions_<Name>``) read like upstream's. Every error names
what it is about (a znode path, a config key, a bookie id, a ledger id) in its message.

``retriable`` says whether the same operation may succeed if tried again later (a bookie that is down
may come back; a malformed znode will not fix itself).
"""

from __future__ import annotations


class AutoRecoveryError(Exception):
    """Base of every error raised by autorecovery.

    Attributes:
        retriable: True when retrying the same operation later may succeed.
        bk_code: the upstream BKException code this error mirrors (0 when none).
        upstream_name: the upstream exception's simple class name, used in the
            ``exceptions_<name>`` metric family as upstream does.
    """

    retriable: bool = False
    bk_code: int = 0
    upstream_name: str = "BKException"


class ConfigError(AutoRecoveryError, ValueError):
    """A configuration key is unknown or has a bad value. The message names the key and the value."""

    upstream_name = "ConfigurationException"


class MetadataError(AutoRecoveryError):
    """Ledger metadata cannot be read or written."""

    bk_code = -102
    upstream_name = "BKMetadataSerializationException"


class MalformedMetadataError(MetadataError):
    """A metadata znode holds bytes that do not decode. The message names the znode path."""


class NoSuchLedgerError(AutoRecoveryError):
    """The ledger does not exist in the metadata store (upstream BKNoSuchLedgerExistsOnMetadataServerException)."""

    bk_code = -25
    upstream_name = "BKNoSuchLedgerExistsOnMetadataServerException"


class BadVersionError(AutoRecoveryError):
    """A compare-and-set on a znode version lost a race (upstream BKMetadataVersionException)."""

    retriable = True
    bk_code = -17
    upstream_name = "BKMetadataVersionException"


class NotEnoughBookiesError(AutoRecoveryError):
    """The placement policy cannot find enough bookies (upstream BKNotEnoughBookiesException)."""

    retriable = True
    bk_code = -3
    upstream_name = "BKNotEnoughBookiesException"


class BookieError(AutoRecoveryError):
    """A bookie answered with a non-OK status code, or could not be reached.

    Attributes:
        bookie_id: the bookie (``host:port``) that failed.
        status: the bookie protocol status name (``EIO``, ``EFENCED``, ``UNAVAILABLE``, ...).
        entry_id / failed_entry_id / entries_written / bytes_written: set only by the calls that
            document them (a read's ``ENOENTRY`` item, a refused pull, a stream of adds); declared here,
            never defaulted, so ``getattr(err, name, default)`` still tells an unset one.
    """

    retriable = True
    upstream_name = "BKBookieException"
    entry_id: int | None
    failed_entry_id: int
    entries_written: int
    bytes_written: int

    def __init__(self, bookie_id: str, status: str, message: str = "") -> None:
        self.bookie_id = bookie_id
        self.status = status
        super().__init__(f"bookie {bookie_id}: {status}{': ' + message if message else ''}")


class BookieUnavailableError(BookieError):
    """The bookie could not be reached (upstream BKBookieHandleNotAvailableException)."""

    bk_code = -8
    upstream_name = "BKBookieHandleNotAvailableException"


class BookieRefusedError(BookieError):
    """A bookie asks for something this process cannot do safely, so nothing is sent to it: an
    authentication plugin, or TLS on upstream's protocol (upstream BKUnauthorizedAccessException).
    Not retriable: an operator must change the bookie's or our configuration; the message says which."""

    retriable = False
    bk_code = -102
    upstream_name = "BKUnauthorizedAccessException"


class LedgerFencedError(BookieError):
    """The ledger is fenced on a bookie: a normal add was refused with EFENCED (upstream BKLedgerFencedException)."""

    retriable = False
    bk_code = -101
    upstream_name = "BKLedgerFencedException"


class DigestMismatchError(AutoRecoveryError):
    """An entry's digest does not match its contents (upstream BKDigestMatchException).

    The message names the ledger id, entry id and the bookie the entry came from.
    """

    retriable = True
    bk_code = -5
    upstream_name = "BKDigestMatchException"


class ReadError(AutoRecoveryError):
    """No replica could serve an entry (upstream BKReadException). Names ledger and entry ids."""

    retriable = True
    bk_code = -1
    upstream_name = "BKReadException"


class WriteError(AutoRecoveryError):
    """An add could not reach its ack quorum (upstream BKNotEnoughBookiesException / BKWriteException)."""

    retriable = True
    bk_code = -12
    upstream_name = "BKWriteException"


class LedgerClosedError(AutoRecoveryError):
    """An add was attempted on a closed ledger handle (upstream BKLedgerClosedException)."""

    bk_code = -11
    upstream_name = "BKLedgerClosedException"


class LedgerRecoveryError(AutoRecoveryError):
    """Recovering or re-replicating a ledger failed (upstream BKLedgerRecoveryException)."""

    retriable = True
    bk_code = -10
    upstream_name = "BKLedgerRecoveryException"


class ZooKeeperError(AutoRecoveryError):
    """A ZooKeeper operation failed. The message names the znode path."""

    retriable = True
    upstream_name = "ZKException"


class SessionExpiredError(ZooKeeperError):
    """The ZooKeeper session expired; every role must stop and rejoin with a new session."""

    upstream_name = "NonRecoverableReplicationException"


class CompatibilityError(AutoRecoveryError):
    """A layout znode holds a format this version does not support (upstream CompatibilityException)."""

    upstream_name = "CompatibilityException"


class NoClusterError(AutoRecoveryError):
    """ZooKeeper answers but there is no BookKeeper cluster (no ``LAYOUT``) under the ledgers root."""

    http_status = 503


class CookieError(AutoRecoveryError):
    """A bookie's cookie is missing or does not match (upstream BookieException.InvalidCookieException)."""

    upstream_name = "InvalidCookieException"


class UnavailableError(AutoRecoveryError):
    """A replication/admin operation cannot proceed now (upstream ReplicationException.UnavailableException)."""

    retriable = True
    upstream_name = "UnavailableException"


class IllegalOpError(AutoRecoveryError):
    """An operation is not allowed in the current state (upstream BKIllegalOpException)."""

    bk_code = -100
    upstream_name = "BKIllegalOpException"


#: Modules whose exceptions are transport/coordination failures (a dropped connection, a CAS race, a
#: timed-out RPC): trying again later may succeed.
_TRANSIENT_MODULES = ("kazoo", "grpc")


def is_retriable(exc: BaseException) -> bool:
    """Whether the retry loops (worker slots and passes, the auditor's event loop) should try again.

    * :class:`AutoRecoveryError`: its :attr:`~AutoRecoveryError.retriable` flag (e.g. a bookie that is
      down may come back; a malformed metadata znode will not fix itself);
    * ZooKeeper (kazoo) and gRPC exceptions, ``OSError`` (connections) and ``TimeoutError``: retriable;
    * anything else (``TypeError``, ``KeyError``, ...) is a bug or a state retrying cannot change: not
      retriable, so it is surfaced instead of being retried forever.
    """
    if isinstance(exc, AutoRecoveryError):
        return bool(exc.retriable)
    if isinstance(exc, (OSError, TimeoutError)):
        return True
    return any(type(exc).__module__ == m or type(exc).__module__.startswith(m + ".") for m in _TRANSIENT_MODULES)
