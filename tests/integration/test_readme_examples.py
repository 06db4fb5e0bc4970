"""README.md's shell blocks run as written, top to bottom, with bash, against the cluster the README's own
``local-cluster up`` starts (issue 10: ``shell listunderreplicated -c`` is upstream's "count only";
issue 28: the old "Running" commands used ``zk1:2181;zk2:2181;zk3:2181`` and failed as written).

Every fenced block in README.md names its language. ``bash`` blocks run; a block that is deliberately
not run says so in its info string, ``bash not-run: <why>`` (the test lists them and their reasons);
``bash daemon`` is one command that runs in the foreground until stopped (the test waits for its
``AUTORECOVERY_READY`` line, sends SIGTERM and expects exit code 0). Other languages (``text``,
``properties``) are not shell. A ``text`` block right after a ``bash`` block is that block's output
(stderr, then stdout) and must match it line for line.

The blocks run in a scratch directory where ``.venv/bin/autorecovery`` is this checkout's entry point;
each block is its own ``bash -euo pipefail``, and what a block exports (``. .cluster/env``) is carried to
the next, as in one terminal. No substitution is made in the README's text.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from test_shell_support import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
FENCE = re.compile(r"^( *)```(\S*)[ \t]*([^\n]*)\n(.*?)^\1```[ \t]*$", re.S | re.M)
SHELL = {"bash", "sh"}


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    marker: str  # "" (run), "daemon", or "not-run: <why>"
    text: str
    output: str | None = None  # the text block that follows, if any


def readme_blocks() -> list[Block]:
    src = README.read_text()
    blocks: list[Block] = []
    last_end = None
    for m in FENCE.finditer(src):
        indent, lang, marker, body = m.group(1), m.group(2), m.group(3).strip(), m.group(4)
        text = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln for ln in body.splitlines())
        line = src.count("\n", 0, m.start()) + 1
        if lang == "text" and blocks and blocks[-1].lang in SHELL and src[last_end:m.start()].strip() == "":
            blocks[-1].output = text
        blocks.append(Block(line, lang, marker, text))
        last_end = m.end()
    return blocks


def test_every_block_is_labelled_and_the_skipped_ones_say_why():
    blocks = readme_blocks()
    assert blocks
    unlabelled = [b.line for b in blocks if not b.lang]
    assert not unlabelled, f"README.md blocks without a language (line {unlabelled}): say bash, text, properties..."
    shell = [b for b in blocks if b.lang in SHELL]
    bad = [(b.line, b.marker) for b in shell if b.marker not in ("", "daemon") and not
           re.match(r"not-run: \S", b.marker)]
    assert not bad, f"unknown marker(s) on README.md shell blocks: {bad}"
    skipped = [(b.line, b.marker.removeprefix("not-run: ")) for b in shell if b.marker.startswith("not-run")]
    print(f"\nREADME.md: {len(shell)} shell blocks, {len(shell) - len(skipped)} run, {len(skipped)} not run:")
    for line, why in skipped:
        print(f"  line {line}: {why}")
    # today: `make demo`/`make test` and the production install (systemd, kubectl)
    assert len(skipped) == 2, skipped
    assert len(shell) - len(skipped) >= 5
    daemons = [b for b in shell if b.marker == "daemon"]
    assert all(len([ln for ln in b.text.splitlines() if ln.strip()]) == 1 for b in daemons), \
        "a daemon block is one command"
    assert not any("zk1:2181" in b.text for b in shell if not b.marker.startswith("not-run")), \
        "runnable blocks use the cluster the README starts, not example hosts"


def _json_objects(stdout: str) -> list[dict]:
    return [json.loads(m.group(0)) for m in re.finditer(r"^\{\n.*?^\}$", stdout, re.S | re.M)]


def _check(block: Block, out: str, err: str, env: dict[str, str], work: Path) -> None:
    """Key output of each command the README shows."""
    text = block.text
    where = f"README.md line {block.line}:\n{text}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    if "local-cluster up" in text:
        assert re.search(r"^127\.0\.0\.1:\d+$", out, re.M), where
        assert env.get("ZK") and env.get("AUTORECOVERY_CONF") and env.get("AUTORECOVERY_HTTP"), \
            f"`. .cluster/env` exported ZK, AUTORECOVERY_CONF, AUTORECOVERY_HTTP\n{where}"
        assert f"\n{env['ZK']}\n" in f"\n{out}", where
    if "local-cluster status" in text:
        (status,) = [o for o in _json_objects(out) if "zk_connect" in o]
        assert status["zk_connect"] == env["ZK"], where
        assert Path(status["conf"]).resolve() == Path(env["AUTORECOVERY_CONF"]), where
        assert status["bookies"] and all(b["alive"] and re.match(r"127\.0\.0\.\d+:\d+$", b["id"])
                                         for b in status["bookies"]), where
        assert status["daemons"] and all(d["alive"] and d["http"] for d in status["daemons"]), where
        assert env["AUTORECOVERY_HTTP"] in [d["http"] for d in status["daemons"]], where
    if "restart --daemon 0" in text:
        assert re.search(r"^autorecovery-0: running, http (127\.0\.0\.1:\d+), pid \d+$", out, re.M), where
        port = re.search(r"^autorecovery-0: running, http (127\.0\.0\.1:\d+)", out, re.M).group(1)
        assert env["AUTORECOVERY_HTTP"] == port, f"the env file names the restarted daemon's port\n{where}"
    if "/readyz" in text:
        assert json.loads(out.strip().splitlines()[-1])["ready"] is True, where
    if "shell overview" in text:
        assert re.search(r"^    auditor:      127\.0\.0\.\d+:\d+ \(elected ", out, re.M), where
        assert re.search(r"^    under-replicated: 0 ledgers", out, re.M), where
    if "shell history" in text:
        # the kill -9 above is one healed episode: every ledger it marked healed
        assert re.search(r"bookie.*127\.0\.0\.13:\d+: (\d+)/\1 ledgers, .* healed; healed in ", out), where
    if "shell oktostop" in text:
        assert re.match(r"ok to stop 127\.0\.0\.12:\d+: every one of its \d+ fragments", out), where
    if "/api/v1/autorecovery/overview" in text:
        doc = json.loads(out)
        assert doc["auditor"]["bookie_id"] and doc["underreplicated"]["ledgers"] == 0, where
    if "workload write" in text:
        assert "wrote 20 ledgers, 10000 entries" in out, where
    if "workload verify" in text:
        assert re.search(r"verified 20 ledgers, 10000 entries, \d+ bytes; 0 errors", out), where
    if "who_is_auditor" in text:
        assert re.search(r"127\.0\.0\.\d+:\d+", out), where
    if "config check" in text:
        assert f"zkServers={env['ZK']}" in out, where
    if "listunderreplicated --conf" in text:
        assert "Under replicated ledger count: 0" in out, where
    if "shell whoisauditor" in text:
        assert re.search(r"^Auditor: 127\.0\.0\.\d+:\d+$", out, re.M), where
    if "export -c" in text:
        assert any((work / ".cluster" / "snap").iterdir()), where
    if "report all" in text:
        assert any((work / ".cluster" / "report").iterdir()), where
    if "local-cluster down" in text:
        assert out.startswith("stopped: ") and "zookeeper" in out, where
    if block.output is not None:
        got = [ln for ln in (err + out).splitlines() if ln.strip()]
        assert got == [ln for ln in block.output.splitlines() if ln.strip()], \
            f"the output README.md shows after line {block.line} differs:\n{where}"
        assert "kazoo" not in err, where


def test_readme_runs_top_to_bottom(tmp_path):
    work = tmp_path / "repo"
    (work / ".venv" / "bin").mkdir(parents=True)
    entry = work / ".venv" / "bin" / "autorecovery"
    entry.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m autorecovery \"$@\"\n")
    entry.chmod(0o755)
    (work / "deploy").symlink_to(REPO / "deploy")
    state = tmp_path / "exports.sh"
    state.write_text("")
    base_env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for k in ("ZK", "AUTORECOVERY_CONF", "AUTORECOVERY_HTTP"):
        base_env.pop(k, None)
    env_now: dict[str, str] = {}
    ran = 0

    def exported() -> dict[str, str]:
        res = subprocess.run(["bash", "-c", f". {shlex.quote(str(state))}; env -0"], env=base_env,
                             capture_output=True, text=True, check=True)
        return dict(item.split("=", 1) for item in res.stdout.split("\0") if "=" in item)

    try:
        for block in readme_blocks():
            if block.lang not in SHELL or block.marker.startswith("not-run"):
                continue
            if block.marker == "daemon":
                cmd = next(ln for ln in block.text.splitlines() if ln.strip())
                log = tmp_path / f"daemon-{block.line}.log"
                with open(log, "w") as fh:
                    proc = subprocess.Popen(["bash", "-c", f". {shlex.quote(str(state))}\nexec {cmd}"], cwd=work,
                                            env=base_env, stdout=fh, stderr=subprocess.STDOUT,
                                            start_new_session=True)
                try:
                    wait_until(lambda: "AUTORECOVERY_READY" in log.read_text() or proc.poll() is not None, 120,  # noqa: B023 - run before the loop rebinds it
                               0.1, f"README.md line {block.line} to print AUTORECOVERY_READY")
                    assert proc.poll() is None, f"README.md line {block.line} exited:\n{log.read_text()[-3000:]}"
                    proc.send_signal(signal.SIGTERM)
                    assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                ran += 1
                continue
            script = (f"set -euo pipefail\n. {shlex.quote(str(state))}\n{block.text}\n"
                      f"export -p > {shlex.quote(str(state))}\n")
            res = subprocess.run(["bash", "-c", script], cwd=work, env=base_env, capture_output=True, text=True,
                                 timeout=900)
            assert res.returncode == 0, (f"README.md line {block.line} exited {res.returncode}:\n{block.text}\n"
                                         f"stdout:\n{res.stdout[-3000:]}\nstderr:\n{res.stderr[-3000:]}")
            env_now = exported()
            _check(block, res.stdout, res.stderr, env_now, work)
            ran += 1
        assert ran >= 6
    finally:
        if (work / ".cluster" / "cluster.json").exists():
            subprocess.run([str(entry), "local-cluster", "down", "--dir", ".cluster"], cwd=work, env=base_env,
                           capture_output=True, timeout=120)
