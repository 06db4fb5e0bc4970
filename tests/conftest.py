"""Shared fixtures: a real ZooKeeper (Debian package) per test session with a chroot per test, and a
factory for real local clusters (ZooKeeper + bookie processes) that are always torn down."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.testing.zk_chroot import fresh_chroot
from autorecovery.testing.zk_server import ZooKeeperServer


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory) -> ZooKeeperServer:
    """One private ZooKeeper for the whole session (tests isolate themselves with chroots)."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk")).start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zk_server: ZooKeeperServer) -> str:
    """A connect string with a fresh chroot (``host:port/t<uuid>``) that already exists."""
    return fresh_chroot(zk_server.connect_string)


@pytest.fixture
def cluster_factory(tmp_path: Path):
    """``make(bookies=3, racks=1) -> LocalCluster`` (started); every cluster is stopped at teardown."""
    made: list[LocalCluster] = []

    def make(bookies: int = 3, racks: int = 1, **kw) -> LocalCluster:
        c = LocalCluster(tmp_path / f"cluster{len(made)}", bookies=bookies, racks=racks, **kw)
        made.append(c)
        c.up()
        return c

    yield make
    for c in made:
        c.down()


def run(coro):
    """Run a coroutine to completion from a synchronous test."""
    return asyncio.run(coro)
