"""Fixtures for interop tests against stock Apache BookKeeper 4.17.2 (``make upstream`` installs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autorecovery.testing.upstream_cluster import JavaCluster
from autorecovery.testing.zk_server import ZooKeeperServer


@pytest.fixture
def java_cluster(zk_server: ZooKeeperServer, tmp_path: Path):
    """``make(bookies=4, racks=2, **kw) -> JavaCluster`` (up) on the session ZooKeeper, each under its own
    fresh root znode; every cluster is killed at teardown. ``kw`` goes to :class:`JavaCluster`."""
    made: list[JavaCluster] = []

    def make(bookies: int = 4, racks: int = 2, **kw) -> JavaCluster:
        c = JavaCluster(tmp_path / f"java{len(made)}", zk_server.connect_string, bookies=bookies, racks=racks, **kw)
        made.append(c)
        return c.up()

    yield make
    for c in made:
        c.down()
