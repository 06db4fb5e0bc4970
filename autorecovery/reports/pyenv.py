"""The Python environment a Spark cluster's executors run for ``autorecovery report`` (EDGE: files; driver side).

Spark's documented way to give executors their Python packages is an archive of a virtual environment
in ``spark.archives`` with ``PYSPARK_PYTHON`` pointing into it (Spark's "Python Package Management",
the venv-pack section)::

    .venv/bin/python -m autorecovery.reports.pyenv /tmp/autorecovery-env.tar.gz
    autorecovery report all --snapshot snap/ --out report/ --master spark://host:7077 \\
        --conf spark.archives=/tmp/autorecovery-env.tar.gz#environment

:func:`pack` writes that archive itself rather than with venv-pack, because venv-pack refuses a venv
with an editable install (a development checkout) and packs everything the venv holds (pyspark's jars,
the linters): the archive holds ``autorecovery`` (its package files, copied from wherever it is
imported from) and the installed distributions it requires with its ``reports`` extra, closed
transitively, with pyspark's jars left out (an executor's Python worker does not load them; the JVM
has its own). Like venv-pack's, the interpreter itself is a symbolic link (``bin/python`` to the base
Python named in ``pyvenv.cfg``): every worker host needs that Python at that path, and nothing else.

:func:`executor_python` is what :mod:`autorecovery.reports.spark_io` makes executors run when a
``spark.archives`` entry is unpacked as ``#environment``. :func:`spark_home` is the directory
``spark-class`` (starting a standalone master or worker from the pip-installed pyspark) needs in
``SPARK_HOME``; ``python -m autorecovery.reports.pyenv --spark-home`` prints it.
"""

from __future__ import annotations

import io
import os
import re
import sys
import sysconfig
import tarfile
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path

#: the directory name (``#fragment`` of the ``spark.archives`` entry) the archive is unpacked under
FRAGMENT = "environment"

#: what a Python worker needs no copy of: pyspark's jars (the JVM side), byte-code caches
_SKIP = re.compile(r"(^|/)(__pycache__)(/|$)|^pyspark/jars/|\.pyc$")


def executor_python(fragment: str = FRAGMENT) -> str:
    """The interpreter path executors run for an archive unpacked as ``#fragment``: relative to the
    executor's working directory, where Spark unpacks ``spark.archives`` (``./environment/bin/python``)."""
    return f"./{fragment}/bin/python"


def archive_fragment(archives: str) -> str | None:
    """The ``#fragment`` of the first ``spark.archives`` entry (comma-separated URIs) unpacked as
    :data:`FRAGMENT`, or None when there is none."""
    for uri in (a.strip() for a in archives.split(",")):
        if uri.rpartition("#")[2] == FRAGMENT and "#" in uri:
            return FRAGMENT
    return None


def spark_home() -> str:
    """The pip-installed pyspark's package directory: ``SPARK_HOME`` for its ``bin/spark-class``."""
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent)


def distributions(root: str = "autorecovery", extras: Iterable[str] = ("reports",)) -> list[metadata.Distribution]:
    """The installed distributions ``root`` (with ``extras``) requires, transitively; ``root`` not included.

    Raises ``metadata.PackageNotFoundError`` naming a required distribution that is not installed."""
    from packaging.requirements import Requirement

    seen: dict[str, metadata.Distribution] = {}
    todo: list[tuple[str, tuple[str, ...]]] = [(root, tuple(extras))]
    while todo:
        name, ex = todo.pop()
        dist = metadata.distribution(name)
        for req in dist.requires or []:
            r = Requirement(req)
            env_extras = ["", *list(ex)]
            if r.marker is not None and not any(r.marker.evaluate({"extra": e}) for e in env_extras):
                continue
            key = re.sub(r"[-_.]+", "-", r.name).lower()
            if key == re.sub(r"[-_.]+", "-", root).lower() or key in seen:
                continue
            seen[key] = metadata.distribution(r.name)
            todo.append((r.name, tuple(r.extras)))
    return sorted(seen.values(), key=lambda d: d.metadata["Name"].lower())


def _dist_files(dist: metadata.Distribution, site: Path) -> Iterator[tuple[Path, str]]:
    """(file on disk, path inside site-packages) of a distribution's RECORD entries under site-packages."""
    for f in dist.files or []:
        src = Path(str(dist.locate_file(f))).resolve()
        try:
            rel = src.relative_to(site).as_posix()
        except ValueError:
            continue  # a script in bin/ or a data file outside site-packages
        if not _SKIP.search(rel) and src.is_file():
            yield src, rel


def _package_files(pkg: str = "autorecovery") -> Iterator[tuple[Path, str]]:
    """The package's own files (sources, templates, generated protobuf modules), from where it is imported."""
    import importlib

    top = Path(importlib.import_module(pkg).__file__ or "").resolve().parent
    for p in sorted(top.rglob("*")):
        rel = p.relative_to(top.parent).as_posix()
        if p.is_file() and not _SKIP.search(rel):
            yield p, rel


def pack(out: Path, *, compresslevel: int = 1) -> dict[str, int]:
    """Write ``out`` (``.tar.gz``): a virtual environment for executors (module docstring).

    Layout: ``pyvenv.cfg`` (this venv's, or one naming this interpreter's home), ``bin/python`` and
    ``bin/python3`` (symbolic links to the base interpreter), ``lib/pythonX.Y/site-packages/`` with
    ``autorecovery`` and its required distributions (their files and ``.dist-info``). Returns
    ``{"files": n, "bytes": uncompressed bytes}``. Raises ``metadata.PackageNotFoundError`` (a required
    distribution is not installed) or ``OSError`` (``out`` cannot be written)."""
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    pyver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    dest_site = f"lib/{pyver}/site-packages"
    base = Path(getattr(sys, "_base_executable", sys.executable) or sys.executable)
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    cfg_text = (cfg.read_text() if cfg.is_file()
                else f"home = {base.parent}\ninclude-system-site-packages = false\nversion = {sys.version.split()[0]}\n")
    files = 0
    size = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(tmp, "w:gz", compresslevel=compresslevel) as tar:
        def add_bytes(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))

        add_bytes("pyvenv.cfg", cfg_text.encode())
        for link in ("python", "python3", pyver):
            info = tarfile.TarInfo(f"bin/{link}")
            info.type = tarfile.SYMTYPE
            info.linkname = str(base)
            info.mode = 0o755
            tar.addfile(info)
        entries = list(_package_files())
        for dist in distributions():
            entries.extend(_dist_files(dist, site))
        for src, rel in entries:
            tar.add(src, arcname=f"{dest_site}/{rel}", recursive=False)
            files += 1
            size += src.stat().st_size
    os.replace(tmp, out)
    return {"files": files, "bytes": size}


def main(argv: list[str] | None = None) -> int:
    """``python -m autorecovery.reports.pyenv OUT.tar.gz`` packs; ``--spark-home`` prints SPARK_HOME."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--spark-home"]:
        print(spark_home())
        return 0
    if len(args) != 1 or not args[0].endswith((".tar.gz", ".tgz")):
        print("usage: python -m autorecovery.reports.pyenv OUT.tar.gz | --spark-home", file=sys.stderr)
        return 2
    res = pack(Path(args[0]))
    print(f"{args[0]}: {res['files']} files, {res['bytes'] / 2**20:.0f} MiB before compression; use "
          f"--conf spark.archives={Path(args[0]).resolve()}#{FRAGMENT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
