"""The chaos injector's apply-hold-heal helpers (:mod:`autorecovery.testing.chaos.faults`): each heals
however the held block ends, on real processes and a real proxy."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from typing import ClassVar

import pytest

from autorecovery.testing.chaos.faults import Injector, applied, proxies_faulted, stopped
from autorecovery.testing.chaos.schedule import Fault
from autorecovery.testing.tcp_proxy import TcpProxy
from autorecovery.zk.paths import Paths


async def test_applied_heals_after_the_block_even_when_it_raises():
    done: list[str] = []
    with pytest.raises(RuntimeError, match="held"):
        async with applied(lambda: done.append("apply"), lambda: done.append("heal")):
            done.append("hold")
            raise RuntimeError("held")
    assert done == ["apply", "hold", "heal"]


async def test_applied_heals_nothing_when_the_apply_is_refused():
    healed: list[str] = []

    def refuse() -> None:
        raise OSError("refused")

    with pytest.raises(OSError):
        async with applied(refuse, lambda: healed.append("heal")):
            pass
    assert healed == []


def test_stopped_holds_a_process_group_stopped_and_continues_it():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        with pytest.raises(KeyError), stopped(proc.pid):
            _, status = os.waitpid(proc.pid, os.WUNTRACED)  # returns once the child is stopped
            assert os.WIFSTOPPED(status)
            raise KeyError("fault ends")
        _, status = os.waitpid(proc.pid, os.WCONTINUED)
        assert os.WIFCONTINUED(status)
    finally:
        proc.kill()
        proc.wait()


def _connect(proxy: TcpProxy) -> socket.socket:
    host, port = proxy.address.split(":")
    c = socket.create_connection((host, int(port)), timeout=5)
    c.settimeout(5)
    return c


def test_proxies_faulted_cuts_for_the_block_and_restores_after_a_raise():
    target = socket.create_server(("127.0.0.1", 0))
    target.settimeout(5)
    proxy = TcpProxy(target.getsockname()).start()
    try:
        with pytest.raises(ValueError), proxies_faulted([proxy], TcpProxy.cut):
            with _connect(proxy) as c:
                assert c.recv(1) == b""  # a cut proxy closes a new connection at once
            raise ValueError("fault ends")
        with _connect(proxy) as c:
            c.sendall(b"x")
            conn, _ = target.accept()
            with conn:
                conn.settimeout(5)
                assert conn.recv(1) == b"x"  # restored: bytes reach the target again
    finally:
        proxy.close()
        target.close()


async def test_applied_runs_apply_and_heal_off_the_event_loop():
    turns = 0

    async def ticker() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0.01)
            turns += 1

    t = asyncio.ensure_future(ticker())
    async with applied(lambda: time.sleep(0.2), lambda: time.sleep(0.2)):  # a blocking command's stand-in
        pass
    t.cancel()
    assert turns > 5


class RecordingLink:
    """A :class:`~autorecovery.testing.chaos.netfilter.LinkFaults` stand-in that records its commands."""

    def __init__(self, calls: list[tuple], link: str = "veth0") -> None:
        self.calls, self.link = calls, link

    def drop(self, direction: str, percent: int = 100, peer: str | None = None) -> None:
        self.calls.append(("drop", direction, percent, peer))

    def clear_drops(self) -> None:
        self.calls.append(("clear_drops",))


class OneBookie:
    bookies: ClassVar[dict] = {0: type("Info", (), {"host": "10.1.0.2"})(), 1: type("Info", (), {"host": "10.1.0.10"})()}
    bookie_session_timeout_ms = 4000

    def bookie_id(self, i: int) -> str:
        return f"{self.bookies[i].host}:3181"


def _injector() -> Injector:
    return Injector(cluster=OneBookie(), zk=None, paths=Paths("/ledgers"), proxies={},  # type: ignore[arg-type]
                    daemon_session_s=0.0, on_bookie_lost=lambda b, t: None)


async def test_one_way_loss_drops_one_direction_then_clears_it():
    calls: list[tuple] = []
    inj = _injector()
    inj.netns = (0, None)  # type: ignore[assignment]
    inj.link_faults = (RecordingLink(calls), RecordingLink(calls, "veth1"))  # type: ignore[assignment]
    said = await inj.apply(Fault(1, "one_way_loss", target=1, hold_s=0.0))
    assert calls == [("drop", "from", 30, None), ("clear_drops",)]
    assert said.startswith("30% of the packets from bookie 10.1.0.2:3181 dropped at random (data link veth0")


async def test_a_daemon_cut_from_one_bookie_drops_both_ways_then_clears_once():
    calls: list[tuple] = []
    inj = _injector()
    inj.daemon_ns = (2, type("Ns", (), {"link": "w2", "root": "10.1.2.9"})(), RecordingLink(calls))  # type: ignore[assignment]
    said = await inj.apply(Fault(1, "daemon_netns_cut_bookie", target=1, hold_s=-2.0))  # held 0 s (hold + 2)
    assert calls == [("drop", "to", 100, "10.1.0.10"), ("drop", "from", 100, "10.1.0.10"), ("clear_drops",)]
    assert said.startswith("daemon 2 (own namespace) cut from bookie 10.1.0.10:3181 only")


class ElectionCluster:
    """Five daemons and a scripted auditor election: the first vote of :attr:`order` whose daemon is
    alive is the auditor; a daemon cut from ZooKeeper loses its session, so its vote goes to the back."""

    def __init__(self, proxies: dict[int, list[TcpProxy]]) -> None:
        self.proxies = proxies
        self.killed: list[int] = []
        self.order = [0, 2, 3, 1, 4]

    def stop_daemon(self, i: int, sig: int) -> None:
        self.killed.append(i)

    def auditor(self) -> int:
        for i, ps in self.proxies.items():
            if any(p._blackhole for p in ps) and self.order[-1] != i:
                self.order.remove(i)
                self.order.append(i)
        return next(i for i in self.order if i not in self.killed)


async def test_auditor_kill9_never_kills_the_witness_but_expires_its_session_first():
    target = socket.create_server(("127.0.0.1", 0))
    proxy = TcpProxy(target.getsockname()).start()
    try:
        cluster = ElectionCluster({0: [proxy]})
        inj = Injector(cluster=cluster, zk=None, paths=Paths("/ledgers"), proxies={0: [proxy]},  # type: ignore[arg-type]
                       daemon_session_s=0.0, on_bookie_lost=lambda b, t: None)
        inj.witness = 0
        restarted: list[int] = []

        async def auditor_index() -> int:
            return cluster.auditor()

        async def restart(i: int) -> None:
            restarted.append(i)

        inj.auditor_index = auditor_index  # type: ignore[method-assign]
        inj._restart_daemon = restart  # type: ignore[method-assign]
        said = await inj.apply(Fault(1, "auditor_kill9", target=0, hold_s=0.0))
        assert cluster.killed == [2] and restarted == [2]  # the witness (0) was never killed
        assert not proxy._blackhole  # its ZooKeeper link restored
        assert said.startswith("the auditor was the witness (daemon 0): its session expired")
        assert "auditor daemon 2 killed (SIGKILL)" in said
    finally:
        proxy.close()
        target.close()
