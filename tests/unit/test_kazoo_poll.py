"""kazoo's handler with a one-system-call select (autorecovery.zk.kazoo_poll, issue 29): the same
answers as kazoo's own selector_select on real sockets."""

from __future__ import annotations

import socket

import pytest
from kazoo.handlers.utils import selector_select

from autorecovery.zk.kazoo_poll import PollHandler, poll_select


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def both(*args, **kwargs):
    return poll_select(*args, **kwargs), selector_select(*args, **kwargs)


def test_nothing_to_read_times_out_empty(pair):
    a, _b = pair
    mine, kazoos = both([a], [], [], 0.01)
    assert mine == kazoos == ([], [], [])


def test_readable_and_writable_objects_are_returned_as_given(pair):
    a, b = pair
    b.send(b"x")
    mine, kazoos = both([a], [], [], 1.0)
    assert mine == kazoos == ([a], [], [])
    mine, kazoos = both([], [a], [], 1.0)
    assert mine == kazoos == ([], [a], [])
    # a descriptor given as an int comes back as the int
    r, w, _ = poll_select([a.fileno()], [b.fileno()], [], 1.0)
    assert r == [a.fileno()] and w == [b.fileno()]


def test_peer_closed_is_ready_to_read(pair):
    a, b = pair
    b.close()
    r, _w, _x = poll_select([a], [], [], 1.0)
    assert r == [a]  # the recv that follows returns b"" and kazoo reconnects
    assert a.recv(1) == b""


def test_bad_arguments_fail_like_kazoos():
    for args, error in ((([-1], [], [], 0), TypeError), (([], [], [], -1), ValueError),
                        (([], [], [], "1"), TypeError)):
        with pytest.raises(error):
            selector_select(*args)
        with pytest.raises(error):
            poll_select(*args)


def test_handler_select_is_poll_select(pair):
    a, b = pair
    b.send(b"y")
    assert PollHandler().select([a], [], [], 1.0) == ([a], [], [])
