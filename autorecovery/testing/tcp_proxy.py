"""A TCP proxy whose connections can be cut and restored: drops a *connection* without ending the
ZooKeeper *session* behind it (test aid for issue 9's "watch lost on a connection blip").

Put it between a client and ZooKeeper (``ZkClient(proxy.address + chroot)``). :meth:`TcpProxy.cut`
closes every proxied connection and answers new ones by closing them at once, so the client sees a
connection loss (kazoo: SUSPENDED) and keeps retrying; :meth:`TcpProxy.restore` lets connections through
again, so the client reconnects to the same session if it is still alive on the server.
:meth:`TcpProxy.blackhole` is a silent partition instead (issue 26): connections stay open and new ones
are accepted, but no byte is forwarded either way, so the client learns of the loss only from its own
timeouts, as behind a link whose packets are dropped. Threads, not
asyncio: the proxy keeps working while the test's event loop waits.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Forward ``listen_host:<free port>`` to ``target``.

    Args:
        target: ``(host, port)`` to forward to.
        listen_host: loopback address to listen on.

    Attributes:
        address: ``host:port`` clients connect to. accepted: connections accepted so far.
    """

    def __init__(self, target: tuple[str, int], listen_host: str = "127.0.0.1") -> None:
        self.target = target
        self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind((listen_host, 0))
        self._srv.listen(64)
        self.address = f"{listen_host}:{self._srv.getsockname()[1]}"
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._blackhole = False
        self._closed = False
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True)

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def cut(self) -> None:
        """Close every proxied connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._cut = True
            socks, self._open = list(self._open), set()
        for s in socks:
            _close(s)

    def blackhole(self) -> None:
        """Forward nothing (either way) until :meth:`restore`; connections stay open, new ones are
        accepted and held without reaching the target."""
        with self._lock:
            self._blackhole = True

    def restore(self) -> None:
        """Let new connections and bytes through again."""
        with self._lock:
            self._cut = False
            self._blackhole = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._srv)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._srv.accept()
            except OSError:
                return
            with self._lock:
                refuse, hole = self._cut, self._blackhole
            if refuse:
                _close(client)
                continue
            if hole:  # a dropped SYN-ACK path: the client's connection goes nowhere
                with self._lock:
                    self._open.add(client)
                threading.Thread(target=self._pump, args=(client, None), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._cut:
                    _close(client)
                    _close(upstream)
                    continue
                self._open.update((client, upstream))
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket | None) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if dst is not None and not self._blackhole:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(src)
                if dst is not None:
                    self._open.discard(dst)
            _close(src)
            if dst is not None:
                _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
