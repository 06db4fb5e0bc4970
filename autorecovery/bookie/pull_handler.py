"""The reference bookie's PullEntries handler (feature ``PULL_ENTRIES``, ours): copy a range of a
ledger from another bookie into this one, verifying each entry's digest, in one hop instead of the
worker's two (EDGE). :class:`PullHandler` is a mixin of
:class:`~autorecovery.bookie.service.BookieService`; it reads peers through the service's
``peers`` client and stores with the add path's checks, admission and window.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import grpc
import structlog

from autorecovery.bookie.admission import Admission
from autorecovery.bookie.limits import PULL_REPORT_BYTES, STREAM_WINDOW_ENTRIES
from autorecovery.bookie.status import SKIPPED, BookieStatusError
from autorecovery.bookie.storage import BookieStorage
from autorecovery.errors import BookieError, DigestMismatchError, ZooKeeperError
from autorecovery.ledger.digest import EntryDigest, digest_for
from autorecovery.ledger.metadata import DigestType
from autorecovery.ledger.striping import index_stores
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.rpc.convert import status_code

if TYPE_CHECKING:
    from autorecovery.rpc.bookie_client import GrpcBookieClient

log = structlog.get_logger("autorecovery.bookie.service")
_OK = pb.StatusCode.EOK


class PullHandler:
    """PullEntries of the bookie's servicer (a mixin: the attributes below are set by
    ``BookieService.__init__``; ``_check_entry`` is the add path's, ``_range_problem`` the range
    reads', ``_submit_adds`` the add path's)."""

    storage: BookieStorage
    bookie_id: str
    stream_window_bytes: int
    admission: Admission
    peers: GrpcBookieClient | None
    peer_check: Callable[[str], Awaitable[bool]] | None
    _closing: bool
    _check_entry: Callable[[int, int, bytes], int]
    _range_problem: Callable[[int, int, int, int, int, int], str | None]
    _submit_adds: Callable[..., asyncio.Future]

    async def PullEntries(self, request: pb.PullRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.PullProgress]:
        """Copy a range of a ledger from another bookie into this one (feature ``PULL_ENTRIES``, ours;
        upstream's replicator always reads to itself and writes out, so every byte crosses the network
        twice). Reads ``source_bookie_id`` with the range's striping filter, verifies each entry's
        digest (``digest_type``: CRC32C when unset, CRC32 or DUMMY; HMAC is refused, the bookie has no
        password; a corrupt copy is reported ``DIGEST`` and never stored), and stores each entry as a
        ``RECOVERY_ADD`` with the same checks, admission and window as an AddEntries stream. Progress
        reports list the entry ids that became durable; the last has ``done``. Statuses: EOK (the
        source's own failures are reported per entry or in ``source_status``), EBADREQ (bad range, a
        source that is this bookie, no peer client, an HMAC or unknown digest type), EREADONLY, EUA,
        EIO, ETOOMANYREQUESTS.
        """
        lid, first, last = request.ledger_id, request.first_entry_id, request.last_entry_id
        source = request.source_bookie_id

        def refuse(status: str, detail: str) -> pb.PullProgress:
            return pb.PullProgress(status=status_code(status), done=True, failed_entry_id=-1,
                                   message=f"bookie {self.bookie_id}: {detail}")

        if self.peers is None:
            yield refuse("EBADREQ", "does not pull entries from other bookies (no peer client)")
            return
        bad = self._range_problem(lid, first, last, request.ensemble_size, request.write_quorum,
                                  request.bookie_index)
        if bad is None and last < first:
            bad = "empty range"
        if bad is None and not source:
            bad = "no source bookie"
        digest, digest_problem = _pull_digest(request.digest_type)
        if bad is None:
            bad = digest_problem
        if bad is not None:
            yield refuse("EBADREQ", f"bad pull of ledger {lid} entries {first}..{last} from {source!r}: {bad}")
            return
        if source == self.bookie_id:
            yield refuse("EBADREQ", f"ledger {lid}: cannot pull from itself")
            return
        if self.peer_check is not None:
            try:
                known = await self.peer_check(source)
            except ZooKeeperError as exc:  # ZooKeeper unreachable: the worker retries the copy later
                yield refuse("EIO", f"ledger {lid}: cannot check that source {source} is a bookie of this "
                                    f"cluster now: {exc}")
                return
            if not known:
                yield refuse("EBADREQ", f"ledger {lid}: source {source} is not a registered bookie of this cluster")
                return
        stream = self.storage.new_stream()
        # one storage operation per message received: (entry ids, future, bytes)
        inflight: deque[tuple[list[int], asyncio.Future, int]] = deque()
        inflight_bytes = inflight_entries = 0
        stored: list[int] = []
        stored_bytes = 0
        failed: list[pb.PullFailure] = []
        failure: tuple[int, BookieStatusError] | None = None
        source_status = source_message = ""

        async def settle_head() -> None:
            nonlocal inflight_bytes, inflight_entries, stored_bytes, failure
            eids, fut, n = inflight.popleft()
            inflight_bytes -= n
            inflight_entries -= len(eids)
            try:
                res = await fut
            finally:
                self.admission.release_add(n, len(eids))
            if res is None:
                stored.extend(eids)
                stored_bytes += n
            elif failure is None and isinstance(res, BookieStatusError) and res is not SKIPPED:
                failure = (eids[0], res)

        def report(done: bool = False) -> pb.PullProgress:
            nonlocal stored, stored_bytes, failed
            msg = pb.PullProgress(status=_OK, stored_entry_ids=stored, bytes_stored=stored_bytes, failed=failed,
                                  done=done, failed_entry_id=-1)
            stored, stored_bytes, failed = [], 0, []
            return msg

        # the request's fields, taken out of the message once (not per entry)
        E, WQ, idx, master_key = request.ensemble_size, request.write_quorum, request.bookie_index, request.master_key

        def accept(batch: list) -> tuple[list[tuple[int, bytes]], list[int], int]:
            """The entries of one message to store, in order, their piggy-backed LACs and body bytes.
            Records the failed ones; an entry this bookie refuses sets ``failure`` and ends the list
            (the entries before it are still stored)."""
            nonlocal failure
            good: list[tuple[int, bytes]] = []
            lacs: list[int] = []
            nbytes = 0
            for item in batch:
                if isinstance(item, BookieError):
                    failed.append(pb.PullFailure(entry_id=getattr(item, "entry_id", -1), reason=item.status))
                    continue
                eid, body = item.entry_id, item.body
                if not first <= eid <= last or (E and not index_stores(idx, eid, E, WQ)):
                    continue  # not asked for (a source that ignores the filter): never stored
                try:
                    digest.verify(body, lid, eid, source=source)
                except DigestMismatchError as exc:
                    # WARNING: the worker that asked logs the ERROR (and counts it) once for this entry
                    log.warning("corrupt replica not pulled", ledger_id=lid, entry_id=eid, bookie_id=source,
                                error=str(exc))
                    failed.append(pb.PullFailure(entry_id=eid, reason="DIGEST"))
                    continue
                try:
                    lac = self._check_entry(lid, eid, body)
                except BookieStatusError as exc:
                    failure = (eid, exc)
                    break
                good.append((eid, body))
                lacs.append(lac)
                nbytes += len(body)
            return good, lacs, nbytes

        # a message at a time: one admission, one storage operation and one future per message, not
        # per entry (the per-entry cost of the event loop was most of this handler's CPU); each body is
        # a view of the message received, verified (one copy of its payload for CRC32C), checked and
        # written to the entry log without another copy (issue 29)
        reader = self.peers.read_entry_batches(source, lid, first, last, ensemble_size=E, write_quorum=WQ,
                                               bookie_index=idx, views=True)
        try:
            async with contextlib.aclosing(reader):
                async for batch in reader:
                    if self._closing:
                        failure = (-1, BookieStatusError("EIO", f"bookie {self.bookie_id} is shutting down"))
                        break
                    good, lacs, n = accept(batch)
                    if good:
                        while inflight and inflight_bytes + n > self.stream_window_bytes:
                            await settle_head()  # our own adds may be what fills the admission budget
                        if not await self.admission.wait_add(n, len(good)):
                            failure = (good[0][0], BookieStatusError(
                                "ETOOMANYREQUESTS", f"bookie {self.bookie_id}: {self.admission.describe_adds()}"))
                            break
                        fut = self._submit_adds(lid, master_key, good, recovery=True, stream=stream, nbytes=n,
                                                lacs=lacs)
                        inflight.append(([eid for eid, _body in good], fut, n))
                        inflight_bytes += n
                        inflight_entries += len(good)
                    while inflight and (inflight[0][1].done() or inflight_entries > STREAM_WINDOW_ENTRIES):
                        await settle_head()
                    if failure is not None:
                        break
                    if stored_bytes >= PULL_REPORT_BYTES:
                        yield report()
        except BookieError as exc:  # the source stream failed: report it, keep what was stored
            source_status, source_message = exc.status, str(exc)
        except Exception as exc:  # broad: answered as EIO after pending writes settle
            log.exception("PullEntries failed", ledger_id=lid, source=source)
            if failure is None:
                failure = (-1, BookieStatusError("EIO", f"bookie {self.bookie_id}: {exc}"))
        finally:
            while inflight:  # never answer (or leave) before submitted writes settle
                try:
                    await settle_head()
                except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.debug("best-effort step failed", step="accept", error=repr(cleanup_exc))
        if failure is not None:
            eid, err = failure
            msg = report(done=True)
            msg.status, msg.failed_entry_id, msg.message = status_code(err.status), eid, err.detail
            yield msg
            return
        msg = report(done=True)
        msg.source_status, msg.message = source_status, source_message
        yield msg


def _pull_digest(number: int) -> tuple[EntryDigest, str | None]:
    """The digest a PullEntries target checks entries with, from ``PullRequest.digest_type`` (0 =
    CRC32C, for callers that predate the field), and why the request is refused (None: it is not)."""
    if number == 0:
        number = DigestType.CRC32C
    if number == DigestType.HMAC:
        return digest_for(DigestType.CRC32C), ("an HMAC ledger cannot be verified by a bookie (it has no password): "
                                               "copy it through the worker")
    try:
        return digest_for(number), None
    except ValueError:
        return digest_for(DigestType.CRC32C), f"unknown digest type {number}"
