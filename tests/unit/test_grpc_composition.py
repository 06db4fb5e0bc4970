"""The gRPC bookie client is composed of parts (``rpc/bookie_client.py``): one declared connection state
shared by its reads and writes, its operations handed on with the parts' own signatures, its settings
clamped once. Pure construction: no channel is opened until a call is made."""

from __future__ import annotations

import inspect

import pytest

from autorecovery.rpc.bookie_client import GrpcBookieClient
from autorecovery.rpc.grpc_common import GRPC_FRAMING_BYTES, GrpcChannels
from autorecovery.rpc.grpc_reads import GrpcReads
from autorecovery.rpc.grpc_writes import GrpcWrites
from autorecovery.rpc.transport import BookieTransport


def _params(fn) -> list[tuple[str, object, object]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]


def test_the_parts_share_one_connection_state_and_the_settings() -> None:
    c = GrpcBookieClient(timeout_s=3.0, max_message_bytes=GRPC_FRAMING_BYTES + 1000, batch_bytes=10**9,
                         batch_entries=0, batching=False)
    assert isinstance(c.channels, GrpcChannels)
    assert c._reads._channels is c.channels and c._writes._channels is c.channels
    assert c._reads._settings is c.settings is c.channels.settings is c._writes._settings
    # a batch and its framing fit in one message; at least one entry per batch
    assert (c.batch_bytes, c.batch_entries, c.timeout_s, c.batching) == (1000, 1, 3.0, False)
    assert c.tls is None


@pytest.mark.parametrize("part", [GrpcReads, GrpcWrites])
def test_every_operation_of_a_part_is_offered_with_its_signature(part) -> None:
    ops = [n for n, f in inspect.getmembers(part, inspect.isfunction) if not n.startswith("_")]
    assert ops, part
    for name in ops:
        assert _params(getattr(GrpcBookieClient, name)) == _params(getattr(part, name)), name


def test_the_client_offers_the_transport_interface() -> None:
    names = [n for n in dir(BookieTransport) if not n.startswith("_")]
    for name in names:
        ours = getattr(GrpcBookieClient, name)
        if isinstance(ours, property):
            continue
        assert _params(ours) == _params(getattr(BookieTransport, name)), name


def test_cut_keeps_runs_within_the_limits() -> None:
    c = GrpcBookieClient(batch_bytes=25, batch_entries=3)
    runs = list(c.cut([(e, b"x" * 10) for e in range(7)] + [(7, b"y" * 40), (8, b"z")]))
    assert [[e for e, _ in run] for run in runs] == [[0, 1], [2, 3], [4, 5], [6], [7], [8]]
