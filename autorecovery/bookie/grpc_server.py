"""The reference bookie's gRPC server set-up: channel options and binding (plaintext or TLS) (EDGE;
imports ``bookie.limits``, ``rpc.tls``). The servicer's registration behind the receive gate is
:func:`autorecovery.bookie.service.add_service`.
"""

from __future__ import annotations

import grpc

from autorecovery.bookie.limits import DEFAULT_MAX_CONNECTIONS, GRPC_HEADROOM, STREAM_LOOKAHEAD_BYTES
from autorecovery.config.tls import ServerTls

def grpc_server_options(max_entry_size: int, max_concurrent_streams: int = 1000,
                        max_connections: int = DEFAULT_MAX_CONNECTIONS) -> list[tuple[str, int]]:
    """gRPC server channel options for a bookie whose entries may be ``max_entry_size`` bytes.

    ``max_concurrent_streams`` bounds the streams one client connection may have open (HTTP/2; more
    wait in the client); ``max_connections`` the connections open at once (more are closed at accept);
    connections idle for 10 minutes are closed (clients reconnect on demand). Windows are fixed at
    :data:`STREAM_LOOKAHEAD_BYTES` per stream (no BDP probing): a stream's data beyond that waits in
    its sender until the handler reads (see ``bookie.request_gate``).
    """
    return [
        ("grpc.max_receive_message_length", max_entry_size + GRPC_HEADROOM),
        ("grpc.max_send_message_length", max(max_entry_size + GRPC_HEADROOM, 64 * 1024 * 1024)),
        ("grpc.max_concurrent_streams", max_concurrent_streams),
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.max_connection_idle_ms", 600_000),
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.lookahead_bytes", STREAM_LOOKAHEAD_BYTES),
        # Fail loudly when the port is taken instead of sharing it with another process.
        ("grpc.so_reuseport", 0),
    ]


def build_grpc_server(host: str, port: int, max_entry_size: int, *, max_concurrent_streams: int = 1000,
                      max_connections: int = DEFAULT_MAX_CONNECTIONS,
                      tls: ServerTls | None = None) -> tuple[grpc.aio.Server, int]:
    """A grpc.aio server bound (not yet started, no servicer yet) to ``host:port``; returns it and the
    bound port (``port=0`` picks a free one). Add the servicer with :func:`add_service` before
    ``start()``. Binding first lets the bookie learn its id (``host:port``) before the cookie check.

    ``tls`` (issue 15): serve TLS with the bookie's PEM certificate and key, and with
    ``client_auth`` require a client certificate signed by its trust store (mTLS); None = plaintext.

    Raises:
        RuntimeError: naming the address when it cannot be bound (e.g. the port is in use).
        ConfigError: a TLS file cannot be read or is not PEM (naming the flag).
    """
    server = grpc.aio.server(options=grpc_server_options(max_entry_size, max_concurrent_streams, max_connections))
    addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is not None:
            from autorecovery.rpc.tls import server_credentials

            bound = server.add_secure_port(addr, server_credentials(tls))
        else:
            bound = server.add_insecure_port(addr)
    except RuntimeError as exc:
        raise RuntimeError(f"cannot bind the bookie gRPC server to {addr}: {exc}") from exc
    if bound == 0:
        raise RuntimeError(f"cannot bind the bookie gRPC server to {addr} (port in use?)")
    return server, bound
