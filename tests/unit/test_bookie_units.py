"""Pure parts of the reference bookie: cookie text format, ranges, striping, disk thresholds."""

from __future__ import annotations

from pathlib import Path

import pytest

from autorecovery.bookie.cookie import Cookie
from autorecovery.bookie.disk import DiskProbe, DiskThresholds, DiskUsage, write_fake_disk
from autorecovery.errors import CookieError
from autorecovery.rpc.convert import (
    compact_ranges,
    decode_service_info,
    encode_service_info,
    status_code,
    status_name,
    stored_on,
)


def test_cookie_text_is_upstream_layout_5() -> None:
    c = Cookie.for_bookie("127.0.0.1:3181", Path("/data/bk1"), "abc-123")
    # exactly what upstream Cookie.toString() writes: "5\n" (CURRENT_COOKIE_LAYOUT_VERSION since 4.16)
    # + TextFormat of CookieFormat
    assert c.to_text() == (
        "5\n"
        'bookieHost: "127.0.0.1:3181"\n'
        'journalDir: "/data/bk1"\n'
        'ledgerDirs: "1\\t/data/bk1"\n'
        'instanceId: "abc-123"\n'
    )
    assert Cookie.parse(c.to_text(), "test") == c


def test_cookie_parse_layout_3_and_garbage() -> None:
    c = Cookie.parse("3\n127.0.0.1:3181\n/j\n1\t/l\n", "f")
    assert (c.bookie_host, c.journal_dirs, c.ledger_dirs, c.instance_id, c.layout_version) == (
        "127.0.0.1:3181", "/j", "1\t/l", None, 3)
    with pytest.raises(CookieError, match="zpath"):
        Cookie.parse("not a cookie", "zpath")
    with pytest.raises(CookieError, match="cannot parse"):
        Cookie.parse('4\nbookieHost: "x"\nnoSuchField: 1\n', "f")


def test_cookie_mismatch_names_the_field() -> None:
    a = Cookie.for_bookie("h:1", Path("/d"), "i1")
    assert a.mismatch(a) is None
    assert "instanceId" in a.mismatch(Cookie.for_bookie("h:1", Path("/d"), "i2"))
    assert "bookieHost" in a.mismatch(Cookie.for_bookie("h:2", Path("/d"), "i1"))
    assert "journalDir" in a.mismatch(Cookie.for_bookie("h:1", Path("/e"), "i1"))


def test_compact_ranges() -> None:
    assert compact_ranges([]) == []
    assert compact_ranges([5, 0, 1, 2, 7, 8, 8]) == [(0, 2), (5, 5), (7, 8)]


def test_round_robin_striping() -> None:
    # E=3, WQ=2: entry 0 on {0,1}, entry 1 on {1,2}, entry 2 on {2,0}
    assert [e for e in range(6) if stored_on(e, 3, 2, 0)] == [0, 2, 3, 5]
    assert [e for e in range(6) if stored_on(e, 3, 2, 1)] == [0, 1, 3, 4]
    assert all(stored_on(e, 0, 0, 7) for e in range(5))
    # every entry is on exactly WQ indexes
    for e in range(20):
        assert sum(stored_on(e, 5, 3, i) for i in range(5)) == 3


def test_status_names_keep_upstream_numbers() -> None:
    assert status_code("EFENCED") == 504 and status_name(403) == "ENOENTRY" and status_name(999) == "E999"


def test_service_info_round_trip() -> None:
    assert decode_service_info(encode_service_info("10.0.0.1", 3181)) == ("10.0.0.1", 3181)
    assert decode_service_info(b"") is None


def test_disk_thresholds_hysteresis() -> None:
    t = DiskThresholds(usage_threshold=0.9, usage_lwm_threshold=0.8)
    full, mid, low = DiskUsage(100, 5), DiskUsage(100, 15), DiskUsage(100, 50)
    assert t.readonly(full, False) and t.readonly(full, True)
    assert not t.readonly(mid, False) and t.readonly(mid, True)  # between LWM and threshold: keep state
    assert not t.readonly(low, True)
    floor = DiskThresholds(readonly_free_bytes=60)
    assert floor.readonly(low, False) and not floor.readonly(DiskUsage(100, 60), True)
    assert DiskThresholds(force_readonly=True).readonly(low, False)
    with pytest.raises(ValueError, match="diskUsageLwmThreshold"):
        DiskThresholds(usage_threshold=0.5, usage_lwm_threshold=0.6)


def test_disk_probe_fake_file_overrides(tmp_path: Path) -> None:
    probe = DiskProbe(tmp_path, fake_total_bytes=1000, fake_free_bytes=900)
    assert probe.probe() == DiskUsage(1000, 900)
    write_fake_disk(tmp_path, free_bytes=10)
    assert probe.probe() == DiskUsage(1000, 10)
    (tmp_path / "fake-disk.json").write_text("{broken")
    assert probe.probe() == DiskUsage(1000, 900)
    write_fake_disk(tmp_path)
    real = DiskProbe(tmp_path).probe()
    assert real.total_bytes > 0 and 0 <= real.free_bytes <= real.total_bytes


def test_cookie_of_a_4_16_bookie_with_index_dirs_is_accepted():
    """Issue 10: cookies written by 4.16+ bookies carry ``indexDirs`` (CookieFormat field 5)."""
    from autorecovery.bookie.cookie import Cookie

    text = ('5\nbookieHost: "10.0.0.1:3181"\njournalDir: "/bk/journal"\nledgerDirs: "1\\t/bk/ledgers"\n'
            'instanceId: "abc"\nindexDirs: "1\\t/bk/index"\n')
    c = Cookie.parse(text, "/ledgers/cookies/10.0.0.1:3181")
    assert c.index_dirs == "1\t/bk/index" and c.ledger_dirs == "1\t/bk/ledgers"
    assert c.to_text() == text
    # a layout-4 cookie (bookies before 4.16) reads the same and is written back as 5, as upstream does
    old = Cookie.parse("4" + text[1:], "/ledgers/cookies/10.0.0.1:3181")
    assert old.layout_version == 4 and old.mismatch(c) is None and old.to_text() == text
    # upstream Cookie.verifyInternal: no indexDirs means "the ledger directories"
    plain = Cookie("10.0.0.1:3181", "/bk/journal", "1\t/bk/ledgers", "abc")
    assert plain.mismatch(Cookie("10.0.0.1:3181", "/bk/journal", "1\t/bk/ledgers", "abc", 4, "1\t/bk/ledgers")) is None
    assert "indexDirs" in (plain.mismatch(c) or "")
