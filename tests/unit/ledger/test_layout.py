"""LAYOUT parsing and the supported ledger managers (PURE, milliseconds)."""

from __future__ import annotations

import pytest

from autorecovery.errors import CompatibilityError
from autorecovery.ledger.layout import HIERARCHICAL, Layout, parse_layout, require_supported
from autorecovery.zk.paths import LAYOUT_DATA

P = "/ledgers/LAYOUT"


def test_what_we_write_is_what_upstream_writes_and_is_supported() -> None:
    lay = parse_layout(LAYOUT_DATA, P)
    assert lay == Layout(2, HIERARCHICAL, 1)
    assert require_supported(lay, P) is lay


@pytest.mark.parametrize("data, words", [
    (b"3\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1", "format version 3 is newer"),
    (b"garbage", "cannot parse LAYOUT"),
    (b"2\nHierarchicalLedgerManagerFactory", "cannot parse the ledger manager"),
    (b"\xff\xfe", "not UTF-8"),
])
def test_unparsable_layouts_name_the_znode(data: bytes, words: str) -> None:
    with pytest.raises(CompatibilityError) as ei:
        parse_layout(data, P)
    assert str(ei.value).startswith(P) and words in str(ei.value)


@pytest.mark.parametrize("data, words", [
    (b"1\nflat:1", "pre-4.2 layout"),
    (b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1", "FlatLedgerManagerFactory is not supported"),
    (b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:2", "version 2 is not supported"),
])
def test_managers_we_cannot_lay_out_are_refused_not_guessed(data: bytes, words: str) -> None:
    with pytest.raises(CompatibilityError) as ei:
        require_supported(parse_layout(data, P), P)
    assert P in str(ei.value) and words in str(ei.value)
