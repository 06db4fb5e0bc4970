"""rpc.wire.encode_batch writes exactly protobuf's bytes for the batch messages (issue 13)."""

from __future__ import annotations

import os

import pytest

from autorecovery.proto import bookie_pb2 as pb
from autorecovery.rpc.wire import encode_batch


@pytest.mark.parametrize("sizes", [[], [0], [1], [100, 127, 128, 16383, 16384], [65536] * 16, [3 << 20]])
def test_batches_encode_as_protobuf_does_from_a_message_or_a_list(sizes):
    reads = [pb.ReadResponse(status=pb.EOK if i % 3 else pb.ENOENTRY, ledger_id=7, entry_id=i, body=os.urandom(n),
                             lac=i - 1, message="gone" if i % 3 == 0 else "") for i, n in enumerate(sizes)]
    adds = [pb.AddRequest(ledger_id=7, entry_id=i, master_key=b"mk", body=os.urandom(n), flags=i % 2)
            for i, n in enumerate(sizes)]
    for cls, entries in ((pb.ReadBatch, reads), (pb.AddBatch, adds)):
        msg = cls(entries=entries)
        want = msg.SerializeToString()
        assert encode_batch(msg) == want
        assert encode_batch(entries) == want
        assert cls.FromString(encode_batch(entries)) == msg


def test_a_non_message_entry_is_refused():
    with pytest.raises(AttributeError):
        encode_batch([b"raw bytes"])
