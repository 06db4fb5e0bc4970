"""The lock files (issue 28): requirements/runtime.txt (the Docker image) and requirements/test.txt (the
venv of `make venv`, and so CI) are fresh against pyproject.toml: every dependency pyproject.toml names
is locked at a version that satisfies it, every locked version carries hashes, nothing a locked package
needs is missing from its lock, and the runtime lock holds no dev or test tool. `make lock` regenerates
them."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "requirements" / "runtime.txt"
TEST = ROOT / "requirements" / "test.txt"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._\-]*)==([^\s\\;]+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})*)", re.M)


def locked(path: Path) -> dict[str, tuple[str, int]]:
    """canonical name → (version, number of hashes)."""
    return {canonicalize_name(n): (v, hashes.count("--hash=")) for n, v, hashes in _PIN.findall(path.read_text())}


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def requirements(extras: tuple[str, ...] = ()) -> list[Requirement]:
    """pyproject.toml's dependencies plus those of ``extras``, self-references (``autorecovery[x]``)
    expanded."""
    proj = project()
    out = [Requirement(r) for r in proj["dependencies"]]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for r in map(Requirement, proj["optional-dependencies"][extra]):
            if canonicalize_name(r.name) == canonicalize_name(proj["name"]):
                todo.extend(r.extras)
            else:
                out.append(r)
    return out


def missing_or_unsatisfied(reqs: list[Requirement], lock: dict[str, tuple[str, int]]) -> list[str]:
    bad = []
    for r in reqs:
        got = lock.get(canonicalize_name(r.name))
        if got is None:
            bad.append(f"{r} (not locked)")
        elif not r.specifier.contains(got[0], prereleases=True):
            bad.append(f"{r} (locked {got[0]})")
    return bad


def transitive_gaps(lock: dict[str, tuple[str, int]]) -> list[str]:
    """Requirements of locked packages (as their installed metadata states them, for this Python on
    Linux, no extras) that the lock lacks. Only packages installed here at the locked version are read."""
    env = {**default_environment(), "extra": ""}
    gaps = []
    for name, (version, _h) in lock.items():
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        for raw in dist.requires or []:
            r = Requirement(raw)
            if r.marker is not None and not r.marker.evaluate(env):
                continue
            if canonicalize_name(r.name) not in lock:
                gaps.append(f"{name}=={version} needs {r}")
    return gaps


@pytest.mark.parametrize("path, extras", [(RUNTIME, ()), (TEST, ("test",))], ids=["runtime", "test"])
def test_every_pyproject_dependency_is_locked_at_a_satisfying_version_with_hashes(path, extras):
    lock = locked(path)
    assert lock, f"{path.name}: no pinned requirement read"
    assert missing_or_unsatisfied(requirements(extras), lock) == [], f"{path.name} is stale: run `make lock`"
    assert [n for n, (_v, h) in lock.items() if h == 0] == [], f"{path.name}: pins without --hash"
    assert transitive_gaps(lock) == [], f"{path.name} misses a transitive dependency: run `make lock`"


def test_the_runtime_lock_holds_no_dev_or_test_tool_and_agrees_with_the_test_lock():
    runtime, test = locked(RUNTIME), locked(TEST)
    dev_only = {canonicalize_name(r.name) for r in requirements(("test",))} - {
        canonicalize_name(r.name) for r in requirements()}
    assert "grpcio-tools" in dev_only, "grpcio-tools generates the protobuf modules only (make proto)"
    assert sorted(dev_only & set(runtime)) == []
    # CI tests the versions the image ships
    assert {n: v for n, (v, _h) in runtime.items() if test.get(n, (None,))[0] != v} == {}


def test_freshness_check_catches_a_stale_lock(tmp_path):
    stale = tmp_path / "runtime.txt"
    text = RUNTIME.read_text()
    text = re.sub(r"^kazoo==[^\s\\]+", "kazoo==2.10.0", text, flags=re.M)  # pyproject pins another version
    stale.write_text(text)
    lock = locked(stale)
    assert any("kazoo" in b and "locked 2.10.0" in b for b in missing_or_unsatisfied(requirements(), lock))
    del lock["aiohappyeyeballs"]  # aiohttp needs it
    assert any("needs aiohappyeyeballs" in g for g in transitive_gaps(lock))


def test_the_cli_starts_without_site_hooks_as_in_a_runtime_only_install():
    """In a venv holding only the runtime lock (the image), nothing imports ``importlib.util`` before us:
    every `autorecovery` command failed with ``AttributeError: module 'importlib' has no attribute 'util'``.
    ``-S`` skips the site hooks (``.pth`` files) that import it in a development venv."""
    import site
    import subprocess
    import sys

    paths = [str(ROOT), *site.getsitepackages()]
    res = subprocess.run([sys.executable, "-S", "-c", "from autorecovery.cli.main import main; main(['--help'])"],
                         env={"PYTHONPATH": ":".join(paths), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and "local-cluster" in res.stdout, res.stderr[-2000:]
