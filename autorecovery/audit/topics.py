"""Under-replicated, blocked, unrecoverable and at-risk ledgers rolled up by Pulsar tenant, namespace
and topic (PURE).

Operators think in topics, not ledger ids (apache/pulsar#9099). Each ledger is named by its
``pulsar/managed-ledger`` custom metadata (:func:`autorecovery.ledger.pulsar_names.pulsar_names`, the
parser the offline reports use); a ledger without it is counted under :data:`NOT_PULSAR`.

Statuses (a ledger may count in several):

* ``under_replicated``: marked under-replicated (``underreplication/ledgers``), data loss and BP-54
  placement marks alike;
* ``at_risk``: marked, and some entry has fewer readable copies than the ledger's ack quorum (one
  more loss may lose it; :func:`autorecovery.plan.priority.ledger_priority`'s margin below 0);
* ``blocked``: a worker reports it cannot progress now (no eligible target, open ledger waiting...);
* ``unrecoverable``: entries no replica holds (``underreplication/unrecoverable/urL…``).

:func:`namespace_series` bounds what goes to metrics: the ``n`` namespaces with the most
under-replicated ledgers, plus ``other`` for the rest, so the label count never exceeds ``n + 1``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autorecovery.ledger.pulsar_names import NOT_PULSAR, pulsar_names

STATUSES = ("under_replicated", "at_risk", "blocked", "unrecoverable")

#: Label of the namespaces beyond the top ``n`` in :func:`namespace_series`.
OTHER = "other"


@dataclass(frozen=True)
class LedgerState:
    """One ledger's input to the rollup.

    Attributes:
        ledger_id: the ledger. custom: its custom metadata (None when the metadata was not read).
        statuses: which of :data:`STATUSES` apply.
    """

    ledger_id: int
    custom: Mapping[str, bytes] | None
    statuses: frozenset[str]


def names_of(custom: Mapping[str, bytes] | None) -> tuple[str, str, str]:
    """(tenant, namespace, topic) of a ledger, :data:`NOT_PULSAR` for each when it has no Pulsar name
    (and for the topic of a name with fewer than four parts)."""
    tenant, ns, topic = pulsar_names(custom)
    if not tenant:
        return NOT_PULSAR, NOT_PULSAR, NOT_PULSAR
    return tenant, ns or NOT_PULSAR, topic or NOT_PULSAR


def rollup(ledgers: Iterable[LedgerState], *, max_ledger_ids: int = 20) -> dict[str, Any]:
    """``{"tenants": {name: counts}, "namespaces": {...}, "topics": {...}, "ledgers": n}``; ``counts``
    is ``{status: ledgers}`` for every status in :data:`STATUSES`, and topics also carry
    ``ledger_ids`` (the first ``max_ledger_ids``, ascending). Keys are sorted by name."""
    levels: dict[str, dict[str, dict[str, Any]]] = {"tenants": {}, "namespaces": {}, "topics": {}}
    n = 0
    for led in sorted(ledgers, key=lambda x: x.ledger_id):
        n += 1
        for level, name in zip(("tenants", "namespaces", "topics"), names_of(led.custom), strict=False):
            counts = levels[level].setdefault(name, {s: 0 for s in STATUSES})
            for s in led.statuses:
                if s in counts:
                    counts[s] += 1
            if level == "topics":
                ids = counts.setdefault("ledger_ids", [])
                if len(ids) < max_ledger_ids:
                    ids.append(led.ledger_id)
    return {"ledgers": n, **{k: dict(sorted(v.items())) for k, v in levels.items()}}


def namespace_series(namespaces: Mapping[str, Mapping[str, int]], n: int) -> dict[tuple[str, str], int]:
    """Gauge values ``(namespace, status) → ledgers`` for the top ``n`` namespaces by under-replicated
    ledgers (ties by name) and :data:`OTHER` summing the rest (present, 0, when nothing is left over,
    so a series that existed keeps being exported). ``n`` < 0 is taken as 0 (everything is ``other``)."""
    ranked = sorted(namespaces.items(), key=lambda kv: (-int(kv[1].get("under_replicated", 0)), kv[0]))
    keep, rest = ranked[:max(0, n)], ranked[max(0, n):]
    out: dict[tuple[str, str], int] = {}
    for name, counts in keep:
        for s in STATUSES:
            out[(name, s)] = int(counts.get(s, 0))
    for s in STATUSES:
        out[(OTHER, s)] = sum(int(c.get(s, 0)) for _, c in rest)
    return out


def format_rollup(doc: Mapping[str, Any]) -> list[str]:
    """Text lines of ``listunderreplicated --by-topic``: per tenant, then namespace, then topic, each
    with its counts and (topics) ledger ids."""
    out: list[str] = []

    def counts(c: Mapping[str, Any]) -> str:
        return ", ".join(f"{s.replace('_', '-')} {c.get(s, 0)}" for s in STATUSES)

    for level, title in (("tenants", "Tenant"), ("namespaces", "Namespace"), ("topics", "Topic")):
        for name, c in doc.get(level, {}).items():
            line = f"{title} {name}: {counts(c)}"
            if level == "topics" and c.get("ledger_ids"):
                line += f"; ledgers {', '.join(str(i) for i in c['ledger_ids'])}"
            out.append(line)
    return out
