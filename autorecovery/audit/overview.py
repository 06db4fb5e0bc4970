"""The cluster at a glance, and the heal history as text (PURE).

Ours, as ``ceph -s`` is for Ceph: :func:`build` reduces what ZooKeeper holds (and, on a daemon, its
progress view) to one document — the auditor, bookies up / down (since when) / read-only / in
maintenance, under-replicated ledgers and bytes, in progress, blocked (with reasons), unrecoverable,
heal rate and ETA, the last check times and the open / latest heal episodes — with a health word and
its reasons. :func:`format_overview` lays it out for a person; :func:`format_history` lists episodes.
The I/O that gathers the inputs is ``admin.ops_overview``.

Units: times in ms since the epoch (shown in UTC), sizes in bytes, rates in bytes per second.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autorecovery.audit.episodes import Episode

#: the checks shown, state name → (ctime znode key, label)
CHECKS = (("bookie_check", None, "bookie check"), ("check_all_ledgers", "checkallledgers", "ledger check"),
          ("placement_check", "placementpolicycheck", "placement check"),
          ("replicas_check", "replicascheck", "replicas check"))


@dataclass(frozen=True)
class Inputs:
    """What :func:`build` reduces (every field plain data, gathered by ``admin.ops_overview``).

    Attributes:
        auditor: bookie id of the elected auditor, None when nobody is elected.
        enabled: AutoRecovery enabled (no ``underreplication/disable``).
        writable, readonly: registered bookie ids. known: every bookie with a cookie.
        state: the auditor's published history state ({} when none, see ``zk.history``).
        maintenance: bookie or rack → window record (``maintenance-state`` windows).
        guard: failure domain → bookies the rack-loss guard holds back.
        marked: under-replicated ledgers now (markers). in_progress: ledger id → lock holder.
        unrecoverable: marked ledgers with an unrecoverable record.
        ctimes: ctime znode key → ms of the last run (``checkallledgersctime``...; None when absent).
        progress: a daemon's ``/progress`` cluster section (rate, ETA, blocked), None from the shell.
        episodes: the heal episodes, oldest first. errors: one line per thing that could not be read.
        now_ms: wall clock, ms.
    """

    auditor: str | None
    enabled: bool
    writable: frozenset[str]
    readonly: frozenset[str]
    known: frozenset[str]
    state: Mapping[str, Any]
    maintenance: Mapping[str, Mapping[str, Any]]
    guard: Mapping[str, Iterable[str]]
    marked: int
    in_progress: Mapping[int, str]
    unrecoverable: int
    ctimes: Mapping[str, int | None]
    progress: Mapping[str, Any] | None
    episodes: list[Episode]
    now_ms: int
    errors: list[str] = field(default_factory=list)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _map(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``doc[key]`` when it is an object, else {} (a hostile or old state document)."""
    v = doc.get(key)
    return v if isinstance(v, Mapping) else {}


def build(i: Inputs) -> dict[str, Any]:
    """The overview document (``shell overview --json``, ``GET /api/v1/autorecovery/overview``)."""
    state = i.state if i.state.get("auditor") == i.auditor else {}  # a stale state of another auditor: not used
    lost_doc = _map(state, "lost")
    available = i.writable | i.readonly
    down = sorted((i.known | set(lost_doc)) - available)
    held = {b: dict(w) for b, w in i.maintenance.items()}
    guarded = sorted({b for bs in i.guard.values() for b in bs})
    ur = _map(state, "underreplicated")
    by_worker: dict[str, int] = {}
    for w in i.in_progress.values():
        by_worker[w] = by_worker.get(w, 0) + 1
    reasons: dict[str, int] = {}
    prog = i.progress or {}
    for r in (prog.get("blocked") or {}).values():
        reasons[str(r)] = reasons.get(str(r), 0) + 1
    if guarded:
        reasons["rack-loss guard holds back lost bookies"] = len(guarded)
    if held:
        reasons["maintenance window holds back lost bookies"] = len(held)
    opened = [e for e in i.episodes if e.open]
    closed = [e for e in i.episodes if not e.open]
    rate: float | None
    if i.progress is not None:
        rate, eta, source = prog.get("rate_bytes_per_s"), prog.get("eta_s"), "daemon"
    else:
        rate = sum(e.rate_bytes_per_s(i.now_ms) for e in opened) if opened else None
        etas = [e.eta_s(i.now_ms) for e in opened]
        eta = None if not opened or any(x is None for x in etas) else max(x for x in etas if x is not None)
        source = "episodes"
    if i.marked == 0:
        eta = 0.0
    checks_doc = _map(state, "checks")
    checks: dict[str, Any] = {}
    for name, ctime_key, _label in CHECKS:
        c = _map(checks_doc, name)
        last = _int(c.get("started_ms"))
        if last is None and ctime_key is not None:
            last = i.ctimes.get(ctime_key)
        checks[name] = {"last_ms": last, "ok": c.get("ok"), "skipped": c.get("skipped") or ""}
    health, why = "HEALTH_OK", []
    if i.auditor is None:
        why.append("no auditor elected")
    if i.unrecoverable:
        why.append(f"{i.unrecoverable} ledgers unrecoverable")
    err = bool(why)
    if not i.enabled:
        why.append("AutoRecovery disabled")
    if down:
        why.append(f"{len(down)} bookies down")
    if i.marked:
        why.append(f"{i.marked} ledgers under-replicated")
    if reasons:
        why.append(f"{sum(reasons.values())} blocked")
    if why:
        health = "HEALTH_ERR" if err else "HEALTH_WARN"
    return {
        "health": health, "health_reasons": why, "now_ms": i.now_ms,
        "auditor": None if i.auditor is None else {
            "bookie_id": i.auditor, "elected_ms": _int(state.get("elected_ms")),
            "state_updated_ms": _int(state.get("updated_ms"))},
        "autorecovery_enabled": i.enabled,
        "bookies": {
            "total": len(i.known | available), "writable": sorted(i.writable), "readonly": sorted(i.readonly),
            "down": [{"bookie_id": b, "since_ms": _int(lost_doc.get(b))} for b in down],
            "in_maintenance": sorted(held), "held_by_guard": guarded},
        "underreplicated": {
            "ledgers": i.marked, "bytes": _int(ur.get("bytes")) if state else None,
            "in_progress": len(i.in_progress), "in_progress_by_worker": dict(sorted(by_worker.items())),
            "unrecoverable": i.unrecoverable, "blocked": sum(reasons.values()), "blocked_reasons": reasons},
        "heal": {"rate_bytes_per_s": None if rate is None else round(float(rate), 1),
                 "eta_s": None if eta is None else round(float(eta), 1), "source": source,
                 "open_episodes": [e.as_dict(i.now_ms) for e in opened],
                 "last_episode": closed[-1].as_dict(i.now_ms) if closed else None},
        "checks": checks,
        "errors": list(i.errors),
    }


# -- text ---------------------------------------------------------------------------------------------------
def human_bytes(n: int | float | None) -> str:
    """``1.5 MB`` (powers of 1000, as upstream's readable sizes); ``?`` for None."""
    if n is None:
        return "?"
    v = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(v) < 1000 or unit == "TB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1000
    return f"{v:.1f} TB"


def when(ms: int | None, now_ms: int) -> str:
    """``2026-12-02 04:20:01Z (5 m ago)``; ``never`` for None."""
    if ms is None:
        return "never"
    t = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return f"{t} ({duration(max(0.0, (now_ms - ms) / 1000))} ago)"


def duration(s: float | None) -> str:
    """``42 s``, ``3 m 5 s``, ``2 h 10 m``; ``?`` for None."""
    if s is None:
        return "?"
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} m {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} m"


def episode_line(e: Mapping[str, Any], now_ms: int) -> str:
    """One line of an episode dict (:meth:`Episode.as_dict`)."""
    head = f"{e['name'] or '-'}  {e['kind']:<12} {e['subject']}"
    figures = (f"{e['ledgers_healed']}/{e['ledgers_marked']} ledgers, {human_bytes(e['bytes_healed'])}/"
               f"{human_bytes(e['bytes_marked'])} healed")
    extra = []
    if e["ledgers_unrecoverable"]:
        extra.append(f"{e['ledgers_unrecoverable']} unrecoverable")
    if e["ledgers_blocked"]:
        extra.append(f"{e['ledgers_blocked']} blocked")
    if e["state"] == "open":
        tail = f"open since {when(e['detected_ms'], now_ms)}, ETA {duration(e['eta_s'])}"
    else:
        tail = f"{e['state']} in {duration(e['duration_s'])}, detected {when(e['detected_ms'], now_ms)}"
    who = ""
    if e.get("workers"):
        who = "; by " + ", ".join(f"{w} ({n})" for w, n in e["workers"].items())
    if e.get("copied_to"):
        who += "; to " + ", ".join(f"{b} ({n})" for b, n in e["copied_to"].items())
    return f"{head}: {figures}{', ' + ', '.join(extra) if extra else ''}; {tail}{who}"


def format_overview(doc: Mapping[str, Any]) -> str:
    """The overview as ``ceph -s`` lays out its status: sections, one fact a line."""
    now = doc["now_ms"]
    out = ["  cluster:", f"    health: {doc['health']}"]
    out += [f"            {r}" for r in doc["health_reasons"]]
    a = doc["auditor"]
    out.append("")
    out.append("  services:")
    out.append(f"    auditor:      {a['bookie_id'] + ' (elected ' + when(a['elected_ms'], now) + ')' if a else 'none elected'}")
    out.append(f"    autorecovery: {'enabled' if doc['autorecovery_enabled'] else 'DISABLED'}")
    b = doc["bookies"]
    out.append(f"    bookies:      {b['total']} total: {len(b['writable'])} writable, {len(b['readonly'])} read-only, "
               f"{len(b['down'])} down, {len(b['in_maintenance'])} in maintenance")
    for d in b["down"]:
        out.append(f"                  down: {d['bookie_id']} since {when(d['since_ms'], now)}")
    for r in b["readonly"]:
        out.append(f"                  read-only: {r}")
    for m in b["in_maintenance"]:
        out.append(f"                  in maintenance: {m}")
    u = doc["underreplicated"]
    out.append("")
    out.append("  data:")
    out.append(f"    under-replicated: {u['ledgers']} ledgers, {human_bytes(u['bytes'])}")
    workers = ", ".join(f"{w}: {n}" for w, n in u["in_progress_by_worker"].items())
    out.append(f"    in progress:      {u['in_progress']} ledgers{' (' + workers + ')' if workers else ''}")
    out.append(f"    blocked:          {u['blocked']}")
    out += [f"                      {n} {r}" for r, n in u["blocked_reasons"].items()]
    out.append(f"    unrecoverable:    {u['unrecoverable']} ledgers")
    h = doc["heal"]
    rate = "?" if h["rate_bytes_per_s"] is None else f"{human_bytes(h['rate_bytes_per_s'])}/s"
    out.append(f"    heal rate:        {rate}, ETA {duration(h['eta_s'])}")
    out.append("")
    out.append("  checks:")
    for name, _key, label in CHECKS:
        c = doc["checks"][name]
        note = f" (skipped: {c['skipped']})" if c["skipped"] else " (failed)" if c["ok"] is False else ""
        out.append(f"    {label + ':':<17} {when(c['last_ms'], now)}{note}")
    out.append("")
    out.append("  heal episodes:")
    if not h["open_episodes"] and not h["last_episode"]:
        out.append("    none recorded")
    for e in h["open_episodes"]:
        out.append(f"    {episode_line(e, now)}")
    if h["last_episode"]:
        out.append(f"    last: {episode_line(h['last_episode'], now)}")
    for err in doc["errors"]:
        out.append(f"  error: {err}")
    return "\n".join(out)


def format_history(items: list[Mapping[str, Any]], now_ms: int, errors: Iterable[str] = ()) -> str:
    """Episodes newest first, one line each, then one line per unreadable record."""
    lines = [episode_line(e, now_ms) for e in reversed(items)] or ["No heal episode recorded."]
    lines += [f"error: {e}" for e in errors]
    return "\n".join(lines)


__all__ = ["Inputs", "build", "format_overview", "format_history", "episode_line", "human_bytes", "when",
           "duration", "CHECKS"]
