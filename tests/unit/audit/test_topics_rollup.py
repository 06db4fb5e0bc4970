"""By-topic rollup of under-replicated / at-risk / blocked / unrecoverable ledgers (pure), and the
bounded namespace series the auditor exports."""

from __future__ import annotations

from autorecovery.audit.topics import OTHER, STATUSES, LedgerState, format_rollup, namespace_series, rollup
from autorecovery.ledger.pulsar_names import NOT_PULSAR, pulsar_names


def ml(name: str) -> dict[str, bytes]:
    return {"pulsar/managed-ledger": name.encode()}


def test_parser_is_the_reports_one():
    from autorecovery.reports import jobs, riskpass

    assert jobs.pulsar_names is pulsar_names
    assert riskpass.pulsar_names is pulsar_names
    assert pulsar_names(ml("t/ns/persistent/a/b")) == ("t", "t/ns", "persistent://t/ns/a/b")
    assert pulsar_names({"pulsar/managed-ledger": b"t/\xff"}) == ("t", "t/\ufffd", "")


def test_rollup_by_tenant_namespace_topic_with_not_pulsar():
    states = [
        LedgerState(3, ml("public/default/persistent/orders"), frozenset({"under_replicated", "at_risk"})),
        LedgerState(1, ml("public/default/persistent/orders"), frozenset({"under_replicated"})),
        LedgerState(2, ml("acme/billing/persistent/invoices"), frozenset({"under_replicated", "blocked"})),
        LedgerState(9, None, frozenset({"unrecoverable"})),
        LedgerState(8, {"application": b"x"}, frozenset({"under_replicated"})),
    ]
    doc = rollup(states)
    assert doc["ledgers"] == 5
    orders = doc["topics"]["persistent://public/default/orders"]
    assert orders["under_replicated"] == 2 and orders["at_risk"] == 1 and orders["ledger_ids"] == [1, 3]
    assert doc["namespaces"]["acme/billing"]["blocked"] == 1
    assert doc["tenants"]["public"]["under_replicated"] == 2
    assert doc["tenants"][NOT_PULSAR] == {"under_replicated": 1, "at_risk": 0, "blocked": 0, "unrecoverable": 1}
    assert doc["topics"][NOT_PULSAR]["ledger_ids"] == [8, 9]
    lines = format_rollup(doc)
    assert "Topic persistent://public/default/orders: under-replicated 2, at-risk 1, blocked 0, unrecoverable 0; " \
           "ledgers 1, 3" in lines
    assert f"Tenant {NOT_PULSAR}: under-replicated 1, at-risk 0, blocked 0, unrecoverable 1" in lines


def test_topic_ledger_ids_are_bounded():
    doc = rollup([LedgerState(i, ml("t/n/persistent/x"), frozenset({"under_replicated"})) for i in range(50)],
                 max_ledger_ids=5)
    assert doc["topics"]["persistent://t/n/x"]["ledger_ids"] == [0, 1, 2, 3, 4]
    assert doc["topics"]["persistent://t/n/x"]["under_replicated"] == 50


def test_namespace_series_top_n_plus_other_is_bounded_and_sums_right():
    namespaces = {f"t/ns{i}": {"under_replicated": i, "at_risk": 1, "blocked": 0, "unrecoverable": 0}
                  for i in range(30)}
    series = namespace_series(namespaces, 20)
    names = {ns for ns, _ in series}
    assert len(names) == 21 and OTHER in names and "t/ns29" in names and "t/ns9" not in names
    total = sum(c["under_replicated"] for c in namespaces.values())
    assert sum(v for (ns, s), v in series.items() if s == "under_replicated") == total
    assert series[(OTHER, "at_risk")] == 10
    few = namespace_series({"a/b": {"under_replicated": 2}}, 20)
    assert few[(OTHER, "under_replicated")] == 0 and few[("a/b", "under_replicated")] == 2
    assert set(s for _, s in few) == set(STATUSES)
    assert {ns for ns, _ in namespace_series(namespaces, -1)} == {OTHER}
