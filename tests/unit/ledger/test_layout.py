"""LAYOUT parsing and the supported ledger managers (PURE, milliseconds)."""

from __future__ import annotations

import pytest

from autorecovery.errors import CompatibilityError
from autorecovery.ledger.ids import ledger_id_from_path
from autorecovery.ledger.layout import (
    HIERARCHICAL,
    LONG_HIERARCHICAL,
    Layout,
    layout_data,
    manager_from_config,
    parse_layout,
    require_matches,
    require_supported,
)
from autorecovery.zk.paths import Paths
from autorecovery.zk.paths import LAYOUT_DATA

P = "/ledgers/LAYOUT"


def test_what_we_write_is_what_upstream_writes_and_is_supported() -> None:
    assert LAYOUT_DATA == b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"  # upstream's bytes
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
    (b"1\nflat:1", "only 'hierarchical' is supported"),
    (b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1", "FlatLedgerManagerFactory is not supported"),
    (b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:2", "version 2 is not supported"),
])
def test_managers_we_cannot_lay_out_are_refused_not_guessed(data: bytes, words: str) -> None:
    with pytest.raises(CompatibilityError) as ei:
        require_supported(parse_layout(data, P), P)
    assert P in str(ei.value) and words in str(ei.value)


def test_long_hierarchical_layout_is_supported_and_lays_out_every_id_3_4_4_4_4() -> None:
    data = b"2\norg.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory:1"
    assert layout_data(LONG_HIERARCHICAL) == data
    lay = require_supported(parse_layout(data, P), P)
    assert lay.long_paths and lay.type_name == "longhierarchical"
    paths = Paths("/ledgers").with_layout(lay)
    # upstream StringUtils.getLongHierarchicalLedgerPath: 19 digits, 3-4-4-4-4, for every id
    assert paths.ledger(1) == "/ledgers/000/0000/0000/0000/L0001"
    assert paths.ledger(123456789012) == "/ledgers/000/0000/1234/5678/L9012"
    assert ledger_id_from_path("/ledgers", paths.ledger(1)) == 1
    # the hybrid (default) manager keeps 2-4-4 below 2^31-1
    hyb = Paths("/ledgers").with_layout(parse_layout(layout_data(), P))
    assert hyb.ledger(1) == "/ledgers/00/0000/L0001" and not hyb.long_hierarchical


def test_pre_4_2_hierarchical_type_layout_is_read_as_upstream() -> None:
    lay = require_supported(parse_layout(b"1\nhierarchical:1", P), P)
    assert lay.manager_factory == HIERARCHICAL and not lay.long_paths


@pytest.mark.parametrize("value, want", [
    (None, None), ("", None), ("null", None), ("hierarchical", HIERARCHICAL),
    ("longhierarchical", LONG_HIERARCHICAL), (LONG_HIERARCHICAL, LONG_HIERARCHICAL),
])
def test_configured_manager_names(value, want) -> None:
    assert manager_from_config(value, "ledgerManagerFactoryClass") == want


def test_unknown_configured_manager_names_the_key() -> None:
    with pytest.raises(CompatibilityError, match="ledgerManagerType=flat"):
        manager_from_config("flat", "ledgerManagerType")


def test_configured_manager_must_match_layout() -> None:
    lay = parse_layout(layout_data(LONG_HIERARCHICAL), P)
    assert require_matches(lay, None, "metadataServiceUri", P) is lay
    assert require_matches(lay, LONG_HIERARCHICAL, "metadataServiceUri", P) is lay
    with pytest.raises(CompatibilityError) as ei:
        require_matches(lay, HIERARCHICAL, "metadataServiceUri", P)
    msg = str(ei.value)
    assert "metadataServiceUri" in msg and P in msg and "zk+longhierarchical" in msg
