"""ZooKeeper security from the keys: digest identity and ACLs (``zkEnableSecurity``, ``zkDigestAuth``),
SASL (``zkSaslMechanism``...) and TLS (``zookeeper.client.secure``, ``zookeeper.ssl.*``) into a
:class:`~autorecovery.config.settings.ZkSecurity`; a secret is never quoted in an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autorecovery.config.files import secret_first_line
from autorecovery.config.settings import ZkSasl, ZkSecurity, ZkTls
from autorecovery.config.tls import read_pem
from autorecovery.errors import ConfigError


def build_zk_security(values: Mapping[str, Any], errors: list[str]) -> ZkSecurity:
    """``zkEnableSecurity`` + ``zkDigestAuth``/``zkDigestAuthFile`` → :class:`ZkSecurity`.

    Appends to ``errors`` (never quoting the secret): both digest keys set; an unreadable or empty
    digest file (naming the key and the path); a digest that is not ``user:password``;
    ``zkEnableSecurity=true`` with no identity (ZooKeeper rejects a creator-all ACL from an
    unauthenticated session with InvalidACL, so we refuse before connecting).
    """
    enabled = bool(values.get("zkEnableSecurity"))
    inline = values.get("zkDigestAuth") or None
    path = values.get("zkDigestAuthFile") or None
    digest: str | None = None
    source = ""
    if inline and path:
        errors.append("zkDigestAuth and zkDigestAuthFile are both set; set only one")
        return ZkSecurity(enabled=enabled)
    if path:
        source = "zkDigestAuthFile"
        line = secret_first_line("zkDigestAuthFile", path, errors)
        if line is None:
            return ZkSecurity(enabled=enabled)
        digest = line.strip()
        if not digest:
            errors.append(f"bad value for zkDigestAuthFile: {path} is empty (expected a first line user:password)")
            return ZkSecurity(enabled=enabled)
    elif inline:
        source = "zkDigestAuth"
        digest = str(inline).strip()
    if digest is not None:
        user, sep, _password = digest.partition(":")
        if not sep or not user:
            where = f" (from {path})" if source == "zkDigestAuthFile" else ""
            errors.append(f"bad value for {source}{where}: expected user:password (the value is a secret and "
                          f"is not shown)")
            return ZkSecurity(enabled=enabled)
    sasl = _zk_sasl(values, errors)
    tls = _zk_tls(values, errors)
    if digest and sasl is not None:
        errors.append(f"{source} and zkSaslMechanism are both set: set one ZooKeeper identity")
    if enabled and not digest and sasl is None and not _sasl_asked(values):
        errors.append("zkEnableSecurity=true needs a ZooKeeper identity: set zkDigestAuth=user:password or "
                      "zkDigestAuthFile=<file holding user:password>, or zkSaslMechanism=DIGEST-MD5 with "
                      "zkSaslUsername and zkSaslPasswordFile (ZooKeeper refuses creator-only ACLs from an "
                      "unauthenticated session)")
    return ZkSecurity(enabled=enabled, digest=digest, source=source, sasl=sasl, tls=tls)


def _sasl_asked(values: Mapping[str, Any]) -> bool:
    return any(values.get(k) for k in ("zkSaslMechanism", "zkSaslUsername", "zkSaslPasswordFile"))


def _zk_sasl(values: Mapping[str, Any], errors: list[str]) -> ZkSasl | None:
    """``zkSaslMechanism`` + ``zkSaslUsername`` + ``zkSaslPasswordFile`` → :class:`ZkSasl` (None when
    none is set).

    Appends to ``errors`` (never quoting the password): a mechanism other than DIGEST-MD5 (GSSAPI
    needs a Kerberos KDC and the ``kerberos`` module, which this project neither ships nor tests);
    a user name or password file without the mechanism, or the mechanism without them; an
    unreadable or empty password file.
    """
    mech = str(values.get("zkSaslMechanism") or "").strip()
    user = str(values.get("zkSaslUsername") or "").strip()
    path = str(values.get("zkSaslPasswordFile") or "").strip()
    if not (mech or user or path):
        return None
    if not mech:
        errors.append("zkSaslUsername/zkSaslPasswordFile set without zkSaslMechanism: set "
                      "zkSaslMechanism=DIGEST-MD5 to authenticate with SASL")
        return None
    if mech.upper() != "DIGEST-MD5":
        errors.append(f"bad value for zkSaslMechanism: {mech!r} (only DIGEST-MD5 is supported; GSSAPI/Kerberos "
                      f"is not: see docs/security.md)")
        return None
    missing = [k for k, v in (("zkSaslUsername", user), ("zkSaslPasswordFile", path)) if not v]
    if missing:
        errors.append(f"zkSaslMechanism={mech} needs {' and '.join(missing)}")
        return None
    line = secret_first_line("zkSaslPasswordFile", path, errors)
    if line is None:
        return None
    password = line.rstrip("\r\n")
    if not password:
        errors.append(f"bad value for zkSaslPasswordFile: {path} is empty (expected the password on its first line)")
        return None
    return ZkSasl(mechanism="DIGEST-MD5", username=user, password=password, password_file=path)


_ZK_TLS_FILES = ("zookeeper.ssl.keyStore.location", "zookeeper.ssl.trustStore.location")


def _zk_tls(values: Mapping[str, Any], errors: list[str]) -> ZkTls | None:
    """``zookeeper.client.secure`` and the ``zookeeper.ssl.*`` keys → :class:`ZkTls` (None = plaintext).

    Appends to ``errors`` when TLS is on: a key or trust store type other than PEM; a key store
    password (``zookeeper.ssl.keyStore.password``/``passwordPath``: the PEM key must be unencrypted,
    the value is never quoted); a key store file that is not PEM, lacks the certificate or the
    private key, or holds an encrypted key; a trust store that is not a PEM certificate file.
    """
    if not values.get("zookeeper.client.secure"):
        return None
    ok = True
    for kind in ("keyStore", "trustStore"):
        t = values.get(f"zookeeper.ssl.{kind}.type")
        if t and str(t).strip().upper() != "PEM":
            errors.append(f"bad value for zookeeper.ssl.{kind}.type: {t!r} (only PEM files are supported; "
                          f"convert the store with keytool/openssl)")
            ok = False
    for name in ("zookeeper.ssl.keyStore.password", "zookeeper.ssl.keyStore.passwordPath"):
        if values.get(name):
            errors.append(f"{name} is set: encrypted key stores are not supported; give an unencrypted PEM key "
                          f"(decrypt it with `openssl pkey`, keep the file readable by the service user only)")
            ok = False
    keystore = str(values.get("zookeeper.ssl.keyStore.location") or "") or None
    trust = str(values.get("zookeeper.ssl.trustStore.location") or "") or None
    if ok:
        try:
            if keystore:
                read_pem(keystore, "zookeeper.ssl.keyStore.location")  # the certificate chain
                read_pem(keystore, "zookeeper.ssl.keyStore.location", private_key=True)  # and the key
            if trust:
                read_pem(trust, "zookeeper.ssl.trustStore.location")
        except ConfigError as exc:
            errors.append(str(exc))
    return ZkTls(trust_path=trust, keystore_path=keystore,
                 hostname_verification=bool(values.get("zookeeper.ssl.hostnameVerification", True)))


def zk_security(enabled: bool, digest: str | None = None, digest_file: str | None = None, *,
                extra: Mapping[str, Any] | None = None) -> ZkSecurity:
    """:class:`ZkSecurity` from explicit values (the reference bookie's flags), validated as the keys are.

    Args:
        extra: further typed key values (``zkSaslMechanism``, ``zookeeper.client.secure``,
            ``zookeeper.ssl.*``...), as the loader would have parsed them.

    Raises:
        ConfigError: the problems :func:`build_zk_security` reports (never quoting the secret).
    """
    errors: list[str] = []
    sec = build_zk_security({"zkEnableSecurity": enabled, "zkDigestAuth": digest, "zkDigestAuthFile": digest_file,
                        **(extra or {})}, errors)
    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(errors))
    return sec
