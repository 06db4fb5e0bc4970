"""A private ZooKeeper server from Debian's ``zookeeper`` package, for tests, benchmarks and the demo.

It runs ``org.apache.zookeeper.server.ZooKeeperServerMain`` as a child process with its own data
directory, on a free port of a loopback address, with an SLF4J logging backend writing to
``<dir>/zookeeper.log`` so that a failed start is not silent. ``start()`` waits (with a deadline, no
sleeps as synchronisation) until the server answers the ``conf`` four-letter word *and* reports our
own data directory, so we never talk to somebody else's ZooKeeper that happens to hold the port.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
_LOG_BACKENDS = ("slf4j-simple.jar", "slf4j-jdk14.jar", "slf4j-nop.jar")


class ZooKeeperNotInstalled(RuntimeError):
    """Debian's ``zookeeper`` package is missing (``make zookeeper`` installs it)."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 1.0) -> str:
    """Send a ZooKeeper four-letter word (``ruok``, ``conf``, ``srvr``...) and return the answer text.

    Raises:
        OSError: when the server cannot be reached within ``timeout_s`` seconds.
    """
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def _classpath(netty: bool = False) -> str:
    if not ZOOKEEPER_JAR.exists():
        raise ZooKeeperNotInstalled(
            f"{ZOOKEEPER_JAR} not found: install Debian's zookeeper package (make zookeeper)"
        )
    parts = [str(ZOOKEEPER_JAR)]
    if netty:  # the jar's manifest lists netty's handler/transport but not the codec/resolver they need
        parts += [str(ZOOKEEPER_JAR.parent / j) for j in ("netty-codec.jar", "netty-resolver.jar")
                  if (ZOOKEEPER_JAR.parent / j).exists()]
    for name in _LOG_BACKENDS:
        jar = ZOOKEEPER_JAR.parent / name
        if jar.exists():
            parts.append(str(jar))
            break
    return ":".join(parts)


@dataclass(frozen=True)
class ServerTls:
    """TLS of the server's ``secureClientPort`` (ZooKeeper 3.8 PEM stores, Netty connection factory).

    Attributes:
        keystore_path: one PEM file with the server's certificate chain and unencrypted private key.
        truststore_path: PEM CA certificates that sign client certificates.
        client_auth: ``ssl.clientAuth``: ``need`` (a client certificate is required), ``want`` or
            ``none``.
    """

    keystore_path: str
    truststore_path: str
    client_auth: str = "none"


@dataclass
class ZooKeeperServer:
    """One standalone ZooKeeper process.

    Attributes:
        data_dir: directory for snapshots, transaction logs, the config and the log file.
        host: loopback address to bind (``127.0.0.1`` by default).
        port: client port (plaintext; readiness is checked on it); 0 picks a free one at start.
        tick_time_ms: ZooKeeper tickTime; the minimum session timeout is 2 ticks.
        tls: also serve TLS on ``secure_port`` (:class:`ServerTls`); None = plaintext only.
        secure_port: the TLS client port (0 picks a free one at start; only with ``tls``).
        sasl_users: DIGEST-MD5 users (name → password) of a JAAS ``Server`` section; when set the
            server requires SASL authentication of every session (``zookeeper.enforce.auth.enabled``
            with the ``sasl`` scheme, ZooKeeper 3.8): unauthenticated sessions are closed.
        heap_mb: the JVM's maximum heap (``-Xmx``, MB); 1M ledger znodes need ~1 GB (bench/audit.py).
    """

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    tick_time_ms: int = 250
    tls: ServerTls | None = None
    secure_port: int = 0
    sasl_users: dict[str, str] | None = None
    heap_mb: int = 256
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def connect_string(self) -> str:
        """``host:port`` for clients."""
        return f"{self.host}:{self.port}"

    @property
    def secure_connect_string(self) -> str:
        """``host:secure_port`` for TLS clients (only with ``tls``)."""
        return f"{self.host}:{self.secure_port}"

    def _tls_lines(self) -> list[str]:
        if self.tls is None:
            return []
        return [
            f"secureClientPort={self.secure_port}",
            f"secureClientPortAddress={self.host}",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={self.tls.keystore_path}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={self.tls.truststore_path}",
            "ssl.trustStore.type=PEM",
            f"ssl.clientAuth={self.tls.client_auth}",
        ]

    def _sasl_jvm_args(self) -> list[str]:
        if not self.sasl_users:
            return []
        jaas = self.data_dir / "jaas.conf"
        users = "\n".join(f'    user_{u}="{p}"' for u, p in self.sasl_users.items())
        jaas.write_text("Server {\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n"
                        f"{users};\n}};\n")
        return [
            f"-Djava.security.auth.login.config={jaas}",
            "-Dzookeeper.authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
            "-Dzookeeper.enforce.auth.enabled=true",
            "-Dzookeeper.enforce.auth.schemes=sasl",
        ]

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_time_ms}",
                    f"dataDir={self.data_dir / 'data'}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "maxClientCnxns=0",
                    f"minSessionTimeout={2 * self.tick_time_ms}",
                    "maxSessionTimeout=60000",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=*",
                    "snapCount=100000",
                    "preAllocSize=4096",
                    "forceSync=no",
                    *self._tls_lines(),
                    "",
                ]
            )
        )
        return cfg

    def start(self, timeout_s: float = 30.0) -> ZooKeeperServer:
        """Start the server and wait until it answers and reports our data directory.

        Raises:
            ZooKeeperNotInstalled: the Debian package is missing.
            RuntimeError: the process died or did not answer within ``timeout_s`` s; the message
                carries the tail of its log.
        """
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperNotInstalled("java not found on PATH (ZooKeeper needs a JRE)")
        if self.port == 0:
            self.port = free_port(self.host)
        if self.tls is not None and self.secure_port == 0:
            self.secure_port = free_port(self.host)
        cfg = self._write_config()
        log = open(self.data_dir / "zookeeper.log", "ab")  # noqa: SIM115 - held while the process/object lives, closed when it stops
        self.proc = subprocess.Popen(
            [
                java,
                f"-Xmx{self.heap_mb}m",
                "-XX:+UseSerialGC",
                # C1 only: a short-lived test/demo server spent ~half its CPU in the C2 compiler during
                # a heal on 2 cores (issue 13's heal bench); C1 code is fast enough for it
                "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-Dzookeeper.4lw.commands.whitelist=*",
                *self._sasl_jvm_args(),
                "-cp",
                _classpath(netty=self.tls is not None),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(cfg),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        (self.data_dir / "zookeeper.pid").write_text(str(self.proc.pid))
        deadline = time.monotonic() + timeout_s
        expected = str(self.data_dir / "data")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                conf = four_letter_word(self.host, self.port, "conf", timeout_s=0.5)
            except OSError:
                conf = ""
            if expected in conf:
                return self
            time.sleep(0.05)  # polling a readiness condition with a deadline, not synchronising
        self.stop()
        raise RuntimeError(f"ZooKeeper on {self.connect_string} not ready in {timeout_s}s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return (self.data_dir / "zookeeper.log").read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout_s`` s). Idempotent."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout_s)
