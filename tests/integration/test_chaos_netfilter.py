"""Issue 26: the per-direction faults, for real on a network namespace's veth link (root; nftables from
``make chaos-deps``): a one-way drop stops one direction and delivers the other, random loss drops a
share of the packets, and the tbf slow link narrows a transfer; each heals to a clean link."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from autorecovery.testing.chaos_netfilter import SLOW_RATE_KBIT, LinkFaults, NetfilterError, probe_nft
from autorecovery.testing.chaos_netns import BookieNetns, NetnsError

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
        proc = subprocess.Popen(ns.exec_prefix() + [sys.executable, "-c", HELPER, ns.data_ns], stdout=subprocess.PIPE, text=True)
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
            try:
                s.sendto(m, (ns.data_ns, 9000))
            except PermissionError:  # a local sender sees the output hook's drop as EPERM (TCP retransmits)
                pass
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
    ns, lf = link
    bad = LinkFaults("no-such-link0", "no-such-link0n", ns.name, table=f"t{ns.data_link}")
    with pytest.raises(NetfilterError, match="tc qdisc replace dev no-such-link0 .*exit"):
        bad.slow()
