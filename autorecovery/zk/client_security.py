"""How a :class:`~autorecovery.config.settings.ZkSecurity` becomes a ZooKeeper connection's arguments
(EDGE): ``KazooClient``'s digest, SASL and TLS options, and the client TLS context the connection-failure
probe uses. Names also resolve from :mod:`autorecovery.zk.bridge`.
"""

from __future__ import annotations

import ssl
from typing import Any

from autorecovery.config.settings import ZkSecurity


def kazoo_security_kwargs(security: ZkSecurity) -> dict[str, Any]:
    """The ``KazooClient`` arguments for ``security``: ``auth_data`` (digest scheme), ``sasl_options``
    (DIGEST-MD5 via pure-sasl, service ``zookeeper``: the server's default) and the TLS options
    (``use_ssl``, ``ca``, ``certfile``/``keyfile`` = ZooKeeper's one-file PEM key store,
    ``verify_certs`` always on, ``check_hostname`` from ``zookeeper.ssl.hostnameVerification``).
    Empty for the default (no authentication, plaintext), so that path is unchanged."""
    kw: dict[str, Any] = {}
    if security.digest:
        kw["auth_data"] = [("digest", security.digest)]
    else:
        kw["auth_data"] = None
    if security.sasl is not None:
        kw["sasl_options"] = {"mechanism": security.sasl.mechanism, "username": security.sasl.username,
                              "password": security.sasl.password}
    if security.tls is not None:
        kw.update(use_ssl=True, ca=security.tls.trust_path, certfile=security.tls.keystore_path,
                  keyfile=security.tls.keystore_path, verify_certs=True,
                  check_hostname=security.tls.hostname_verification)
    return kw


def zk_ssl_context(security: ZkSecurity) -> ssl.SSLContext | None:
    """The client TLS context kazoo's connection uses for ``security.tls`` (None: plaintext), for the
    failure probe of :meth:`ZkClient.start`.

    Raises:
        OSError, ValueError: a trust store or key store that cannot be read.
    """
    tls = security.tls
    if tls is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = tls.hostname_verification
    ctx.verify_mode = ssl.CERT_REQUIRED
    if tls.trust_path:
        ctx.load_verify_locations(tls.trust_path)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if tls.keystore_path:
        ctx.load_cert_chain(tls.keystore_path, tls.keystore_path)
    return ctx
