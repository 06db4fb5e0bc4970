"""Auditor election on ZooKeeper primitives (EDGE).

Upstream ``ZkLedgerAuditorManager`` + ``AuditorElector``: every candidate creates an
EPHEMERAL_SEQUENTIAL vote ``R/underreplication/auditorelection/V_<10 digits>`` holding the text
``AuditorVoteFormat{bookieId}``; votes are ordered by their sequence number; the first one is the
auditor, which also writes its vote to the ``auditorelection`` znode itself (for tools). Every other
candidate watches only its immediate predecessor (no herd effect) and re-checks when it goes away.

Better than upstream: upstream kills the whole AutoRecovery process on session expiry (#3799, #3351)
and has no re-election retry inside a process. :func:`elector_loop` instead stops the roles cleanly
(``on_lost``), waits for kazoo's new session and rejoins the election as a candidate.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog
from google.protobuf import text_format

from autorecovery import metrics
from autorecovery.ledger import textformat
from autorecovery.proto import bookkeeper_formats_pb2 as pb
from autorecovery.retry import Backoff
from autorecovery.zk.bridge import EventType, NodeExistsError, NoNodeError, SessionEvent, ZkClient
from autorecovery.zk.paths import Paths

log = structlog.get_logger("autorecovery.election")

VOTE_PREFIX = "V_"


def encode_vote(bookie_id: str) -> bytes:
    """Text ``AuditorVoteFormat``: ``bookieId: "<id>"``."""
    return textformat.print_message(pb.AuditorVoteFormat(bookieId=bookie_id)).encode()


def decode_vote(data: bytes) -> str | None:
    m = pb.AuditorVoteFormat()
    try:
        textformat.parse(data.decode(), m)
    except (text_format.ParseError, UnicodeDecodeError):
        return None
    return m.bookieId if m.HasField("bookieId") else None


def vote_seq(name: str) -> int:
    """Sequence number of a vote name ``V_0000000012`` (non-votes sort last)."""
    try:
        return int(name[len(VOTE_PREFIX):])
    except ValueError:
        return 1 << 62


def sorted_votes(children: list[str]) -> list[str]:
    return sorted((c for c in children if c.startswith(VOTE_PREFIX)), key=vote_seq)


async def current_auditor(zk: ZkClient, paths: Paths) -> str | None:
    """Bookie id in the first vote (upstream getCurrentAuditor); None when nobody is a candidate."""
    for _ in range(5):
        try:
            votes = sorted_votes(await zk.get_children(paths.auditor_election))
        except NoNodeError:
            return None
        if not votes:
            return None
        try:
            data, _ = await zk.get(f"{paths.auditor_election}/{votes[0]}")
        except NoNodeError:
            continue  # the first vote vanished between the two reads: look again
        return decode_vote(data)
    return None


class AuditorElector:
    """One candidate in the auditor election.

    Args:
        zk: a started client; the vote lives as long as its session.
        paths: cluster znode paths.
        bookie_id: this node's id (upstream: the bookie id from the server config).

    Attributes:
        vote_path: full path of this candidate's vote, or None.
        elected: True after :meth:`run_for_leadership` returned and until :meth:`resign`.
    """

    def __init__(self, zk: ZkClient, paths: Paths, bookie_id: str) -> None:
        self.zk = zk
        self.paths = paths
        self.bookie_id = bookie_id
        self.vote_path: str | None = None
        self.elected = False
        self._attempts = metrics.counter("auditor", "election_attempts")

    async def _ensure_parents(self) -> None:
        for p in (self.paths.underreplication, self.paths.auditor_election):
            try:
                await self.zk.create(p)
            except NodeExistsError:
                pass
            except NoNodeError:
                await self.zk.ensure_path(p)

    async def run_for_leadership(self) -> None:
        """Vote and wait until this candidate's vote is the first one; returns when elected.

        Cancel the call to stop waiting (the vote stays until :meth:`resign` or session end).
        Raises ZooKeeper errors from the bridge (e.g. when the session is gone).
        """
        await self._ensure_parents()
        while True:
            if self.vote_path is None or await self.zk.exists(self.vote_path) is None:
                self.vote_path = await self._own_vote() or await self.zk.create(
                    f"{self.paths.auditor_election}/{VOTE_PREFIX}", encode_vote(self.bookie_id),
                    ephemeral=True, sequence=True,
                )
            mine = self.vote_path.rsplit("/", 1)[1]
            votes = sorted_votes(await self.zk.get_children(self.paths.auditor_election))
            if mine not in votes:
                self.vote_path = None  # my vote disappeared: vote again
                continue
            idx = votes.index(mine)
            if idx == 0:
                await self.zk.set(self.paths.auditor_election, encode_vote(self.bookie_id))
                self.elected = True
                log.info("elected auditor", bookie_id=self.bookie_id, vote=mine)
                return
            gone = asyncio.Event()
            pred = f"{self.paths.auditor_election}/{votes[idx - 1]}"

            def fired(_event: object, gone: asyncio.Event = gone) -> None:  # this round's own Event
                gone.set()

            stat = await self.zk.exists(pred, watch=fired)
            if stat is None:
                continue
            await gone.wait()
            self._attempts.inc()

    async def _own_vote(self) -> str | None:
        """A vote this ZooKeeper *session* already holds, adopted instead of voting again (the
        lowest; any other is deleted), or None.

        A vote survives a connection loss (the session lives on): a ``create`` that failed with
        ConnectionLoss after the server made the znode, or a rejoin after an error while
        disconnected, leaves it. Voting again behind it would deadlock the election once it comes
        first: nobody watches it and it never goes (issue 26: the chaos campaign ran 3 minutes
        without an auditor). Upstream's Curator-style fix is the same: find your own node by owner.
        """
        cid = self.zk.client_id
        if cid is None:
            return None
        mine: list[str] = []
        for name in sorted_votes(await self.zk.get_children(self.paths.auditor_election)):
            path = f"{self.paths.auditor_election}/{name}"
            try:
                data, stat = await self.zk.get(path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == cid[0] and decode_vote(data) == self.bookie_id:
                mine.append(path)
        for extra in mine[1:]:
            with contextlib.suppress(NoNodeError):
                await self.zk.delete(extra)
        if mine:
            log.info("adopted this session's earlier auditor vote", bookie_id=self.bookie_id, vote=mine[0],
                     deleted=len(mine) - 1)
        return mine[0] if mine else None

    async def watch_own_vote(self) -> None:
        """Return when this candidate's vote is deleted (by an operator, or the session ended)."""
        while self.vote_path is not None:
            ev = asyncio.Event()
            kinds: list = []

            def cb(e, kinds: list = kinds, ev: asyncio.Event = ev) -> None:
                kinds.append(e.type)
                ev.set()

            if await self.zk.exists(self.vote_path, watch=cb) is None:
                return
            await ev.wait()
            if kinds and kinds[-1] == EventType.DELETED:
                return

    async def resign(self) -> None:
        """Delete this candidate's vote (missing vote ignored). Idempotent."""
        self.elected = False
        path, self.vote_path = self.vote_path, None
        if path is not None:
            try:
                await self.zk.delete(path)
            except NoNodeError:
                pass
            except Exception as exc:  # noqa: BLE001 - the session may be gone: the vote is gone too
                log.warning("could not delete vote", vote=path, error=str(exc))


async def elector_loop(
    zk: ZkClient,
    paths: Paths,
    bookie_id: str,
    on_elected: Callable[[], Awaitable[object]],
    on_lost: Callable[[], Awaitable[object]],
    *,
    on_session_lost: Callable[[], Awaitable[object]] | None = None,
    elector_created: Callable[[AuditorElector], object] | None = None,
) -> None:
    """Run for auditor forever: elect → ``on_elected()``; session expiry or vote deleted →
    ``on_lost()`` → wait for the new session → vote again. Cancel the task to stop: the auditor is
    stopped through ``on_lost()`` and the vote is deleted.

    Args:
        on_elected: start the auditor (awaited).
        on_lost: stop the auditor, cancelling its tasks (awaited; called only after ``on_elected``).
        on_session_lost: called on every session expiry, elected or not, so the daemon can stop the
            other roles (e.g. drop the worker's locks) before the node rejoins.
        elector_created: test/introspection hook receiving each new :class:`AuditorElector`.

    Better than upstream (which shuts the process down on expiry): a clean stop and a rejoin.
    """
    q = zk.session_events()
    backoff = Backoff(0.5, 0.5)  # jitter only: every daemon of a failing ZooKeeper rejoins within 0.5 s, not all at once
    try:
        while True:
            if not zk.connected.is_set():
                await zk.connected.wait()
            elector = AuditorElector(zk, paths, bookie_id)
            if elector_created is not None:
                elector_created(elector)
            generation = zk.session_generation
            elected = False
            reason = ""
            try:
                reason = await _run_until_lost(elector, q, on_elected)
                elected = reason != "session-lost-before-election"
            except asyncio.CancelledError:
                elected = elector.elected
                raise
            except Exception as exc:  # noqa: BLE001 - any ZooKeeper failure: stop roles, rejoin
                log.warning("auditor election failed; rejoining", bookie_id=bookie_id, error=str(exc))
                elected = elector.elected
                reason = "error"
            finally:
                if elected or elector.elected:
                    try:
                        await asyncio.shield(on_lost())
                    except Exception as exc:  # noqa: BLE001
                        log.error("stopping the auditor failed", error=str(exc))
                if zk.connected.is_set() and zk.session_generation == generation:
                    try:
                        await asyncio.shield(elector.resign())
                    except Exception as exc:  # noqa: BLE001 - the loop must outlive a failed resign
                        # (a ConnectionLoss mid-delete: the chaos campaign's ZooKeeper faults ended the
                        # loop here and the daemon exited). The vote stays with this session; the next
                        # elector adopts it (``run_for_leadership``) or the session's end removes it.
                        log.warning("withdrawing the auditor vote failed; rejoining", bookie_id=bookie_id,
                                    error=str(exc))
                        reason = reason or "error"
                else:
                    elector.vote_path = None
                    elector.elected = False
            if reason.startswith("session-lost") and on_session_lost is not None:
                try:
                    await on_session_lost()
                except Exception as exc:  # noqa: BLE001 - a role that fails to stop must not end the election
                    log.warning("stopping the roles after a session loss failed", bookie_id=bookie_id,
                                error=str(exc))
            if reason == "error":
                await backoff.sleep()  # back off before retrying a failing ZooKeeper
    finally:
        zk.unsubscribe(q)


async def _run_until_lost(elector: AuditorElector, q: asyncio.Queue, on_elected) -> str:
    """Elect, start the role, then wait for the end of leadership. Returns the reason.

    Owns every task it starts: whatever way it ends (returned, raised, cancelled), each is cancelled
    *and awaited* here, so none outlives it to fail later with "Task exception was never retrieved"
    (issue 9: stopping daemons together left ``run_for_leadership`` failing on a closed connection).
    """
    session_lost = asyncio.ensure_future(_wait_lost(q))
    run = asyncio.ensure_future(elector.run_for_leadership())
    vote_gone: asyncio.Task | None = None
    try:
        done, _ = await asyncio.wait({run, session_lost}, return_when=asyncio.FIRST_COMPLETED)
        if session_lost in done:
            return "session-lost-before-election"
        run.result()
        await on_elected()
        vote_gone = asyncio.ensure_future(elector.watch_own_vote())
        done, _ = await asyncio.wait({vote_gone, session_lost}, return_when=asyncio.FIRST_COMPLETED)
        if session_lost in done:
            return "session-lost"
        vote_gone.result()
        log.warning("my auditor vote was deleted; stepping down", bookie_id=elector.bookie_id)
        return "vote-deleted"
    finally:
        owned = [t for t in (run, session_lost, vote_gone) if t is not None]
        for t in owned:
            t.cancel()
        # retrieve every outcome (a ZooKeeper error of a task nobody waits for any more is expected here)
        await asyncio.gather(*owned, return_exceptions=True)


async def _wait_lost(q: asyncio.Queue) -> None:
    while True:
        ev = await q.get()
        if ev == SessionEvent.LOST:
            return


__all__ = ["AuditorElector", "current_auditor", "elector_loop", "encode_vote", "decode_vote"]
