"""kazoo's errors as ZkClient raises them (:func:`autorecovery.zk.gate.translate`)."""

from __future__ import annotations

import pytest
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError

from autorecovery.errors import ZooKeeperError
from autorecovery.zk.gate import PASSED_THROUGH, translate


@pytest.mark.parametrize("kind", PASSED_THROUGH)
def test_errors_callers_handle_by_type_pass_through(kind):
    exc = kind()
    assert translate(exc, "/ledgers/x") is exc


def test_any_other_error_names_the_path_and_kazoos_error():
    out = translate(ConnectionLoss("gone"), "/ledgers/underreplication")
    assert isinstance(out, ZooKeeperError)
    assert str(out) == "ZooKeeper operation on /ledgers/underreplication failed: ConnectionLoss gone"


def test_the_passed_through_errors_are_the_ones_callers_catch():
    assert NoNodeError in PASSED_THROUGH and NodeExistsError in PASSED_THROUGH
