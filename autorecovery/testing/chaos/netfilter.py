"""Per-direction faults on a namespaced bookie's veth links: nftables drop rules and a ``tc tbf`` rate
limit (EDGE; root; issue 26's one-way loss, asymmetric partitions and slow link).

What this kernel offers (probed on the campaign machine, Linux 6.18, Debian 12 userland): nf_tables
works once Debian's ``nftables`` package is installed (``make chaos-deps``); ``tc`` has the ``tbf``,
``htb`` and ``pfifo`` qdiscs and the ``u32`` classifier, but no ``netem`` qdisc (``Error: Specified
qdisc kind is unknown.``) and no ``gact`` action (``Error: Failed to load TC action module.``). So:

- loss and drops per direction are nftables rules in one table of the root namespace (``inet
  chaos<pid>``), matched on the root side's veth end: packets *to* the bookie leave the root namespace
  through it (hook ``output``, ``oifname``), packets *from* the bookie arrive through it (hook ``input``,
  ``iifname``); the same rule goes into the ``forward`` hook for packets between two namespaces. Random loss is ``numgen random mod 100 < percent drop`` (uniform per packet, not
  bursty); a one-way partition is the same rule at 100 %. TCP (all the campaign's traffic: gRPC,
  ZooKeeper) sees a dropped packet as lost and retransmits, nothing is refused; a local *UDP* sender
  gets EPERM from a drop in the output hook;
- a slow link is a token bucket (``tc qdisc replace ... root tbf rate R burst B latency L``) on the
  egress of *both* veth ends (the bookie's end inside its namespace): bandwidth capped at ``R`` each
  way, a queue of at most ``L`` ms, packets beyond it dropped. There is no added constant delay
  (netem's ``delay``): a slow link here is a narrow one.

Every daemon and client shares the root namespace's address on the link, so a rule cuts or slows the
bookie for *every* worker and client at once, not for one worker (per-worker rules would need each
daemon in its own namespace, see docs/chaos.md). Every command's failure raises
:class:`NetfilterError` with the command and its exact stderr; the runner prints it as the skip reason.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import subprocess

from autorecovery.testing.chaos.undo import undone_on

#: the slow link: rate (kbit/s each way), bucket (bytes), longest queueing (ms)
SLOW_RATE_KBIT = 1000
SLOW_BURST_BYTES = 16_000
SLOW_LATENCY_MS = 400


class NetfilterError(RuntimeError):
    """An ``nft`` or ``tc`` command failed; the message is the command and its exact error."""


def run(cmd: list[str], stdin: str | None = None) -> None:
    """Run ``cmd`` (``nft``/``tc``/``ip netns exec``), 30 s bound.

    Raises:
        NetfilterError: naming the command and its exit status and stderr (or the OSError).
    """
    try:
        r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetfilterError(f"{' '.join(cmd)}: {exc}") from None
    if r.returncode != 0:
        raise NetfilterError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")


def table_name() -> str:
    """The nftables table of this process (``chaos<pid>``, family ``inet``)."""
    return f"chaos{os.getpid()}"


def probe_nft() -> str | None:
    """None when nftables works here (a throw-away table is created and deleted), else the exact error."""
    t = f"{table_name()}probe"
    try:
        run(["nft", "add", "table", "inet", t])
        run(["nft", "delete", "table", "inet", t])
    except NetfilterError as exc:
        return str(exc)
    return None


class LinkFaults:
    """Per-direction faults on one veth link: ``link`` is its root-side end, ``peer`` its end inside
    namespace ``ns``. :meth:`up` creates the (empty) nftables table; :meth:`clear` removes every rule
    and qdisc this object added; :meth:`down` deletes the table. Rules from two faults never overlap
    (the campaign's second lane runs the drops, its first lane the rate limit: :meth:`clear_drops` and
:meth:`clear_slow` remove one kind each); :meth:`clear` is idempotent.
    """

    def __init__(self, link: str, peer: str, ns: str, table: str | None = None) -> None:
        self.link, self.peer, self.ns = link, peer, ns
        self.table = table or table_name()
        self._slowed = False

    def up(self) -> LinkFaults:
        """Create table ``inet <table>`` with ``output``, ``input`` and ``forward`` filter chains (policy
        accept; forwarded packets cross between two namespaces, e.g. the namespaced daemon and bookie).

        Raises:
            NetfilterError: nftables missing or refused (the exact error).
        """
        run(["nft", "-f", "-"], stdin=(
            f"table inet {self.table} {{\n"
            f"  chain out {{ type filter hook output priority 0; policy accept; }}\n"
            f"  chain in {{ type filter hook input priority 0; policy accept; }}\n"
            f"  chain fw {{ type filter hook forward priority 0; policy accept; }}\n"
            f"}}\n"))
        return self

    def drop(self, direction: str, percent: int = 100, peer: str | None = None) -> None:
        """Drop ``percent`` % of the packets going ``direction`` (``"to"`` the namespace's process or
        ``"from"`` it) on this link, chosen at random per packet; with ``peer`` (an IPv4 address of the
        root namespace: a bookie, a proxy) only the packets exchanged with that address.

        Raises:
            ValueError: ``direction`` not to/from, ``percent`` outside 1..100 or ``peer`` not an IPv4 address.
            NetfilterError: the rule was refused.
        """
        if direction not in ("to", "from"):
            raise ValueError(f"direction must be 'to' or 'from', got {direction!r}")
        if not 1 <= percent <= 100:
            raise ValueError(f"percent must be in 1..100, got {percent}")
        chain, match = ("out", f"oifname {self.link}") if direction == "to" else ("in", f"iifname {self.link}")
        if peer is not None:
            try:
                ipaddress.IPv4Address(peer)
            except ValueError:
                raise ValueError(f"peer must be an IPv4 address, got {peer!r}") from None
            match += f" ip {'saddr' if direction == 'to' else 'daddr'} {peer}"
        verdict = "drop" if percent == 100 else f"numgen random mod 100 < {percent} drop"
        # local traffic (root namespace ↔ this namespace) and forwarded traffic (another namespace ↔ this one)
        for c in (chain, "fw"):
            run(["nft", "add", "rule", "inet", self.table, c, *match.split(), *verdict.split()])

    def slow(self, rate_kbit: int = SLOW_RATE_KBIT, burst_bytes: int = SLOW_BURST_BYTES,
             latency_ms: int = SLOW_LATENCY_MS) -> None:
        """Cap both directions at ``rate_kbit`` kbit/s with a ``tbf`` qdisc on each veth end's egress.

        Raises:
            NetfilterError: ``tc`` refused (the qdisc already added on one end is removed again).
        """
        spec = ["root", "tbf", "rate", f"{rate_kbit}kbit", "burst", str(burst_bytes), "latency", f"{latency_ms}ms"]
        self._slowed = True
        with undone_on(NetfilterError, self.clear_slow):
            run(["tc", "qdisc", "replace", "dev", self.link, *spec])
            run(["ip", "netns", "exec", self.ns, "tc", "qdisc", "replace", "dev", self.peer, *spec])

    def slow_from(self, peer: str, rate_kbit: int = SLOW_RATE_KBIT) -> None:
        """Cap what ``peer`` (an IPv4 address of the root namespace, e.g. a source bookie) sends over
        this link to ``rate_kbit`` kbit/s, everything else unchanged: an ``htb`` qdisc on the root
        side's egress, a ``u32`` filter classifying ``ip src <peer>`` into a narrow class (the other
        direction is not limited: requests are small, the copy's data flows from the peer).

        Raises:
            ValueError: ``peer`` not an IPv4 address.
            NetfilterError: ``tc`` refused (what was added is removed again).
        """
        try:
            ipaddress.IPv4Address(peer)
        except ValueError:
            raise ValueError(f"peer must be an IPv4 address, got {peer!r}") from None
        self._slowed = True
        dev = ["dev", self.link]
        with undone_on(NetfilterError, self.clear_slow):
            run(["tc", "qdisc", "replace", *dev, "root", "handle", "1:", "htb", "default", "10"])
            run(["tc", "class", "add", *dev, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit", "quantum", "60000"])
            run(["tc", "class", "add", *dev, "parent", "1:", "classid", "1:20", "htb", "rate", f"{rate_kbit}kbit",
                 "ceil", f"{rate_kbit}kbit", "quantum", "1514"])
            run(["tc", "filter", "add", *dev, "parent", "1:", "protocol", "ip", "u32", "match", "ip", "src", f"{peer}/32",
                 "classid", "1:20"])

    def clear(self) -> None:
        """Remove every drop rule and the rate limit (idempotent).

        Raises:
            NetfilterError: a flush was refused (a qdisc that is already gone is not an error).
        """
        self.clear_drops()
        self.clear_slow()

    def clear_drops(self) -> None:
        """Remove the drop rules only (the rate limit stays).

        Raises:
            NetfilterError: a flush was refused.
        """
        for chain in ("out", "in", "fw"):
            run(["nft", "flush", "chain", "inet", self.table, chain])

    def clear_slow(self) -> None:
        """Remove the rate limit only (the drop rules stay); nothing to do when none was added.

        Raises:
            NetfilterError: ``tc`` refused (a qdisc already gone is not an error).
        """
        if not self._slowed:
            return
        for cmd in (["tc", "qdisc", "del", "dev", self.link, "root"],
                    ["ip", "netns", "exec", self.ns, "tc", "qdisc", "del", "dev", self.peer, "root"]):
            try:
                run(cmd)
            except NetfilterError as exc:
                if "No such file or directory" not in str(exc) and "Cannot delete qdisc with handle of zero" not in str(exc):
                    raise
        self._slowed = False

    def down(self) -> None:
        """Delete the table (errors ignored: idempotent; the qdiscs go with the links)."""
        with contextlib.suppress(NetfilterError):
            run(["nft", "delete", "table", "inet", self.table])
