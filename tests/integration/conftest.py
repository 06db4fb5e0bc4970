"""Fixtures shared by the integration tests (the session ZooKeeper is in tests/conftest.py)."""

from __future__ import annotations

import pytest

from autorecovery.rpc.transport import BookieClient


@pytest.fixture
async def client():
    """A plaintext BookieClient with a 5 s deadline, closed after the test."""
    c = BookieClient(timeout_s=5.0)
    yield c
    await c.close()
