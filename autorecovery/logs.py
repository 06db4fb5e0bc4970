"""structlog set-up for every autorecovery process (EDGE: touches the logging module and a stream).

* Not a TTY (systemd, Kubernetes, a file): one JSON object per line, e.g.
  ``{"event": "ledger replicated", "ledger_id": 17, "level": "info", "logger": "autorecovery.worker",
  "timestamp": "2026-05-01T10:00:00.123Z"}``.
* A TTY: structlog's console renderer.

Standard-library loggers (kazoo, aiohttp, grpc) are routed through the same renderer, so a line from
kazoo is JSON too. Conventions enforced here: a line about a ledger carries ``ledger_id`` and a line
about a bookie carries ``bookie_id`` — the processor :func:`normalise_ids` renames the common
shorthands (``ledger``, ``lid``, ``bookie``, ``bookie_src``) so the convention holds even when a
caller forgets.

Call :func:`configure` once, at the start of a CLI command.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_ID_ALIASES = {"ledger": "ledger_id", "lid": "ledger_id", "ledgerId": "ledger_id",
               "bookie": "bookie_id", "bookieId": "bookie_id", "bookie_src": "bookie_id"}

#: Third-party loggers that are chatty at INFO; raised to WARNING unless the level is DEBUG.
#: logger of the ``audit`` events: always at INFO or below, so ``logLevel=WARNING`` keeps them
AUDIT_LOGGER = "autorecovery.audit"

_NOISY = ("kazoo", "kazoo.client", "kazoo.protocol.connection", "aiohttp.access", "asyncio", "grpc")

#: loggers whose every line is re-levelled to DEBUG: kazoo retries a connect string forever and logs each
#: attempt (``Cannot resolve zk1``, ``Connection dropped``...); the one line that matters comes from
#: :meth:`autorecovery.zk.bridge.ZkClient.start` (a failed connect, classified) and its state changes
#: (connection lost / re-established), so kazoo's own lines only show with ``logLevel=DEBUG`` (issue 28)
DEBUG_ONLY = ("kazoo",)


class _DemoteToDebug(logging.Filter):
    """Handler filter: a record of a :data:`DEBUG_ONLY` logger (or a child) becomes DEBUG and passes only
    when the root logger is at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not any(record.name == n or record.name.startswith(n + ".") for n in DEBUG_ONLY):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().getEffectiveLevel() <= logging.DEBUG


def normalise_ids(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: rename ``ledger``/``lid``/``bookie``... to ``ledger_id``/``bookie_id``
    (an explicit ``ledger_id``/``bookie_id`` is never overwritten)."""
    for alias, canonical in _ID_ALIASES.items():
        if alias in event_dict and canonical not in event_dict:
            value = event_dict[alias]
            if isinstance(value, (int, str)):
                event_dict[canonical] = event_dict.pop(alias)
    return event_dict


def _renderer(fmt: str, stream: TextIO) -> Any:
    use_console = fmt == "console" or (fmt == "auto" and _isatty(stream))
    if use_console:
        return structlog.dev.ConsoleRenderer(colors=_isatty(stream))
    return structlog.processors.JSONRenderer(sort_keys=False)


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def configure(level: str = "INFO", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Configure structlog and the standard-library root logger.

    Args:
        level: ``DEBUG``, ``INFO``, ``WARNING`` or ``ERROR`` (case-insensitive; ``WARN`` accepted).
        fmt: ``auto`` (JSON unless ``stream`` is a TTY), ``json`` or ``console``.
        stream: where log lines go (default ``sys.stderr``; command output goes to stdout).

    Raises:
        ValueError: naming the level when it is not a logging level name.
    """
    stream = stream if stream is not None else sys.stderr
    lvl_name = {"WARN": "WARNING"}.get(level.upper(), level.upper())
    lvl = logging.getLevelName(lvl_name)
    if not isinstance(lvl, int):
        raise ValueError(f"bad log level {level!r}: expected DEBUG, INFO, WARNING or ERROR")

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        normalise_ids,
        structlog.processors.StackInfoRenderer(),
    ]
    renderer = _renderer(fmt, stream)
    json_mode = isinstance(renderer, structlog.processors.JSONRenderer)

    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *shared,
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *( [structlog.processors.format_exc_info] if json_mode else [] ),
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.addFilter(_DemoteToDebug())
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_autorecovery", False):
            root.removeHandler(h)
    handler._autorecovery = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(lvl)
    for name in _NOISY:
        logging.getLogger(name).setLevel(lvl if lvl <= logging.DEBUG else max(lvl, logging.WARNING))
    # audit lines (admin HTTP mutations, the shell's mutating commands; issue 25) whatever the level
    logging.getLogger(AUDIT_LOGGER).setLevel(min(lvl, logging.INFO))


def add_audit_file(path: str) -> logging.Handler:
    """Also append every ``audit`` event (logger :data:`AUDIT_LOGGER`) to ``path`` as one JSON line
    (``httpAuditLogFile``); returns the handler, for :func:`remove_audit_file`.

    Raises:
        OSError: the file cannot be opened for appending.
    """
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.JSONRenderer()]))
    logging.getLogger(AUDIT_LOGGER).addHandler(handler)
    return handler


def remove_audit_file(handler: logging.Handler) -> None:
    """Detach and close a handler of :func:`add_audit_file`. Idempotent."""
    logging.getLogger(AUDIT_LOGGER).removeHandler(handler)
    handler.close()


def library_defaults() -> None:
    """Quiet defaults for autorecovery used as a library (called on ``import autorecovery``).

    Unconfigured structlog prints every event, debug included, to stdout; a program embedding our client
    would see lines like ``rack info updated from /bookies`` on its console. Until somebody configures
    structlog (:func:`configure`, or the host program), our events go through the standard ``logging``
    module instead, under logger names ``autorecovery.*``, and a ``NullHandler`` on ``autorecovery`` keeps
    them off the console while logging is unconfigured (the Python convention for libraries). A host
    that configures ``logging`` (e.g. ``logging.basicConfig(level=logging.DEBUG)``) sees them, rendered as
    ``event='...' key=value``.
    """
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.processors.KeyValueRenderer(key_order=["event"], drop_missing=True),
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    lib = logging.getLogger("autorecovery")
    if not any(isinstance(h, logging.NullHandler) for h in lib.handlers):
        lib.addHandler(logging.NullHandler())
    # without a handler, kazoo's per-attempt WARNINGs would reach Python's last-resort stderr handler
    for name in DEBUG_ONLY:
        kz = logging.getLogger(name)
        if not kz.handlers:
            kz.addHandler(logging.NullHandler())


def get_logger(name: str, **context: Any) -> Any:
    """A structlog logger named ``name`` with ``context`` bound (e.g. ``bookie_id=...``)."""
    return structlog.get_logger(name).bind(**context) if context else structlog.get_logger(name)
