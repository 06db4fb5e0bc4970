"""An autorecovery daemon in its own network namespace, so that cutting it from ZooKeeper or from one
bookie is a real packet-level partition on its own link, not a proxy (EDGE; root; issue 26).

Layout for daemon namespace ``k`` (Debian's iproute2; sysctl; nftables and tc via
:class:`~autorecovery.testing.chaos.netfilter.LinkFaults`):

- one veth link ``<tag>w<k>`` ↔ ``<tag>w<k>n``: root side ``10.<net>.<b>.9/30``, daemon side ``.10``;
- the bookies and ZooKeeper bind loopback addresses of the root namespace (``127.0.0.1x``,
  ``127.0.0.2..4``), which a namespace cannot normally reach: ``route_localnet=1`` on both veth ends lets
  127/8 packets cross the link, and inside the namespace the ``local 127.0.0.0/8`` route is replaced by
  a route of 127/8 via the link (the namespace keeps ``127.0.0.1`` for itself), so the daemon dials
  bookie ids as registered, over its own link;
- ZooKeeper is reached through one :class:`TcpProxy` per server listening on the link's root address
  (so the proxy faults, ``zk_conn_cut`` and ``partition_daemon_from_zk``, still apply to it).

On this link, packets *to* the daemon leave the root namespace (nftables hook ``output``, ``oifname``)
and packets *from* it arrive (hook ``input``, ``iifname``); a rule matching ZooKeeper's side is
``ip saddr/daddr <root address>`` and one matching a bookie is ``ip saddr/daddr <bookie address>``.
Every command's failure raises :class:`~autorecovery.testing.chaos.netns.NetnsError` with its exact error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autorecovery.testing.chaos.netns import (BookieNetns, NetnsError, add_veth, ip, plan_address, plan_tag, remove_netns,
                                              run_in_netns)
from autorecovery.testing.chaos.undo import undone_on
from autorecovery.testing.tcp_proxy import TcpProxy


def sysctl(key: str, value: str, ns: str | None = None) -> None:
    """``sysctl -w key=value`` (in namespace ``ns``).

    Raises:
        NetnsError: naming the command and its exact error.
    """
    run_in_netns(["sysctl", "-qw", f"{key}={value}"], ns)


@dataclass
class DaemonNetns:
    """Namespace ``name`` for one daemon (see the module docstring); ``zk_proxies`` after :meth:`up`."""

    name: str
    link: str
    root: str
    inner: str
    zk_proxies: list[TcpProxy] = field(default_factory=list)

    @classmethod
    def plan(cls, k: int, tag: str | None = None) -> DaemonNetns:
        """Names and addresses for daemon namespace ``k`` (< 32), unique to this process (``tag``: pid
        based; addresses in the block after the bookie namespaces' of :class:`BookieNetns`)."""
        t = plan_tag(tag)
        return cls(f"{t}-dns{k}", f"{t}w{k}", plan_address(64 + k, 9), plan_address(64 + k, 10))

    @property
    def peer(self) -> str:
        """The link's end inside the namespace."""
        return f"{self.link}n"

    def up(self, zk_servers: list[tuple[str, int]]) -> DaemonNetns:
        """Create the namespace, its link, the routes to the root namespace's loopback addresses and the
        ZooKeeper proxies.

        Raises:
            NetnsError: the first command the machine refused (the namespace is removed again).
        """
        ip("netns", "add", self.name)
        with undone_on(NetnsError, self.down):
            add_veth(self.link, self.name, self.root, self.inner)
            ip("link", "set", "lo", "up", ns=self.name)
            sysctl(f"net.ipv4.conf.{self.link}.route_localnet", "1")
            sysctl(f"net.ipv4.conf.{self.peer}.route_localnet", "1", ns=self.name)
            # 127/8 leaves through the link (127.0.0.1 stays the namespace's own)
            ip("route", "del", "local", "127.0.0.0/8", "dev", "lo", "table", "local", ns=self.name)
            ip("route", "replace", "local", "127.0.0.1", "dev", "lo", "table", "local", ns=self.name)
            ip("route", "add", "127.0.0.0/8", "via", self.root, "dev", self.peer, "src", self.inner, ns=self.name)
            self.zk_proxies = [TcpProxy(srv, listen_host=self.root).start() for srv in zk_servers]
        return self

    @property
    def zk_connect(self) -> str:
        """The connect string the daemon uses: its proxies on the link's root address."""
        return ",".join(p.address for p in self.zk_proxies)

    def exec_prefix(self) -> list[str]:
        """``ip netns exec <name>``: the prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def route_between(self, bookie_ns: BookieNetns) -> None:
        """Let this daemon reach a bookie in its own namespace (:class:`BookieNetns`): forwarding on the
        two root-side links only (``conf.<link>.forwarding=1``; ``ip_forward`` stays as it is) and a
        host route each way. Forwarded packets cross the ``forward`` hook of :class:`LinkFaults`.

        Raises:
            NetnsError: naming the refused command and its exact error.
        """
        sysctl(f"net.ipv4.conf.{self.link}.forwarding", "1")
        sysctl(f"net.ipv4.conf.{bookie_ns.data_link}.forwarding", "1")
        ip("route", "replace", f"{bookie_ns.data_ns}/32", "via", self.root, "dev", self.peer, ns=self.name)
        ip("route", "replace", f"{self.inner}/32", "via", bookie_ns.data_root, "dev", f"{bookie_ns.data_link}n",
           ns=bookie_ns.name)

    def down(self) -> None:
        """Remove the proxies, the link and the namespace (errors ignored: idempotent)."""
        remove_netns(self.name, (self.link,), self.zk_proxies)
        self.zk_proxies = []
