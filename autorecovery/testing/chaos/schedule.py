"""Fault kinds and the seeded fault schedule of a chaos campaign (PURE: no I/O).

A campaign injects faults one after another (never two at once: with E3/WQ3/AQ2 one bookie lost at a
time can never lose an acknowledged entry, so any loss the checks find is a bug, not bad luck). The
schedule is drawn from ``random.Random(seed)`` only, so the same seed, budget and cluster size give the
same list of faults; targets that only exist at run time (the current auditor) are resolved then and
named ``auditor`` in the schedule.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: kind → what it does (docs/chaos.md repeats this table).
KINDS: dict[str, str] = {
    "bookie_kill9": "SIGKILL a bookie, keep it down for the hold time (the auditor marks its ledgers, "
                    "workers copy), then start it again on the same data dir and address",
    "bookie_sigstop": "SIGSTOP a bookie until its ZooKeeper session expires (its znode leaves available/), "
                      "then SIGCONT",
    "bookie_restart": "SIGTERM a bookie (clean unregister) and start it again at once",
    "bookie_torn_tail": "SIGKILL a bookie, append the bytes of a torn, unacknowledged add to its current "
                        "entry log, start it again",
    "daemon_kill9": "SIGKILL an autorecovery daemon that is not the auditor, then start it again",
    "auditor_kill9": "SIGKILL the daemon holding the auditor election, then start it again",
    "daemon_sigstop": "SIGSTOP a daemon past its ZooKeeper session timeout (zkTimeout), then SIGCONT",
    "zk_conn_cut": "cut every connection of one daemon's ZooKeeper proxies (TcpProxy) for the hold time",
    "zk_leader_kill9": "SIGKILL the ZooKeeper ensemble's leader, hold, start it again; wait for the quorum",
    "zk_follower_kill9": "SIGKILL a ZooKeeper follower, hold, start it again; wait for the quorum",
    "zk_quorum_loss": "SIGKILL a majority of the ZooKeeper ensemble for longer than the bookies' and daemons' "
                      "session timeouts plus the hold, then start them again",
    "zk_rolling_restart": "SIGTERM and restart each ZooKeeper member in turn, waiting for the quorum each time",
    "partition_bookie_from_workers": "take down the data veth link of the bookie that runs in its own network "
                                     "namespace (it keeps its ZooKeeper link: still registered, unreachable "
                                     "by workers and clients) for the hold time, then bring it up",
    "partition_daemon_from_zk": "blackhole a daemon's ZooKeeper proxies (connections open, no byte forwarded) past "
                                "its session timeout, then restore (it keeps the bookies)",
    "one_way_loss": "drop 20-50 % of the packets, at random, in one direction of the namespaced bookie's data link "
                    "(nftables numgen), the other direction intact, for the hold time",
    "asymmetric_partition": "drop every packet of one direction between the namespaced bookie and the workers or "
                            "ZooKeeper (nftables), the reverse direction delivered, for the hold time",
    "slow_link": "cap the namespaced bookie's data link at 1 Mbit/s each way (tc tbf) while another bookie is down, "
                 "so workers copy reading from it over the slow link",
    "daemon_netns_cut_zk": "drop every packet between the daemon in its own network namespace and ZooKeeper "
                           "(nftables on its link, both directions) past its session timeout; its bookies stay reachable",
    "daemon_netns_cut_bookie": "drop every packet between the namespaced daemon and one bookie (nftables on the daemon's "
                               "link): that worker loses the bookie, every other process still reaches it",
    "slow_link_one_worker": "cap what one source bookie sends to the namespaced daemon at 1 Mbit/s (tc htb + u32 on "
                            "the daemon's link) while another bookie is down, so that worker copies over a slow link",
    "disk_full_during_copy": "fill the last bookie's size-limited tmpfs data dir to ENOSPC, SIGKILL another "
                             "bookie so workers copy while it is full, hold, free the space, restart the other",
    "bookie_sigstop_short": "SIGSTOP a bookie for less than half its ZooKeeper session timeout (it stays "
                            "registered, answers nothing), then SIGCONT",
    "bookie_rolling_restart": "SIGTERM and start every bookie in turn, each waited for until registered again",
    "ledger_dir_full": "stock bookies: fill the disk bookie's tmpfs ledger dir until the bookie turns read-only, "
                       "SIGKILL another bookie so workers copy while it is read-only, hold, free the space, wait "
                       "for it writable again, restart the other",
    "journal_dir_full": "stock bookies: fill the disk bookie's tmpfs journal dir to ENOSPC for the hold, free it; "
                        "a bookie that exited on it is started again (and counted lost meanwhile)",
    "bookie_empty_ledger_dir": "stock bookies: SIGKILL a bookie, empty its ledger dir (a replaced disk), start it: "
                               "it must be refused (cookie mismatch); then the operator's fix (bookieformat "
                               "-deleteCookie on its conf) and a start with empty dirs",
}

#: kinds only a stock (Java) bookie takes: its ledger and journal dirs, its cookie
STOCK_ONLY_KINDS = ("ledger_dir_full", "journal_dir_full", "bookie_empty_ledger_dir")

#: kinds the stock cluster cannot take, with the reason printed
STOCK_NOT_APPLICABLE: dict[str, str] = {
    "bookie_torn_tail": "it appends to our bookie's entry-log format; a stock bookie's journal replay is "
                        "exercised by bookie_kill9 during writes",
    "disk_full_during_copy": "on the stock cluster ledger_dir_full fills a Java bookie's ledger dir during copies",
}

#: kinds that need LocalCluster(zk_members=3)
ZK_ENSEMBLE_KINDS = ("zk_leader_kill9", "zk_follower_kill9", "zk_quorum_loss", "zk_rolling_restart")

#: kinds that need the namespaced bookie and nftables (``make chaos-deps``)
NETFILTER_KINDS = ("one_way_loss", "asymmetric_partition", "slow_link")

#: kinds that need the daemon in its own network namespace and nftables
DAEMON_NETNS_KINDS = ("daemon_netns_cut_zk", "daemon_netns_cut_bookie", "slow_link_one_worker")

#: network faults that start and kill no process (the second lane of a two-lane campaign): they make a
#: bookie or a daemon unreachable for seconds, never lose what a disk holds
LIGHT_KINDS = ("zk_conn_cut", "one_way_loss", "asymmetric_partition", "partition_bookie_from_workers",
               "partition_daemon_from_zk", "daemon_netns_cut_zk", "daemon_netns_cut_bookie")

#: kinds cheap enough for CI (seconds each)
CHEAP_KINDS = ("bookie_kill9", "bookie_sigstop", "bookie_restart", "bookie_torn_tail", "daemon_kill9",
               "auditor_kill9", "daemon_sigstop", "zk_conn_cut", "zk_leader_kill9", "zk_follower_kill9",
               "partition_bookie_from_workers", "partition_daemon_from_zk", *NETFILTER_KINDS, *DAEMON_NETNS_KINDS)

#: every kind this runner injects on our bookies (a full campaign's default)
ALL_KINDS = (*CHEAP_KINDS, "zk_quorum_loss", "zk_rolling_restart", "disk_full_during_copy")

#: the stock cluster's kinds (``bench/chaos.py --cluster stock``): every kind that applies to Java bookies
#: (the namespaced ones are refused at run time with the reason) and the Java-only kinds
STOCK_KINDS = (*(k for k in CHEAP_KINDS if k not in STOCK_NOT_APPLICABLE),
               "zk_quorum_loss", "zk_rolling_restart", "bookie_sigstop_short", "bookie_rolling_restart", *STOCK_ONLY_KINDS)

#: kinds asked for by issue 26 that this runner does not inject, each with the reason printed (none left)
NOT_AVAILABLE: dict[str, str] = {}


def usable_kinds(kinds: tuple[str, ...], zk_members: int,
                 unavailable: dict[str, str] | None = None, stock: bool = False) -> tuple[tuple[str, ...], dict[str, str]]:
    """(kinds this cluster can take, kind → reason for each one it cannot), the second including
    :data:`NOT_AVAILABLE` and ``unavailable`` (kinds the machine refused, with the exact error).
    ZooKeeper ensemble kinds need ``zk_members`` >= 3; ``stock`` (Java bookies) rules out
    :data:`STOCK_NOT_APPLICABLE`, otherwise :data:`STOCK_ONLY_KINDS` are ruled out."""
    skipped = {**NOT_AVAILABLE, **(unavailable or {})}
    for k in kinds:
        if stock and k in STOCK_NOT_APPLICABLE:
            skipped[k] = STOCK_NOT_APPLICABLE[k]
        elif not stock and k in STOCK_ONLY_KINDS:
            skipped[k] = "only stock Java bookies take it (bench/chaos.py --cluster stock)"
    if zk_members < 3:
        for k in kinds:
            if k in ZK_ENSEMBLE_KINDS:
                skipped[k] = f"the cluster runs {zk_members} ZooKeeper server; ensemble faults need --zk-members 3"
    return tuple(k for k in kinds if k not in skipped), skipped


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: ``seq`` from 1, ``kind`` (a key of :data:`KINDS`), ``target`` node index
    (bookie i / daemon i; ignored for ``auditor_kill9``), ``hold_s`` seconds the fault lasts at least."""

    seq: int
    kind: str
    target: int
    hold_s: float

    def describe(self) -> str:
        """One line: ``#seq kind target hold``, as printed in the schedule."""
        who = "auditor" if self.kind == "auditor_kill9" else f"node {self.target}"
        return f"#{self.seq:<4} {self.kind:<17} {who:<8} hold {self.hold_s:.1f}s"


def parse_kinds(spec: str) -> tuple[str, ...]:
    """``"a,b:3,c"`` → ``("a", "b", "b", "b", "c")``: a kind listed with ``:w`` is drawn ``w`` times as
    often (weights 1..100; a kind without one weighs 1, so unweighted lists draw as before).

    Raises:
        ValueError: naming the entry whose weight is not an integer in 1..100.
    """
    out: list[str] = []
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        kind, _, w = entry.partition(":")
        try:
            weight = int(w) if w else 1
        except ValueError:
            weight = 0
        if not 1 <= weight <= 100:
            raise ValueError(f"--kinds entry {entry!r}: the weight must be an integer in 1..100")
        out += [kind.strip()] * weight
    return tuple(out)


def schedule(seed: int, faults: int, nodes: int, kinds: tuple[str, ...] = CHEAP_KINDS, *,
             min_hold_s: float = 1.0, max_hold_s: float = 5.0) -> list[Fault]:
    """The campaign's faults in order, drawn from ``random.Random(seed)``: each a uniform choice from
    ``kinds`` (a kind repeated is weighted, see :func:`parse_kinds`), a target in ``range(nodes)`` and a
    hold uniform in ``[min_hold_s, max_hold_s]`` rounded to 0.1 s.

    Raises:
        ValueError: naming the offending argument (``faults`` < 1, ``nodes`` < 4, an unknown kind,
            hold bounds out of order).
    """
    if faults < 1:
        raise ValueError(f"--faults must be >= 1, got {faults}")
    if nodes < 4:
        raise ValueError(f"--bookies must be >= 4 (E3 ledgers need 3 bookies while one is down), got {nodes}")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown fault kind(s) {unknown or kinds!r}; known: {', '.join(KINDS)}")
    if not 0 < min_hold_s <= max_hold_s:
        raise ValueError(f"hold bounds must satisfy 0 < min <= max, got {min_hold_s}..{max_hold_s}")
    rng = random.Random(seed)
    return [Fault(n, rng.choice(kinds), rng.randrange(nodes), round(rng.uniform(min_hold_s, max_hold_s), 1))
            for n in range(1, faults + 1)]
