"""Reading a ZooKeeper subtree whole, for tests that compare what we and upstream create."""

from __future__ import annotations

import re

from kazoo.client import KazooClient

#: a version-4 UUID as upstream writes INSTANCEID (bytes)
UUID_V4 = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def znode_tree(connect: str, root: str) -> dict[str, bytes]:
    """Every znode under ``root``, root included: path relative to ``root`` (``""`` for the root) →
    data (bytes). One session, closed on return."""
    kz = KazooClient(connect)
    kz.start(10)
    try:
        out: dict[str, bytes] = {}
        stack = [root]
        while stack:
            p = stack.pop()
            out[p[len(root):]] = kz.get(p)[0]
            stack.extend(f"{p}/{k}" for k in kz.get_children(p))
        return out
    finally:
        kz.stop()
        kz.close()
