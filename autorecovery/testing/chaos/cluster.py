"""The chaos campaign's cluster: a :class:`LocalCluster` with one bookie and one daemon in network
namespaces of their own and per-direction faults on their links (EDGE; root; issue 26).

- bookie :data:`NETNS_BOOKIE` runs in a :class:`BookieNetns` (its bookie id is the namespace's data
  address; it reaches ZooKeeper through proxies on its ZooKeeper link), with a :class:`LinkFaults` on each
  of its two links;
- daemon :data:`NETNS_DAEMON` runs in a :class:`DaemonNetns` (it reaches the loopback bookies and its
  ZooKeeper proxies over its own link; forwarding on the two root-side links lets it reach the namespaced
  bookie), with a :class:`LinkFaults` on its link.

:meth:`ChaosCluster.setup_namespaces` builds what the campaign's kinds need and returns, for what the
machine refused, the exact error per group of kinds; :meth:`ChaosCluster.teardown_namespaces` removes it
all (idempotent).
"""

from __future__ import annotations

from pathlib import Path

from autorecovery.testing.chaos.daemon_netns import DaemonNetns
from autorecovery.testing.chaos.netfilter import LinkFaults, NetfilterError, probe_nft, table_name
from autorecovery.testing.chaos.netns import BookieNetns, NetnsError
from autorecovery.testing.chaos.schedule import DAEMON_NETNS_KINDS, NETFILTER_KINDS
from autorecovery.testing.local_cluster import LocalCluster, ProcInfo

#: the bookie that runs in its own network namespace (the disk-full one is the last)
NETNS_BOOKIE = 0
#: the daemon that runs in its own network namespace (not node 0: the soak witness of the full campaign)
NETNS_DAEMON = 1

#: kinds that need the namespaced bookie
BOOKIE_NETNS_KINDS = ("partition_bookie_from_workers", *NETFILTER_KINDS)


def _tables(links: list[tuple[str, str, str, str]]) -> list[LinkFaults] | str:
    """One :class:`LinkFaults` (table created) per ``(link, peer, namespace, table suffix)``, or the exact
    reason nftables cannot be used (tables made before the failure are deleted again)."""
    why = probe_nft()
    if why is not None:
        return f"nftables unusable ({why}); `make chaos-deps` installs it"
    made: list[LinkFaults] = []
    try:
        for link, peer, ns, suffix in links:
            made.append(LinkFaults(link, peer, ns, table=f"{table_name()}{suffix}").up())
    except NetfilterError as exc:
        for lf in made:
            lf.down()
        return f"nftables refused a table: {exc}"
    return made


class ChaosCluster(LocalCluster):
    """A :class:`LocalCluster` with a namespaced bookie and daemon (see the module docstring)."""

    #: (bookie index, its namespace) or None
    netns: tuple[int, BookieNetns] | None = None
    #: (data link, ZooKeeper link) faults of the namespaced bookie, or None
    bookie_links: tuple[LinkFaults, LinkFaults] | None = None
    #: (daemon index, its namespace, its link's faults) or None
    daemon_ns: tuple[int, DaemonNetns, LinkFaults] | None = None

    def put_in_netns(self, i: int, ns: BookieNetns) -> None:
        """Run bookie ``i`` in namespace ``ns``: its address (bookie id) becomes the namespace's data address
        ``<ns.data_ns>:3181``; call before :meth:`start_bookies`."""
        self.netns = (i, ns)
        self.bookies[i] = ProcInfo(name=f"bookie-{i}", pid=0, host=ns.data_ns, port=3181,
                                   data_dir=str(self.base / f"bookie-{i}"), log=str(self.base / f"bookie-{i}.log"))

    def bookie_args(self, i: int) -> list[str]:
        """The bookie's command line; for the namespaced bookie, prefixed with ``ip netns exec <ns>`` and
        pointed at the namespace's ZooKeeper proxies."""
        args = super().bookie_args(i)
        if self.netns is None or self.netns[0] != i:
            return args
        ns = self.netns[1]
        args[args.index("--zk") + 1] = ns.zk_connect
        return ns.exec_prefix() + args

    def daemon_args(self, i: int, conf: Path) -> list[str]:
        """The daemon's command line; the namespaced daemon's is prefixed with ``ip netns exec <ns>``."""
        args = super().daemon_args(i, conf)
        if self.daemon_ns is None or self.daemon_ns[0] != i:
            return args
        return self.daemon_ns[1].exec_prefix() + args

    def setup_namespaces(self, kinds: tuple[str, ...], zk_servers: list[tuple[str, int]]) -> list[tuple[str, tuple[str, ...]]]:
        """Build the namespaces and link faults ``kinds`` need, before any bookie or daemon starts.
        Returns ``[(exact reason, kinds it rules out)]`` for what the machine refused (empty: all built).
        """
        refused: list[tuple[str, tuple[str, ...]]] = []
        if any(k in kinds for k in BOOKIE_NETNS_KINDS):
            try:
                self.put_in_netns(NETNS_BOOKIE, BookieNetns.plan(NETNS_BOOKIE).up(zk_servers))
            except NetnsError as exc:
                refused.append((f"cannot build a network namespace: {exc}", BOOKIE_NETNS_KINDS))
        if self.netns is not None and any(k in kinds for k in NETFILTER_KINDS):
            ns = self.netns[1]
            made = _tables([(ns.data_link, f"{ns.data_link}n", ns.name, "d"), (ns.zk_link, f"{ns.zk_link}n", ns.name, "z")])
            if isinstance(made, str):
                refused.append((made, NETFILTER_KINDS))
            else:
                self.bookie_links = (made[0], made[1])
        if any(k in kinds for k in DAEMON_NETNS_KINDS):
            try:
                dns = DaemonNetns.plan(NETNS_DAEMON).up(zk_servers)
                if self.netns is not None:
                    dns.route_between(self.netns[1])
            except NetnsError as exc:
                refused.append((f"cannot build the daemon's network namespace: {exc}", DAEMON_NETNS_KINDS))
            else:
                made = _tables([(dns.link, dns.peer, dns.name, "w")])
                if isinstance(made, str):
                    dns.down()
                    refused.append((made, DAEMON_NETNS_KINDS))
                else:
                    self.daemon_ns = (NETNS_DAEMON, dns, made[0])
        return refused

    def teardown_namespaces(self) -> None:
        """Delete the nftables tables, links, proxies and namespaces (after the processes stopped)."""
        for lf in self.bookie_links or ():
            lf.down()
        if self.daemon_ns is not None:
            self.daemon_ns[2].down()
            self.daemon_ns[1].down()
        if self.netns is not None:
            self.netns[1].down()
