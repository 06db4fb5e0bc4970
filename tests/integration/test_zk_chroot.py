"""The shared chroot set-up of the tests' ``zk_connect`` and the benches (:func:`fresh_chroot`)."""

from __future__ import annotations

import pytest

from autorecovery.testing.zk_chroot import fresh_chroot
from autorecovery.zk.bridge import ZkClient

pytestmark = pytest.mark.integration


async def test_each_chroot_is_new_exists_and_roots_a_client(zk_server):
    a, b = fresh_chroot(zk_server.connect_string, "q"), fresh_chroot(zk_server.connect_string, "q")
    assert a != b and a.startswith(f"{zk_server.connect_string}/q") and len(a.rsplit("/", 1)[1]) == 13
    root = await ZkClient(zk_server.connect_string).start()
    rooted = await ZkClient(a).start()
    try:
        assert await root.exists("/" + a.rsplit("/", 1)[1]) is not None
        await rooted.create("/made-inside")
        assert await root.get_children("/" + a.rsplit("/", 1)[1]) == ["made-inside"]
    finally:
        await rooted.stop()
        await root.stop()
