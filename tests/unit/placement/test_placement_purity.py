"""The placement package is PURE: no asyncio/grpc/kazoo/socket/sqlite3/aiohttp imports anywhere, and
subprocess only in the script resolver."""

from __future__ import annotations

import ast
from pathlib import Path

import autorecovery.placement as placement

FORBIDDEN = {"asyncio", "grpc", "kazoo", "socket", "sqlite3", "aiohttp", "requests", "urllib", "http", "threading"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_io_imports_in_placement():
    pkg = Path(placement.__file__).parent
    files = sorted(pkg.glob("*.py"))
    assert len(files) >= 10
    for f in files:
        names = _imports(f)
        assert not names & FORBIDDEN, (f.name, names & FORBIDDEN)
        if f.name != "resolvers.py":
            assert "subprocess" not in names, f.name
