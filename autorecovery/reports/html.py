"""The report page a capacity planner reads (``report.html``), from a Jinja2 template
(``templates/report.html.j2``).

The answer comes first: what the worst rack (and the worst domain) loss costs — ledgers that lose data,
bytes lost and to heal, heal time — and what to do. Then risk, capacity and placement, each led by its
answer and what to do, riskiest first, with inline SVG charts (:mod:`reports.svg`; nothing is fetched
when the page is opened): the riskiest failure domains (data loss, below AQ and heal time, each panel on
its own scale) and the days until each rack is full. Every section of ``summary.json`` is shown, the
ones this module does not know as a generic table, so a new key appears without editing this file; the
appendix (folded) lists every figure. Each quantity is written in one unit (bytes in binary units, a
distribution's min/p50/max in its parent's unit), lists as comma-separated words, never a Python repr.
Raw figures live in the CSV/Parquet/JSON files linked from the page.

Every figure taken from ``summary.json`` is a ``<span class="fig" data-key="a.b.c" data-value="...">``
with its humanised text: tests (and tools) can check the page against the summary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from autorecovery.reports import svg, units

#: rows of a table on the page (the linked files hold every row)
TOP_ROWS = 20
#: tables with a dedicated place on the page; any other table (a new report's) is shown generically
_SHOWN = frozenset({"capacity_rack", "capacity_bookies", "capacity_zone", "capacity_region", "risk_domains",
                    "risk_by_namespace", "placement_repair_by_source", "placement_fail_by_namespace",
                    "placement_verdicts", "placement_repair_by_target"})
#: summary sections with a dedicated part of the page (each also gets its full generic table)
KNOWN_SECTIONS = ("capacity", "placement", "risk")

_env = Environment(loader=PackageLoader("autorecovery.reports", "templates"),
                   autoescape=select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)


# -- figures ---------------------------------------------------------------------------------------
class Figures:
    """Looks up dotted paths (``risk.worst.heal_bytes``, ``capacity.soonest_full.0.days``) in the summary
    and renders each as a tagged, humanised span."""

    def __init__(self, summary: Mapping[str, Any]) -> None:
        self.summary = summary

    def get(self, path: str, default: Any = None) -> Any:
        cur: Any = self.summary
        for part in path.split("."):
            if isinstance(cur, Mapping) and part in cur:
                cur = cur[part]
            elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
                cur = cur[int(part)]
            else:
                return default
        return cur

    def __call__(self, path: str) -> Markup:
        return tag(path, self.get(path))


#: leaves of a distribution (``model.spread``): in the unit of the figure they describe (the parent key)
_STATS = frozenset({"min", "p50", "p90", "max", "mean", "stddev"})


def unit_key(path: str) -> str:
    """The key whose name gives ``path``'s unit: its last part, or for a list element (``soonest_full.0``)
    or a distribution's statistic (``distribution.used_bytes.p50``) the parent's."""
    parts = path.split(".")
    key = parts[-1]
    if len(parts) > 1 and (key.isdigit() or key in _STATS):
        return parts[-2]
    return key


def tag(path: str, value: Any) -> Markup:
    """``<span class="fig" data-key=path data-value=json(value)>humanised</span>``."""
    key = unit_key(path)
    text = units.figure(key, value)
    raw = json.dumps(value, default=str)
    return Markup('<span class="fig" data-key="{}" data-value="{}" data-kind="{}">{}</span>').format(
        path, raw, units.kind_of(key) if isinstance(value, (int, float)) and not isinstance(value, bool) else "text",
        text)


def flatten(value: Any, prefix: str) -> list[tuple[str, Any]]:
    """``(dotted path, leaf)`` for every scalar under ``value``; a list of objects stays one leaf (it is
    rendered as a table), a list of scalars too."""
    if isinstance(value, Mapping):
        out: list[tuple[str, Any]] = []
        for k, v in value.items():
            out.extend(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return [(prefix, value)]


def _rows(path: str, items: list) -> tuple[list[str], list[list[Markup]]] | None:
    """A list of objects as (columns, tagged cells)."""
    if not items or not all(isinstance(x, Mapping) for x in items):
        return None
    cols: list[str] = []
    for x in items:
        cols.extend(c for c in x if c not in cols)
    return cols, [[tag(f"{path}.{i}.{c}", x.get(c)) for c in cols] for i, x in enumerate(items)]


def _leaf(path: str, value: Any) -> Markup:
    if isinstance(value, list):
        if not value:
            return Markup("none")
        rows = _rows(path, value)
        if rows:
            cols, cells = rows
            head = Markup("").join(Markup("<th>{}</th>").format(c.replace("_", " ")) for c in cols)
            body = Markup("").join(Markup("<tr>") + Markup("").join(Markup("<td>{}</td>").format(c) for c in r)
                                   + Markup("</tr>") for r in cells)
            return Markup('<table class="inner"><tr>{}</tr>{}</table>').format(head, body)
        return Markup(", ").join(tag(f"{path}.{i}", v) for i, v in enumerate(value))
    return tag(path, value)


#: labels of summary keys that read badly as words
_LABELS = {"k1": "any 1 bookie", "k2": "any 2 bookies", "k3": "any 3 bookies"}


def label(path: str) -> str:
    """A dotted summary path as words: ``method.ranked_by`` → ``method › ranked by``."""
    return " › ".join(_LABELS.get(p, p.replace("_", " ")) for p in path.split("."))


def section_rows(name: str, value: Any) -> list[tuple[str, Markup]]:
    """Every figure of one summary section as (label, tagged value): the generic table."""
    return [(label(p[len(name) + 1:] or name), _leaf(p, v)) for p, v in flatten(value, name)]


# -- tables ----------------------------------------------------------------------------------------
def table(df: pd.DataFrame | None, sort: Iterable[tuple[str, bool]] = (), rows: int = TOP_ROWS,
          cols: Iterable[str] | None = None) -> dict[str, Any] | None:
    """The first ``rows`` rows of ``df`` after sorting (``(column, ascending)``, missing values last),
    every cell humanised by its column's name (``used_bytes`` → GiB)."""
    if df is None or not len(df):
        return None
    sort = [(c, a) for c, a in sort if c in df.columns]
    if sort:
        df = df.sort_values([c for c, _ in sort], ascending=[a for _, a in sort], na_position="last", kind="stable")
    if cols is not None:
        df = df[[c for c in cols if c in df.columns]]
    body = [[_cell(c, v) for c, v in zip(df.columns, r, strict=True)] for r in df.head(rows).itertuples(index=False)]
    return {"columns": [c.replace("_", " ") for c in df.columns], "rows": body, "total": len(df),
            "shown": min(rows, len(df))}


def _cell(col: str, v: Any) -> str:
    if isinstance(v, str) and not v:
        return "—"
    if isinstance(v, float) and math.isnan(v):
        return "—" if units.kind_of(col) != "bytes" else "unknown"
    if hasattr(v, "tolist"):
        v = v.tolist()
    return units.figure(col, v)


# -- charts ----------------------------------------------------------------------------------------
#: days to full beyond this draw a full-length bar with an arrow (two years: a planner's horizon)
DAYS_CAP = 730.0
#: rows of a chart
CHART_ROWS = 12


def domain_label(kind: str, name: str) -> str:
    """``rack A``, ``racks A + B`` (a pair), ``zone z1``, ``region r``: a failure domain in words."""
    if kind == "rack_pair":
        return "racks " + " + ".join(name.split("|", 1))
    return f"{kind} {name}"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def charts(tables: Mapping[str, Mapping[str, pd.DataFrame]], summary: Mapping[str, Any] | None = None
           ) -> dict[str, Markup]:
    """The page's charts, inline SVG (:mod:`reports.svg`): ``risk`` (the riskiest failure domains:
    ledgers losing data, ledgers below AQ, time to heal, each panel on its own scale) and ``days``
    (days until each rack is full, soonest first, bars capped at :data:`DAYS_CAP`)."""
    out: dict[str, Markup] = {}
    risk = _domains(tables.get("risk", {}).get("risk_domains"), summary or {})
    if risk is not None and len(risk):
        top = risk[~risk["holds_every_bookie"]].sort_values(
            ["ledgers_data_loss", "ledgers_below_ack_quorum", "heal_bytes"], ascending=False, kind="stable")
        top = top.head(CHART_ROWS)
        if len(top):
            heal = [None if t != t or t is None else float(t) for t in top["heal_time_s"]]
            out["risk"] = svg.bars(
                "What losing each failure domain would cost, riskiest first",
                [domain_label(k, n) for k, n in zip(top["kind"], top["name"], strict=True)],
                [svg.Panel("ledgers that lose data", "#c0392b",
                           [(float(v), f"{int(v):,}") for v in top["ledgers_data_loss"]]),
                 svg.Panel("ledgers below AQ", "#e67e22",
                           [(float(v), f"{int(v):,}") for v in top["ledgers_below_ack_quorum"]]),
                 svg.Panel("time to heal", "#2980b9", [(h, units.duration(h)) for h in heal])])
    cap = tables.get("capacity", {}).get("capacity_rack")
    if cap is not None and len(cap):
        c = cap.sort_values("days_until_full", na_position="last", kind="stable").head(CHART_ROWS)
        cells = []
        for d, free in zip(c["days_until_full"], c["free_bytes"], strict=True):
            known = d is not None and d == d
            cells.append((float(d) if known else None,
                          units.days(float(d)) if known else ("unknown disk" if free != free else "not growing")))
        out["days"] = svg.bars(f"Days until each rack is full, soonest first (bars stop at {int(DAYS_CAP)} days)",
                               [f"rack {r}" for r in c["rack"]],
                               [svg.Panel("days until full", "#8e44ad", cells, cap=DAYS_CAP)])
    return out


# -- the answer ------------------------------------------------------------------------------------
def actions(f: Figures) -> list[Markup]:
    """What to do, from the summary: each line with its figures tagged."""
    out: list[Markup] = []
    if f.get("risk.racks_whose_loss_loses_data"):
        out.append(Markup("Losing any of these racks loses data: {}. Spread those ledgers over more racks "
                          "(run the BP-54 repair below) before the DR test.").format(
            Markup(", ").join(tag(f"risk.racks_whose_loss_loses_data.{i}", r)
                              for i, r in enumerate(f.get("risk.racks_whose_loss_loses_data")))))
    if f.get("placement.repair.ledgers_to_mark"):
        out.append(Markup("Repair placement (BP-54): mark {} ledgers, {} swaps, {} to copy, about {} with {} workers{}.")
                   .format(f("placement.repair.ledgers_to_mark"), f("placement.repair.swaps"),
                           f("placement.repair.bytes_to_copy"), f("placement.repair.copy_time_s"),
                           f("placement.repair.workers"),
                           " at an assumed rate" if f.get("placement.repair.rate_assumed") else ""))
    if f.get("placement.repair.ledgers_without_fix"):
        out.append(Markup("{} ledgers have no placement fix with today's bookies: add bookies in other racks.")
                   .format(f("placement.repair.ledgers_without_fix")))
    soon = f.get("capacity.soonest_full") or []
    if soon and isinstance(soon[0], Mapping) and isinstance(soon[0].get("days"), (int, float)) and soon[0]["days"] < 90:
        out.append(Markup("Bookie {} is full in {}: add disk or bookies to its rack.").format(
            f("capacity.soonest_full.0.bookie_id"), f("capacity.soonest_full.0.days")))
    if f.get("risk.rate_assumed") or (not f.get("risk") and f.get("placement.repair.rate_assumed")):
        out.append(rate_note(f))
    if not out:
        out.append(Markup("Nothing to do: no rack loss loses data and placement adheres."))
    return out


def risk_lead(f: Figures, tables: Mapping[str, Mapping[str, pd.DataFrame]]) -> Markup:
    """The risk section's answer and what to do, one paragraph."""
    racks = f.get("risk.racks_whose_loss_loses_data") or []
    worst = f.get("risk.worst")
    if not worst:
        return Markup("No failure domain short of the whole cluster puts a ledger at risk.")
    n = int(worst["ledgers_data_loss"])
    head = Markup("The riskiest failure domain is {}: {} {} data and {} below AQ. ").format(
        domain_label(worst["kind"], worst["name"]), _plural(n, "ledger"), "loses" if n == 1 else "lose",
        _plural(int(worst["ledgers_below_ack_quorum"]), "ledger"))
    if racks:
        todo = Markup("Losing {} alone loses data: spread those ledgers over more racks (the BP-54 repair "
                      "below) before the DR test.").format(", ".join(f"rack {r}" for r in racks))
    elif worst["ledgers_data_loss"]:
        todo = Markup("No single rack loses data; only a loss of two racks or more does.")
    else:
        todo = Markup("No loss short of the whole cluster loses data.")
    return head + todo


def capacity_lead(f: Figures, tables: Mapping[str, Mapping[str, pd.DataFrame]]) -> Markup:
    """The capacity section's answer and what to do."""
    cap = tables.get("capacity", {}).get("capacity_rack")
    out = Markup("Ledgers use {} of the disks, {} are free, growing {}. ").format(
        f("capacity.used_bytes"), f("capacity.free_bytes"), f("capacity.growth_bytes_per_day"))
    if cap is not None and len(cap) and cap["days_until_full"].notna().any():
        r = cap.sort_values("days_until_full", kind="stable").iloc[0]
        d = float(r["days_until_full"])
        out += Markup("Rack {} fills first, in {}").format(r["rack"], units.days(d))
        out += Markup(": add disk or bookies there now." if d < 90 else ": nothing to do within 90 days.")
    elif cap is not None and len(cap):
        out += Markup("No rack's known disk is filling.")
    unknown = f.get("capacity.bookies_disk_unknown") or []
    if unknown:
        out += Markup(" {} did not report its disk ({}): their free space is not counted.").format(
            _plural(len(unknown), "bookie"), ", ".join(unknown[:5]) + (" …" if len(unknown) > 5 else ""))
    return out


def placement_lead(f: Figures) -> Markup:
    """The placement section's answer and what to do."""
    now = f.get("placement.current") or {}
    alt = f.get("placement.under_what_if")
    out = Markup("{} fail placement now").format(_plural(int(now.get("FAIL", 0)), "closed ledger"))
    wi = ", ".join(f"{k}={v}" for k, v in (f.get("placement.what_if") or {}).items())
    if alt is not None:
        out += Markup(", {} under {}").format(int(alt.get("FAIL", 0)), wi)
    out += Markup(". ")
    under = Markup(" under {}").format(wi) if alt is not None else Markup("")
    if f.get("placement.repair.ledgers_to_mark"):
        out += Markup("The BP-54 repair (repairedPlacementPolicyNotAdheringBookieEnabled){} marks {} ledgers and "
                      "copies {} in about {}; run it, then re-check.").format(
            under, f("placement.repair.ledgers_to_mark"), f("placement.repair.bytes_to_copy"),
            f("placement.repair.copy_time_s"))
    else:
        out += Markup("The BP-54 repair{} has nothing to copy.").format(under)
    if f.get("placement.repair.ledgers_without_fix"):
        out += Markup(" {} have no fix with today's bookies: add bookies in other racks.").format(
            _plural(int(f.get("placement.repair.ledgers_without_fix")), "ledger"))
    return out


def rate_note(f: Figures) -> Markup:
    """Where the copy rate of every time on the page comes from."""
    rate = f.get("risk.heal_model") or {}
    src = rate.get("rate_source") or f.get("placement.repair.rate_source") or ""
    per = "risk.rate_bytes_per_s_per_worker" if f.get("risk") else "placement.repair.rate_bytes_per_s_per_worker"
    kind, _, why = src.partition(": ")
    if kind == "measured":
        return Markup("Times use a copy rate of {} per daemon, measured from {}.").format(f(per), why)
    why = {"given": "given by " + why if why else "given", "default": why}.get(kind, "assumed")
    return Markup("Times use an assumed copy rate of {} per daemon ({}). Measure yours (bench/heal.py, or export "
                  "a cluster that has healed before: its heal history gives the rate) and pass "
                  "--assumed-rate-mbps.").format(f(per), why)


def verdicts(f: Figures) -> dict[str, Any] | None:
    """Placement verdicts now and under the what-if, one row per verdict."""
    now = f.get("placement.current") or {}
    alt = f.get("placement.under_what_if")
    if not now:
        return None
    names = [n for n in ("FAIL", "MEETS_SOFT", "MEETS_STRICT", "OPEN_SKIPPED") if n in now or (alt and n in alt)]
    cols = ["verdict", "ledgers now"] + (["under the what-if"] if alt is not None else [])
    rows = [[n.replace("_", " ").lower(), units.number(now.get(n, 0))]
            + ([units.number(alt.get(n, 0))] if alt is not None else []) for n in names]
    return {"columns": cols, "rows": rows, "total": len(rows), "shown": len(rows)}


#: titles of the what-if sections the page knows (others are titled from their key)
SECTION_TITLES = {"what_if_bookies": "Worst loss of any 1, 2 and 3 bookies",
                  "what_if_decommission": "Decommissioning a bookie",
                  "what_if_add_bookies": "Adding bookies",
                  "capacity_after_bp54": "Disk use after the BP-54 repair"}


def section_lead(name: str, value: Any) -> Markup | None:
    """The answer of a what-if section the page knows, one sentence; None for the others."""
    if not isinstance(value, Mapping):
        return None
    if name == "what_if_bookies" and value.get("k1"):
        parts = []
        for k, n in (("k1", "one bookie"), ("k2", "two bookies"), ("k3", "three bookies")):
            if not value.get(k):
                continue
            w = value[k][0]
            dl = int(w["ledgers_data_loss"])
            parts.append(Markup("the worst {} ({}) {}").format(
                n, ", ".join(w["bookies"]), f"{'loses' if k == 'k1' else 'lose'} data in {_plural(dl, 'ledger')}"
                if dl else f"{'puts' if k == 'k1' else 'put'} {_plural(int(w['ledgers_below_ack_quorum']), 'ledger')} "
                           "below AQ, no data lost"))
        out = Markup("Of any set of bookies, ") + Markup("; ").join(parts) + Markup(".")
        first = next((value[k][0] for k in ("k1", "k2", "k3") if value.get(k) and value[k][0]["ledgers_data_loss"]), None)
        if first and len(first["bookies"]) == 1:
            out += Markup(" Never take {} down: some entries have no other copy.").format(first["bookies"][0])
        elif first:
            out += Markup(" Never take {} down together (maintenance, upgrades).").format(" and ".join(first["bookies"]))
        return out
    if name == "what_if_decommission":
        return Markup("Decommissioning {} moves {} in about {}; {} lose placement.").format(
            value.get("bookie"), units.size(value.get("bytes_to_move")), units.duration(value.get("move_time_s")),
            _plural(int(value.get("segments_losing_placement") or 0), "segment"))
    if name == "what_if_add_bookies":
        before = (value.get("cluster_before") or {}).get("free_bytes")
        after = (value.get("cluster_after") or {}).get("free_bytes")
        return Markup("Adding {} to rack {} takes free space from {} to {}{}.").format(
            _plural(int(value.get("bookies_added") or 0), "bookie"), value.get("rack"), units.size(before),
            units.size(after), " and adds a failure domain" if value.get("new_rack") else "")
    if name == "capacity_after_bp54":
        over = value.get("bookies_over_capacity") or []
        return Markup("After the BP-54 repair the fullest bookie holds {}; {}.").format(
            units.size((value.get("used_bytes") or {}).get("max")),
            "no bookie runs out of disk" if not over else "out of disk: " + ", ".join(map(str, over)))
    return None


def worst_rack(tables: Mapping[str, Mapping[str, pd.DataFrame]]) -> dict[str, Any] | None:
    """The riskiest single rack (most ledgers losing data, then below AQ, then bytes to heal), or None."""
    risk = tables.get("risk", {}).get("risk_domains")
    if risk is None or not len(risk):
        return None
    racks = risk[risk["kind"] == "rack"].sort_values(
        ["ledgers_data_loss", "ledgers_below_ack_quorum", "heal_bytes"], ascending=False, kind="stable")
    if not len(racks):
        return None
    r = racks.iloc[0]
    return {"name": r["name"], "ledgers_data_loss": int(r["ledgers_data_loss"]),
            "ledgers_below_ack_quorum": int(r["ledgers_below_ack_quorum"]),
            "lost_bytes": units.size(float(r.get("lost_bytes_data_loss", 0.0))),
            "heal_bytes": units.size(float(r["heal_bytes"])), "heal_time": units.duration(r.get("heal_time_s"))}


#: an outcome (``model.OUTCOME_NAMES``) in words
_OUTCOME_WORDS = {"data_loss": "loses data", "below_ack_quorum": "below AQ", "copy_lost": "copy lost",
                  "unaffected": "unaffected"}


def _outcomes(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """``df`` with its ``outcome_name`` in words, as column ``outcome``."""
    if df is None or "outcome_name" not in df:
        return df
    return df.assign(outcome=[_OUTCOME_WORDS.get(o, o) for o in df["outcome_name"]])


def _named(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """``df`` with a ``failure_domain`` column in words (:func:`domain_label`) from ``kind`` and ``name``."""
    if df is None or "kind" not in df or "name" not in df:
        return df
    return df.assign(failure_domain=[domain_label(k, n) for k, n in zip(df["kind"], df["name"], strict=True)])


def _domains(df: pd.DataFrame | None, summary: Mapping[str, Any]) -> pd.DataFrame | None:
    """The risk table with the domains that hold every bookie (losing them loses everything) last."""
    if df is None:
        return None
    every = set((summary.get("risk") or {}).get("domains_holding_every_bookie") or [])
    return df.assign(holds_every_bookie=[f"{k} {n}" in every for k, n in zip(df["kind"], df["name"], strict=True)])


def render(summary: dict[str, Any], tables: Mapping[str, Mapping[str, pd.DataFrame]],
           files: Iterable[str] = ()) -> str:
    """The whole HTML document as a string. ``tables``: report name → table name → DataFrame (the
    tables :func:`autorecovery.reports.build.run` wrote); ``files``: names of the files beside the page,
    linked from it."""
    f = Figures(summary)
    cap = tables.get("capacity", {})
    risk = tables.get("risk", {})
    pl = tables.get("placement", {})
    worst = f.get("risk.worst")
    ctx = {
        "s": summary, "f": f, "actions": actions(f), "worst_rack": worst_rack(tables), "charts": charts(tables, summary),
        "worst_label": domain_label(worst["kind"], worst["name"]) if isinstance(worst, Mapping) else "",
        "risk_lead": risk_lead(f, tables) if "risk" in summary else None,
        "capacity_lead": capacity_lead(f, tables) if "capacity" in summary else None,
        "placement_lead": placement_lead(f) if "placement" in summary else None,
        "rate_note": rate_note(f) if ("risk" in summary or "placement" in summary) else None,
        "verdicts": verdicts(f), "titles": SECTION_TITLES,
        "leads": {k: section_lead(k, v) for k, v in summary.items()},
        "snapshot_rows": [(k, tag(k, v)) for k, v in summary.items() if not isinstance(v, (Mapping, list))],
        "sections": [(k, section_rows(k, v)) for k, v in summary.items() if isinstance(v, (Mapping, list))],
        "known": KNOWN_SECTIONS,
        "racks": table(cap.get("capacity_rack"), [("days_until_full", True), ("used_bytes", False)]),
        "bookies": table(cap.get("capacity_bookies"), [("days_until_full", True), ("used_bytes", False)],
                         cols=["bookie_id", "state", "rack", "used_bytes", "free_bytes", "total_bytes",
                               "growth_bytes_per_day", "days_until_full"]),
        "domains": table(_named(_domains(risk.get("risk_domains"), summary)),
                         [("holds_every_bookie", True), ("ledgers_data_loss", False),
                          ("ledgers_below_ack_quorum", False), ("heal_bytes", False)],
                         cols=["failure_domain", "ledgers_data_loss", "lost_bytes_data_loss", "ledgers_below_ack_quorum",
                               "ledgers_copy_lost", "heal_bytes", "heal_time_s", "heal_limited_by"]),
        "by_namespace": table(_outcomes(_named(risk.get("risk_by_namespace"))), [("ledgers", False)],
                              cols=["failure_domain", "namespace", "outcome", "ledgers", "lost_bytes", "heal_bytes"]),
        "repair_sources": table(pl.get("placement_repair_by_source"), [("bytes", False)]),
        "repair_targets": table(pl.get("placement_repair_by_target"), [("bytes", False)]),
        "fail_by_namespace": table(pl.get("placement_fail_by_namespace"), [("count", False)]),
        "more_tables": [(name, table(df)) for group in tables.values() for name, df in group.items()
                        if name not in _SHOWN],
        "files": sorted(files),
        "humanise": units,
    }
    return _env.get_template("report.html.j2").render(**ctx)

