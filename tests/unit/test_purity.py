"""PURE modules (DESIGN.md) import no I/O: no asyncio, grpc, kazoo, socket, sqlite3 or HTTP, and from
our own package only other PURE modules. This stands in for an import-linter contract."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "autorecovery"

PURE_PACKAGES = ("ledger", "audit", "plan", "placement", "config/keys")
PURE_MODULES = ("errors.py", "zk/paths.py", "config/sections.py", "rpc/convert.py", "reports/model.py", "reports/whatif.py",
                "reports/riskvec.py", "reports/capacityvec.py", "admin/params.py")
PURE_PREFIXES = (
    *(f"autorecovery.{p}" for p in PURE_PACKAGES),
    "autorecovery.errors", "autorecovery.zk.paths", "autorecovery.config.keys", "autorecovery.config.sections",
    "autorecovery.rpc.convert",
    "autorecovery.proto", "autorecovery.reports.model", "autorecovery.reports.whatif", "autorecovery.admin.params",
    "autorecovery.reports.riskvec", "autorecovery.reports.capacityvec",
)
FORBIDDEN = {"asyncio", "grpc", "kazoo", "socket", "sqlite3", "aiohttp", "requests", "urllib", "http",
             "threading", "subprocess", "pyspark", "pandas", "pyarrow"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                pkg = ".".join(path.relative_to(PKG.parent).with_suffix("").parts[: -node.level])
                names.add(f"{pkg}.{node.module}")
            else:
                names.add(node.module)
    return names


def _pure_files() -> list[Path]:
    files = [f for p in PURE_PACKAGES for f in sorted((PKG / p).glob("*.py"))]
    return files + [PKG / m for m in PURE_MODULES]


def test_pure_modules_import_no_io():
    files = _pure_files()
    assert len(files) > 25
    for f in files:
        names = _imports(f)
        top = {n.split(".")[0] for n in names}
        bad = top & FORBIDDEN
        if f.name == "resolvers.py" and f.parent.name == "placement":
            bad -= {"subprocess"}  # the script resolver runs the operator's topology script
        assert not bad, f"{f.relative_to(PKG)} imports {sorted(bad)}"


def test_pure_modules_import_only_pure_parts_of_the_package():
    for f in _pure_files():
        ours = {n for n in _imports(f) if n.startswith("autorecovery")}
        impure = {n for n in ours if not n.startswith(PURE_PREFIXES)}
        assert not impure, f"{f.relative_to(PKG)} imports edge modules {sorted(impure)}"
