"""The chaos campaign's disk filler on a real tmpfs (root: ``mount -t tmpfs``): filled to a fraction it
stops there, leaving the room a bookie's write cache may still flush; filled to 1.0 it leaves nothing."""

from __future__ import annotations

import os

import pytest

from autorecovery.testing.chaos import disk as chaos_disk

pytestmark = pytest.mark.integration


def _used(d) -> float:
    st = os.statvfs(d)
    return 1.0 - st.f_bavail / st.f_blocks


def test_fill_to_a_fraction_then_to_the_last_byte_then_free(tmp_path):
    d = tmp_path / "disk"
    why = chaos_disk.mount_tmpfs(d, 64)
    assert why is None, why
    try:
        wrote = chaos_disk.fill(d, to_fraction=0.96)
        assert wrote > 0
        assert 0.95 < _used(d) <= 0.961, _used(d)
        assert os.statvfs(d).f_bavail * os.statvfs(d).f_frsize >= int(0.039 * 64 * 2**20)
        chaos_disk.fill(d)
        assert os.statvfs(d).f_bavail == 0
        chaos_disk.free(d)
        assert _used(d) < 0.01
        with pytest.raises(ValueError, match="to_fraction"):
            chaos_disk.fill(d, to_fraction=0.0)
    finally:
        chaos_disk.unmount(d)
