"""Network faults on one stock Java bookie without a namespace: nftables rules on loopback (EDGE; root;
issue 40).

A Java bookie of the stock cluster listens on its own loopback address (``127.0.0.2x:port``); every
client and worker connects to that address and port, and the bookie answers from it. So one table
(``inet chaos<pid>lo``) with an ``output`` chain (on loopback every packet is locally generated and passes
``output``) can drop what goes *to* the bookie's data port (``ip daddr H tcp dport P``) or what comes
*from* it (``ip saddr H tcp sport P``), at random (``numgen random mod 100 < p``) or entirely, while its
ZooKeeper session — a connection the bookie opens from 127.0.0.1 to the ZooKeeper servers — is left
alone: it stays registered while no worker or client reaches it.

What loopback cannot offer: the bookie's ZooKeeper traffic is not told apart from everyone else's (same
source address, ephemeral ports), so the one-way ZooKeeper partitions (``asymmetric_partition``) and a
slow link (``tc`` on ``lo`` would slow every process) are refused with that reason.

:class:`LoopbackPartition` offers what :class:`~autorecovery.testing.chaos.netns.BookieNetns` offers the
``partition_bookie_from_workers`` injector (``cut``/``heal``, ``data_link``), :class:`LoopbackLink` what
:class:`~autorecovery.testing.chaos.netfilter.LinkFaults` offers ``one_way_loss`` (``drop``,
``clear_drops``, ``link``).
"""

from __future__ import annotations

import contextlib

from autorecovery.testing.chaos.netfilter import NetfilterError, probe_nft, run, table_name


class LoopbackLink:
    """Drops on one bookie's data port (see the module docstring). :meth:`up` creates the table."""

    link = "lo"

    def __init__(self, host: str, port: int, table: str | None = None) -> None:
        self.host, self.port = host, port
        self.table = table or f"{table_name()}lo"

    def up(self) -> LoopbackLink:
        """Create table ``inet <table>`` with an ``output`` filter chain (policy accept).

        Raises:
            NetfilterError: nftables missing or refused (the exact error).
        """
        why = probe_nft()
        if why is not None:
            raise NetfilterError(f"nftables unusable ({why}); `make chaos-deps` installs it")
        run(["nft", "-f", "-"], stdin=(f"table inet {self.table} {{\n"
                                      "  chain out { type filter hook output priority 0; policy accept; }\n}\n"))
        return self

    def drop(self, direction: str, percent: int = 100, peer: str | None = None) -> None:
        """Drop ``percent`` % of the packets ``"to"`` or ``"from"`` the bookie's data port.

        Raises:
            ValueError: a bad direction, percentage or a ``peer`` (not offered on loopback).
            NetfilterError: nft refused the rule.
        """
        if direction not in ("to", "from") or not 0 < percent <= 100 or peer is not None:
            raise ValueError(f"drop({direction!r}, {percent}, peer={peer!r}): direction to/from, 1..100 %, no peer")
        match = (f"ip daddr {self.host} tcp dport {self.port}" if direction == "to"
                 else f"ip saddr {self.host} tcp sport {self.port}")
        verdict = "drop" if percent == 100 else f"numgen random mod 100 < {percent} drop"
        run(["nft", "add", "rule", "inet", self.table, "out", *match.split(), *verdict.split()])

    def clear_drops(self) -> None:
        """Remove every drop rule (the bookie reachable again)."""
        run(["nft", "flush", "chain", "inet", self.table, "out"])

    def down(self) -> None:
        """Delete the table (errors ignored: idempotent)."""
        with contextlib.suppress(NetfilterError):
            run(["nft", "delete", "table", "inet", self.table])


class NoZkLink:
    """The bookie's ZooKeeper "link" on loopback: every fault on it is refused (see the module docstring)."""

    link = "lo (ZooKeeper)"

    def drop(self, direction: str, percent: int = 100, peer: str | None = None) -> None:
        raise NetfilterError("a stock bookie's ZooKeeper traffic cannot be told apart on loopback")

    def clear_drops(self) -> None:
        return None


class LoopbackPartition:
    """``partition_bookie_from_workers`` on loopback: :meth:`cut` drops both directions of the bookie's
    data port, :meth:`heal` removes the rules."""

    def __init__(self, data: LoopbackLink) -> None:
        self.data = data
        self.data_link = f"lo ({data.host}:{data.port})"
        self.cut_how = f"nftables drops every packet to and from its data port on lo, table {data.table}"

    def cut(self) -> None:
        self.data.drop("to")
        self.data.drop("from")

    def heal(self) -> None:
        self.data.clear_drops()
