"""TLS for the bookie gRPC protocol: credentials built from PEM files (EDGE, issue 15).

Upstream's ``TLSContextFactory`` reads ``tlsCertificatePath`` (certificate chain), ``tlsKeyStore``
(with ``tlsKeyStoreType=PEM``: the private key) and ``tlsTrustStore`` (with ``tlsTrustStoreType=PEM``:
the CA certificates to trust). The same files configure both ends here:

* our client (:class:`~autorecovery.rpc.transport.BookieClient`): ``grpc.ssl_channel_credentials``
  with the trust store as roots and, with ``tlsClientAuthentication=true``, our certificate and key;
* the reference bookie (``autorecovery bookie --tls-cert/--tls-key/--tls-trust-store/--tls-client-auth``):
  ``grpc.ssl_server_credentials``, requiring and verifying a client certificate with client auth.

gRPC always checks that the server's certificate names the host the client dialled (a bookie id
``127.0.0.1:3181`` needs an IP SAN ``127.0.0.1``); that is upstream's
``tlsHostnameVerificationEnabled=true``.

Files are read once, when the credentials are built (a renewed certificate needs a restart).
"""

from __future__ import annotations

import grpc

from autorecovery.errors import ConfigError

# the settings and the PEM reader live in the config layer (config/tls.py): config.load builds them
from autorecovery.config.tls import TLS_CONTEXT_FACTORY, BookieTls, ServerTls, read_pem  # noqa: F401,E402


def channel_credentials(tls: BookieTls) -> grpc.ChannelCredentials:
    """``grpc.ssl_channel_credentials`` for :class:`BookieTls` (roots = the trust store; with client
    auth also our key and certificate chain).

    Raises:
        ConfigError: a file cannot be read or is not what its key says (naming the key).
    """
    roots = read_pem(tls.trust_path, "tlsTrustStore") if tls.trust_path else None
    if tls.client_auth:
        if not tls.cert_path or not tls.key_path:
            raise ConfigError("tlsClientAuthentication=true needs tlsCertificatePath (PEM certificate) and "
                              "tlsKeyStore (PEM private key, tlsKeyStoreType=PEM)")
        return grpc.ssl_channel_credentials(
            root_certificates=roots,
            private_key=read_pem(tls.key_path, "tlsKeyStore", private_key=True),
            certificate_chain=read_pem(tls.cert_path, "tlsCertificatePath"),
        )
    return grpc.ssl_channel_credentials(root_certificates=roots)


def server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    """``grpc.ssl_server_credentials`` of the reference bookie.

    Raises:
        ConfigError: naming the flag when a file is missing or not PEM, or client auth without a
            trust store.
    """
    if tls.client_auth and not tls.trust_path:
        raise ConfigError("--tls-client-auth needs --tls-trust-store (PEM CA certificates of the clients)")
    roots = read_pem(tls.trust_path, "--tls-trust-store") if tls.trust_path else None
    pair = (read_pem(tls.key_path, "--tls-key", private_key=True), read_pem(tls.cert_path, "--tls-cert"))
    return grpc.ssl_server_credentials([pair], root_certificates=roots,
                                       require_client_auth=bool(tls.client_auth))


def tls_failure(details: str) -> str | None:
    """Why a gRPC ``UNAVAILABLE`` on a TLS channel is a failed handshake, or None when it is not one.

    ``details`` is the gRPC error text. Our side failing the handshake (the bookie's certificate is not
    signed by the trust store, does not name the bookie's host, or the bookie speaks plaintext) names
    TLS in it; a bookie that refuses *our* certificate (none, or one its trust store did not sign)
    just closes the connection during the handshake, which gRPC reports as "Socket closed" while
    connecting.
    """
    low = (details or "").lower()
    if any(s in low for s in ("handshake", "ssl_error", "certificate", "tsi_", "ssl routines", "verification check")):
        return details
    if "failed to connect" in low and ("socket closed" in low or "connection reset" in low):
        return ("the bookie closed the connection during the handshake: it did not accept our client "
                "certificate (none sent: tlsClientAuthentication=false, or not signed by a CA the bookie "
                f"trusts) or it does not serve TLS ({details})")
    return None
