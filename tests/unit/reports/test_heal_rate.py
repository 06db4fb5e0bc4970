"""The copy rate of the heal-time model: measured from the heal history when the snapshot has one
(``reports/healrate.py``), else given or the default, and ``rate_assumed`` says which."""

from __future__ import annotations

import pandas as pd
import pytest

from autorecovery.reports import build
from autorecovery.reports.healrate import measured_rate
from autorecovery.reports.input_checks import BadInput

BOOKIES = pd.DataFrame({"bookie_id": ["a:1", "b:1", "c:1"], "state": ["writable", "readonly", "gone"]})


def test_measured_rate_over_closed_episodes_per_daemon():
    eps = [{"state": "closed", "closed_ms": 5, "duration_s": 10.0, "bytes_healed": 4000, "workers": {"w1": 3, "w2": 1}},
           {"state": "closed", "closed_ms": 9, "duration_s": 20.0, "bytes_healed": 2000, "workers": {}},
           {"state": "open", "closed_ms": None, "duration_s": None, "bytes_healed": 999, "workers": {"w1": 1}},
           {"state": "closed", "closed_ms": 7, "duration_s": 0.0, "bytes_healed": 10, "workers": {}},   # no time
           {"state": "closed", "closed_ms": 8, "duration_s": "x", "bytes_healed": 10}]                    # not a number
    got = measured_rate(eps)
    # (4000 + 2000) bytes / (10 s × 2 daemons + 20 s × 1 daemon) = 150 bytes/s
    assert got is not None and got.bytes_per_s == pytest.approx(150.0) and got.episodes == 2
    assert measured_rate([eps[2]]) is None and measured_rate([]) is None


@pytest.mark.parametrize("given, measured, assumed, source", [
    (None, None, True, "default"),          # the 50 MB/s default: assumed, even though nothing caps it
    (20e6, None, True, "given"),            # --assumed-rate-mbps: still an assumption
    (None, measured_rate([{"state": "closed", "closed_ms": 1, "duration_s": 2.0, "bytes_healed": 600,
                           "workers": {"w": 1}}]), False, "measured"),
])
def test_rate_assumed_unless_measured(given, measured, assumed, source):
    manifest = {"throttles": {"replicationRateByBytes": "1000000", "replicationWorkerConcurrentLedgers": "2"}}
    thr = build.throttles(manifest, BOOKIES, given, None, measured)
    assert thr.assumed is assumed and thr.rate_source.startswith(source)
    rate = {"default": build.DEFAULT_RATE, "given": 20e6, "measured": 300.0}[source]
    assert thr.measured_rate == pytest.approx(rate)
    # the throttle caps the daemon rate; the stream rate stays the rate over the concurrent ledgers
    assert thr.rate_bytes_per_s == pytest.approx(min(rate, 1e6))
    assert thr.describe()["stream_rate_bytes_per_s"] == pytest.approx(rate / 2)
    assert thr.describe()["rate_assumed"] is assumed


def test_history_file_read_or_named_when_bad(tmp_path):
    assert build.read_history(tmp_path) is None  # no history.json: an older or synthetic snapshot
    (tmp_path / "history.json").write_text('{"episodes": [{"state": "healed", "closed_ms": 9, "duration_s": 3.0, '
                                           '"bytes_healed": 300, "workers": {"w": 1}}], "errors": []}')
    got = build.read_history(tmp_path)
    assert got is not None and got.bytes_per_s == pytest.approx(100.0)
    for bad, why in (("{", "not valid JSON"), ('{"episodes": 3}', "expected an object with an 'episodes' list")):
        (tmp_path / "history.json").write_text(bad)
        with pytest.raises(BadInput, match=why) as exc:
            build.read_history(tmp_path)
        assert "history.json" in str(exc.value) and "\n" not in str(exc.value)
