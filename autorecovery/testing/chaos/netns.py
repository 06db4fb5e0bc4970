"""A bookie in its own network namespace, with one veth link for its data traffic and one for ZooKeeper,
so the chaos campaign can cut it off from the workers and clients but not from ZooKeeper (EDGE; root).

Layout for namespace ``k`` (``ip netns``, Debian's iproute2; ``tc netem`` and nftables are not needed):

- data link ``<tag>d<k>`` ↔ ``<tag>d<k>n``: root side ``10.<net>.<k>.1/30``, bookie side ``.2``; the
  bookie binds ``10.<net>.<k>.2`` (its bookie id), workers and clients reach it over this link;
- ZooKeeper link ``<tag>z<k>`` ↔ ``<tag>z<k>n``: root ``10.<net>.<k>.5/30``, bookie side ``.6``; a
  :class:`TcpProxy` per ZooKeeper server listens on the root side (ZooKeeper itself binds loopback,
  which a namespace cannot reach).

Cutting = ``ip link set <data link> down`` plus a route of the bookie's address to a veth end whose peer
is down (the kernel has no ``dummy`` module here): the kernel drops the packets, both sides stay alive,
nothing answers; healing = ``up`` and the route removed. Every command's failure is reported with its
exact error, so a machine that forbids namespaces gets the fault kind skipped with the reason printed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field

from autorecovery.testing.chaos.undo import undone_on
from autorecovery.testing.tcp_proxy import TcpProxy


class NetnsError(RuntimeError):
    """An ``ip`` command failed; the message is the command and its stderr."""


def ip(*args: str, ns: str | None = None) -> None:
    """Run ``ip <args>`` (in namespace ``ns``).

    Raises:
        NetnsError: naming the command and its exact error.
    """
    run_in_netns(["ip", *args], ns)


def run_in_netns(argv: list[str], ns: str | None = None) -> None:
    """Run ``argv`` (in namespace ``ns`` through ``ip netns exec``), 30 s at most.

    Raises:
        NetnsError: naming the command and its exact error (exit code and stderr, or the OSError).
    """
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(argv)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except OSError as exc:
        raise NetnsError(f"{' '.join(cmd)}: {exc}") from None
    if r.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")


def add_veth(link: str, ns: str, root: str, inner: str) -> None:
    """A veth link ``link`` ↔ ``<link>n``: the ``n`` end moved into namespace ``ns``, ``root``/30 on the
    root end and ``inner``/30 on the namespace's end, both up.

    Raises:
        NetnsError: naming the first refused ``ip`` command and its exact error.
    """
    ip("link", "add", link, "type", "veth", "peer", "name", f"{link}n")
    ip("link", "set", f"{link}n", "netns", ns)
    ip("addr", "add", f"{root}/30", "dev", link)
    ip("link", "set", link, "up")
    ip("addr", "add", f"{inner}/30", "dev", f"{link}n", ns=ns)
    ip("link", "set", f"{link}n", "up", ns=ns)


def remove_netns(name: str, links: Iterable[str], proxies: Iterable[TcpProxy]) -> None:
    """Close ``proxies``, then delete ``links`` (root-side ends) and namespace ``name``, in that order
    (errors ignored: idempotent)."""
    for p in proxies:
        p.close()
    for cmd in (*(("link", "del", link) for link in links), ("netns", "del", name)):
        with contextlib.suppress(NetnsError):
            ip(*cmd)


def plan_tag(tag: str | None = None) -> str:
    """``tag``, or the prefix of this process's namespace and link names (``c<pid % 100000>``)."""
    return tag or f"c{os.getpid() % 100000}"


def plan_address(block: int, offset: int) -> str:
    """``10.<net>.<hi>.<lo>``: ``offset`` past the first address of 8-address block ``block`` of this
    process's /16 (``net`` = 100 + pid % 100), the links' addresses (:class:`BookieNetns` uses blocks
    0..63, :class:`~autorecovery.testing.chaos.daemon_netns.DaemonNetns` the ones after)."""
    net = 100 + os.getpid() % 100
    base = 8 * block
    return f"10.{net}.{base // 256}.{base % 256 + offset}"


@dataclass
class BookieNetns:
    """Namespace ``name`` for one bookie (see the module docstring); ``zk_proxies`` after :meth:`up`."""

    name: str
    data_link: str
    zk_link: str
    data_root: str
    data_ns: str
    zk_root: str
    zk_ns: str
    zk_proxies: list[TcpProxy] = field(default_factory=list)

    @classmethod
    def plan(cls, k: int, tag: str | None = None) -> BookieNetns:
        """Names and addresses for namespace ``k`` (< 64), unique to this process (``tag``: pid based)."""
        t = plan_tag(tag)
        return cls(f"{t}-ns{k}", f"{t}d{k}", f"{t}z{k}", plan_address(k, 1), plan_address(k, 2),
                   plan_address(k, 5), plan_address(k, 6))

    def up(self, zk_servers: list[tuple[str, int]]) -> BookieNetns:
        """Create the namespace, both links and the ZooKeeper proxies.

        Raises:
            NetnsError: the first command the machine refused (the namespace is removed again).
        """
        ip("netns", "add", self.name)
        with undone_on(NetnsError, self.down):
            add_veth(self.data_link, self.name, self.data_root, self.data_ns)
            add_veth(self.zk_link, self.name, self.zk_root, self.zk_ns)
            ip("link", "set", "lo", "up", ns=self.name)
            # a veth end whose peer stays down has no carrier: what is routed to it is dropped
            ip("link", "add", self.sink, "type", "veth", "peer", "name", f"{self.data_link}y")
            ip("link", "set", self.sink, "up")
            self.zk_proxies = [TcpProxy(srv, listen_host=self.zk_root).start() for srv in zk_servers]
        return self

    @property
    def sink(self) -> str:
        """A veth end without carrier: what is routed to it is dropped silently (the cut's route)."""
        return f"{self.data_link}x"

    @property
    def zk_connect(self) -> str:
        """The ZooKeeper connect string the namespaced bookie uses: its proxies on the root side of the
        ZooKeeper link (``host:port,...``, one per ZooKeeper server)."""
        return ",".join(p.address for p in self.zk_proxies)

    def exec_prefix(self) -> list[str]:
        """``ip netns exec <name>``: the prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        """Take the data link down and blackhole the bookie's address: the bookie keeps ZooKeeper,
        loses the workers and clients. (Without the sink route, packets to the address would follow
        the default route once the link is down — on a sandbox, to an egress proxy that accepts any
        connection; a ``blackhole`` route would fail local connects at once with EINVAL instead of
        dropping silently.)"""
        ip("route", "replace", f"{self.data_ns}/32", "dev", self.sink)
        ip("link", "set", self.data_link, "down")

    def heal(self) -> None:
        """Undo :meth:`cut`: the data link up and the sink route removed.

        Raises:
            NetnsError: naming the ``ip`` command and its exact error.
        """
        ip("link", "set", self.data_link, "up")
        ip("route", "del", f"{self.data_ns}/32", "dev", self.sink)

    def down(self) -> None:
        """Remove the proxies, the links and the namespace (errors ignored: idempotent)."""
        remove_netns(self.name, (self.sink, self.data_link, self.zk_link), self.zk_proxies)
        self.zk_proxies = []
