"""Issue 26: the per-direction faults, for real on a network namespace's veth link (root; nftables from
``make chaos-deps``): a one-way drop stops one direction and delivers the other, random loss drops a
share of the packets, and the tbf slow link narrows a transfer; a daemon's own namespace reaches the root
namespace's loopback services and is cut or slowed per peer; each heals to a clean link."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time

import pytest

from autorecovery.testing.chaos.netfilter import SLOW_RATE_KBIT, LinkFaults, NetfilterError, probe_nft
from autorecovery.testing.chaos.daemon_netns import DaemonNetns
from autorecovery.testing.chaos.netns import BookieNetns, NetnsError

pytestmark = pytest.mark.integration

#: inside the namespace: a UDP echo that counts what it received (``count`` asks, ``reset`` zeroes) and a
#: TCP server that sends 200,000 bytes to whoever connects
HELPER = """
import socket, sys, threading
addr = sys.argv[1]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((addr, 9000))
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); t.bind((addr, 9001)); t.listen()
def bulk():
    while True:
        c, _ = t.accept()
        c.sendall(b"x" * 200000); c.close()
threading.Thread(target=bulk, daemon=True).start()
print("up", flush=True)
n = 0
while True:
    d, a = u.recvfrom(100)
    if d == b"count":
        u.sendto(str(n).encode(), a)
    elif d == b"reset":
        n = 0; u.sendto(b"0", a)
    else:
        n += 1; u.sendto(d, a)
"""


@pytest.fixture
def link():
    why = probe_nft()
    if why is not None:
        pytest.skip(f"nftables unusable here (make chaos-deps): {why}")
    ns = BookieNetns.plan(11)
    try:
        ns.up([])
    except NetnsError as exc:
        pytest.skip(f"network namespaces not permitted here: {exc}")
    lf = LinkFaults(ns.data_link, f"{ns.data_link}n", ns.name, table=f"t{ns.data_link}")
    proc = None
    try:
        lf.up()
        proc = subprocess.Popen([*ns.exec_prefix(), sys.executable, "-c", HELPER, ns.data_ns], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        yield ns, lf
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(10)
        lf.down()
        ns.down()


def udp(ns: BookieNetns, msgs: list[bytes], wait_s: float = 0.5) -> int:
    """Send ``msgs`` to the helper; how many echoes came back within ``wait_s`` after the last."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for m in msgs:
            with contextlib.suppress(PermissionError):  # a local sender sees the output hook's drop as EPERM (TCP retransmits)
                s.sendto(m, (ns.data_ns, 9000))
            time.sleep(0.001)  # pacing datagrams, not a synchronisation
        s.settimeout(wait_s)
        got = 0
        try:
            while got < len(msgs):
                s.recvfrom(100)
                got += 1
        except TimeoutError:
            pass
        return got


def ask(ns: BookieNetns, what: bytes) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(what, (ns.data_ns, 9000))
        return int(s.recvfrom(100)[0])


def bulk_s(ns: BookieNetns) -> float:
    t0 = time.monotonic()
    with socket.create_connection((ns.data_ns, 9001), timeout=10) as c:
        c.settimeout(10)
        n = 0
        while chunk := c.recv(65536):
            n += len(chunk)
    assert n == 200_000
    return time.monotonic() - t0


def test_one_way_drops_stop_one_direction_and_deliver_the_other(link):
    ns, lf = link
    ask(ns, b"reset")
    assert udp(ns, [b"p"] * 20) == 20 and ask(ns, b"count") == 20  # clean link
    ask(ns, b"reset")
    lf.drop("to")
    assert udp(ns, [b"p"] * 20) == 0
    lf.clear()
    assert ask(ns, b"count") == 0  # nothing reached the bookie's side
    lf.drop("from")
    assert udp(ns, [b"p"] * 20) == 0  # no echo came back ...
    lf.clear()
    assert ask(ns, b"count") == 20  # ... though every datagram arrived: one-way
    ask(ns, b"reset")
    assert udp(ns, [b"p"] * 20) == 20


def test_random_loss_drops_a_share_of_one_direction(link):
    ns, lf = link
    ask(ns, b"reset")
    lf.drop("to", 40)
    echoed = udp(ns, [b"p"] * 300)
    lf.clear()
    arrived = ask(ns, b"count")
    assert echoed == arrived  # the reverse direction lost nothing
    assert 120 <= arrived <= 240, arrived  # 60 % expected (binomial sd 8.5)
    with pytest.raises(ValueError, match="percent"):
        lf.drop("to", 0)
    with pytest.raises(ValueError, match="direction"):
        lf.drop("sideways")


def test_slow_link_narrows_a_transfer_and_heals(link):
    ns, lf = link
    assert bulk_s(ns) < 1.0
    lf.slow()
    slow = bulk_s(ns)
    lf.clear()
    # 200,000 bytes at 1,000 kbit/s take 1.6 s less the bucket's 16 kB
    assert slow >= 0.8 * 200_000 * 8 / (SLOW_RATE_KBIT * 1000) - 0.2, slow
    assert bulk_s(ns) < 1.0
    lf.clear()  # idempotent


def test_a_refused_command_names_itself_and_its_error(link):
    ns, _lf = link
    bad = LinkFaults("no-such-link0", "no-such-link0n", ns.name, table=f"t{ns.data_link}")
    with pytest.raises(NetfilterError, match=r"tc qdisc replace dev no-such-link0 .*exit"):
        bad.slow()


def test_a_daemon_namespace_reaches_loopback_bookies_and_is_cut_per_peer():
    """The namespaced daemon reaches a root-namespace loopback service (a bookie at 127.0.0.1x) and its
    ZooKeeper proxy over its own link; a cut from one peer leaves the other reachable; slow_from narrows
    only that peer; everything heals."""
    why = probe_nft()
    if why is not None:
        pytest.skip(f"nftables unusable here (make chaos-deps): {why}")
    bookie = socket.socket()
    bookie.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    bookie.bind(("127.0.0.19", 0))
    bookie.listen()
    zk = socket.socket()
    zk.bind(("127.0.0.1", 0))
    zk.listen()
    stop = False

    def serve(s: socket.socket, payload: bytes) -> None:
        while not stop:
            try:
                c, _ = s.accept()
            except OSError:
                return
            with c:
                c.sendall(payload)

    for s, payload in ((bookie, b"b" * 200_000), (zk, b"zk")):
        threading.Thread(target=serve, args=(s, payload), daemon=True).start()
    try:
        d = DaemonNetns.plan(5).up([("127.0.0.1", zk.getsockname()[1])])
    except NetnsError as exc:
        bookie.close()
        zk.close()
        pytest.skip(f"network namespaces not permitted here: {exc}")
    lf = LinkFaults(d.link, d.peer, d.name, table=f"t{d.link}")
    code = ("import socket,sys,time\nt=time.monotonic()\ntry:\n c=socket.create_connection((sys.argv[1],int(sys.argv[2])),2)\n"
            " c.settimeout(10);n=0\n while (b:=c.recv(65536)): n+=len(b)\n print(n, round(time.monotonic()-t,2))\n"
            "except OSError as e: print('cut', type(e).__name__)")

    def fetch(host: str, port: int) -> str:
        return subprocess.run([*d.exec_prefix(), sys.executable, "-c", code, host, str(port)], capture_output=True,
                              text=True, timeout=60).stdout.strip()

    zh, zp = d.zk_connect.rsplit(":", 1)
    bport = bookie.getsockname()[1]
    try:
        lf.up()
        assert fetch("127.0.0.19", bport).startswith("200000 ") and fetch(zh, int(zp)).startswith("2 ")
        lf.drop("to", 100, d.root)
        lf.drop("from", 100, d.root)
        assert fetch(zh, int(zp)) == "cut TimeoutError" and fetch("127.0.0.19", bport).startswith("200000 ")
        lf.clear_drops()
        lf.drop("to", 100, "127.0.0.19")
        lf.drop("from", 100, "127.0.0.19")
        assert fetch("127.0.0.19", bport) == "cut TimeoutError" and fetch(zh, int(zp)).startswith("2 ")
        lf.clear_drops()
        lf.slow_from("127.0.0.19")
        slow = float(fetch("127.0.0.19", bport).split()[1])
        assert slow >= 0.8 * 200_000 * 8 / (SLOW_RATE_KBIT * 1000) - 0.2, slow  # 1.6 s at 1 Mbit/s
        assert fetch(zh, int(zp)).startswith("2 ")
        lf.clear()
        assert float(fetch("127.0.0.19", bport).split()[1]) < 1.0
        with pytest.raises(ValueError, match="IPv4"):
            lf.drop("to", 100, "bookie-1")
    finally:
        stop = True
        lf.down()
        d.down()
        bookie.close()
        zk.close()
