"""Stock Apache BookKeeper 4.17 as child processes: the jars, JVM command lines, logging, process handles.

``make upstream`` fetches upstream's jars from Maven Central into ``.upstream/lib/`` (``interop/pom.xml``)
and compiles our Java test client (``interop/java/``) into ``.upstream/classes/``. This module turns
those into processes: :func:`java_cmd` builds a fast-starting JVM command line with a log4j2
configuration that writes a log file per process, :class:`JavaProcess` owns one child (logs, signals,
a failed start reported with its log tail), :class:`JavaBookie` is one upstream bookie, and
:func:`expected_payload` is the deterministic entry content the Java writer writes and the reader
checks. :mod:`autorecovery.testing.upstream_cluster` builds a whole cluster, the shell, the client tool
and AutoRecoveryMain on top of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from autorecovery.testing import waits

if TYPE_CHECKING:
    from kazoo.client import KazooClient

#: the directory ``make upstream`` fills (``lib/`` jars, ``classes/`` our Java client)
UPSTREAM_DIR = Path(__file__).resolve().parents[2] / ".upstream"
#: our Java client tool (interop/java/autorecovery/interop/BkTool.java)
TOOL_CLASS = "autorecovery.interop.BkTool"
BOOKIE_CLASS = "org.apache.bookkeeper.server.Main"
AUTORECOVERY_CLASS = "org.apache.bookkeeper.replication.AutoRecoveryMain"
SHELL_CLASS = "org.apache.bookkeeper.bookie.BookieShell"

LEDGER_STORAGE = {
    "db": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",  # upstream's production default
    "sorted": "org.apache.bookkeeper.bookie.SortedLedgerStorage",  # ServerConfiguration's default
}

# upstream's bin/common.sh flags for JDK 9+: netty's direct buffers, posix_fadvise in the journal, and
# the direct-memory CRC32 digest
_UPSTREAM_JVM_FLAGS = (
    "-Djava.net.preferIPv4Stack=true",
    "-Dio.netty.leakDetectionLevel=disabled",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
)
# short-lived test JVMs: small serial heap, C1 only (the C2 compiler would eat a core of a 2-core CI
# box while tests run), the default CDS archive for the JDK's own classes
_FAST_START_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-XX:-UsePerfData")
# long-running JVMs as upstream's bin/common.sh starts a bookie on JDK 9+ (DEFAULT_BOOKIE_GC_OPTS): G1 with a
# 10 ms pause goal, tiered C1+C2 (the JVM's default), a fixed heap (-Xms = -Xmx, as BOOKIE_MEM_OPTS sets it)
_PRODUCTION_FLAGS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=10", "-XX:+ParallelRefProcEnabled",
                     "-XX:+DisableExplicitGC")

# daemons (bookies, AutoRecoveryMain) and our client tool: INFO and up to the log file, WARN and up
# also to stderr (which the caller keeps in a file too); stdout stays free for the tool's JSON line
_DAEMON_LOG4J = """\
status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:autorecovery.log.file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{HH:mm:ss.SSS} %-5p [%t] %c{1} - %m%n
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %d{HH:mm:ss.SSS} %-5p %c{1} - %m%n
appender.err.filter.threshold.type = ThresholdFilter
appender.err.filter.threshold.level = warn
rootLogger.level = info
rootLogger.appenderRef.file.ref = FILE
rootLogger.appenderRef.err.ref = STDERR
"""

# the shell: as upstream's conf/log4j2.cli.xml (its commands print their results through the logger at
# INFO on stdout, ZooKeeper's chatter only from ERROR), plus the same lines in the log file
_CLI_LOG4J = """\
status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:autorecovery.log.file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{HH:mm:ss.SSS} %-5p [%t] %c{1} - %m%n
appender.out.type = Console
appender.out.name = CONSOLE
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{ABSOLUTE} %-5p %m%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = FILE
rootLogger.appenderRef.out.ref = CONSOLE
logger.zookeeper.name = org.apache.zookeeper
logger.zookeeper.level = error
"""


class UpstreamNotInstalled(RuntimeError):
    """``.upstream/`` (upstream BookKeeper's jars and our compiled Java client) is missing: run ``make upstream``."""


class UpstreamProcessError(RuntimeError):
    """An upstream Java process failed to start, or a tool gave no result; the message has its log tail."""


def upstream_home(home: Path | None = None) -> Path:
    """The directory holding ``lib/*.jar`` (upstream BookKeeper 4.17.2) and ``classes/`` (our client).

    Raises:
        UpstreamNotInstalled: the jars or the compiled client are missing (``make upstream`` makes them).
    """
    home = Path(home) if home is not None else UPSTREAM_DIR
    lib, classes = home / "lib", home / "classes"
    if not any(lib.glob("bookkeeper-server-*.jar")) or not (classes / "autorecovery/interop/BkTool.class").exists():
        raise UpstreamNotInstalled(f"upstream BookKeeper is not installed in {home}: run `make upstream`")
    return home


def log4j_config(directory: Path, console: str = "stderr") -> Path:
    """Write (once) and return the log4j2 properties file in ``directory``.

    Args:
        console: ``"stderr"`` for daemons and our tool (WARN+ on stderr), ``"stdout"`` for the shell
            (upstream's CLI layout: INFO+ on stdout).
    """
    if console not in ("stderr", "stdout"):
        raise ValueError(f"console must be 'stderr' or 'stdout', not {console!r}")
    path = Path(directory) / f"log4j2-{'cli' if console == 'stdout' else 'daemon'}.properties"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_CLI_LOG4J if console == "stdout" else _DAEMON_LOG4J)
    return path


def java_cmd(main_class: str, args: Iterable[str] = (), heap: str = "256m", *, log_file: Path | None = None,
             console: str = "stderr", jvm_opts: Iterable[str] = (), home: Path | None = None,
             production: bool = False) -> list[str]:
    """A ``java`` command line running ``main_class`` on upstream's classpath plus our client's classes.

    Args:
        heap: ``-Xmx`` (and the direct memory cap), e.g. ``"256m"``.
        log_file: where log4j2 writes this process's log (INFO and up); its directory also gets the
            log4j2 config. None: a ``java.log`` in the current directory.
        console: see :func:`log4j_config`.
        jvm_opts: extra JVM flags (``-D...``), placed before the main class.
        production: the JVM flags upstream's ``bin/common.sh`` gives a bookie (G1, C1+C2, ``-Xms`` =
            ``-Xmx``) instead of the fast-start test flags (serial GC, C1 only); for benchmarks.

    Raises:
        UpstreamNotInstalled: see :func:`upstream_home`.
    """
    home = upstream_home(home)
    log_file = Path(log_file) if log_file is not None else Path.cwd() / "java.log"
    config = log4j_config(log_file.parent, console)
    return [
        "java",
        f"-Xmx{heap}",
        f"-XX:MaxDirectMemorySize={heap}",
        *((f"-Xms{heap}", *_PRODUCTION_FLAGS) if production else _FAST_START_FLAGS),
        *_UPSTREAM_JVM_FLAGS,
        f"-Dlog4j.configurationFile={config}",
        f"-Dautorecovery.log.file={log_file}",
        *jvm_opts,
        "-cp",
        f"{home / 'lib'}/*:{home / 'classes'}",
        main_class,
        *args,
    ]


def write_properties(path: Path, props: Mapping[str, object]) -> Path:
    """Write a Java properties file (``key=value`` lines; values as ``str()``; bools as true/false)."""
    lines = []
    for k, v in props.items():
        if "=" in k or "\n" in k:
            raise ValueError(f"bad property key {k!r}")
        value = ("true" if v else "false") if isinstance(v, bool) else str(v)
        lines.append(f"{k}={value}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    return path


def tail(path: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of a text file ("(no file)" when missing)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return f"(no {path})"
    return data[-chars:].decode(errors="replace")


def expected_payload(ledger_id: int, entry_id: int, size: int) -> bytes:
    """The bytes the Java writer puts in entry ``entry_id`` of ledger ``ledger_id`` (``size`` bytes).

    ``b"L<ledger>E<entry>:"`` (cut to ``size``), then byte ``i`` is ``ord('a') + (i + ledger + entry) % 26``
    (interop/java/autorecovery/interop/Payload.java).
    """
    if ledger_id < 0 or entry_id < 0 or size < 1:
        raise ValueError(f"bad payload coordinates: ledger {ledger_id}, entry {entry_id}, size {size}")
    prefix = f"L{ledger_id}E{entry_id}:".encode()[:size]
    base = (ledger_id + entry_id) % 26
    return prefix + bytes(97 + (i + base) % 26 for i in range(len(prefix), size))


class JavaProcess:
    """One JVM child process in its own session, with stdout and stderr in files.

    Args:
        cmd: the command line (from :func:`java_cmd`).
        name: a label for messages ("bookie-0", "autorecovery-1"...).
        out_path, err_path: files receiving stdout and stderr (appended).
        log_path: the log4j2 log file (for the tail in error messages).
    """

    def __init__(self, cmd: list[str], name: str, out_path: Path, err_path: Path, log_path: Path) -> None:
        self.cmd, self.name = cmd, name
        self.out_path, self.err_path, self.log_path = Path(out_path), Path(err_path), Path(log_path)
        self.proc: subprocess.Popen | None = None

    def start(self) -> JavaProcess:
        """Spawn the process (idempotent while it runs)."""
        if self.alive:
            return self
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.out_path, "ab") as out, open(self.err_path, "ab") as err:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        """Running (a stopped, SIGSTOPped process counts as alive)."""
        return self.proc is not None and self.proc.poll() is None

    def describe_failure(self) -> str:
        """Exit status and the tails of stderr and the log, for error messages."""
        rc = self.proc.poll() if self.proc is not None else None
        return (f"{self.name} (pid {self.pid}, exit {rc}); stderr {self.err_path}:\n{tail(self.err_path, 1500)}\n"
                f"log {self.log_path}:\n{tail(self.log_path, 2500)}")

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process (no-op when it has exited)."""
        if self.alive:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def kill(self, timeout_s: float = 10.0) -> None:
        """SIGKILL and reap (idempotent)."""
        if self.alive:
            assert self.proc is not None
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout_s)

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (after SIGCONT, in case it is stopped), SIGKILL after ``timeout_s`` s; reaps. Idempotent."""
        if not self.alive:
            return
        assert self.proc is not None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def sigstop(self) -> None:
        """Freeze the process (SIGSTOP): sockets stay open, nothing answers, its ZooKeeper session lapses."""
        self.signal(signal.SIGSTOP)

    def sigcont(self) -> None:
        """Resume a frozen process (SIGCONT)."""
        self.signal(signal.SIGCONT)


def wait_until(predicate, timeout_s: float, what: str, proc: JavaProcess | None = None,
               interval_s: float = 0.05) -> None:
    """Poll ``predicate()`` until true, with a deadline (:func:`autorecovery.testing.waits.wait_until`).

    Raises:
        UpstreamProcessError: ``proc`` exited first, or ``timeout_s`` passed; with its log tail.
    """
    def exited() -> str | None:
        return None if proc is None or proc.alive else f"the process exited first: {proc.describe_failure()}"

    waits.wait_until(predicate, timeout_s, what, interval_s=interval_s, give_up=exited,
                     detail=(proc.describe_failure if proc is not None else None), error=UpstreamProcessError)


class ProcessHandle:
    """What every handle on one Java process offers, delegated to its :class:`JavaProcess` (``process``)."""

    process: JavaProcess

    @property
    def alive(self) -> bool:
        return self.process.alive

    def kill(self) -> None:
        """SIGKILL and reap (idempotent)."""
        self.process.kill()

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (upstream's shutdown hooks run); SIGKILL after ``timeout_s`` s."""
        self.process.stop(timeout_s)

    def sigstop(self) -> None:
        """Freeze it (SIGSTOP)."""
        self.process.sigstop()

    def sigcont(self) -> None:
        """Resume it (SIGCONT)."""
        self.process.sigcont()


class JavaBookie(ProcessHandle):
    """One upstream bookie process (``org.apache.bookkeeper.server.Main --conf bk_server.conf``). A kill
    leaves its registration until its ZooKeeper session expires (``zkTimeout`` later); a stop closes it.

    Args:
        workdir: its directory (conf, journal, ledgers, logs); kept across restarts.
        host, port: the loopback address it binds and advertises; its id is ``host:port``.
        metadata_uri: ``metadataServiceUri`` (``zk+hierarchical://HOST:PORT/root/ledgers``).
        kz: a started kazoo client on the same ZooKeeper (no chroot), used to watch its registration.
        conf: extra or overriding bk_server.conf keys (upstream names).
        zk_timeout_ms: ``zkTimeout``: a killed bookie's registration vanishes this long after.
        production_jvm: upstream's bookie JVM flags (see :func:`java_cmd`) instead of the test ones.
    """

    def __init__(self, workdir: Path, host: str, port: int, metadata_uri: str, kz: KazooClient, *,
                 conf: Mapping[str, object] | None = None, zk_timeout_ms: int = 5000, heap: str = "256m",
                 ledger_storage: str = "db", jvm_opts: Iterable[str] = (), production_jvm: bool = False) -> None:
        if ledger_storage not in LEDGER_STORAGE:
            raise ValueError(f"ledger_storage must be one of {sorted(LEDGER_STORAGE)}, not {ledger_storage!r}")
        self.workdir, self.host, self.port = Path(workdir).resolve(), host, port
        self.metadata_uri, self.kz = metadata_uri, kz
        self.ledgers_root = "/" + metadata_uri.split("://", 1)[1].split("/", 1)[1]
        self.conf_path = self.workdir / "bk_server.conf"
        props: dict[str, object] = {
            "bookiePort": port,
            "advertisedAddress": host,
            "listeningInterface": "lo",  # bind the advertised address itself, not 0.0.0.0
            "allowLoopback": True,
            "useHostNameAsBookieID": False,
            "metadataServiceUri": metadata_uri,
            "zkTimeout": zk_timeout_ms,
            "journalDirectories": self.workdir / "journal",
            "ledgerDirectories": self.workdir / "ledgers",
            "ledgerStorageClass": LEDGER_STORAGE[ledger_storage],
            "dbStorage_writeCacheMaxSizeMb": 16,
            "dbStorage_readAheadCacheMaxSizeMb": 16,
            "dbStorage_rocksDB_blockCacheSize": 8 * 1024 * 1024,
            "journalSyncData": False,  # tests kill processes, not machines: the page cache survives
            "httpServerEnabled": False,
            "autoRecoveryDaemonEnabled": False,
            # every bookie shares one real disk; only a nearly full one should make them read-only
            "diskUsageThreshold": 0.99,
            "diskUsageWarnThreshold": 0.98,
        }
        props.update(conf or {})
        self.properties = props
        log = self.workdir / "bookie.log"
        self.process = JavaProcess(java_cmd(BOOKIE_CLASS, ["--conf", str(self.conf_path)], heap, log_file=log,
                                            jvm_opts=jvm_opts, production=production_jvm),
                                   f"bookie {self.bookie_id}", self.workdir / "bookie.out",
                                   self.workdir / "bookie.err", log)
        # ZooKeeper sessions of registrations left by a previous process when this one started
        self._stale: set[int] = set()

    @property
    def bookie_id(self) -> str:
        """``host:port`` (upstream's id with ``useHostNameAsBookieID=false``)."""
        return f"{self.host}:{self.port}"

    def _reg_path(self, readonly: bool = False) -> str:
        return f"{self.ledgers_root}/available/{'readonly/' if readonly else ''}{self.bookie_id}"

    def _owner_of(self, readonly: bool = False) -> int | None:
        stat = self.kz.exists(self._reg_path(readonly))
        return stat.ephemeralOwner if stat is not None else None

    def start(self, wait: bool = True, timeout_s: float = 60.0) -> JavaBookie:
        """Write its conf and start it; with ``wait``, return once it is registered (see :meth:`wait_registered`)."""
        write_properties(self.conf_path, self.properties)
        if not self.process.alive:
            self._stale = {o for o in (self._owner_of(), self._owner_of(True)) if o is not None}
        self.process.start()
        if wait:
            self.wait_registered(timeout_s)
        return self

    def wait_registered(self, timeout_s: float = 60.0, readonly: bool = False) -> None:
        """Wait until ``<ledgers root>/available/[readonly/]<id>`` exists for this process's ZooKeeper
        session (after a kill and restart, the previous process's lingering znode does not count).

        Raises:
            UpstreamProcessError: it exited first or did not register in ``timeout_s`` s (log tail).
        """
        def registered() -> bool:
            owner = self._owner_of(readonly)
            return owner is not None and owner not in self._stale

        wait_until(registered, timeout_s, f"bookie {self.bookie_id} registering", self.process)

    def wait_unregistered(self, timeout_s: float = 60.0) -> None:
        """Wait until its writable and read-only registrations are gone (its session closed or expired)."""
        wait_until(lambda: self._owner_of() is None and self._owner_of(True) is None, timeout_s,
                   f"bookie {self.bookie_id} unregistering")

    def restart(self, timeout_s: float = 60.0) -> JavaBookie:
        """Stop it if it runs, then start it on the same data, address and conf; waits for registration."""
        self.stop()
        return self.start(True, timeout_s)
