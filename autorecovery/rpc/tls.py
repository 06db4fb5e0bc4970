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

Renewed files are taken without a restart when ``tlsCertFilesRefreshDurationSeconds`` (the bookie's
``--tls-cert-files-refresh-seconds``) is above 0 (see :mod:`autorecovery.rpc.tls_reload`): the client
builds new credentials for the channels it opens afterwards (and for a channel whose handshake failed),
the bookie serves them from the next handshake on (``grpc.dynamic_ssl_server_credentials``).
"""

from __future__ import annotations

import grpc
import structlog

from autorecovery.errors import ConfigError
from autorecovery.rpc.tls_reload import CERT, KEY, TRUST, PemFile, PemFiles

# the settings and the PEM reader live in the config layer (config/tls.py): config.load builds them
from autorecovery.config.tls import BookieTls, ServerTls

log = structlog.get_logger(__name__)


class ChannelCredentialSource:
    """``grpc.ssl_channel_credentials`` for :class:`BookieTls`, rebuilt when its files change.

    Roots = the trust store; with client auth also our key and certificate chain. With
    ``tls.refresh_s`` > 0 :meth:`current` re-reads changed files at most every ``refresh_s`` seconds
    (``force``: now), keeping the previous credentials while a new version is not whole.

    Raises:
        ConfigError: (construction) a file cannot be read or is not what its key says (naming the key);
            client auth without a certificate or key.
    """

    def __init__(self, tls: BookieTls) -> None:
        files = []
        if tls.trust_path:
            files.append(PemFile("tlsTrustStore", tls.trust_path, TRUST))
        if tls.client_auth:
            if not tls.cert_path or not tls.key_path:
                raise ConfigError("tlsClientAuthentication=true needs tlsCertificatePath (PEM certificate) and "
                                  "tlsKeyStore (PEM private key, tlsKeyStoreType=PEM)")
            files += [PemFile("tlsKeyStore", tls.key_path, KEY), PemFile("tlsCertificatePath", tls.cert_path, CERT)]
        self.files = PemFiles(files, tls.refresh_s)
        self._credentials = self._build()
        self._generation = self.files.generation

    def _build(self) -> grpc.ChannelCredentials:
        d = self.files.data
        return grpc.ssl_channel_credentials(root_certificates=d.get(TRUST), private_key=d.get(KEY),
                                            certificate_chain=d.get(CERT))

    def current(self, *, force: bool = False) -> tuple[grpc.ChannelCredentials, int]:
        """The credentials for a new channel and their generation (+1 at each version of the files)."""
        if self.files.refresh(force=force) or self._generation != self.files.generation:
            self._credentials, self._generation = self._build(), self.files.generation
        return self._credentials, self._generation


def server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    """The reference bookie's server credentials: ``grpc.ssl_server_credentials`` (``refresh_s`` 0), or
    ``grpc.dynamic_ssl_server_credentials`` whose fetcher serves the files' new version from the next
    handshake on once they changed (looked at on a handshake at most every ``refresh_s`` seconds).
    Connections already up keep theirs.

    Raises:
        ConfigError: naming the flag when a file is missing or not PEM, or client auth without a
            trust store.
    """
    if tls.client_auth and not tls.trust_path:
        raise ConfigError("--tls-client-auth needs --tls-trust-store (PEM CA certificates of the clients)")
    files = [PemFile("--tls-key", tls.key_path, KEY), PemFile("--tls-cert", tls.cert_path, CERT)]
    if tls.trust_path:
        files.append(PemFile("--tls-trust-store", tls.trust_path, TRUST))
    pems = PemFiles(files, tls.refresh_s)

    def configuration() -> grpc.ServerCertificateConfiguration:
        d = pems.data
        return grpc.ssl_server_certificate_configuration([(d[KEY], d[CERT])], root_certificates=d.get(TRUST))

    if not pems.reloads:
        d = pems.data
        return grpc.ssl_server_credentials([(d[KEY], d[CERT])], root_certificates=d.get(TRUST),
                                           require_client_auth=bool(tls.client_auth))

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        try:
            return configuration() if pems.refresh() else None
        except Exception as exc:  # noqa: BLE001 - called by gRPC's handshaker: keep serving the old ones
            log.warning("TLS files not reloaded: keeping the previous certificates", error=str(exc))
            return None

    return grpc.dynamic_ssl_server_credentials(configuration(), fetch,
                                               require_client_authentication=bool(tls.client_auth))


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
