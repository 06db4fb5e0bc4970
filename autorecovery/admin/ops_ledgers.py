"""Admin commands on ledger metadata: read it (``ledgermetadata``), dump and restore its upstream binary
form (``-dumptofile`` / ``-restorefromfile``), the ledgers a set of bookies hold, and the two JSON shapes
(upstream's ``LedgerMetadata`` JSON, ours). Every name resolves from :mod:`autorecovery.admin.ops`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

import structlog

from autorecovery.admin.op_context import (
    AdminContext,
    BadRequestError,
    check_ledger_id,
)
from autorecovery.errors import (
    IllegalOpError,
    NoSuchLedgerError,
)
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.zk.bridge import NoNodeError

log = structlog.get_logger("autorecovery.admin")


# -- ledgers ----------------------------------------------------------------------------------------------
async def ledger_metadata(ctx: AdminContext, ledger_id: Any) -> tuple[int, LedgerMetadata, int]:
    """(ledger id, metadata, znode version).

    Raises:
        BadRequestError: a bad ledger id. NoSuchLedgerError: ``ledger N does not exist``.
    """
    lid = check_ledger_id(ledger_id)
    md, version = await ctx.ledgers.read(lid)
    return lid, md, version


async def ledger_metadata_bytes(ctx: AdminContext, ledger_id: Any) -> tuple[int, bytes]:
    """(ledger id, the metadata znode's bytes): what upstream's ``ledgermetadata -dumptofile`` writes
    (``LedgerMetadataSerDe.serialize`` of what it read, i.e. the stored form).

    Raises:
        BadRequestError: a bad ledger id. NoSuchLedgerError: ``ledger N does not exist``.
    """
    lid = check_ledger_id(ledger_id)
    path = ctx.paths.ledger(lid)
    try:
        data, _stat = await ctx.zk.get(path)
    except NoNodeError:
        raise NoSuchLedgerError(f"ledger {lid} does not exist ({path})") from None
    return lid, bytes(data)


async def restore_ledger_metadata(ctx: AdminContext, ledger_id: Any, data: bytes, source: str,
                                  update: bool = False) -> tuple[int, bool]:
    """Upstream ``ledgermetadata -restorefromfile FILE [-update]``: parse ``data`` (a ``-dumptofile``
    output, any format version we read) and create the ledger's metadata znode; with ``update`` an
    existing one is overwritten whatever its version. Returns (ledger id, True when it overwrote).

    Raises:
        BadRequestError: a bad ledger id, or ``data`` is not ledger metadata (names ``source``).
        IllegalOpError: the ledger exists and ``update`` is False.
    """
    from autorecovery.errors import MalformedMetadataError
    from autorecovery.ledger import formats
    from autorecovery.zk.bridge import NodeExistsError

    lid = check_ledger_id(ledger_id)
    try:
        md = formats.deserialize(data, source)
    except (MalformedMetadataError, ValueError) as exc:
        raise BadRequestError(f"{source} is not ledger metadata: {exc}") from None
    try:
        await ctx.ledgers.create(lid, md)
        return lid, False
    except NodeExistsError:
        if not update:
            raise IllegalOpError(f"ledger {lid} already exists ({ctx.paths.ledger(lid)}); "
                                 "add -update to overwrite its metadata") from None
    await ctx.ledgers.write(lid, md, -1)
    return lid, True


#: Upstream ``client.api.DigestType`` names (ours says HMAC where upstream's API says MAC).
UPSTREAM_DIGEST_NAMES = {"CRC32": "CRC32", "HMAC": "MAC", "CRC32C": "CRC32C", "DUMMY": "DUMMY"}


def upstream_digest_name(md: LedgerMetadata) -> str:
    """``MAC``/``CRC32``/``CRC32C``/``DUMMY``: the digest type as upstream's ``LedgerMetadata`` prints it."""
    return UPSTREAM_DIGEST_NAMES.get(md.digest_type.name, md.digest_type.name)


def base64_text(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")




#: What stands for the ledger password when it is not asked for (upstream ``toSafeString``'s word).
PASSWORD_OMITTED = "OMITTED"


def metadata_upstream_json(ledger_id: int, md: LedgerMetadata, *, with_password: bool = False) -> dict[str, Any]:
    """One ledger's metadata as upstream's HTTP ``/api/v1/ledger/metadata`` serialises it (Jackson on
    ``LedgerMetadataImpl``'s getters): bookies as ``{"id": "host:port"}`` objects, custom metadata
    values in base64, ``lastEntryId`` -1 and ``length`` 0 while open. The password is
    ``"OMITTED"`` (upstream's ``toSafeString`` word; upstream's HTTP prints it, issue 25) unless
    ``with_password`` (an authenticated admin's ``?withPassword=true``), then base64 as upstream."""
    return {
        "ledgerId": ledger_id,
        "allEnsembles": {str(s.first_entry_id): [{"id": b} for b in s.ensemble] for s in md.segments},
        "ensembleSize": md.ensemble_size,
        "writeQuorumSize": md.write_quorum,
        "ackQuorumSize": md.ack_quorum,
        "ctime": md.ctime,
        "password": base64_text(md.password) if with_password else PASSWORD_OMITTED,
        "digestType": upstream_digest_name(md),
        "lastEntryId": md.last_entry_id if md.state == LedgerState.CLOSED else -1,
        "length": md.length if md.state == LedgerState.CLOSED else 0,
        "closed": md.state == LedgerState.CLOSED,
        "state": md.state.name,
        "customMetadata": {k: base64_text(v) for k, v in sorted(md.custom_metadata.items())},
        "metadataFormatVersion": md.format_version,
        "ctoken": md.ctoken,
    }


async def ledgers_containing(ctx: AdminContext, bookies: Iterable[str]) -> list[tuple[int, LedgerMetadata]]:
    """Every ledger whose ensembles name one of ``bookies`` (upstream ``getLedgersContainBookies``, the
    ``recover -q`` query), by ledger id. Malformed metadata znodes are skipped (counted by the store)."""
    wanted = set(bookies)
    out = []
    async for lid, md, _v in ctx.ledgers.scan():
        if md.all_bookies() & wanted:
            out.append((lid, md))
    return sorted(out, key=lambda x: x[0])


def metadata_json(ledger_id: int, md: LedgerMetadata, version: int) -> dict[str, Any]:
    """Metadata as JSON (ours; upstream's HTTP get_ledger_meta uses the same field names)."""
    return {
        "ledgerId": ledger_id,
        "version": version,
        "formatVersion": md.format_version,
        "ensembleSize": md.ensemble_size,
        "writeQuorumSize": md.write_quorum,
        "ackQuorumSize": md.ack_quorum,
        "state": md.state.name,
        "length": md.length,
        "lastEntryId": md.last_entry_id,
        "digestType": md.digest_type.name,
        "ctime": md.ctime,
        "ensembles": {str(s.first_entry_id): list(s.ensemble) for s in md.segments},
        "customMetadata": {k: v.decode("utf-8", "replace") for k, v in md.custom_metadata.items()},
    }
