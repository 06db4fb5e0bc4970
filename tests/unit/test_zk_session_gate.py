"""kazoo's errors as ZkClient raises them (:func:`autorecovery.zk.session_gate.translate`)."""

from __future__ import annotations

import pytest
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError

from autorecovery.errors import ZooKeeperError
from autorecovery.zk.session_gate import PASSED_THROUGH, translate


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


def test_a_shared_kazoo_failure_is_copied_per_request_so_tracebacks_do_not_pile_up():
    from autorecovery.zk.session_gate import fresh

    shared = ConnectionLoss("gone")
    for _ in range(50):  # what each request did with kazoo's one instance before the fix
        try:
            raise shared
        except ConnectionLoss:
            pass
    depth = 0
    tb = shared.__traceback__
    while tb is not None:
        depth, tb = depth + 1, tb.tb_next
    assert depth >= 1
    copy = fresh(shared)
    assert type(copy) is ConnectionLoss and copy.args == ("gone",) and copy is not shared
    assert copy.__traceback__ is None


def test_a_failure_nobody_waits_for_is_not_logged_as_never_retrieved():
    import asyncio
    import gc

    from autorecovery.zk.session_gate import consume

    async def main() -> list[dict]:
        seen: list[dict] = []
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: seen.append(ctx))
        fut = loop.create_future()
        fut.add_done_callback(consume)
        fut.set_exception(ConnectionLoss())  # its caller was cancelled: nobody awaits it
        await asyncio.sleep(0)  # the done-callback runs
        del fut
        gc.collect()
        plain = loop.create_future()  # control: without the callback asyncio does complain
        plain.set_exception(ConnectionLoss())
        del plain
        gc.collect()
        return seen

    seen = asyncio.run(main())
    assert len(seen) == 1 and "never retrieved" in seen[0]["message"]
