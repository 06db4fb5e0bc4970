"""The reference bookie's service limits and window sizes, one table (EDGE; imports nothing).

Bytes unless said otherwise. What each limit does to a request is told in ``bookie.service``'s
docstring; the handlers (``bookie.add_handlers``, ``bookie.read_handlers``, ``bookie.pull_handler``)
and the server set-up (``bookie.grpc_server``) read them from here, and they still resolve from
``bookie.service``.
"""

#: Default largest entry body (``--max-entry-size``); larger adds are answered ``EBADREQ``.
DEFAULT_MAX_ENTRY_SIZE = 5 * 1024 * 1024
GRPC_HEADROOM = 1024 * 1024
MAX_RANGE_ENTRIES = 1_000_000
#: Default and largest body bytes per ReadBatch message (ReadEntryBatches).
MAX_READ_BATCH_BYTES = 1024 * 1024
#: A PullEntries call reports what became durable at least every this many body bytes.
PULL_REPORT_BYTES = 4 * 1024 * 1024
#: most entries an add stream (AddEntries, AddStream, PullEntries) keeps in flight to storage, and most
#: entries in one storage operation of an AddStream run
STREAM_WINDOW_ENTRIES = 256
#: HTTP/2 receive window of a stream whose handler has not asked for its next message, bytes (fixed:
#: BDP probing, which grows windows to the connection's bandwidth-delay product, is off).
STREAM_LOOKAHEAD_BYTES = 64 * 1024
#: Default most client connections a bookie accepts at once (``--max-connections``).
DEFAULT_MAX_CONNECTIONS = 1024
