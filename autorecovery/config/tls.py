"""TLS settings of the bookie gRPC protocol, and reading their PEM files (config layer, issue 15).

The settings are built by :mod:`autorecovery.config.load` from upstream's keys; the gRPC credentials
are built from them by :mod:`autorecovery.rpc.tls`.
"""

from __future__ import annotations

from dataclasses import dataclass
from autorecovery.config.files import read_bounded
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
        refresh_s: ``tlsCertFilesRefreshDurationSeconds``: at most this often (s), connections opened
            afterwards re-read the files above when they changed; 0 = never (upstream's default).
    """

    enabled: bool = False
    client_auth: bool = False
    cert_path: str | None = None
    key_path: str | None = None
    trust_path: str | None = None
    refresh_s: float = 0.0


@dataclass(frozen=True)
class ServerTls:
    """TLS of the reference bookie's gRPC port (``autorecovery bookie --tls-*`` flags).

    Attributes:
        cert_path / key_path: the bookie's PEM certificate chain and unencrypted private key.
        trust_path: PEM CA certificates that sign client certificates (needed with client_auth).
        client_auth: require and verify a client certificate (``tlsClientAuthentication``).
        refresh_s: ``--tls-cert-files-refresh-seconds`` (upstream's ``tlsCertFilesRefreshDurationSeconds``):
            at most this often (s), a new handshake re-reads the files above when they changed; 0 = never.
    """

    cert_path: str
    key_path: str
    trust_path: str | None = None
    client_auth: bool = False
    refresh_s: float = 0.0


def read_pem(path: str, key: str, *, private_key: bool = False) -> bytes:
    """The bytes of one PEM file, checked to look like PEM.

    Args:
        path: the file.
        key: the configuration key or flag that named it (for messages).
        private_key: the file must hold an unencrypted private key.

    Raises:
        ConfigError: naming ``key`` and the path when the file cannot be read, is not a regular file
            or is over :data:`~autorecovery.config.files.MAX_SECRET_FILE_BYTES`, holds no PEM block,
            or (private_key) holds no private key or an encrypted one. The key's content is never quoted.
    """
    data = read_bounded(path, key)
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
