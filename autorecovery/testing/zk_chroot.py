"""A fresh ZooKeeper chroot per test or bench run, so runs sharing one server never see each other's znodes."""

from __future__ import annotations

import uuid


def fresh_chroot(connect: str, prefix: str = "t", timeout_s: float = 10.0) -> str:
    """Create the persistent znode ``/<prefix><12 hex digits>`` (random) on the ZooKeeper at ``connect``
    (``host:port,...``, no chroot) with a short kazoo session of its own, closed on return.

    Returns:
        ``connect`` with the chroot appended (``host:port/<prefix><hex>``), for a client rooted there.

    Raises:
        kazoo's ``KazooTimeoutError``: no session within ``timeout_s`` seconds.
    """
    from kazoo.client import KazooClient

    chroot = f"/{prefix}{uuid.uuid4().hex[:12]}"
    kz = KazooClient(connect)
    kz.start(timeout_s)
    try:
        kz.ensure_path(chroot)
    finally:
        kz.stop()
        kz.close()
    return f"{connect}{chroot}"
