"""What the parts of the gRPC bookie client share (EDGE): batch limits and the mapping of gRPC failures
and bookie statuses to :class:`~autorecovery.errors.BookieError` (see :mod:`autorecovery.rpc.bookie_client`).
"""

from __future__ import annotations

import grpc
import structlog

from autorecovery.errors import BookieError, BookieUnavailableError, LedgerFencedError
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.rpc.convert import status_name
from autorecovery.rpc.tls import tls_failure

log = structlog.get_logger("autorecovery.rpc.bookie_client")

#: Default most body bytes / entries per batch message (BATCHED_ENTRIES framing, issue 13).
DEFAULT_BATCH_BYTES = 1024 * 1024
DEFAULT_BATCH_ENTRIES = 512
#: Room kept in a message for the protobuf framing of a batch around its bodies (ids, keys, tags).
GRPC_FRAMING_BYTES = 64 * 1024

TOTAL_DISK_CAPACITY = pb.TOTAL_DISK_CAPACITY
FREE_DISK_SPACE = pb.FREE_DISK_SPACE


#: Extra time the worker waits for a pull report beyond its own timeout: the target itself waits up
#: to its peer client's timeout (10 s) for the source before it reports the source as failed, s.
PULL_SOURCE_GRACE_S = 15.0


def _status_error(bookie_id: str, code: int, message: str) -> BookieError:
    name = status_name(code)
    if name == "EFENCED":
        return LedgerFencedError(bookie_id, name, message)
    return BookieError(bookie_id, name, message)


def _rpc_error(bookie_id: str, exc: grpc.aio.AioRpcError, what: str, tls: bool = False) -> BookieError:
    code = exc.code()
    detail = f"{what}: gRPC {code.name}: {exc.details()}"
    why = tls_failure(exc.details() or "") if tls and code == grpc.StatusCode.UNAVAILABLE else None
    if why is not None:
        detail = f"{what}: TLS handshake failed: {why}"
        log.warning("TLS handshake failed", bookie_id=bookie_id, error=why)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return BookieUnavailableError(bookie_id, "UNAVAILABLE", detail)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return BookieError(bookie_id, "EBADREQ", detail)
    return BookieError(bookie_id, "EIO", detail)
