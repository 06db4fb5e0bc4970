"""Heal history in ZooKeeper (EDGE; the records and rules are ``audit.episodes``).

``<root>/underreplication/history`` (ours, beside upstream's ``underreplication/`` znodes, like
``maintenance`` and ``unrecoverable``): its data is the elected auditor's published state (JSON: the
auditor, lost bookies and since when, last check times, under-replicated ledgers and bytes); its
children ``e-<10 digits>`` (persistent sequential, so names sort oldest first) are the heal episodes.
Only the elected auditor writes: one create per episode, one setData per episode per progress step,
one setData of the state when it changes, and deletes of the oldest beyond
:data:`~autorecovery.audit.episodes.MAX_EPISODES`. Anyone reads.

A record that does not parse (hostile, truncated) is skipped with a one-line error naming its znode
(:class:`HistoryReadError` in :attr:`Listing.errors`); it never raises out of a listing.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from autorecovery.audit import episodes as E
from autorecovery.zk.bridge import NoNodeError, NodeExistsError, ZkClient
from autorecovery.zk.kazoo_ext import ServerTooOld
from autorecovery.zk.paths import Paths

PREFIX = "e-"
#: largest state document read, bytes
MAX_STATE_BYTES = 256 * 1024


@dataclass(frozen=True)
class Listing:
    """Episodes oldest first, and one line per znode that could not be read."""

    episodes: list[E.Episode]
    errors: list[str] = field(default_factory=list)


class HistoryStore:
    """Read and write ``underreplication/history``.

    Raises (from the writers): ZooKeeperError naming the path on ZooKeeper failures.
    """

    def __init__(self, zk: ZkClient, paths: Paths) -> None:
        self.zk = zk
        self.paths = paths

    def path_of(self, name: str) -> str:
        return f"{self.paths.history}/{name}"

    async def names(self) -> list[str]:
        """Episode znode names, oldest first ([] when the history was never written)."""
        try:
            children = await self.zk.get_children(self.paths.history)
        except NoNodeError:
            return []
        return sorted(c for c in children if c.startswith(PREFIX))

    async def listing(self, limit: int | None = None) -> Listing:
        """The episodes (the newest ``limit`` when given), oldest first; bad records are reported in
        :attr:`Listing.errors`, one line each naming the znode."""
        names = await self.names()
        if limit is not None:
            names = names[-limit:] if limit > 0 else []
        reads = await self._read_all([self.path_of(n) for n in names])
        out: list[E.Episode] = []
        errors: list[str] = []
        for n, r in zip(names, reads, strict=True):
            if isinstance(r, NoNodeError):
                continue  # dropped between the listing and the read
            if isinstance(r, Exception):
                errors.append(f"{self.path_of(n)}: {type(r).__name__}: {r}")
                continue
            try:
                out.append(E.decode(r[0], n))
            except ValueError as exc:
                errors.append(f"bad heal episode {self.path_of(n)}: {exc}")
        return Listing(out, errors)

    async def _read_all(self, paths: list[str]) -> list[Any]:
        """getData of every path (one multiRead; one get each before ZooKeeper 3.6)."""
        if not paths:
            return []
        try:
            return await self.zk.get_many(paths)
        except ServerTooOld:
            out: list[Any] = []
            for p in paths:
                try:
                    out.append(await self.zk.get(p))
                except Exception as exc:  # noqa: BLE001 - reported per znode by the caller
                    out.append(exc)
            return out

    async def create(self, ep: E.Episode) -> str:
        """Write a new episode; returns its name (``e-<seq>``)."""
        data = E.encode(ep)
        base = f"{self.paths.history}/{PREFIX}"
        try:
            path = await self.zk.create(base, data, sequence=True)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):  # the parent holds the state document: never created empty
                await self.zk.create(self.paths.history, b"{}", makepath=True)
            path = await self.zk.create(base, data, sequence=True)
        return path.rsplit("/", 1)[1]

    async def update(self, ep: E.Episode) -> None:
        """Rewrite an existing episode (``ep.name``); re-creates nothing if it was dropped meanwhile."""
        with contextlib.suppress(NoNodeError):
            await self.zk.set(self.path_of(ep.name), E.encode(ep))

    async def trim(self, open_names: list[str], keep: int = E.MAX_EPISODES) -> list[str]:
        """Delete the oldest episodes beyond ``keep`` (closed first); returns the names deleted."""
        gone = E.to_drop(await self.names(), open_names, keep)
        for n in gone:
            with contextlib.suppress(NoNodeError):
                await self.zk.delete(self.path_of(n))
        return gone

    async def write_state(self, state: dict[str, Any]) -> None:
        """Publish the auditor's state as the data of ``underreplication/history``."""
        data = json.dumps(state, sort_keys=True).encode()
        try:
            await self.zk.set(self.paths.history, data)
        except NoNodeError:
            try:
                await self.zk.create(self.paths.history, data, makepath=True)
            except NodeExistsError:
                await self.zk.set(self.paths.history, data)

    async def read_state(self) -> tuple[dict[str, Any], str | None]:
        """The last published state ({} when none) and a one-line error naming the znode when it is
        not a JSON object."""
        try:
            data, _ = await self.zk.get(self.paths.history)
        except NoNodeError:
            return {}, None
        if not data:
            return {}, None
        if len(data) > MAX_STATE_BYTES:
            return {}, f"bad history state {self.paths.history}: {len(data)} bytes, more than {MAX_STATE_BYTES}"
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            return {}, f"bad history state {self.paths.history}: not JSON ({str(exc)[:80]})"
        if not isinstance(doc, dict):
            return {}, f"bad history state {self.paths.history}: not a JSON object"
        return doc, None


__all__ = ["HistoryStore", "Listing", "PREFIX"]
