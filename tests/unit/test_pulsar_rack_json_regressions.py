"""Issue 15 regressions: hostile Pulsar ``/bookies`` rack JSON gives MalformedMetadataError naming the znode."""

from __future__ import annotations

import pytest

from autorecovery.errors import MalformedMetadataError
from autorecovery.placement.resolvers import PulsarRackResolver
from autorecovery.zk.topology_source import _one_level_racks


@pytest.mark.parametrize("doc", [
    b"[" * 100_000 + b"]" * 100_000,  # RecursionError used to escape
    b'{"g": {"h:1": {"rack": ' + b"9" * 5000 + b"}}}",  # ValueError (int digit limit) used to escape
])
def test_hostile_rack_json_is_malformed_metadata(doc):
    with pytest.raises(MalformedMetadataError, match="/bookies"):
        PulsarRackResolver(doc)
    assert _one_level_racks(doc) is False
    # the resolver still works with a good document afterwards
    r = PulsarRackResolver(b'{"default": {"h:3181": {"rack": "/r1"}}}')
    assert r.resolve(["h:3181"]) == ["/r1"]
