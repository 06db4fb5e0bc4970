"""Issue 26: the chaos campaign's own fault tools, for real: TcpProxy's silent partition (blackhole),
a 3-node ZooKeeper ensemble losing its leader, and a bookie's network namespace link cut and healed."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from autorecovery.testing.chaos.netns import BookieNetns, NetnsError
from autorecovery.testing.tcp_proxy import TcpProxy
from autorecovery.testing.zk_ensemble import ZooKeeperEnsemble

pytestmark = pytest.mark.integration


def echo_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=c: [c.sendall(d) for d in iter(lambda: c.recv(100), b"")],
                             daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def roundtrip(addr: str, timeout_s: float = 0.5) -> bool:
    h, p = addr.rsplit(":", 1)
    with socket.create_connection((h, int(p)), timeout=2) as s:
        s.settimeout(timeout_s)
        s.sendall(b"ping")
        try:
            return s.recv(4) == b"ping"
        except TimeoutError:
            return False


def test_blackhole_forwards_nothing_keeps_connections_and_restores():
    srv, port = echo_server()
    p = TcpProxy(("127.0.0.1", port)).start()
    try:
        assert roundtrip(p.address)
        h, pp = p.address.rsplit(":", 1)
        held = socket.create_connection((h, int(pp)), timeout=2)
        held.settimeout(0.5)
        p.blackhole()
        held.sendall(b"ping")
        with pytest.raises(TimeoutError):  # silent: no answer, no reset
            held.recv(4)
        assert not roundtrip(p.address)  # a new connection is accepted and goes nowhere
        p.restore()
        assert roundtrip(p.address)
        held.close()
    finally:
        p.close()
        srv.close()


def test_ensemble_elects_a_new_leader_and_takes_the_old_one_back(tmp_path):
    ens = ZooKeeperEnsemble(tmp_path / "zk").start()
    try:
        lead = ens.leader()
        assert lead is not None and len(ens.connect_string.split(",")) == 3
        ens.kill(lead)
        ens.wait_serving([m.myid for m in ens.members if m.myid != lead], 30)
        assert ens.leader() not in (None, lead)
        ens.spawn(lead)
        ens.wait_serving(None, 30)
        assert ens.member(lead).mode() == "follower"
    finally:
        ens.stop()


def test_bookie_namespace_data_link_cut_and_healed_keeps_the_zookeeper_link():
    srv, port = echo_server()
    ns = BookieNetns.plan(9)
    try:
        ns.up([("127.0.0.1", port)])
    except NetnsError as exc:
        srv.close()
        pytest.skip(f"network namespaces not permitted here: {exc}")
    inner = socket.socket()
    try:
        # a listener inside the namespace on the bookie's data address, via a helper process
        import subprocess
        import sys

        code = (f"import socket;s=socket.socket();s.bind(('{ns.data_ns}',3181));s.listen();print('up',flush=True);"
                "c,_=s.accept();c.sendall(c.recv(4));c2,_=s.accept();c2.sendall(c2.recv(4))")
        proc = subprocess.Popen([*ns.exec_prefix(), sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        assert roundtrip(f"{ns.data_ns}:3181")
        ns.cut()
        with pytest.raises(OSError):
            socket.create_connection((ns.data_ns, 3181), timeout=1).close()
        zk_side = subprocess.run([*ns.exec_prefix(), sys.executable, "-c", (
            f"import socket;h,p='{ns.zk_connect}'.rsplit(':',1);s=socket.create_connection((h,int(p)),2);"
            "s.sendall(b'ping');print(s.recv(4).decode())")], capture_output=True, text=True, timeout=20)
        assert zk_side.stdout.strip() == "ping", zk_side.stderr  # ZooKeeper's link still works
        ns.heal()
        assert roundtrip(f"{ns.data_ns}:3181", 2)
        proc.wait(10)
    finally:
        inner.close()
        ns.down()
        srv.close()


def test_cluster_json_names_the_ensemble_so_another_process_stops_it(tmp_path):
    from autorecovery.testing.local_cluster import LocalCluster, _alive

    c = LocalCluster(tmp_path / "c", bookies=4, zk_members=3)
    try:
        c.start_zookeeper()
        state = json.loads((tmp_path / "c" / "cluster.json").read_text())
        members = state["zk_ensemble"]
        assert [m["myid"] for m in members] == [1, 2, 3]
        assert ",".join(m["address"] for m in members) == c.zk_connect
        pids = [m["pid"] for m in members]
        assert all(p > 0 and _alive(p) for p in pids)
        other = LocalCluster.load(tmp_path / "c")  # a handle of another process
        assert {k: v for k, v in other.status().items() if k.startswith("zookeeper-")} == {
            "zookeeper-1": True, "zookeeper-2": True, "zookeeper-3": True}
        assert {"zookeeper-1", "zookeeper-2", "zookeeper-3"} <= set(other.down())
        assert not any(_alive(p) for p in pids)
    finally:
        c.down()
