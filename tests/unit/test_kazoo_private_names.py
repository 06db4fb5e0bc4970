"""The private kazoo names our ZooKeeper edge still needs, pinned: each test fails, naming the name, when
the pinned kazoo (requirements/runtime.txt) changes it.

Where they are used: ``autorecovery/zk/kazoo_ext.py`` (the persistent-watch hook: ``KazooClient._connection``,
``KazooClient._stopped``, ``ConnectionHandler._read_watch_event``), ``autorecovery/zk/bridge.py`` (``addWatch``
/ ``multiRead`` requests sent with ``KazooClient._call``) and ``autorecovery/zk/kazoo_poll.py`` (the connection
waits through ``handler.select``, which :class:`~autorecovery.zk.kazoo_poll.PollHandler` overrides). Pure
inspection of kazoo's classes and source; no server.
"""

from __future__ import annotations

import inspect

import kazoo
from kazoo.client import KazooClient
from kazoo.protocol import connection as kconn
from kazoo.protocol.connection import ConnectionHandler

from autorecovery.zk.kazoo_poll import PollHandler

PINNED = "2.11.0"


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_the_pinned_kazoo_is_the_one_installed():
    # a new kazoo release is where these names may move: this test names the version they were checked at
    assert kazoo.__version__ == PINNED, f"kazoo {kazoo.__version__} installed; private names checked at {PINNED}"


def test_kazooclient_call_queues_a_request_with_an_async_result():
    assert _params(KazooClient._call) == ["self", "request", "async_object"], \
        "KazooClient._call(request, async_object) changed: zk/bridge.py sends addWatch/multiRead with it"
    src = inspect.getsource(KazooClient._call)
    assert "_queue" in src and "async_object" in src, "KazooClient._call no longer queues the request"


def test_kazooclient_connection_and_stopped_are_set_in_init():
    src = inspect.getsource(KazooClient.__init__)
    assert "self._connection = ConnectionHandler(" in src, \
        "KazooClient._connection (the ConnectionHandler) changed: zk/kazoo_ext.install_event_hook needs it"
    assert "self._stopped = self.handler.event_object()" in src, \
        "KazooClient._stopped (an Event) changed: zk/kazoo_ext's hook checks it"


def test_connection_reads_watch_events_through_read_watch_event():
    assert _params(ConnectionHandler._read_watch_event) == ["self", "buffer", "offset"], \
        "ConnectionHandler._read_watch_event(buffer, offset) changed: zk/kazoo_ext's hook wraps it"
    # the hook replaces the bound method on the instance: kazoo must call it through self, not the class
    src = inspect.getsource(kconn.ConnectionHandler)
    assert "self._read_watch_event(buffer, offset)" in src, \
        "ConnectionHandler no longer calls self._read_watch_event(buffer, offset): persistent watches would go deaf"


def test_connection_waits_through_handler_select():
    src = inspect.getsource(kconn.ConnectionHandler)
    assert src.count("self.handler.select(") >= 2, \
        "ConnectionHandler no longer waits through handler.select: zk/kazoo_poll.PollHandler would be unused"
    assert "select" in PollHandler.__dict__, "PollHandler no longer overrides select"
