"""Starting Spark for ``autorecovery report`` and reading a snapshot into it (EDGE: PySpark; driver side).

Split from :mod:`autorecovery.reports.jobs` (the executor-side partition functions stay there):
:func:`spark_session` starts or joins a session with the report's settings and its log file,
:func:`shuffle_partitions` and :func:`storage_level` size the partitions and place the cached blocks for
a snapshot, :func:`load` reads the snapshot's Parquet tables and builds the one-row-per-ledger view.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


#: Ledgers per shuffle partition at most. A partition is one block of the cached ledger view and of the
#: persisted fused rows; when such a block has spilled, Spark reads it back into one on-heap buffer
#: (``BlockManager.maybeCacheDiskBytesInMemory``), so the block, not the snapshot, sets the heap a task
#: needs. 125k is what a 1M snapshot's 8 partitions hold; 500k blocks ran the 2 GiB heap out of memory at
#: 10M ledgers (two tasks reading spilled blocks at once), and so did 125k ones: above 1M ledgers the
#: blocks stay on disk (:func:`storage_level`).
LEDGERS_PER_PARTITION = 125_000


#: Shuffle partitions of a snapshot of at most ``MIN_PARTITIONS * LEDGERS_PER_PARTITION`` (1M) ledgers:
#: four tasks per core on ``local[2]``.
MIN_PARTITIONS = 8


def shuffle_partitions(manifest: dict) -> int:
    """Shuffle partitions for a snapshot: :data:`MIN_PARTITIONS`, more for snapshots over 1M ledgers so a
    partition holds at most :data:`LEDGERS_PER_PARTITION` (10M ledgers: 80)."""
    n = int(manifest.get("counts", {}).get("ledgers") or 0)
    return max(MIN_PARTITIONS, -(-n // LEDGERS_PER_PARTITION))


def storage_level(manifest: dict) -> str:
    """Spark storage level (a ``pyspark.StorageLevel`` attribute name) of the cached ledger view and the
    persisted fused rows: ``MEMORY_AND_DISK`` up to :data:`MIN_PARTITIONS` partitions (1M ledgers),
    ``DISK_ONLY`` above.

    With a memory level, a block that spilled is read back into one on-heap buffer to be cached again
    (Spark's ``BlockManager.maybeCacheDiskBytesInMemory``), outside the memory the tasks account for: at
    10M ledgers that ran the 2 GiB heap out of memory while the per-ledger tables were written, even with
    125k-ledger blocks. On disk only, a block is streamed back and never held whole (the page cache keeps
    it close)."""
    return "MEMORY_AND_DISK" if shuffle_partitions(manifest) <= MIN_PARTITIONS else "DISK_ONLY"


def spark_session(master: str | None = None, app: str = "autorecovery-report", conf: Mapping[str, str] | None = None,
                  log_path: Path | None = None):
    """A SparkSession on ``master`` (``local[*]`` by default), bound to loopback unless configured.

    Python workers run this interpreter (``PYSPARK_PYTHON``), so they import the same ``autorecovery``;
    on a cluster master (not ``local``) with ``conf["spark.archives"]`` naming an archive unpacked as
    ``#environment`` (:mod:`autorecovery.reports.pyenv` packs one), they run ``./environment/bin/python``
    from it instead (Spark's "Python Package Management"). ``SPARK_HOME`` defaults to the pyspark package.
    With ``log_path``, the JVM (and the Python workers it starts) write their stderr — log4j's console,
    the JVM's own warnings, executor stack traces — to that file instead of ours: a terminal shows only
    the result, or one error line.
    """
    if log_path is not None:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(fd, 2)  # the JVM is forked now and inherits this stderr for its whole life
        try:
            return _start(master, app, conf)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            os.close(fd)
    return _start(master, app, conf)


def _start(master: str | None, app: str, conf: Mapping[str, str] | None):
    from autorecovery.reports import pyenv

    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("SPARK_HOME", pyenv.spark_home())  # spark-submit and spark-class need it
    # a cluster master with an archive unpacked as #environment: executors run the archive's Python
    # (Spark's documented venv shipping); else this interpreter, which then must exist on every host
    shipped = (not (master or "local").startswith("local")
               and pyenv.archive_fragment((conf or {}).get("spark.archives", "")) is not None)
    executor_python = pyenv.executor_python() if shipped else os.environ.get("PYSPARK_PYTHON", sys.executable)
    saved_python = os.environ.get("PYSPARK_PYTHON")
    # the SparkContext reads PYSPARK_PYTHON once, at its start, as the executors' interpreter
    os.environ["PYSPARK_PYTHON"] = executor_python
    try:
        return _build(master, app, conf, executor_python)
    finally:
        if shipped:
            if saved_python is None:
                os.environ.pop("PYSPARK_PYTHON", None)
            else:
                os.environ["PYSPARK_PYTHON"] = saved_python


def _build(master: str | None, app: str, conf: Mapping[str, str] | None, executor_python: str):
    from pyspark.sql import SparkSession

    b = (SparkSession.builder.appName(app).master(master or "local[*]")
         .config("spark.driver.host", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "8")
         .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
         # the ledgers table is O(ledgers): never broadcast it into the driver (a 1M snapshot's Parquet is
         # small enough to pass the default threshold and then does not fit once expanded)
         .config("spark.sql.autoBroadcastJoinThreshold", "-1")
         .config("spark.driver.memory", "2g")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.executorEnv.PYSPARK_PYTHON", executor_python))
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    try:
        spark = b.getOrCreate()
    except Exception as exc:  # broad: re-raised unless the JVM-start failure retried below
        # the JVM is started by fork+exec; in a process where gRPC's poller threads run (the test suite;
        # an embedding program) the child can die before it reports its port ("JAVA_GATEWAY_EXITED",
        # seen once in CI with an epoll "Bad file descriptor" from gRPC). One more start, then give up.
        if "JAVA_GATEWAY_EXITED" not in str(exc):
            raise
        import structlog

        structlog.get_logger("autorecovery.reports").warning("Spark's JVM exited at start; starting it once more",
                                                             error=str(exc)[:300])
        spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def executor_environment(spark) -> list[dict[str, str]]:
    """What the executors' Python workers run: one ``{"python": sys.executable, "prefix": sys.prefix,
    "autorecovery": the imported package's file}`` per distinct answer, from a task per default slot."""
    def probe(_rows):
        import sys

        import autorecovery

        yield (sys.executable, sys.prefix, autorecovery.__file__ or "")

    sc = spark.sparkContext
    n = max(2, int(sc.defaultParallelism))
    got = sorted(set(sc.parallelize(range(n), n).mapPartitions(probe).collect()))
    return [{"python": a, "prefix": b, "autorecovery": c} for a, b, c in got]


def load(spark, snapshot: Path) -> dict[str, Any]:
    """The snapshot's tables as DataFrames, plus ``ledger_view``: one row per ledger with ``segs``, its
    segments sorted by first entry id."""
    from pyspark.sql import functions as F

    from autorecovery.reports.snapshot import OPTIONAL_LEDGER_COLUMNS

    snap = str(Path(snapshot).resolve())
    t = {name: spark.read.parquet(f"{snap}/{name}.parquet") for name in ("ledgers", "segments", "bookies", "markers")}
    t["lac_read"] = "lac" in t["ledgers"].columns
    for col in OPTIONAL_LEDGER_COLUMNS:  # an older snapshot: LAC unknown, the open ledger's last segment empty
        if col not in t["ledgers"].columns:
            t["ledgers"] = t["ledgers"].withColumn(col, F.lit(None).cast("long"))
    segs = (t["segments"].groupBy("ledger_id")
            .agg(F.sort_array(F.collect_list(F.struct("first_entry_id", "last_entry_id", "ensemble"))).alias("segs")))
    # bookies whose copies of a ledger are already lost: the replicas named by its markers
    marked = (t["markers"].groupBy("ledger_id")
              .agg(F.array_distinct(F.flatten(F.collect_list("replicas"))).alias("marked")))
    t["ledger_view"] = (t["ledgers"].join(segs, "ledger_id", "inner").join(marked, "ledger_id", "left")
                        .drop("custom_metadata"))
    return t
