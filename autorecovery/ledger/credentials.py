"""Which digest type and password open a ledger for recovery (PURE).

Source: upstream ``LedgerOpenOp`` in its administrative form (``BookKeeperAdmin.openLedger`` /
``openLedgerNoRecovery``, what the ReplicationWorker, the Auditor's checker and the admin recover path
use): the digest type and password come from the ledger's metadata when it stores them
(``LedgerMetadata.hasPassword()``), else from the client configuration's ``digestType`` and ``passwd``
keys (``ClientConfiguration.getBookieRecoveryDigestType`` / ``getBookieRecoveryPasswd``; defaults
``CRC32`` and ``""``). Metadata without a password is format v1, or v2 written before 4.2 (its
protobuf has no ``password`` field).

:func:`recovery_credentials` is that choice; :func:`recovery_digest` and :func:`recovery_master_key`
are what the copier, the checker and the client use from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autorecovery.ledger.digest import EntryDigest, digest_for, master_key
from autorecovery.ledger.metadata import DigestType, LedgerMetadata

__all__ = ["RecoveryCredentials", "DEFAULT_CREDENTIALS", "parse_digest_type", "recovery_credentials",
           "recovery_digest", "recovery_master_key", "credentials_source"]

#: upstream ``BookKeeper.DigestType`` names (``MAC``) and the metadata's (``HMAC``) → our enum
_NAMES = {"CRC32": DigestType.CRC32, "CRC32C": DigestType.CRC32C, "MAC": DigestType.HMAC,
          "HMAC": DigestType.HMAC, "DUMMY": DigestType.DUMMY}


def parse_digest_type(name: str, key: str = "digestType") -> DigestType:
    """``CRC32``, ``CRC32C``, ``MAC`` (or ``HMAC``), ``DUMMY`` (any case) → :class:`DigestType`.

    Raises:
        ValueError: ``bad value for <key>: 'x' (expected CRC32, CRC32C, MAC, HMAC or DUMMY)``.
    """
    dt = _NAMES.get(str(name).strip().upper())
    if dt is None:
        raise ValueError(f"bad value for {key}: {name!r} (expected CRC32, CRC32C, MAC, HMAC or DUMMY)")
    return dt


@dataclass(frozen=True)
class RecoveryCredentials:
    """The configured fallback for ledgers whose metadata stores no password.

    Attributes:
        digest_type: ``digestType`` (upstream default CRC32).
        password: ``passwd`` as UTF-8 bytes (default empty); a secret, never in ``repr``.
    """

    digest_type: DigestType = DigestType.CRC32
    password: bytes = field(default=b"", repr=False)


#: upstream's defaults: ``digestType=CRC32``, ``passwd=`` (empty)
DEFAULT_CREDENTIALS = RecoveryCredentials()


def recovery_credentials(md: LedgerMetadata, fallback: RecoveryCredentials = DEFAULT_CREDENTIALS
                         ) -> tuple[DigestType, bytes]:
    """``(digest type, password)`` that open ``md``'s ledger: its own when the metadata stores a
    password (``md.has_password``), else ``fallback``'s (upstream administrative ``LedgerOpenOp``)."""
    if md.has_password:
        return md.digest_type, md.password
    return fallback.digest_type, fallback.password


def credentials_source(md: LedgerMetadata) -> str:
    """Where :func:`recovery_credentials` takes them from, for messages: ``metadata`` or
    ``digestType/passwd`` (never the password itself)."""
    return "metadata" if md.has_password else "digestType/passwd"


def recovery_digest(md: LedgerMetadata, fallback: RecoveryCredentials = DEFAULT_CREDENTIALS) -> EntryDigest:
    """The :class:`EntryDigest` that verifies and packs ``md``'s entries (see :func:`recovery_credentials`)."""
    dt, password = recovery_credentials(md, fallback)
    return digest_for(dt, password)


def recovery_master_key(md: LedgerMetadata, fallback: RecoveryCredentials = DEFAULT_CREDENTIALS) -> bytes:
    """The 20-byte master key that adds and fencing reads of ``md``'s ledger carry (upstream
    ``DigestManager.generateMasterKey`` of the chosen password)."""
    return master_key(recovery_credentials(md, fallback)[1])


def digest_failure_reason(md: LedgerMetadata, fallback: RecoveryCredentials, entry_count: int,
                          answers: set[str]) -> str:
    """The reason an unrecoverable record gives when every replica failed the digest check of a ledger
    whose metadata stores no password (the configured ``digestType``/``passwd`` are likely not the ones
    it was written with); ``""`` when that is not the case (the record keeps its generic reason).

    ``answers``: the kinds of answers the bookies gave (``DIGEST`` for a failed digest check). Never
    names the password.
    """
    if md.has_password or "DIGEST" not in answers:
        return ""
    name = "MAC" if fallback.digest_type == DigestType.HMAC else fallback.digest_type.name
    return (f"{entry_count} entries fail the digest check on every replica: the ledger's metadata stores no "
            f"password (format v{md.format_version}), so they were verified with digestType={name} and the "
            f"configured passwd; set digestType and passwd to what the ledger was written with")
