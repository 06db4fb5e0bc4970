"""The bookie store's refusal: :class:`BookieStatusError` (a protocol status and a reason), the
:data:`SKIPPED` result of an operation after a failed one of its stream, and :class:`StreamState`,
which links the operations of one add stream (EDGE; imports only ``errors``).

Raised or returned by ``bookie.storage`` (and its writer and reader halves), answered to clients by
``bookie.service`` with the status's protocol code (``rpc.convert.status_code``).
"""

from __future__ import annotations

from autorecovery.errors import AutoRecoveryError


class BookieStatusError(AutoRecoveryError):
    """A request the bookie answers with a non-OK protocol status.

    Attributes:
        status: protocol status name (``ENOLEDGER``, ``ENOENTRY``, ``EUA``, ``EFENCED``, ``EBADREQ``,
            ``EREADONLY``, ``EIO``).
        detail: human-readable reason naming the ledger/entry; sent to the client as ``message``.
        lac: the ledger's LAC on this bookie when known (``ENOENTRY`` answers carry it), else -1.
    """

    def __init__(self, status: str, detail: str, lac: int = -1) -> None:
        self.status = status
        self.detail = detail
        self.lac = lac
        super().__init__(f"{status}: {detail}")


class StreamState:
    """Shared by the operations of one AddEntries stream: after the first failure the writer skips
    the stream's remaining operations, so nothing after a failed entry is written."""

    __slots__ = ("failed",)

    def __init__(self) -> None:
        self.failed = False


#: Result of an operation skipped because an earlier entry of its stream failed.
SKIPPED = BookieStatusError("EIO", "skipped: an earlier entry of this stream failed")
