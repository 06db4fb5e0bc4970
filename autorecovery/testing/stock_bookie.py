"""A stand-in for a bookie we cannot talk to: a TCP port that closes every connection, registered as
upstream bookies register (test aid for issue 9's "never false-mark"). Real stock bookies are in
:mod:`autorecovery.testing.upstream_cluster`."""

from __future__ import annotations

import socket
import threading

from autorecovery.proto import bookkeeper_formats_pb2 as fmt


class StockBookie:
    """A TCP port that speaks nothing (it accepts and closes), registered as a stock BookKeeper bookie
    does: ``available/<id>`` with a ``BookieServiceInfoFormat`` advertising ``protocol`` (by default
    one that is neither ours nor upstream's, so the bookie is "foreign")."""

    def __init__(self, protocol: str = "thrift-rpc") -> None:
        self.protocol = protocol
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.bookie_id = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.close()

    def registration(self) -> bytes:
        info = fmt.BookieServiceInfoFormat()
        ep = info.endpoints.add()
        ep.id, ep.host, ep.port, ep.protocol = "bookie", "127.0.0.1", int(self.bookie_id.rsplit(":", 1)[1]), self.protocol
        return info.SerializeToString()

    def close(self) -> None:
        self.sock.close()
