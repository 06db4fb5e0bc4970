"""Why no ZooKeeper session could be made: one probe per server of a connect string (EDGE: sockets).

kazoo retries a connect string forever and, when :meth:`autorecovery.zk.bridge.ZkClient.start` gives up,
only says ``Connection time-out`` whatever happened (issue 28). When the start fails, each server
``host:port`` is probed once, concurrently, with the steps a session needs:

1. ``getaddrinfo(host, port)``: failure -> ``cannot resolve host``;
2. a TCP connect: ``connection refused``, ``timed out`` (no answer to the SYN) or ``unreachable``;
3. with TLS to ZooKeeper configured, the TLS handshake: ``TLS handshake failed: <reason>``;
4. a ZooKeeper ``ConnectRequest`` (jute: protocolVersion 0, lastZxidSeen 0, timeOut, sessionId 0,
   a 16-byte zero password, readOnly false; ZooKeeper's ``ClientCnxnSocket`` framing: a 4-byte big-endian
   length first): no answer within the probe timeout -> ``timed out`` (something accepts the connection
   but is not answering as ZooKeeper: a black hole, a wrong port, a TLS server, an overloaded server),
   the connection closed without an answer -> ``closed the connection`` (a server that is not serving,
   e.g. without quorum, or one that expects TLS). A session the probe makes is closed at once
   (``closeSession``, op code -11), so the probe leaves nothing on the server.

:func:`explain` turns the probes into the one line the commands print, naming the cause per server and
what to check.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
from dataclasses import dataclass

#: causes, in the order :func:`explain` reports them
RESOLVE, REFUSED, TIMED_OUT, UNREACHABLE, TLS, CLOSED, ANSWERED = (
    "cannot resolve host", "connection refused", "timed out", "unreachable", "TLS handshake failed",
    "closed the connection", "answered")

_CHECK = {
    RESOLVE: "the host names in the connect string (--zk, zkServers or metadataServiceUri; for a local "
             "cluster the one `autorecovery local-cluster status` shows)",
    REFUSED: "that ZooKeeper runs and listens on that port (its clientPort; for a local cluster "
             "`autorecovery local-cluster status`)",
    TIMED_OUT: "that the address is ZooKeeper's client port and reachable (firewall), and whether the "
               "server expects TLS (zookeeper.client.secure)",
    UNREACHABLE: "the network route to that address",
    TLS: "the zookeeper.ssl.* trust store and key store, and that the server's secureClientPort is the "
         "port in the connect string",
    CLOSED: "that the server is serving (quorum up: `echo srvr | nc host port`) and whether it expects TLS",
}


@dataclass(frozen=True)
class ServerProbe:
    """The outcome for one server: ``server`` as written (``host:port``), ``cause`` (one of the
    constants above) and ``detail`` (the OS or TLS reason, may be empty)."""

    server: str
    cause: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.server}: {self.cause}" + (f" ({self.detail})" if self.detail else "")


def servers(hosts: str) -> list[tuple[str, str, int]]:
    """``(as written, host, port)`` of each server of a connect string ``h1:2181,[::1]:2181/chroot``
    (kazoo's default port 2181 when none is given)."""
    out = []
    for item in hosts.split("/", 1)[0].split(","):
        hp = item.strip()
        if not hp:
            continue
        host, sep, port = hp.rpartition(":")
        if not sep or not port.isdigit() or (host.count(":") and not host.startswith("[")):
            host, port = hp, "2181"
        out.append((hp, host.strip("[]"), int(port)))
    return out


def _connect_request(session_timeout_ms: int) -> bytes:
    body = struct.pack(">iqiqi16s?", 0, 0, session_timeout_ms, 0, 16, b"\0" * 16, False)
    return struct.pack(">i", len(body)) + body


async def _drain_to_eof(reader: asyncio.StreamReader, limit: int = 65536) -> None:
    """Read until the server closes (at most ``limit`` bytes: the memory a probe holds stays bounded)."""
    seen = 0
    while seen < limit:
        chunk = await reader.read(4096)
        if not chunk:
            return
        seen += len(chunk)


async def probe_server(written: str, host: str, port: int, timeout_s: float = 3.0,
                       tls: ssl.SSLContext | None = None) -> ServerProbe:
    """Probe one server (see the module docstring); never raises."""
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout_s)
    except (TimeoutError, OSError) as exc:
        return ServerProbe(written, RESOLVE, getattr(exc, "strerror", None) or "no answer from the resolver")
    family, _, _, _, addr = infos[0]
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(str(addr[0]), port, family=family), timeout_s)
    except ConnectionRefusedError:
        return ServerProbe(written, REFUSED)
    except TimeoutError:
        return ServerProbe(written, TIMED_OUT, f"no TCP answer within {timeout_s:g} s")
    except OSError as exc:
        return ServerProbe(written, UNREACHABLE, exc.strerror or str(exc))
    try:
        if tls is not None:
            try:
                await asyncio.wait_for(writer.start_tls(tls, server_hostname=host), timeout_s)
            except (TimeoutError, ssl.SSLError, OSError) as exc:
                return ServerProbe(written, TLS, str(exc) or type(exc).__name__)
        writer.write(_connect_request(int(timeout_s * 1000)))
        try:
            await writer.drain()
            head = await asyncio.wait_for(reader.readexactly(4), timeout_s)
        except TimeoutError:
            return ServerProbe(written, TIMED_OUT,
                               f"the TCP connection was accepted but no ZooKeeper answer came within {timeout_s:g} s")
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            return ServerProbe(written, CLOSED, "no ZooKeeper answer")
        (length,) = struct.unpack(">i", head)
        if 0 < length <= 4096:
            try:
                body = await asyncio.wait_for(reader.readexactly(length), timeout_s)
                if len(body) >= 16:  # protocolVersion, timeOut, sessionId: close the session at once,
                    writer.write(struct.pack(">iii", 8, 1, -11))  # and wait for the server to end it
                    await asyncio.wait_for(writer.drain(), timeout_s)
                    await asyncio.wait_for(_drain_to_eof(reader), timeout_s)
            except (TimeoutError, asyncio.IncompleteReadError, OSError):
                pass
        return ServerProbe(written, ANSWERED)
    finally:
        writer.close()
        with contextlib.suppress(TimeoutError, OSError, ssl.SSLError):
            await asyncio.wait_for(writer.wait_closed(), 1.0)


async def probe(hosts: str, timeout_s: float = 3.0, tls: ssl.SSLContext | None = None) -> list[ServerProbe]:
    """Probe every server of ``hosts`` concurrently; one :class:`ServerProbe` per server, in order."""
    return list(await asyncio.gather(*(probe_server(w, h, p, timeout_s, tls) for w, h, p in servers(hosts))))


def explain(hosts: str, probes: list[ServerProbe], fallback: str) -> str:
    """The one line for a failed connection: ``cannot connect to ZooKeeper at <hosts>: <server>: <cause>;
    ... - check <what>`` (``at <server>: <cause> - check <what>`` for a single server). ``fallback`` (kazoo's own reason) is used when every server answered the probe
    (the session failed for another reason, e.g. a too-short connect timeout)."""
    failed = [p for p in probes if p.cause != ANSWERED]
    if not failed:
        return (f"cannot connect to ZooKeeper at {hosts}: no session within the connect timeout ({fallback}), "
                "although the servers answer a probe - check zkTimeout and the server's load and logs")
    causes = list(dict.fromkeys(p.cause for p in failed))
    check = "; ".join(_CHECK[c] for c in causes if c in _CHECK)
    if len(probes) == 1:  # "at h:2181: connection refused", not the server twice
        return f"cannot connect to ZooKeeper at {failed[0]} - check {check}"
    return f"cannot connect to ZooKeeper at {hosts}: {'; '.join(str(p) for p in failed)} - check {check}"
