"""Checks of every input of ``autorecovery report`` on the driver, before Spark starts (EDGE: files, one
TCP probe).

Each check raises :class:`BadInput` with one line naming the offending thing (file, column, key, master
URL); the CLI prints it and exits 2 (docs/reports.md, "Exit codes"). Without them, a corrupt manifest gave a
Python traceback, a truncated Parquet file a Java stack trace after ~19 s, a wrong ``--master`` 211 lines
after ~71 s and an unknown what-if key a failure inside Spark tasks after ~39 s (issue 27).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from autorecovery.errors import AutoRecoveryError, ConfigError
from autorecovery.reports.snapshot import OPTIONAL_LEDGER_COLUMNS, SNAPSHOT_FORMAT, TABLES

#: How long the ``spark://`` probe waits for a TCP connect, in seconds.
PROBE_TIMEOUT_S = 2.0

_LOCAL = re.compile(r"local(\[(\*|[1-9][0-9]{0,4})(,[0-9]{1,4})?\])?")
_HOSTPORT = re.compile(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.\-]+):([0-9]{1,5})")
_K8S = re.compile(r"k8s://(https?://)?[A-Za-z0-9_.\-\[\]:]+(:[0-9]{1,5})?/?")


class BadInput(AutoRecoveryError):
    """An input of ``autorecovery report`` is wrong (one line, names it); exit code 2."""


def _manifest_problem(doc: Any) -> str | None:
    if not isinstance(doc, dict):
        return "not a JSON object"
    fmt = doc.get("format", 1)
    if not isinstance(fmt, int) or isinstance(fmt, bool):
        return f"format {fmt!r} is not an integer"
    if fmt > SNAPSHOT_FORMAT:
        return f"snapshot format {fmt} is newer than this autorecovery reads ({SNAPSHOT_FORMAT}); upgrade it"
    t = doc.get("time_ms")
    if not isinstance(t, int) or isinstance(t, bool) or t < 0:
        return f"time_ms {t!r} is not a non-negative integer (ms since the epoch)"
    for name in ("placement", "throttles", "counts"):
        v = doc.get(name, {})
        if not isinstance(v, dict):
            return f"{name} is {type(v).__name__}, expected an object"
    for name in ("placement", "throttles"):
        for k, v in doc.get(name, {}).items():
            if not isinstance(v, (str, int, float, bool)):
                return f"{name}.{k} is {type(v).__name__}, expected a string"
    for k, v in doc.get("counts", {}).items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return f"counts.{k} {v!r} is not a non-negative integer"
    return None


def check_snapshot(snapshot: Path) -> dict[str, Any]:
    """The snapshot's manifest after checking it and every table's Parquet footer and schema.

    Reads only ``manifest.json`` and each Parquet file's footer (its size is bounded by the row groups,
    not the rows). A table may carry more columns than this version knows; each known column must be
    present with its type (:data:`autorecovery.reports.snapshot.TABLES`), except the ledger columns added
    later (:data:`~autorecovery.reports.snapshot.OPTIONAL_LEDGER_COLUMNS`, the LAC): a snapshot written
    before them loads with the LAC unknown; when present they must have their type.

    Raises:
        BadInput: naming the file and what is wrong with it.
    """
    snapshot = Path(snapshot)
    if not snapshot.is_dir():
        raise BadInput(f"snapshot {snapshot}: not a directory")
    mpath = snapshot / "manifest.json"
    if not mpath.is_file():
        raise BadInput(f"{mpath} does not exist: not a snapshot, or the export did not finish")
    try:
        doc = json.loads(mpath.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"{mpath}: not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    problem = _manifest_problem(doc)
    if problem:
        raise BadInput(f"{mpath}: {problem}")
    for name, schema in TABLES.items():
        path = snapshot / f"{name}.parquet"
        if not path.is_file():
            raise BadInput(f"snapshot {snapshot} has no {path.name}")
        try:
            got = pq.read_schema(path)
        except (pa.ArrowException, OSError) as exc:
            first = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
            raise BadInput(f"{path}: not a readable Parquet file ({first})") from None
        for field in schema:
            idx = got.get_field_index(field.name)
            if idx < 0:
                if name == "ledgers" and field.name in OPTIONAL_LEDGER_COLUMNS:
                    continue  # written before the LAC columns: LAC unknown (spark_io.load adds nulls)
                raise BadInput(f"{path}: no column {field.name!r} ({field.type})")
            if not got.field(idx).type.equals(field.type):
                raise BadInput(f"{path}: column {field.name!r} is {got.field(idx).type}, expected {field.type}")
    return doc


def check_master(master: str | None, probe_timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Accept ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``, ``spark://host:port[,host:port...]``,
    ``yarn`` and ``k8s://...`` (Spark's master URL forms); for ``spark://`` one TCP connect to each
    master (``probe_timeout_s`` each) must succeed for at least one of them.

    Raises:
        BadInput: ``--master <value>: ...``.
    """
    if master is None:
        return
    m = master.strip()
    if _LOCAL.fullmatch(m) or m == "yarn" or _K8S.fullmatch(m):
        return
    if m.startswith("spark://"):
        hosts = m[len("spark://"):].split(",")
        errors = []
        for hp in hosts:
            hm = _HOSTPORT.fullmatch(hp)
            if not hm or not 0 < int(hm.group(2)) <= 65535:
                raise BadInput(f"--master {master!r}: {hp!r} is not host:port (e.g. spark://host:7077)")
            host = hm.group(1).strip("[]")
            try:
                socket.create_connection((host, int(hm.group(2))), timeout=probe_timeout_s).close()
                return
            except OSError as exc:
                errors.append(f"{hp}: {exc.strerror or exc}")
        raise BadInput(f"--master {master!r}: no Spark master answers ({'; '.join(errors)})")
    raise BadInput(f"--master {master!r}: not a Spark master URL (local, local[N], local[*], spark://host:port, "
                   "yarn, k8s://...)")


def check_what_if(what_if: Mapping[str, str], current: Mapping[str, Any]) -> dict[str, str]:
    """The what-if placement keys, each known (a placement key of the key table) and its value parsed by
    the key's type; then the whole config (snapshot's keys overridden) built as the executors will build it.

    Returns the overrides unchanged (strings, as the executors take them).

    Raises:
        BadInput: naming the key (with a "did you mean") or the bad value.
    """
    from autorecovery.config.keys import suggest
    from autorecovery.config.keys.table import KEY_BY_NAME
    from autorecovery.placement.config import PLACEMENT_KEYS

    for k, v in what_if.items():
        if k not in PLACEMENT_KEYS:
            hint = suggest(k, tuple(PLACEMENT_KEYS))
            kind = "not a placement key" if k in KEY_BY_NAME else "unknown key"
            raise BadInput(f"--what-if {k}: {kind}" + (f" (did you mean {hint}?)" if hint and hint != k else ""))
        try:
            KEY_BY_NAME[k].parse(v)
        except ConfigError as exc:
            raise BadInput(f"--what-if {exc}") from None
    if what_if:
        from autorecovery.reports.jobs import _policy

        try:
            _policy({**{k: str(v) for k, v in current.items()}, **what_if}, {}, ([], []))
        except (ConfigError, ValueError) as exc:
            raise BadInput(f"--what-if: {str(exc).splitlines()[0]}") from None
    return dict(what_if)
