"""TLS to the bookies from the keys (``tlsProviderFactoryClass``, ``tlsClientAuthentication``, PEM
certificate, key and trust files) into a :class:`~autorecovery.config.tls.BookieTls`, and the warnings
when TLS is left off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autorecovery.config import keys as K
from autorecovery.config.tls import TLS_CONTEXT_FACTORY, BookieTls, read_pem
from autorecovery.errors import ConfigError


def check_pem(path: str, key: str, errors: list[str], *, private_key: bool = False) -> None:
    try:
        read_pem(path, key, private_key=private_key)
    except ConfigError as exc:
        errors.append(str(exc))


def build_bookie_tls(values: Mapping[str, Any], errors: list[str]) -> BookieTls:
    """``tlsProviderFactoryClass`` and the PEM keys → :class:`~autorecovery.rpc.tls.BookieTls`.

    TLS is on when ``tlsProviderFactoryClass`` names upstream's ``TLSContextFactory`` (full or simple
    name). With TLS on, appends to ``errors`` (each naming the key): another factory class; a JKS or
    PKCS12 trust store (``tlsTrustStoreType``), or key store with client authentication
    (``tlsKeyStoreType``); ``tlsKeyStorePasswordPath`` (encrypted keys); ``tlsHostnameVerificationEnabled
    =false`` (gRPC cannot turn the check off); client authentication without ``tlsCertificatePath`` /
    ``tlsKeyStore``; a named file that is unreadable or not PEM.
    """
    cls = str(values.get("tlsProviderFactoryClass") or "").strip()
    enabled = K.asks_for_security(cls)
    client_auth = bool(values.get("tlsClientAuthentication"))
    cert = values.get("tlsCertificatePath") or None
    key = values.get("tlsKeyStore") or None
    trust = values.get("tlsTrustStore") or None
    refresh = float(values.get("tlsCertFilesRefreshDurationSeconds") or 0)
    tls = BookieTls(enabled=enabled, client_auth=client_auth, cert_path=cert, key_path=key, trust_path=trust,
                    refresh_s=refresh)
    if not enabled:
        return tls
    if cls.rsplit(".", 1)[-1] != "TLSContextFactory":
        errors.append(f"tlsProviderFactoryClass={cls} is not supported: only {TLS_CONTEXT_FACTORY} (PEM files) "
                      f"is; unset it for plaintext")
        return tls
    if str(values.get("tlsTrustStoreType") or "PEM").upper() != "PEM":
        errors.append(f"tlsTrustStoreType={values.get('tlsTrustStoreType')} is not supported: only PEM trust "
                      f"stores are read (convert with `keytool -exportcert -rfc`)")
    elif trust:
        check_pem(str(trust), "tlsTrustStore", errors)
    if values.get("tlsHostnameVerificationEnabled") is False:
        errors.append("tlsHostnameVerificationEnabled=false is not supported: gRPC always checks that the bookie's "
                      "certificate names the host of its bookie id (give bookie certificates an IP or DNS SAN "
                      "for it)")
    if values.get("tlsKeyStorePasswordPath"):
        errors.append("tlsKeyStorePasswordPath is set: encrypted private keys are not supported; give tlsKeyStore "
                      "an unencrypted PEM key readable by the service user only")
    if client_auth:
        if str(values.get("tlsKeyStoreType") or "PEM").upper() != "PEM":
            errors.append(f"tlsKeyStoreType={values.get('tlsKeyStoreType')} is not supported: only PEM keys are "
                          f"read (tlsKeyStore = PEM private key, tlsCertificatePath = PEM certificate chain)")
        else:
            if not cert:
                errors.append("tlsClientAuthentication=true needs tlsCertificatePath (our PEM certificate chain)")
            else:
                check_pem(str(cert), "tlsCertificatePath", errors)
            if not key:
                errors.append("tlsClientAuthentication=true needs tlsKeyStore (our PEM private key, "
                              "tlsKeyStoreType=PEM)")
            else:
                check_pem(str(key), "tlsKeyStore", errors, private_key=True)
    return tls


def tls_off_warnings(values: Mapping[str, Any], sources: Mapping[str, str]) -> list[str]:
    """Warnings for TLS keys that were set while their switch is off (they change nothing then):
    ``tlsClientAuthentication``/``tlsCertificatePath``/``tlsKeyStore``/``tlsTrustStore`` without
    ``tlsProviderFactoryClass``, and the HTTPS files without ``httpServerTlsEnable``."""
    out = []
    groups = (
        (K.asks_for_security(str(values.get("tlsProviderFactoryClass") or "")), "tlsProviderFactoryClass",
         ("tlsClientAuthentication", "tlsCertificatePath", "tlsKeyStore", "tlsTrustStore"),
         "bookie connections stay plaintext"),
        (bool(values.get("zookeeper.client.secure")), "zookeeper.client.secure=true",
         ("zookeeper.ssl.keyStore.location", "zookeeper.ssl.trustStore.location"),
         "ZooKeeper connections stay plaintext"),
        (bool(values.get("httpServerTlsEnable")), "httpServerTlsEnable=true",
         ("httpServerCertificatePath", "httpServerKeyPath", "httpServerClientCaPath", "httpAdminCertificateSubjects"),
         "the admin port serves plain HTTP"),
    )
    for on, switch, names, what in groups:
        if on:
            continue
        set_ = [n for n in names if sources.get(n, "default") != "default" and values.get(n)]
        if set_:
            out.append(f"{', '.join(set_)} set without {switch}: no effect, {what}")
    return out
