"""Metrics keep upstream's exact names (no _total) in both expositions."""

from prometheus_client import generate_latest

from autorecovery.metrics import MetricsRegistry, generate_text


def test_exact_names_and_op_stats():
    reg = MetricsRegistry()
    c = reg.counter("auditor", "NUM_LEDGERS_CHECKED")
    c.inc(3)
    assert reg.counter("auditor", "NUM_LEDGERS_CHECKED") is c
    reg.gauge("auditor", "NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY").set(2)
    op = reg.op_stats("auditor", "AUDIT_BOOKIES_TIME")
    op.record(12.5)
    op.record(3, success=False)
    with op.time():
        pass
    assert op.count() == 2 and op.count(False) == 1
    text = generate_text(reg).decode()
    assert "# TYPE auditor_NUM_LEDGERS_CHECKED counter\nauditor_NUM_LEDGERS_CHECKED 3.0\n" in text
    assert 'auditor_AUDIT_BOOKIES_TIME_count{success="true"} 2.0' in text
    assert 'auditor_AUDIT_BOOKIES_TIME_count{success="false"} 1.0' in text
    prom = generate_latest(reg).decode()
    assert "auditor_NUM_LEDGERS_CHECKED 3.0" in prom and "_total" not in prom
    assert "auditor_NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY 2.0" in prom
    try:
        reg.gauge("auditor", "NUM_LEDGERS_CHECKED")
        raise AssertionError("kind clash must raise")
    except ValueError as exc:
        assert "auditor_NUM_LEDGERS_CHECKED" in str(exc)


def test_every_family_gets_help_before_its_type():
    from autorecovery.metrics import HELP, help_text

    reg = MetricsRegistry()
    reg.counter("auditor", "NUM_LEDGERS_CHECKED").inc()
    reg.gauge("autorecovery", "with_doc", doc="line one\nline two \\ end").set(1)
    reg.counter("replication_worker", "exceptions_TimeoutError").inc()
    text = generate_text(reg).decode()
    assert ("# HELP auditor_NUM_LEDGERS_CHECKED " + HELP["auditor_NUM_LEDGERS_CHECKED"] +
            "\n# TYPE auditor_NUM_LEDGERS_CHECKED counter\n") in text
    assert "# HELP autorecovery_with_doc line one\\nline two \\\\ end\n" in text  # escaped as the format says
    assert help_text("replication_worker_exceptions_TimeoutError", []) == \
        "exceptions of type TimeoutError raised in this role"
    assert text.count("# HELP ") == text.count("# TYPE ") == 3
