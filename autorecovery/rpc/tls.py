"""TLS for the bookie gRPC protocol: credentials built from PEM files (EDGE, issue 15).

Upstream's ``TLSContextFactory`` reads ``tlsCertificatePath`` (certificate chain), ``tlsKeyStore``
(with ``tlsKeyStoreType=PEM``: the private key) and ``tlsTrustStore`` (with ``tlsTrustStoreType=PEM``:
the CA certificates to trust). The same files configure both ends here:

* our client (:class:`~autorecovery.rpc.bookie_client.BookieClient`): ``grpc.ssl_channel_credentials``
  with the trust store as roots and, with ``tlsClientAuthentication=true``, our certificate and key;
* the reference bookie (``autorecovery bookie --tls-cert/--tls-key/--tls-trust-store/--tls-client-auth``):
  ``grpc.ssl_server_credentials``, requiring and verifying a client certificate with client auth.

gRPC always checks that the server's certificate names the host the client dialled (a bookie id
``127.0.0.1:3181`` needs an IP SAN ``127.0.0.1``); that is upstream's
``tlsHostnameVerificationEnabled=true``.

Files are read once, when the credentials are built (a renewed certificate needs a restart).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from autorecovery.errors import ConfigError

#: upstream's TLS provider factory (the only one there is); its simple name is accepted too
TLS_CONTEXT_FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"


@dataclass(frozen=True)
class BookieTls:
    """TLS settings of bookie connections (client side: the daemon, the shell, the admin client).

    Attributes:
        enabled: ``tlsProviderFactoryClass`` names upstream's ``TLSContextFactory``.
        client_auth: ``tlsClientAuthentication``: present our certificate to the bookie (mTLS).
        cert_path: ``tlsCertificatePath``: our PEM certificate chain (needed with client_auth).
        key_path: ``tlsKeyStore`` (``tlsKeyStoreType=PEM``): our PEM private key, unencrypted.
        trust_path: ``tlsTrustStore`` (``tlsTrustStoreType=PEM``): PEM CA certificates that sign the
            bookies' certificates; None = the system's default roots (gRPC's bundled list).
    """

    enabled: bool = False
    client_auth: bool = False
    cert_path: str | None = None
    key_path: str | None = None
    trust_path: str | None = None


@dataclass(frozen=True)
class ServerTls:
    """TLS of the reference bookie's gRPC port (``autorecovery bookie --tls-*`` flags).

    Attributes:
        cert_path / key_path: the bookie's PEM certificate chain and unencrypted private key.
        trust_path: PEM CA certificates that sign client certificates (needed with client_auth).
        client_auth: require and verify a client certificate (``tlsClientAuthentication``).
    """

    cert_path: str
    key_path: str
    trust_path: str | None = None
    client_auth: bool = False


def read_pem(path: str, key: str, *, private_key: bool = False) -> bytes:
    """The bytes of one PEM file, checked to look like PEM.

    Args:
        path: the file.
        key: the configuration key or flag that named it (for messages).
        private_key: the file must hold an unencrypted private key.

    Raises:
        ConfigError: naming ``key`` and the path when the file cannot be read, holds no PEM block,
            or (private_key) holds no private key or an encrypted one. The key's content is never quoted.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"bad value for {key}: cannot read {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise ConfigError(f"bad value for {key}: {path} is not a PEM file (a JKS or PKCS12 store? only PEM "
                          f"files are supported; convert with openssl)")
    if private_key:
        if b"ENCRYPTED" in data:
            raise ConfigError(f"bad value for {key}: {path} holds an encrypted private key; gRPC needs an "
                              f"unencrypted PEM key (decrypt it with `openssl pkey`, keep the file readable "
                              f"by the service user only)")
        if b"PRIVATE KEY-----" not in data:
            raise ConfigError(f"bad value for {key}: {path} holds no PEM private key")
    elif b"CERTIFICATE-----" not in data:
        raise ConfigError(f"bad value for {key}: {path} holds no PEM certificate")
    return data


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
