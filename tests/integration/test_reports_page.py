"""The report page in a real browser (issue 27): ``autorecovery report`` on a tiny synthetic snapshot
(local[1]), report.html opened in headless Chromium (Debian's package, ``make chromium``): a screenshot,
and the rendered DOM's figures equal summary.json — each tagged figure's value and its humanised text.
Also: progress on a terminal (a pty) and nothing but the result without one; a run that fails once
Spark starts exits 1 with one line."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autorecovery.reports.synthetic import generate

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "autorecovery"]
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60}
_TIME = {"s": 1, "min": 60, "h": 3600, "days": 86400}


def chromium() -> str:
    path = shutil.which("chromium")
    if not path:
        pytest.fail("chromium is not installed: run `make chromium` (make test does)")
    return path


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("page")
    generate(base / "snap", ledgers=150, bookies=6, racks=3, zones=3, regions=1, violations=0.05, seed=7)
    return base / "snap"


@pytest.fixture(scope="module")
def report(snapshot) -> tuple[Path, subprocess.CompletedProcess]:
    out = snapshot.parent / "out"
    p = subprocess.run([*CLI, "report", "all", "--snapshot", str(snapshot), "--out", str(out), "--master", "local[1]",
                        "--what-if", "minNumRacksPerWriteQuorum=3"], capture_output=True, text=True, cwd=ROOT,
                       timeout=280)
    assert p.returncode == 0, p.stderr[-2000:]
    return out, p


class Figures(HTMLParser):
    """``data-key`` → (data-value, data-kind, rendered text) of every ``span.fig`` in a DOM dump; headings' text."""

    def __init__(self) -> None:
        super().__init__()
        self.figs: dict[str, tuple[str, str, str]] = {}
        self._open: tuple[str, str, str] | None = None
        self._text: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "span" and a.get("class") == "fig":
            self._open = (a["data-key"], a["data-value"], a["data-kind"])
            self._text = []

    def handle_data(self, data):
        self.text.append(data)
        if self._open:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "span" and self._open:
            self.figs[self._open[0]] = (self._open[1], self._open[2], "".join(self._text))
            self._open = None


def lookup(summary, path: str):
    cur = summary
    for part in path.split("."):
        cur = cur[int(part)] if isinstance(cur, list) else cur[part]
    return cur


def shown_value(text: str, kind: str) -> float | None:
    """The number a humanised figure shows in the summary's unit (``1.397 GiB`` → bytes, ``5.40 h`` → s,
    ``3.2 years`` of a ``days`` figure → days), or None."""
    m = re.fullmatch(r"([0-9][0-9,]*(?:\.[0-9]+)?) ?(B|KiB|MiB|GiB|TiB|PiB|EiB|s|min|h|days|years)?(/s|/day)?",
                     text.strip())
    if not m:
        return None
    v = float(m.group(1).replace(",", ""))
    unit = m.group(2)
    if kind == "days":
        return v * 365 if unit == "years" else v
    return v * _UNITS[unit] if unit in _UNITS else v * _TIME[unit] if unit else v


def test_page_in_chromium_matches_summary(report, tmp_path):
    out, p = report
    browser = chromium()
    summary = json.loads((out / "summary.json").read_text())
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,2000"]
    shot = tmp_path / "report.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", (out / "report.html").as_uri()], capture_output=True,
                   timeout=120, check=True)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 1280 and len(png) > 50_000
    dom = subprocess.run([browser, *flags, "--dump-dom", (out / "report.html").as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    parser = Figures()
    parser.feed(dom)
    figs = parser.figs
    # the answer's figures are there, and every figure on the page is the summary's value
    for key in ("risk.worst.ledgers_data_loss", "risk.worst.heal_bytes", "risk.worst.heal_time_s",
                "capacity.used_bytes", "capacity.free_bytes", "placement.repair.bytes_to_copy",
                "placement.repair.copy_time_s", "ledgers"):
        assert key in figs, key
    checked = 0
    for key, (raw, kind, text) in figs.items():
        want = lookup(summary, key)
        assert json.loads(raw) == want, key
        if isinstance(want, (int, float)) and not isinstance(want, bool) and not key.endswith("time_ms"):
            got = shown_value(text, kind)
            assert got is not None, (key, text)
            assert got == pytest.approx(want, rel=0.01, abs=0.5), (key, text, want)
            checked += 1
    assert checked >= 15
    # every number of summary.json is on the page (a new key shows without editing the page)
    def leaves(v, prefix=""):
        if isinstance(v, dict):
            for k, x in v.items():
                yield from leaves(x, f"{prefix}.{k}" if prefix else k)
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                yield from leaves(x, f"{prefix}.{i}")
        elif not isinstance(v, list):
            yield prefix, v
    missing = [k for k, v in leaves(summary) if k not in figs]
    assert missing == []
    text = " ".join(parser.text)
    assert "e+0" not in text and "e+1" not in text  # no 2.035028e+10
    # readable all the way down: no Python repr of a list or a dict, no raw byte count beside a MiB
    # figure (the snapshot has 150 ledgers and 6 bookies: no count reaches a million)
    assert "['" not in text and "{'" not in text and "{\"" not in text, re.findall(r".{40}(?:\['|\{').{40}", text)
    assert not re.findall(r"\b\d{1,3}(?:,\d{3}){2,}\b|\b\d{7,}\b", text), \
        re.findall(r".{30}(?:\b\d{1,3}(?:,\d{3}){2,}\b|\b\d{7,}\b).{10}", text)
    # each heading once; the charts are inline SVG (no image, no script, nothing fetched)
    heads = re.findall(r"<h[1-3][^>]*>([^<]+)</h[1-3]>", dom)
    assert len(heads) == len(set(heads)), heads
    assert dom.count("<svg ") == 2 and "<script" not in dom and "<img" not in dom
    keep = os.environ.get("REPORT_SCREENSHOT")
    if keep:  # to look at the page as a planner would
        Path(keep).write_bytes(png)
    assert text.index("What to do") < text.index("Failure domains, riskiest first")
    for name in ("summary.json", "risk_domains.csv", "risk_domains.parquet", "capacity_bookies.csv"):
        assert f'href="{name}"' in dom and (out / name).exists()
    assert p.stderr == ""  # not a terminal: nothing but the result (on stdout)
    assert "report: " in p.stdout


def test_progress_on_a_terminal(snapshot):
    out = snapshot.parent / "out-tty"
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CLI, "report", "capacity", "--snapshot", str(snapshot), "--out", str(out),
                             "--master", "local[1]"], stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, text=True)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 280
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break  # the child closed the pty
        if not chunk:
            break
        seen += chunk
    os.close(master)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, seen[-2000:]
    shown = seen.decode(errors="replace")
    assert "report: starting Spark" in shown and "report: capacity" in shown and "\r" in shown
    assert "capacity:" in stdout and "report:" in stdout


def test_failed_run_exits_1_with_one_line(snapshot, tmp_path):
    t0 = time.monotonic()
    p = subprocess.run([*CLI, "report", "capacity", "--snapshot", str(snapshot), "--out", str(tmp_path / "o"),
                        "--master", "local[1]", "--conf", "spark.driver.memory=lots"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 1
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR: the report failed: ") and "spark.log" in lines[0], p.stderr
    assert "Invalid maximum heap size" in (tmp_path / "o" / "spark.log").read_text()
    assert time.monotonic() - t0 < 60
