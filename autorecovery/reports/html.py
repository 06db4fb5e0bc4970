"""A self-contained HTML report: the summary, charts (matplotlib PNGs inlined as base64) and the top rows of
each table. Nothing is fetched from the network when it is opened."""

from __future__ import annotations

import base64
import html
import io
import json
from typing import Any

import pandas as pd


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _charts(tables: dict[str, dict[str, pd.DataFrame]]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    cap = tables.get("capacity", {}).get("capacity_rack")
    if cap is not None and len(cap):
        fig, ax = plt.subplots(figsize=(9, 3.5))
        c = cap.sort_values("rack")
        ax.bar(c["rack"], c["used_bytes"] / 1e12, label="used by ledgers (TB)")
        ax.bar(c["rack"], c["free_bytes"].clip(lower=0) / 1e12, bottom=c["used_bytes"] / 1e12, label="free (TB)",
               alpha=0.5)
        ax.set_ylabel("TB")
        ax.tick_params(axis="x", rotation=90, labelsize=7)
        ax.legend()
        ax.set_title("Capacity per rack")
        out.append(("Capacity per rack", _png(fig)))
    risk = tables.get("risk", {}).get("risk_domains")
    if risk is not None and len(risk):
        top = risk[risk["kind"] == "rack"].head(20)
        fig, ax = plt.subplots(figsize=(9, 3.5))
        ax.bar(top["name"], top["ledgers_data_loss"], label="lose every copy of some entry")
        ax.bar(top["name"], top["ledgers_below_ack_quorum"], bottom=top["ledgers_data_loss"], label="fall below AQ")
        ax.tick_params(axis="x", rotation=90, labelsize=7)
        ax.set_ylabel("ledgers")
        ax.legend()
        ax.set_title("If this rack went down")
        out.append(("Rack loss", _png(fig)))
    ver = tables.get("placement", {}).get("placement_verdicts")
    if ver is not None and len(ver):
        fig, ax = plt.subplots(figsize=(5, 3))
        g = ver.groupby("current")["count"].sum()
        ax.bar(g.index, g.values)
        ax.set_title("Placement adherence (current config)")
        out.append(("Placement", _png(fig)))
    return out


def render(summary: dict[str, Any], tables: dict[str, dict[str, pd.DataFrame]]) -> str:
    """The whole HTML document as a string."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>autorecovery report</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 6px}pre{background:#f6f6f6;padding:1em}</style></head><body>",
             "<h1>autorecovery offline report</h1>",
             f"<pre>{html.escape(json.dumps(summary, indent=2, default=str))}</pre>"]
    for title, src in _charts(tables):
        parts.append(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' src='{src}'>")
    for group, tbls in tables.items():
        for name, df in tbls.items():
            parts.append(f"<h3>{html.escape(name)} ({len(df)} rows, first 50)</h3>")
            parts.append(df.head(50).to_html(index=False, escape=True))
    parts.append("</body></html>")
    return "\n".join(parts)
