"""Every ``autorecovery ...`` command in README.md's code blocks runs, as written, and exits 0 (issue 10:
the README example ``shell listunderreplicated -c deploy/bk_server.conf`` used to fail because ``-c``
is upstream's "count only" flag there).

The commands run in a scratch directory, through the real entry point (``python -m autorecovery``), in
README order against the cluster the README's own ``local-cluster up`` starts. The only substitutions:
``127.0.0.1:PORT`` becomes that cluster's ZooKeeper, and ``deploy/bk_server.conf`` is the repository's
file with ``metadataServiceUri`` pointed at that ZooKeeper and ``httpServerPort=0`` (so the example
daemon does not need port 8080). ``local-cluster down`` runs last, since it stops what the others use;
``run`` is a daemon: it must print ``AUTORECOVERY_READY`` and exit 0 on SIGTERM.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from test_shell_support import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
COMMAND = re.compile(r"^(?:\.venv/bin/)?autorecovery\s+(.*)$")


def readme_commands() -> list[list[str]]:
    """``autorecovery`` argument lists of every command line in README.md's fenced code blocks (trailing
    ``# comments`` dropped)."""
    out = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", README.read_text(), re.S | re.M):
        for line in block.splitlines():
            m = COMMAND.match(line.strip())
            if m:
                out.append(shlex.split(m.group(1), comments=True))
    return out


def test_readme_lists_the_commands_this_test_knows():
    kinds = [tuple(a[:2]) if a[0] in ("local-cluster", "workload", "shell", "config", "report") else (a[0],)
             for a in readme_commands()]
    known = {("local-cluster", "up"), ("local-cluster", "status"), ("local-cluster", "down"),
             ("workload", "write"), ("workload", "verify"), ("run",), ("shell", "listunderreplicated"),
             ("config", "check"), ("export",), ("report", "all")}
    assert kinds and set(kinds) <= known, f"README command(s) this test does not know how to run: {set(kinds) - known}"
    assert ("shell", "listunderreplicated") in kinds


def _conf_for(zk_connect: str) -> str:
    text = (REPO / "deploy" / "bk_server.conf").read_text()
    uri = f"zk+hierarchical://{zk_connect.replace(',', ';')}/ledgers"
    text = re.sub(r"(?m)^metadataServiceUri=.*$", f"metadataServiceUri={uri}", text)
    return re.sub(r"(?m)^httpServerPort=.*$", "httpServerPort=0", text)


def test_every_readme_command_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    commands = readme_commands()
    downs = [a for a in commands if a[:2] == ["local-cluster", "down"]]
    ordered = [a for a in commands if a[:2] != ["local-cluster", "down"]] + downs
    assert ordered[0][:2] == ["local-cluster", "up"], "the README starts its cluster first"
    zk = None

    def run(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autorecovery", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=timeout)

    try:
        for args in ordered:
            args = [a.replace("127.0.0.1:PORT", zk) if zk else a for a in args]
            if args[0] == "run":
                log = tmp_path / "run.log"
                with open(log, "w") as fh:
                    proc = subprocess.Popen([sys.executable, "-m", "autorecovery", *args], cwd=tmp_path, env=env,
                                            stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    wait_until(lambda: "AUTORECOVERY_READY" in log.read_text() or proc.poll() is not None, 90,
                               0.1, f"`autorecovery {shlex.join(args)}` to get ready")
                    assert proc.poll() is None, f"`autorecovery {shlex.join(args)}` exited:\n{log.read_text()[-3000:]}"
                    proc.send_signal(signal.SIGTERM)
                    assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                continue
            res = run(args)
            assert res.returncode == 0, (f"`autorecovery {shlex.join(args)}` exited {res.returncode}\n"
                                         f"stdout:\n{res.stdout[-3000:]}\nstderr:\n{res.stderr[-3000:]}")
            if args[:2] == ["local-cluster", "up"]:
                zk = res.stdout.strip().splitlines()[-1]
                assert re.match(r"^127\.0\.0\.1:\d+$", zk), res.stdout
                (tmp_path / "deploy").mkdir(exist_ok=True)
                (tmp_path / "deploy" / "bk_server.conf").write_text(_conf_for(zk))
            if args[:2] == ["shell", "listunderreplicated"]:
                assert res.stdout.endswith("Under replicated ledger count: 0\n"), res.stdout
    finally:
        if (tmp_path / ".cluster" / "cluster.json").exists():
            run(["local-cluster", "down", "--dir", ".cluster"], timeout=120)
