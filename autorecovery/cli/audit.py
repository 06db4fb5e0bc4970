"""The audit line of the shell's mutating commands (issue 25).

They go straight to ZooKeeper, not through the admin HTTP port, so the shell writes the ``audit``
event itself, in the same shape as the HTTP one: who (the OS user), what (the command and its
options), where (the ZooKeeper connect string), result (the exit code); on stderr, and in
``httpAuditLogFile`` when set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from autorecovery import logs

#: Shell commands that change the cluster (issue 25 audit): command → whether this invocation does,
#: from its parameters. They go straight to ZooKeeper, so the shell writes the audit line itself.
_MUTATING: dict[str, Callable[[dict[str, Any]], bool]] = {
    "triggeraudit": lambda p: True,
    "forceauditchecks": lambda p: True,
    "autorecovery": lambda p: bool(p.get("enable") or p.get("disable")),
    "lostbookierecoverydelay": lambda p: p.get("set_") is not None,
    "ledgermetadata": lambda p: bool(p.get("restore_from")),
    "recover": lambda p: not (p.get("query") or p.get("dry_run")),
    "decommissionbookie": lambda p: True,
    "maintenance start": lambda p: True,
    "maintenance stop": lambda p: True,
    "maintenance override": lambda p: True,
    "oktostop": lambda p: bool(p.get("open_window")),
}
_LOCATION_PARAMS = frozenset({"conf", "zk", "ledgers_root", "sets"})


def audit_entry(settings: Any) -> Callable[[int], None] | None:
    """For a mutating shell command, a function writing its ``audit`` line (who = the OS user, what =
    the command and its options, where = the ZooKeeper it talks to, result = the exit code) on stderr
    and in ``httpAuditLogFile`` when set; None for a read-only one."""
    import getpass

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    name = ctx.info_name or ""
    if ctx.parent is not None and ctx.parent.info_name == "maintenance":
        name = f"maintenance {name}"
    decide = _MUTATING.get(name)
    params = {k: v for k, v in ctx.params.items() if k not in _LOCATION_PARAMS}
    if decide is None or not decide(params):
        return None
    try:
        who = getpass.getuser()
    except (KeyError, OSError):
        who = "unknown"
    shown = {k: str(v)[:100] for k, v in params.items() if v not in (None, False, (), "")}

    def write(code: int) -> None:
        import structlog

        path = settings.http.audit_file
        handler = None
        if path:
            try:
                handler = logs.add_audit_file(path)
            except OSError as exc:
                click.echo(f"WARNING: bad value for httpAuditLogFile: cannot append to {path}: "
                           f"{exc.strerror or exc}", err=True)
        try:
            structlog.get_logger(logs.AUDIT_LOGGER).info(
                "audit", who=f"os:{who}", via="shell", action=name, params=shown, zk=settings.zk_servers,
                result="ok" if code == 0 else "failed", exit_code=code)
        finally:
            if handler is not None:
                logs.remove_audit_file(handler)

    return write
