"""One name, one home: every importer takes a name from the module that defines it (issue 44).

A module that merely imports a name (``from autorecovery.x import name`` in module ``m``) is not that
name's home; another module importing it from ``m`` leans on a re-export, and the next edit of ``m``
(dropping an import it no longer uses) breaks that importer or leaves a shim import that only exists for
it. The scan here parses (never imports) every module of ``autorecovery/`` and every file of ``bench/``
and ``tests/`` and fails on each ``from autorecovery.a import name`` (anywhere in a file: module level,
inside functions, under ``TYPE_CHECKING``) where ``autorecovery.a`` only imports ``name``, naming the
importer's file and line, the name and the module that defines it.

A module defines a name when its module-level code binds it other than by an import: ``def``,
``class``, an assignment (``=``, annotated, augmented, walrus), a ``for``/``with`` target, an
``except ... as`` name, or ``global``; a package also defines its sub-modules. The one exception is a
package ``__init__.py`` that declares ``__all__``: the names listed there are that package's documented
interface (``ALLOWED_INTERFACES`` lists those packages, so a new one is a reviewed change). So is
``zk/bridge.py`` handing on kazoo's names (``EDGE_REEXPORTS``): DESIGN.md makes it the only kazoo importer.

Not checked here: a name reached as an attribute of a module object (``from autorecovery.config import
keys as K`` then ``K.KEY_BY_NAME``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "autorecovery"
IMPORTER_DIRS = ("autorecovery", "bench", "tests")

# packages whose __init__.py declares __all__ and re-exports from its own modules: its documented interface
ALLOWED_INTERFACES = frozenset({"autorecovery.client", "autorecovery.placement"})
# edge modules that are DESIGN.md's only importer of a third-party package and hand its names on: the rest
# of the code takes kazoo's exceptions and event types from zk/bridge.py so that nothing else imports kazoo
EDGE_REEXPORTS = {"autorecovery.zk.bridge": "kazoo"}


@dataclass(frozen=True)
class ModuleInfo:
    """What one module's top level binds: names it defines, names it imports (name -> (module, name))."""

    name: str
    path: Path
    is_package: bool
    defined: frozenset[str]
    imported: dict[str, tuple[str, str]]
    exported: frozenset[str] | None  # __all__ when the module declares it as a literal


@dataclass(frozen=True)
class Offence:
    """One import of a name from a module that is not its home."""

    importer: str  # file path relative to the repository root
    line: int
    module: str  # the module the name was taken from
    name: str
    home: str  # where the name is defined ("module.name"), or "?" when no module binds it

    def __str__(self) -> str:
        return f"{self.importer}:{self.line}: {self.name} from {self.module}, defined in {self.home}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(node: ast.ImportFrom, current: str, is_package: bool) -> str | None:
    """The absolute module of ``from <module> import ...``; ``None`` when it cannot be resolved."""
    if not node.level:
        return node.module
    base = current.split(".") if is_package else current.split(".")[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    if not base:
        return None
    return ".".join([*base, node.module] if node.module else base)


def _targets(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _targets(elt)]
    if isinstance(target, ast.Starred):
        return _targets(target.value)
    return []


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements, descending into if/try/with/for/while blocks (not functions or classes)."""
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, (ast.If, ast.For, ast.While, ast.AsyncFor)):
            out += _top_level(stmt.body) + _top_level(stmt.orelse)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            out += _top_level(stmt.body)
        elif isinstance(stmt, (ast.Try, ast.TryStar)):
            out += _top_level(stmt.body) + _top_level(stmt.orelse) + _top_level(stmt.finalbody)
            for handler in stmt.handlers:
                out += _top_level(handler.body)
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                out += _top_level(case.body)
    return out


def scan_module(path: Path, tree: ast.Module) -> ModuleInfo:
    name = module_name(path)
    is_package = path.name == "__init__.py"
    defined: set[str] = set()
    imported: dict[str, tuple[str, str]] = {}
    exported: frozenset[str] | None = None
    for stmt in _top_level(tree.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                defined.update(_targets(target))
                if isinstance(target, ast.Name) and target.id == "__all__":
                    try:
                        exported = frozenset(ast.literal_eval(stmt.value))
                    except ValueError:
                        exported = None
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
            defined.update(_targets(stmt.target))
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None:
                    defined.update(_targets(item.optional_vars))
        elif isinstance(stmt, (ast.Try, ast.TryStar)):
            defined.update(h.name for h in stmt.handlers if h.name)
        elif isinstance(stmt, ast.Global):
            defined.update(stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            source = resolve(stmt, name, is_package)
            for alias in stmt.names:
                if source is not None and alias.name != "*":
                    imported[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    imported[alias.asname] = (alias.name, "")
                else:
                    top = alias.name.split(".")[0]
                    imported[top] = (top, "")
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.update(n for node in ast.walk(stmt) if isinstance(node, ast.NamedExpr) for n in _targets(node.target))
    # a name both imported and then re-bound at module level is the module's own (it defines it)
    for bound in defined:
        imported.pop(bound, None)
    return ModuleInfo(name, path, is_package, frozenset(defined), imported, exported)


def load_modules() -> dict[str, ModuleInfo]:
    modules: dict[str, ModuleInfo] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        info = scan_module(path, tree)
        modules[info.name] = info
    return modules


def is_submodule(modules: dict[str, ModuleInfo], module: str, name: str) -> bool:
    return f"{module}.{name}" in modules


def home_of(modules: dict[str, ModuleInfo], module: str, name: str) -> str:
    """Follow re-exports to the module that defines ``name`` ("module.name"); "?" when none binds it."""
    seen: set[tuple[str, str]] = set()
    while (module, name) not in seen:
        seen.add((module, name))
        info = modules.get(module)
        if info is None:  # outside autorecovery: its home is that module
            return f"{module}.{name}" if name else module
        if name in info.defined or is_submodule(modules, module, name):
            return f"{module}.{name}"
        if name not in info.imported:
            return "?"
        module, name = info.imported[name]
        if not name:  # `import x as name`: a module object
            return module
    return "?"


def allowed(modules: dict[str, ModuleInfo], module: str, name: str) -> bool:
    """True when ``from module import name`` takes ``name`` from its home (or a documented interface)."""
    info = modules[module]
    if name in info.defined or is_submodule(modules, module, name):
        return True
    source = info.imported.get(name, ("", ""))[0]
    if module in EDGE_REEXPORTS and source.split(".")[0] == EDGE_REEXPORTS[module]:
        return True
    return bool(
        info.is_package and module in ALLOWED_INTERFACES and info.exported is not None and name in info.exported
    )


def importer_files() -> list[Path]:
    return sorted(p for d in IMPORTER_DIRS for p in (ROOT / d).rglob("*.py"))


def scan_importer(path: Path, modules: dict[str, ModuleInfo]) -> list[Offence]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = str(path.relative_to(ROOT))
    is_package = path.name == "__init__.py"
    current = module_name(path)
    found: list[Offence] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = resolve(node, current, is_package)
            if source is None or source not in modules:
                continue
            for alias in node.names:
                if alias.name == "*":
                    continue
                if not allowed(modules, source, alias.name):
                    found.append(Offence(rel, node.lineno, source, alias.name, home_of(modules, source, alias.name)))
    return found


def offences() -> list[Offence]:
    modules = load_modules()
    return sorted(
        {o for path in importer_files() for o in scan_importer(path, modules)},
        key=lambda o: (o.importer, o.line, o.name),
    )


def test_every_name_is_imported_from_its_home() -> None:
    found = offences()
    pairs = sorted({(o.module, o.name) for o in found})
    assert not found, (
        f"{len(pairs)} names imported from a module that only imports them ({len(found)} imports); "
        "import each from its home:\n" + "\n".join(map(str, found))
    )


def test_allowed_interfaces_declare_all() -> None:
    modules = load_modules()
    for package in ALLOWED_INTERFACES:
        info = modules[package]
        assert info.is_package, f"{package} is listed as an interface but is not a package"
        assert info.exported, f"{package}/__init__.py is listed as an interface but declares no __all__"


def test_scanner_finds_a_re_export() -> None:
    # pure-logic check of the scanner on a made-up pair of modules (home defines, shim re-exports)
    home = ast.parse("def f():\n    pass\nX: int = 1\n")
    shim = ast.parse("from autorecovery.home import f\nfrom autorecovery.home import X as Y\nZ = 2\n")
    modules = {
        "autorecovery.home": scan_module(ROOT / "autorecovery" / "home.py", home),
        "autorecovery.shim": scan_module(ROOT / "autorecovery" / "shim.py", shim),
    }
    assert not allowed(modules, "autorecovery.shim", "f")
    assert not allowed(modules, "autorecovery.shim", "Y")
    assert allowed(modules, "autorecovery.shim", "Z")
    assert allowed(modules, "autorecovery.home", "f")
    assert home_of(modules, "autorecovery.shim", "Y") == "autorecovery.home.X"
    assert home_of(modules, "autorecovery.shim", "nothing") == "?"
