"""``autorecovery bookie``: run one reference bookie until SIGTERM/SIGINT.

Also runnable as ``python -m autorecovery.bookie`` (same options). Once the bookie is registered in
ZooKeeper it prints exactly one line ``BOOKIE_READY <host:port>`` to stdout; logs go to stderr as JSON
lines (structlog via ``autorecovery.logs``; ``--log-format console`` for humans). Exit status: 0
after a clean shutdown on SIGTERM/SIGINT, 1 when the bookie cannot start (unformatted cluster,
cookie mismatch such as a wiped data directory, port in use, ZooKeeper unreachable...), with the reason in an ``"event": "bookie failed to start"`` log line
(fields ``error_type``, ``error``, ``bookie_id``, ``data_dir``).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import click
import structlog

from autorecovery import logs
from autorecovery.malloc import tune_malloc
from autorecovery.bookie.admission import AdmissionLimits
from autorecovery.bookie.disk import DiskThresholds
from autorecovery.bookie.server import BookieConfig, BookieServer
from autorecovery.bookie.limits import DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_ENTRY_SIZE
from autorecovery.cli.params import INT64_MAX, FiniteFloatRange
from autorecovery.config.keys.model import INT_MAX, YEAR_MS, YEAR_S
from autorecovery.config.zk_auth import zk_security
from autorecovery.errors import ConfigError
from autorecovery.rpc.tls import server_credentials
from autorecovery.config.tls import ServerTls

log = structlog.get_logger("autorecovery.cli.bookie")

READY_PREFIX = "BOOKIE_READY"

#: Largest --max-entry-size: 1 GiB (gRPC's message limit is an int32, and the limit is this plus 1 MiB).
MAX_ENTRY_SIZE_LIMIT = 1024**3


async def run_bookie(config: BookieConfig) -> int:
    """Start a bookie, print the ready line, and run until SIGTERM/SIGINT. Returns the exit status."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = BookieServer(config)
    starting = asyncio.create_task(server.start())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # signalled while starting: abandon the start (it cleans up after itself)
        starting.cancel()
        try:
            await starting
        except asyncio.CancelledError:
            pass  # the start we cancelled
        except Exception as err:  # noqa: BLE001 - stopping anyway: a start that failed meanwhile is logged
            log.info("the abandoned start failed", bookie_id=server.bookie_id, error=repr(err))
        await server.stop()
        log.info("stopped while starting", bookie_id=server.bookie_id)
        return 0
    exc = starting.exception()
    if exc is not None:
        stopping.cancel()
        log.error(
            "bookie failed to start",
            bookie_id=server.bookie_id,
            data_dir=str(server.data_dir),
            error_type=type(exc).__name__,
            error=str(exc),
        )
        return 1
    print(f"{READY_PREFIX} {server.bookie_id}", flush=True)
    await stopping
    log.info("stop signal received", bookie_id=server.bookie_id)
    await server.stop()
    return 0


@click.command("bookie", context_settings={"show_default": True, "help_option_names": ["-h", "--help"]})
@click.option("--zk", "zk", required=True,
              help="ZooKeeper connect string, optionally with a chroot: 127.0.0.1:2181/chroot")
@click.option("--ledgers-root", default="/ledgers", help="zkLedgersRootPath")
@click.option("--host", default="127.0.0.1", help="address to bind and advertise; the bookie id is host:port")
@click.option("--port", type=click.IntRange(0, 65535), default=3181, help="gRPC port (0 = any free port)")
@click.option(
    "--data-dir", type=click.Path(file_okay=False, path_type=Path), required=True,
    help="data directory (cookie in current/VERSION, SQLite database in current/)",
)
@click.option("--max-entry-size", type=click.IntRange(1024, MAX_ENTRY_SIZE_LIMIT), default=DEFAULT_MAX_ENTRY_SIZE,
              help="largest entry body accepted, bytes (gRPC accepts messages up to 1 MiB more)")
@click.option("--disk-usage-threshold", type=FiniteFloatRange(0, 1, min_open=True), default=0.95,
              help="diskUsageThreshold: turn read-only when this fraction of the disk is used")
@click.option("--disk-usage-lwm-threshold", type=FiniteFloatRange(0, 1, min_open=True), default=0.90,
              help="diskUsageLwmThreshold: turn writable again below this used fraction")
@click.option("--readonly-free-bytes", type=click.IntRange(0, INT64_MAX), default=0,
              help="(ours) also read-only while fewer than this many bytes are free; 0 = off")
@click.option("--force-readonly", is_flag=True, help="forceReadOnlyBookie: always register read-only")
@click.option("--disk-check-interval-ms", type=click.IntRange(10, YEAR_MS), default=2000, help="diskCheckInterval, ms")
@click.option("--fake-disk-total", type=click.IntRange(0, INT64_MAX), default=None,
              help="(test hook) report this total disk size in bytes instead of statvfs")
@click.option("--fake-disk-free", type=click.IntRange(0, INT64_MAX), default=None,
              help="(test hook) report this many free bytes instead of statvfs; "
                   "<data-dir>/fake-disk.json overrides both at run time")
@click.option("--zk-session-timeout-ms", type=click.IntRange(100, INT_MAX), default=10000, help="zkTimeout, ms")
@click.option("--shutdown-grace-ms", type=click.IntRange(0, YEAR_MS), default=5000,
              help="time in-flight requests get on shutdown, ms")
@click.option("--max-adds-in-progress", type=click.IntRange(0, INT_MAX), default=10_000,
              help="maxAddsInProgressLimit: adds in progress before ETOOMANYREQUESTS; 0 = no limit")
@click.option("--max-add-bytes-in-progress", type=click.IntRange(0, INT64_MAX), default=128 * 1024 * 1024,
              help="(ours) bytes of adds in progress before ETOOMANYREQUESTS; 0 = no limit")
@click.option("--max-reads-in-progress", type=click.IntRange(0, INT_MAX), default=10_000,
              help="maxReadsInProgressLimit: reads in progress before ETOOMANYREQUESTS; 0 = no limit")
@click.option("--stream-idle-timeout-ms", type=click.IntRange(100, YEAR_MS), default=120_000,
              help="(ours) an AddEntries stream idle this long is answered and closed, ms")
@click.option("--max-concurrent-streams", type=click.IntRange(1, INT_MAX), default=1000,
              help="(ours) gRPC streams per client connection")
@click.option("--max-receiving-messages", type=click.IntRange(0, INT_MAX), default=32,
              help="(ours) request messages being received or held before admission, all connections; "
                   "a unary request over it is answered ETOOMANYREQUESTS unread; 0 = no limit")
@click.option("--max-connections", type=click.IntRange(1, INT_MAX), default=DEFAULT_MAX_CONNECTIONS,
              help="(ours) client connections open at once; more are closed at accept")
@click.option("--zk-enable-security", is_flag=True,
              help="zkEnableSecurity: create the registration and cookie znodes with CREATOR_ALL_ACL "
                   "(needs --zk-digest-auth-file or --zk-sasl-*)")
@click.option("--zk-digest-auth-file", type=click.Path(dir_okay=False), default=None,
              help="zkDigestAuthFile: file whose first line is the ZooKeeper digest identity user:password")
@click.option("--zk-sasl-mechanism", type=click.Choice(["DIGEST-MD5"], case_sensitive=False), default=None,
              help="zkSaslMechanism: authenticate the ZooKeeper session with SASL (needs --zk-sasl-username "
                   "and --zk-sasl-password-file)")
@click.option("--zk-sasl-username", default=None, help="zkSaslUsername: the SASL user name")
@click.option("--zk-sasl-password-file", type=click.Path(dir_okay=False), default=None,
              help="zkSaslPasswordFile: file whose first line is the SASL password")
@click.option("--zk-tls", is_flag=True,
              help="zookeeper.client.secure: talk TLS to ZooKeeper (its secureClientPort)")
@click.option("--zk-tls-trust-store", type=click.Path(dir_okay=False), default=None,
              help="zookeeper.ssl.trustStore.location: PEM CA certificates of the ZooKeeper servers")
@click.option("--zk-tls-key-store", type=click.Path(dir_okay=False), default=None,
              help="zookeeper.ssl.keyStore.location: one PEM file with our certificate chain and unencrypted key")
@click.option("--zk-tls-no-hostname-verification", is_flag=True,
              help="zookeeper.ssl.hostnameVerification=false: check the CA only, not the host name")
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None,
              help="tlsCertificatePath: serve TLS with this PEM certificate chain (needs --tls-key)")
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None,
              help="tlsKeyStore (tlsKeyStoreType=PEM): the bookie's unencrypted PEM private key")
@click.option("--tls-trust-store", type=click.Path(dir_okay=False), default=None,
              help="tlsTrustStore (tlsTrustStoreType=PEM): PEM CA certificates that sign client certificates")
@click.option("--tls-client-auth", is_flag=True,
              help="tlsClientAuthentication: require a client certificate signed by --tls-trust-store (mTLS)")
@click.option("--tls-cert-files-refresh-seconds", type=click.IntRange(0, YEAR_S), default=0,
              help="tlsCertFilesRefreshDurationSeconds: at most this often, a new handshake re-reads the "
                   "--tls-* files when they changed (the new certificate is served without a restart; a "
                   "broken or partial file keeps the previous ones); 0 = never")
@click.option("--no-pull-entries", is_flag=True,
              help="(ours) do not serve PullEntries: replication workers then copy through themselves "
                   "(a TLS bookie pulls only with --tls-trust-store, dialling its peers with its own "
                   "certificate)")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              default="INFO")
@click.option("--log-format", type=click.Choice(["auto", "json", "console"]), default="auto",
              help="stderr log format; auto = JSON unless stderr is a terminal")
def bookie_command(
    zk: str,
    ledgers_root: str,
    host: str,
    port: int,
    data_dir: Path,
    max_entry_size: int,
    disk_usage_threshold: float,
    disk_usage_lwm_threshold: float,
    readonly_free_bytes: int,
    force_readonly: bool,
    disk_check_interval_ms: int,
    fake_disk_total: int | None,
    fake_disk_free: int | None,
    zk_session_timeout_ms: int,
    shutdown_grace_ms: int,
    max_adds_in_progress: int,
    max_add_bytes_in_progress: int,
    max_reads_in_progress: int,
    stream_idle_timeout_ms: int,
    max_concurrent_streams: int,
    max_receiving_messages: int,
    max_connections: int,
    zk_enable_security: bool,
    zk_digest_auth_file: str | None,
    zk_sasl_mechanism: str | None,
    zk_sasl_username: str | None,
    zk_sasl_password_file: str | None,
    zk_tls: bool,
    zk_tls_trust_store: str | None,
    zk_tls_key_store: str | None,
    zk_tls_no_hostname_verification: bool,
    tls_cert: str | None,
    tls_key: str | None,
    tls_trust_store: str | None,
    tls_client_auth: bool,
    tls_cert_files_refresh_seconds: int,
    no_pull_entries: bool,
    log_level: str,
    log_format: str,
) -> None:
    """Run a reference bookie (SQLite storage, gRPC protocol) registered in ZooKeeper."""
    logs.configure(log_level, fmt=log_format)
    tuned = tune_malloc()
    log.info("allocator tuned for entry buffers" if tuned else "allocator left as configured", **(tuned or {}))
    try:
        thresholds = DiskThresholds(
            usage_threshold=disk_usage_threshold,
            usage_lwm_threshold=disk_usage_lwm_threshold,
            readonly_free_bytes=readonly_free_bytes,
            force_readonly=force_readonly,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    try:
        security = zk_security(zk_enable_security, digest_file=zk_digest_auth_file, extra={
            "zkSaslMechanism": zk_sasl_mechanism, "zkSaslUsername": zk_sasl_username,
            "zkSaslPasswordFile": zk_sasl_password_file, "zookeeper.client.secure": zk_tls,
            "zookeeper.ssl.trustStore.location": zk_tls_trust_store,
            "zookeeper.ssl.keyStore.location": zk_tls_key_store,
            "zookeeper.ssl.hostnameVerification": not zk_tls_no_hostname_verification})
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    tls = _server_tls(tls_cert, tls_key, tls_trust_store, tls_client_auth, tls_cert_files_refresh_seconds)
    config = BookieConfig(
        zk=zk,
        data_dir=data_dir,
        ledgers_root=ledgers_root,
        host=host,
        port=port,
        max_entry_size=max_entry_size,
        thresholds=thresholds,
        disk_check_interval_s=disk_check_interval_ms / 1000.0,
        fake_disk_total_bytes=fake_disk_total,
        fake_disk_free_bytes=fake_disk_free,
        zk_session_timeout_ms=zk_session_timeout_ms,
        limits=AdmissionLimits(max_adds=max_adds_in_progress, max_add_bytes=max_add_bytes_in_progress,
                               max_reads=max_reads_in_progress, max_receiving=max_receiving_messages),
        stream_idle_timeout_s=stream_idle_timeout_ms / 1000.0,
        max_concurrent_streams=max_concurrent_streams,
        max_connections=max_connections,
        shutdown_grace_s=shutdown_grace_ms / 1000.0,
        zk_security=security,
        tls=tls,
        pull_entries=not no_pull_entries,
    )
    rc = asyncio.run(run_bookie(config))
    sys.exit(rc)


def _server_tls(cert: str | None, key: str | None, trust: str | None, client_auth: bool,
                refresh_s: int = 0) -> ServerTls | None:
    """The ``--tls-*`` flags as :class:`ServerTls` (None = plaintext), the files checked now.

    Raises:
        click.UsageError: a certificate without a key (or the reverse), ``--tls-client-auth`` or
            ``--tls-trust-store`` without a certificate, client auth without a trust store, or a file
            that cannot be read or is not PEM (naming the flag).
    """
    if not cert and not key:
        if client_auth or trust:
            raise click.UsageError("--tls-client-auth/--tls-trust-store need --tls-cert and --tls-key")
        return None
    if not cert or not key:
        raise click.UsageError("TLS needs both --tls-cert and --tls-key")
    tls = ServerTls(cert_path=cert, key_path=key, trust_path=trust, client_auth=client_auth,
                    refresh_s=float(refresh_s))
    try:
        server_credentials(tls)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    return tls
