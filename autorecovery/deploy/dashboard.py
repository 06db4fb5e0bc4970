"""The Grafana dashboard ``deploy/grafana/dashboards/autorecovery.json``, generated from code.

Built with Grafana's foundation SDK (``grafana-foundation-sdk``, the ``dashboard`` extra of
pyproject.toml; the build for Grafana 11.1, as docker-compose.yml runs). Write the committed file with
``make dashboard`` (``python -m autorecovery.deploy.dashboard -o deploy/grafana/dashboards/autorecovery.json``);
``tests/unit/test_dashboard.py`` checks the committed file equals :func:`render`, so the two never drift.

Imports anywhere: every panel and query reads the datasource from the ``datasource`` template variable
(``${datasource}``, a Prometheus datasource picker), and the dashboard declares the import input
``DS_PROMETHEUS`` (Grafana's *Import dashboard* asks for it and makes it the variable's default).
Two query variables scope every query:

* ``cluster`` — ``label_values(autorecovery_auditor_elected, cluster)``: the ``cluster`` label the
  scrape config puts on every target (``deploy/prometheus/prometheus.yml``; the Kubernetes
  ServiceMonitor sets it by relabelling). One cluster at a time, matched exactly
  (``cluster="$cluster"``), so clusters never mix. A Prometheus whose targets have no ``cluster``
  label still works: the variable is then empty and ``cluster=""`` matches series without the label.
* ``instance`` — the daemons of that cluster (multi-select, *All* = ``.*``). The cluster-wide gauges
  (``autorecovery_underreplicated_*``) are exported by the elected auditor only (0 elsewhere), so
  their panels show the cluster's figure only while the selection includes the auditor (*All* does).

Panels read upstream's metric names (``auditor_*``, ``replication_worker_*``) and ours
(``autorecovery_*``, :mod:`autorecovery.roles.cluster_gauges`, :mod:`autorecovery.roles.worker`):

* *Heal throughput* counts only successful copies: ``replication_worker_NUM_BYTES_WRITTEN`` is an
  upstream OpStats (a summary with ``success="true"|"false"``), and its ``_sum`` of
  ``success="true"`` is the bytes written.
* *Under-replicated ledgers by Pulsar namespace* reads the auditor's bounded by-namespace gauges
  (:mod:`autorecovery.roles.cluster_gauges`: top ``auditorTopicMetricsMaxNamespaces`` plus ``other``).
* *Heal episodes* and *Last heal episode* read :mod:`autorecovery.roles.auditor_history`'s gauges
  (auditor only) and its counter of closes (``or vector(0)``: no series before the first close).
* *ETA* is the backlog over the 5-minute successful copy rate, and is empty while nothing is copying
  (the rate is kept only when ``> 0``): a backlog that no worker copies (blocked, unrecoverable,
  AutoRecovery disabled) has no ETA, rather than the backlog in seconds.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.builders.dashboard import DatasourceVariable, QueryVariable
from grafana_foundation_sdk.builders.dashboard import Dashboard as DashboardBuilder
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    VariableHide,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

#: The committed file, relative to the repository root.
OUTPUT = Path("deploy/grafana/dashboards/autorecovery.json")
UID = "autorecovery"
#: Import input (``__inputs``): Grafana's import dialog replaces ``${DS_PROMETHEUS}`` with the chosen datasource.
DS_INPUT = "DS_PROMETHEUS"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
#: Label matchers every metric selector of every panel carries.
SCOPE = 'cluster="$cluster",instance=~"$instance"'
#: A metric every daemon exports (1 on the auditor, 0 elsewhere): the variables' label source.
EVERY_NODE_METRIC = "autorecovery_auditor_elected"
ALL_INSTANCES = ".*"

_METRIC = re.compile(r"\b((?:autorecovery|auditor|replication_worker)_[A-Za-z0-9_]+)(\{([^}]*)\})?")


def scoped(expr: str) -> str:
    """``expr`` with the :data:`SCOPE` matchers added to every selector of our metrics.

    ``max(autorecovery_enabled)`` → ``max(autorecovery_enabled{cluster="$cluster",instance=~"$instance"})``;
    existing matchers are kept after the scope (``x{success="true"}`` → ``x{<scope>,success="true"}``).
    """
    def add(m: re.Match) -> str:
        inner = m.group(3)
        return f"{m.group(1)}{{{SCOPE}{',' + inner if inner else ''}}}"

    return _METRIC.sub(add, expr)


@dataclass(frozen=True)
class Target:
    expr: str  # PromQL without the scope matchers (added by :func:`scoped`)
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    kind: str  # "stat" | "timeseries"
    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]


BYTES_WRITTEN_OK = 'replication_worker_NUM_BYTES_WRITTEN_sum{success="true"}'

PANELS: tuple[PanelSpec, ...] = (
    PanelSpec("stat", "Auditor (1 = this node is the elected auditor)",
              "Exactly one node should show 1. 0 everywhere for 5m fires AutoRecoveryNoAuditor.", "short",
              (Target("autorecovery_auditor_elected", "{{instance}}"),)),
    PanelSpec("stat", "AutoRecovery enabled", "0 after `autorecovery shell autorecovery -disable`.", "short",
              (Target("max(autorecovery_enabled)", "enabled"),)),
    PanelSpec("timeseries", "Under-replicated ledgers (cluster)",
              "Exported by the elected auditor only (0 elsewhere), so max() is the cluster's value.", "short",
              (Target("max(autorecovery_underreplicated_ledgers)", "ledgers"),
               Target("max(autorecovery_unrecoverable_ledgers)", "unrecoverable"))),
    PanelSpec("timeseries", "Bytes left to copy",
              "Cluster backlog: metadata length of the marked ledgers (auditor). In workers' hands: the bytes "
              "the workers still have to copy for the ledgers they hold.", "bytes",
              (Target("max(autorecovery_underreplicated_bytes)", "cluster backlog"),
               Target("sum(autorecovery_worker_bytes_remaining)", "in workers' hands"))),
    PanelSpec("timeseries", "ETA at the current heal rate",
              "Backlog bytes over the cluster's 5-minute rate of bytes written by successful copies. Empty while "
              "nothing is copying (blocked or unrecoverable ledgers, AutoRecovery disabled): no ETA then.", "s",
              (Target(f"max(autorecovery_underreplicated_bytes) / (sum(rate({BYTES_WRITTEN_OK}[5m])) > 0)", "ETA"),)),
    PanelSpec("timeseries", "Heal throughput",
              "Bytes written per second by successful re-replication copies (replication_worker_NUM_BYTES_WRITTEN, "
              "success=\"true\"), for the cluster and per daemon.", "Bps",
              (Target(f"sum(rate({BYTES_WRITTEN_OK}[1m]))", "cluster"),
               Target(f"sum by (instance) (rate({BYTES_WRITTEN_OK}[1m]))", "{{instance}}"))),
    PanelSpec("timeseries", "Per-worker copy load",
              "Ledgers each worker holds; blocked ones wait for a reason shown in /api/v1/autorecovery/progress.",
              "short",
              (Target("autorecovery_worker_ledgers_remaining", "{{instance}} remaining"),
               Target("autorecovery_worker_ledgers_blocked", "{{instance}} blocked"))),
    PanelSpec("timeseries", "Per-bookie free disk", "Free disk of each bookie from GET_BOOKIE_INFO.", "bytes",
              (Target("max by (bookie_id) (autorecovery_bookie_free_disk_bytes)", "{{bookie_id}} free"),)),
    PanelSpec("timeseries", "Per-bookie placement probability",
              "Chance of each bookie being chosen by disk-weight placement.", "percentunit",
              (Target("max by (bookie_id) (autorecovery_placement_probability)", "{{bookie_id}} p(pick)"),)),
    PanelSpec("timeseries", "Placement violations (BP-34/BP-54)",
              "Ledgers breaking (or only softly adhering to) the placement policy at the last placement check.",
              "short",
              (Target("max(auditor_NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY)", "not adhering"),
               Target("max(auditor_NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY)", "softly adhering"))),
    PanelSpec("timeseries", "Oldest under-replicated ledger", "Age of the oldest under-replication marker.", "s",
              (Target("max(autorecovery_underreplicated_oldest_age_seconds)", "age"),)),
    PanelSpec("timeseries", "Grace period exceeded",
              "Marked ledgers still under-replicated after underreplicatedLedgerRecoveryGracePeriod.", "short",
              (Target("max(auditor_NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD)", "ledgers"),)),
    PanelSpec("timeseries", "Heal episodes",
              "Heal episodes open now (auditor only) and closed in the last hour. What each one marked, healed and "
              "left: `autorecovery shell history` or /api/v1/autorecovery/history.", "short",
              (Target("max(autorecovery_heal_episodes_open)", "open"),
               Target("sum(increase(autorecovery_heal_episodes_total[1h])) or vector(0)", "closed (1h)"))),
    PanelSpec("stat", "Last heal episode: time to heal",
              "Detection to close of the newest closed heal episode (auditor only; kept across an auditor change).",
              "s", (Target("max(autorecovery_heal_last_episode_duration_seconds)", "time to heal"),)),
    PanelSpec("timeseries", "Under-replicated ledgers by Pulsar namespace",
              "Marked ledgers per namespace from their pulsar/managed-ledger metadata: the top "
              "auditorTopicMetricsMaxNamespaces namespaces, the rest in \"other\", ledgers without it in \"not "
              "Pulsar\" (auditor only: max() is the cluster's value). Topics: `autorecovery shell "
              "listunderreplicated --by-topic` or by_topic in /api/v1/autorecovery/progress.", "short",
              (Target("max by (namespace) (autorecovery_underreplicated_ledgers_by_namespace)", "{{namespace}}"),
               Target("max by (namespace) (autorecovery_unrecoverable_ledgers_by_namespace)",
                      "{{namespace}} unrecoverable"))),
    PanelSpec("timeseries", "Auditor index drift",
              "Ledger ids that differed between the auditor's index and ZooKeeper at the last check (healed at once).",
              "short",
              (Target("max(autorecovery_auditor_index_drift_ledgers)", "drift"),)),
)


def _panel(spec: PanelSpec, panel_id: int):
    p = (stat.Panel() if spec.kind == "stat" else timeseries.Panel())
    p = p.id(panel_id).title(spec.title).description(spec.description).unit(spec.unit)
    p = p.datasource(DATASOURCE).height(7).span(8)
    for ref, t in zip("ABCDEFGH", spec.targets, strict=False):
        p = p.with_target(Dataquery().ref_id(ref).expr(scoped(t.expr)).legend_format(t.legend).datasource(DATASOURCE))
    return p


def _variables() -> list:
    ds = (DatasourceVariable("datasource").label("Data source").type("prometheus")
          .current(VariableOption(text="${" + DS_INPUT + "}", value="${" + DS_INPUT + "}", selected=True)))
    cluster = (QueryVariable("cluster").label("cluster").datasource(DATASOURCE)
               .query(f"label_values({EVERY_NODE_METRIC}, cluster)")
               .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
               .description("the cluster label the scrape config puts on the daemons' targets"))
    instance = (QueryVariable("instance").label("instance").datasource(DATASOURCE)
                .query(f'label_values({EVERY_NODE_METRIC}{{cluster="$cluster"}}, instance)')
                .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
                .multi(True).include_all(True).all_value(ALL_INSTANCES)
                .current(VariableOption(text="All", value="$__all", selected=True))
                .description("autorecovery daemons of the cluster (All includes the elected auditor)"))
    for v in (ds, cluster, instance):
        v.hide(VariableHide.DONT_HIDE)
    return [ds, cluster, instance]


def build() -> dict:
    """The dashboard as a JSON-ready dict (``__inputs`` and ``__requires`` first, as Grafana exports)."""
    b = (DashboardBuilder("AutoRecovery").uid(UID).tags(["bookkeeper", "autorecovery"]).timezone("utc")
         .refresh("30s").time("now-6h", "now").editable())
    for v in _variables():
        b = b.with_variable(v)
    for i, spec in enumerate(PANELS, start=1):
        b = b.with_panel(_panel(spec, i))
    body = json.loads(JSONEncoder().encode(b.build()))
    body["annotations"] = body.get("annotations") or {"list": []}  # the SDK writes {} when there are none
    head = {
        "__inputs": [{"name": DS_INPUT, "label": "Prometheus", "description": "Prometheus scraping the daemons",
                      "type": "datasource", "pluginId": "prometheus", "pluginName": "Prometheus"}],
        "__requires": [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": "11.1.0"},
                       {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
                       {"type": "panel", "id": "stat", "name": "Stat", "version": ""},
                       {"type": "panel", "id": "timeseries", "name": "Time series", "version": ""}],
    }
    return {**head, **body}


def render() -> str:
    """The committed file's exact text (2-space indent, trailing newline)."""
    return json.dumps(build(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autorecovery.deploy.dashboard", description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", type=Path, help=f"write here (e.g. {OUTPUT}); default: stdout")
    ap.add_argument("--check", action="store_true", help="exit 1 if --output differs from the generated text")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if args.output is None:
            ap.error("--check needs --output")
        if not args.output.exists() or args.output.read_text() != text:
            print(f"{args.output}: differs from the generated dashboard; run `make dashboard`", file=sys.stderr)
            return 1
        return 0
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
