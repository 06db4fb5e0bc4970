"""errors.is_retriable: what the retry loops retry (issue 9: ``retriable`` was read nowhere)."""

from __future__ import annotations

from kazoo.exceptions import ConnectionLoss, NoNodeError

from autorecovery.errors import (
    BookieUnavailableError,
    CompatibilityError,
    ConfigError,
    MalformedMetadataError,
    NotEnoughBookiesError,
    ZooKeeperError,
    is_retriable,
)


def test_is_retriable_follows_the_flag_and_treats_transport_errors_as_transient():
    assert is_retriable(BookieUnavailableError("b:1", "UNAVAILABLE"))
    assert is_retriable(NotEnoughBookiesError("need 3"))
    assert is_retriable(ZooKeeperError("connection loss"))
    assert not is_retriable(MalformedMetadataError("/ledgers/00/0000/L0001 garbage"))
    assert not is_retriable(CompatibilityError("LAYOUT"))
    assert not is_retriable(ConfigError("bad key"))
    assert is_retriable(ConnectionLoss()) and is_retriable(NoNodeError())
    assert is_retriable(ConnectionResetError()) and is_retriable(TimeoutError())
    assert not is_retriable(TypeError("a bug")) and not is_retriable(KeyError("x"))
