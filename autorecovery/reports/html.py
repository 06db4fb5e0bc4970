"""The report page a capacity planner reads (``report.html``), from a Jinja2 template
(``templates/report.html.j2``).

The answer comes first: what the worst rack (and the worst domain) loss costs — ledgers that lose data,
bytes lost and to heal, heal time — and what to do. Then capacity, risk and placement, riskiest first,
with charts (matplotlib PNGs inlined; nothing is fetched when the page is opened) drawn so both ends of
their scale read: used and free stacked on a log axis, data loss and below-AQ in separate panels. Every
section of ``summary.json`` is shown, the ones this module does not know as a generic table, so a new key
appears without editing this file. Raw figures live in the CSV/Parquet/JSON files linked from the page.

Every figure taken from ``summary.json`` is a ``<span class="fig" data-key="a.b.c" data-value="...">``
with its humanised text: tests (and tools) can check the page against the summary.
"""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from autorecovery.reports import units

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


def tag(path: str, value: Any) -> Markup:
    """``<span class="fig" data-key=path data-value=json(value)>humanised</span>``."""
    key = path.rsplit(".", 1)[-1]
    if key.isdigit() and "." in path:  # a list element: its unit is the list's
        key = path.rsplit(".", 2)[-2]
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
            head = Markup("").join(Markup("<th>{}</th>").format(c) for c in cols)
            body = Markup("").join(Markup("<tr>") + Markup("").join(Markup("<td>{}</td>").format(c) for c in r)
                                   + Markup("</tr>") for r in cells)
            return Markup('<table class="inner"><tr>{}</tr>{}</table>').format(head, body)
        return Markup(", ").join(tag(f"{path}.{i}", v) for i, v in enumerate(value))
    return tag(path, value)


def section_rows(name: str, value: Any) -> list[tuple[str, Markup]]:
    """Every figure of one summary section as (label, tagged value): the generic table."""
    return [(p[len(name) + 1:] or name, _leaf(p, v)) for p, v in flatten(value, name)]


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
    body = [[_cell(c, v) for c, v in zip(df.columns, r)] for r in df.head(rows).itertuples(index=False)]
    return {"columns": [c.replace("_", " ") for c in df.columns], "rows": body, "total": len(df),
            "shown": min(rows, len(df))}


def _cell(col: str, v: Any) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "—" if units.kind_of(col) != "bytes" else "unknown"
    if hasattr(v, "item"):
        v = v.item()
    return units.figure(col, v)


# -- charts ----------------------------------------------------------------------------------------
def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _binary_axis(ax, axis: str = "x") -> None:
    from matplotlib.ticker import FuncFormatter

    fmt = FuncFormatter(lambda v, _pos: units.size(v) if v > 0 else "0")
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_formatter(fmt)


def charts(tables: Mapping[str, Mapping[str, pd.DataFrame]]) -> list[dict[str, str]]:
    """The page's charts as ``{"title", "src" (data: URL), "alt"}``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    cap = tables.get("capacity", {}).get("capacity_rack")
    if cap is not None and len(cap):
        c = cap.assign(free=cap["free_bytes"].clip(lower=0), used=cap["used_bytes"].clip(lower=0))
        c = c.assign(frac=c["used"] / (c["used"] + c["free"]).where(lambda s: s > 0, 1)).sort_values("frac")
        c = c.tail(TOP_ROWS)
        fig, ax = plt.subplots(figsize=(9, 0.6 + 0.3 * len(c)))
        low = max(1.0, float(c["used"][c["used"] > 0].min() if (c["used"] > 0).any() else 1) / 4)
        ax.barh(c["rack"], c["used"] - low, left=low, color="#c0392b", label="used by ledgers")
        ax.barh(c["rack"], c["free"], left=c["used"].clip(lower=low), color="#95a5a6", label="free")
        ax.set_xscale("log")
        _binary_axis(ax)
        for i, r in enumerate(c.itertuples()):
            ax.text(float(r.used + r.free) * 1.1 if r.used + r.free > 0 else low, i,
                    f"{units.size(r.used)} used of {units.size(r.used + r.free)}", va="center", fontsize=7)
        ax.set_xlim(low, float((c["used"] + c["free"]).max()) * 40 or 10)
        ax.set_xlabel("bytes (log scale: used and free both show)")
        ax.legend(loc="lower right", fontsize=7)
        ax.set_title("Disk per rack, fullest at the top")
        out.append({"title": "Disk per rack", "src": _png(fig),
                    "alt": "used and free bytes per rack, stacked on a log scale, fullest rack at the top"})
    risk = tables.get("risk", {}).get("risk_domains")
    if risk is not None and len(risk):
        top = risk[risk["kind"] == "rack"].head(TOP_ROWS).iloc[::-1]
        if len(top):
            fig, axes = plt.subplots(1, 3, figsize=(11, 0.8 + 0.3 * len(top)), sharey=True)
            for ax, col, title, colour in ((axes[0], "ledgers_data_loss", "ledgers that lose data", "#c0392b"),
                                           (axes[1], "ledgers_below_ack_quorum", "ledgers below AQ", "#e67e22"),
                                           (axes[2], "heal_bytes", "bytes to heal", "#2980b9")):
                ax.barh(top["name"], top[col], color=colour)
                ax.set_title(title, fontsize=9)
                for i, v in enumerate(top[col]):
                    ax.text(v, i, " " + (units.size(v) if col.endswith("bytes") else f"{int(v):,}"), va="center",
                            fontsize=7)
                if col.endswith("bytes"):
                    _binary_axis(ax)
                ax.margins(x=0.35)
            out.append({"title": "If this rack went down (riskiest at the top; each panel has its own scale)", "src": _png(fig),
                        "alt": "per rack: ledgers losing data, ledgers below AQ and bytes to heal, separate panels"})
    ver = tables.get("placement", {}).get("placement_verdicts")
    if ver is not None and len(ver):
        fig, ax = plt.subplots(figsize=(6, 3))
        now = ver.groupby("current")["count"].sum()
        alt = ver[ver["what_if"] != ""].groupby("what_if")["count"].sum() if "what_if" in ver else pd.Series()
        names = sorted(set(now.index) | set(alt.index) - {""})
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], [now.get(n, 0) for n in names], width=0.4, label="now")
        if len(alt):
            ax.bar([i + 0.2 for i in x], [alt.get(n, 0) for n in names], width=0.4, label="what-if")
        ax.set_yscale("symlog")
        for i, n in enumerate(names):
            ax.text(i - 0.2, now.get(n, 0), f"{int(now.get(n, 0)):,}", ha="center", va="bottom", fontsize=7)
            if len(alt):
                ax.text(i + 0.2, alt.get(n, 0), f"{int(alt.get(n, 0)):,}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(list(x), names, fontsize=8)
        ax.set_ylabel("ledgers (log scale)")
        ax.legend(fontsize=7)
        ax.set_title("Placement verdicts")
        out.append({"title": "Placement", "src": _png(fig), "alt": "placement verdict counts now and under the what-if"})
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
    if f.get("risk.rate_assumed"):
        out.append(Markup("Heal times use an assumed copy rate of {} per worker (replicationRateByBytes is off): "
                          "measure yours with bench/heal.py and pass --assumed-rate-mbps.")
                   .format(f("risk.rate_bytes_per_s_per_worker")))
    if not out:
        out.append(Markup("Nothing to do: no rack loss loses data and placement adheres."))
    return out


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


def _domains(df: pd.DataFrame | None, summary: Mapping[str, Any]) -> pd.DataFrame | None:
    """The risk table with the domains that hold every bookie (losing them loses everything) last."""
    if df is None:
        return None
    every = set((summary.get("risk") or {}).get("domains_holding_every_bookie") or [])
    return df.assign(holds_every_bookie=[f"{k} {n}" in every for k, n in zip(df["kind"], df["name"])])


def render(summary: dict[str, Any], tables: Mapping[str, Mapping[str, pd.DataFrame]],
           files: Iterable[str] = ()) -> str:
    """The whole HTML document as a string. ``tables``: report name → table name → DataFrame (the
    tables :func:`autorecovery.reports.build.run` wrote); ``files``: names of the files beside the page,
    linked from it."""
    f = Figures(summary)
    cap = tables.get("capacity", {})
    risk = tables.get("risk", {})
    pl = tables.get("placement", {})
    ctx = {
        "s": summary, "f": f, "actions": actions(f), "worst_rack": worst_rack(tables), "charts": charts(tables),
        "snapshot_rows": [(k, tag(k, v)) for k, v in summary.items() if not isinstance(v, (Mapping, list))],
        "sections": [(k, section_rows(k, v)) for k, v in summary.items() if isinstance(v, (Mapping, list))],
        "known": KNOWN_SECTIONS,
        "racks": table(cap.get("capacity_rack"), [("days_until_full", True), ("used_bytes", False)]),
        "bookies": table(cap.get("capacity_bookies"), [("days_until_full", True), ("used_bytes", False)],
                         cols=["bookie_id", "state", "rack", "used_bytes", "free_bytes", "total_bytes",
                               "growth_bytes_per_day", "days_until_full", "disk_weight"]),
        "domains": table(_domains(risk.get("risk_domains"), summary),
                         [("holds_every_bookie", True), ("ledgers_data_loss", False),
                          ("ledgers_below_ack_quorum", False), ("heal_bytes", False)],
                         cols=["kind", "name", "ledgers_data_loss", "lost_bytes_data_loss", "ledgers_below_ack_quorum",
                               "ledgers_copy_lost", "heal_bytes", "heal_time_s"]),
        "by_namespace": table(risk.get("risk_by_namespace"), [("ledgers", False)]),
        "repair_sources": table(pl.get("placement_repair_by_source"), [("bytes", False)]),
        "fail_by_namespace": table(pl.get("placement_fail_by_namespace"), [("count", False)]),
        "more_tables": [(name, table(df)) for group in tables.values() for name, df in group.items()
                        if name not in _SHOWN],
        "files": sorted(files),
        "humanise": units,
    }
    return _env.get_template("report.html.j2").render(**ctx)

