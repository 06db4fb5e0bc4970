"""The report page without a browser (issue 27): humanised units, every summary section rendered (unknown
ones and new keys generically), no raw JSON dump, figures tagged for the browser test; the progress line
on a terminal only."""

from __future__ import annotations

import os
import pty
import re

import pandas as pd
import pytest

from autorecovery.cli.progress import Progress
from autorecovery.reports import units
from autorecovery.reports.html import render

SUMMARY = {
    "snapshot": "snap", "snapshot_time_ms": 1_780_000_000_000, "instance_id": "c1", "ledgers": 200,
    "capacity": {"bookies": 3, "used_bytes": 2.035028e10, "free_bytes": 3.2e13, "growth_bytes_per_day": 4.1e7,
                 "imbalance_bookie_max_over_mean": 1.31, "soonest_full": [{"bookie_id": "b1:3181", "days": 12.5}],
                 "brand_new_key_bytes": 5 * 2**30},
    "risk": {"domains": 4, "worst": {"kind": "rack", "name": "A", "ledgers_data_loss": 17, "ledgers_below_ack_quorum": 9000,
                                     "heal_bytes": 1.5e9, "heal_time_s": 19_440.0},
             "domains_holding_every_bookie": [], "racks_whose_loss_loses_data": ["A"], "workers": 2,
             "rate_bytes_per_s_per_worker": 5e7, "rate_assumed": True},
    "what_if_decommission": {"bookie_id": "b2:3181", "ledgers_data_loss": 3, "bytes_to_move": 7 * 2**40,
                             "heal_time_s": 3 * 86400.0},
}
TABLES = {
    "capacity": {"capacity_rack": pd.DataFrame({"rack": ["A", "B"], "bookies": [2, 1], "used_bytes": [2e10, 3.5e8],
                                                "free_bytes": [1e13, 2.2e13], "total_bytes": [1.1e13, 2.2e13],
                                                "growth_bytes_per_day": [4e7, 1e6], "days_until_full": [250.0, 9.0]})},
    "risk": {"risk_domains": pd.DataFrame({"kind": ["rack", "rack"], "name": ["B", "A"], "ledgers_data_loss": [0, 17],
                                           "lost_bytes_data_loss": [0.0, 3e6], "ledgers_below_ack_quorum": [10, 9000],
                                           "ledgers_copy_lost": [5, 1], "heal_bytes": [2e6, 1.5e9],
                                           "heal_time_s": [0.04, 19_440.0]})},
    "what_if": {"what_if_k_bookies": pd.DataFrame({"k": [1, 2], "bookies": ["b1", "b1|b2"],
                                                   "lost_bytes": [0.0, 3 * 2**30]})},
}


def figures(page: str) -> dict[str, tuple[str, str]]:
    return {m.group(1): (m.group(2), m.group(3)) for m in
            re.finditer(r'<span class="fig" data-key="([^"]+)" data-value="([^"]*)" data-kind="[^"]*">([^<]*)</span>', page)}


@pytest.mark.parametrize("n,text", [(0, "0 B"), (812, "812 B"), (2.035028e10, "18.95 GiB"), (1536, "1.5 KiB"),
                                    (1023.9 * 1024, "0.9999 MiB"), (3.2e13, "29.1 TiB"), (-1, "unknown"), (None, "unknown")])
def test_bytes_in_binary_units(n, text):
    assert units.size(n) == text


@pytest.mark.parametrize("s,text", [(45, "45.0 s"), (750, "12.5 min"), (19_440, "5.40 h"), (3 * 86400, "3.00 days")])
def test_durations_in_the_unit_a_planner_reads(s, text):
    assert units.duration(s) == text


def test_page_answer_first_humanised_every_section():
    page = render(SUMMARY, TABLES, ["summary.json", "risk_domains.csv", "risk_domains.parquet"])
    assert "<pre>" not in page and "e+10" not in page and "2.035028" not in page
    # the answer comes before the tables, and the worst rack is named with its costs
    answer = page.index('id="answer"')
    assert answer < page.index('id="risk"') and answer < page.index('id="capacity"')
    assert "If rack <b>A</b> goes down" in page and "5.40 h" in page
    figs = figures(page)
    assert figs["risk.worst.heal_bytes"] == ("1500000000.0", "1.397 GiB")
    assert figs["capacity.used_bytes"][1] == "18.95 GiB"
    # an unknown section and a new key in a known section show up without an edit
    assert 'id="section-what_if_decommission"' in page
    assert figs["what_if_decommission.bytes_to_move"][1] == "7 TiB"
    assert figs["what_if_decommission.heal_time_s"][1] == "3.00 days"
    assert figs["capacity.brand_new_key_bytes"][1] == "5 GiB"
    assert figs["capacity.soonest_full.0.days"][1] == "12.5 days"
    # a table of a new report too, humanised
    assert "what if k bookies" in page and "<td>3 GiB</td>" in page
    # riskiest first: rack A (17 ledgers lose data) before rack B; the soonest-full rack B first in capacity
    risk_part = page[page.index('id="risk"'):page.index('id="capacity"')]
    assert risk_part.index(">rack A<") < risk_part.index(">rack B<")
    cap_part = page[page.index('id="capacity"'):page.index('id="all-figures"')]
    assert cap_part.index(">B<") < cap_part.index(">A<")
    # raw figures are linked, not printed
    assert '<a href="risk_domains.parquet">' in page and '<a href="summary.json">' in page
    # charts are inline SVG drawn here (risk per failure domain, days to full): no image, no script, no CDN
    assert page.count("<svg ") == 2 and "<img" not in page and "<script" not in page and "http" not in page.replace(
        "http://www.w3.org/2000/svg", "")


def test_page_has_no_reprs_one_unit_per_quantity_and_no_duplicate_headings():
    summary = {**SUMMARY, "capacity": {**SUMMARY["capacity"], "bookies_disk_unknown": ["b9:3181"],
                                       "distribution": {"used_bytes": {"count": 3, "min": 9_596_928.0, "p50": 4.9e8,
                                                                       "max": 8.1e8, "max_over_mean": 1.79}}},
               "what_if_bookies": {"k1": [{"bookies": ["b1:3181"], "ledgers_data_loss": 2, "lost_bytes": 3e6,
                                           "ledgers_below_ack_quorum": 4}], "k2": [], "k3": []},
               "placement": {"current": {"FAIL": 3, "MEETS_STRICT": 7}, "under_what_if": None, "what_if": {},
                             "repair": {"ledgers_to_mark": 3, "swaps": 3, "bytes_to_copy": 5e8, "copy_time_s": 40.0,
                                        "ledgers_without_fix": 0, "rate_assumed": True,
                                        "rate_source": "default: 50 MB/s"}}}
    page = render(summary, TABLES, [])
    text = re.sub(r"<[^>]+>", " ", page)
    assert "['" not in text and "{'" not in text and "&#39;" not in text
    figs = figures(page)
    # a distribution's statistics in the unit of what they describe; its count and ratio stay plain
    assert figs["capacity.distribution.used_bytes.min"][1] == "9.152 MiB"
    assert figs["capacity.distribution.used_bytes.count"][1] == "3"
    assert figs["capacity.distribution.used_bytes.max_over_mean"][1] == "1.79"
    assert figs["what_if_bookies.k1.0.bookies"][1] == "b1:3181"
    assert not re.search(r"\b\d{1,3}(,\d{3}){2,}\b|\b\d{7,}\b", text)  # no raw byte count anywhere
    heads = re.findall(r"<h[1-3][^>]*>([^<]+)</h[1-3]>", page)
    assert len(heads) == len(set(heads)), heads
    # each known section is led by its answer: the worst bookie set and what to do about it
    assert "the worst one bookie (b1:3181) loses data in 2 ledgers" in page
    assert "Never take b1:3181 down: some entries have no other copy." in page
    assert "3 closed ledgers fail placement now" in page


def test_progress_on_a_terminal_only():
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        bar = Progress("report", stream=tty)
        bar.step("starting Spark")
        bar.count(5, 10, "ledgers")  # throttled
        bar.count(10, 10, "ledgers")
        bar.close()
    out = ""
    while True:  # the writer closed its end: read what the pty holds until EOF (EIO on Linux)
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk.decode()
    os.close(master)
    assert "report: starting Spark" in out and "10/10 ledgers (100.0%)" in out and out.endswith("\n")

    r, w = os.pipe()
    with os.fdopen(w, "w") as pipe:
        bar = Progress("report", stream=pipe)
        bar.step("starting Spark")
        bar.count(10, 10, "ledgers")
        bar.close()
    with os.fdopen(r) as f:
        assert f.read() == ""
