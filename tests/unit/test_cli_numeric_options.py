"""Numeric options of the shell and the other commands are checked by click before anything connects
(issue 25): NaN, infinities, zero/negative timeouts and polls, overflowing integers are click's usage
error naming the option (exit 2); the shell and the HTTP API share one rule per argument
(autorecovery/admin/params.py)."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from autorecovery.admin import params
from autorecovery.admin.op_context import BadRequestError, check_ledger_id
from autorecovery.admin.http_routes import _timeout_s
from autorecovery.cli.main import main
from autorecovery.config.keys.model import YEAR_S

HUGE = "9" * 400
NO_ZK = ["--zk", "127.0.0.1:1"]  # never reached: the option is refused first


def invoke(*args):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("args,option", [
    (["shell", "decommissionbookie", "-bookieid", "h:1", "--timeout", "nan"], "--timeout"),
    (["shell", "decommissionbookie", "-bookieid", "h:1", "--timeout", "inf"], "--timeout"),
    (["shell", "decommissionbookie", "-bookieid", "h:1", "--timeout", "0"], "--timeout"),
    (["shell", "decommissionbookie", "-bookieid", "h:1", "--timeout", "-5"], "--timeout"),
    (["shell", "decommissionbookie", "-bookieid", "h:1", "--timeout", HUGE], "--timeout"),
    (["shell", "decommissionbookie", "-bookieid", "h:1", "--poll", "0"], "--poll"),
    (["shell", "decommissionbookie", "-bookieid", "h:1", "--poll", "-1"], "--poll"),
    (["shell", "decommissionbookie", "-bookieid", "h:1", "--poll", "nan"], "--poll"),
    (["shell", "recover", "h:1", "-f", "--lock-wait", "nan"], "--lock-wait"),
    (["shell", "recover", "h:1", "-f", "--lock-wait", "-1"], "--lock-wait"),
    (["shell", "recover", "h:1", "-f", "-rate", HUGE], "-rate"),
    (["shell", "recover", "h:1", "-f", "-l", "-1"], "-l"),
    (["shell", "recover", "h:1", "-f", "-l", HUGE], "-l"),
    (["shell", "ledgermetadata", "-l", "x1"], "-l"),
    (["shell", "ledgermetadata", "-l", str(2**63)], "-l"),
    (["shell", "lostbookierecoverydelay", "-s", "-5"], "-s"),
    (["shell", "lostbookierecoverydelay", "-s", HUGE], "-s"),
    (["shell", "lostbookierecoverydelay", "-s", str(YEAR_S + 1)], "-s"),
    (["shell", "placementcheck", "--max-list", HUGE], "--max-list"),
    (["shell", "maintenance", "start", "--bookie", "h:1", "--reason", "r", "--ttl", "nan"], "--ttl"),
    (["shell", "maintenance", "start", "--bookie", "h:1", "--reason", "r", "--ttl", "400d"], "--ttl"),
    (["shell", "maintenance", "override", "--rack", "/r", "--reason", "r", "--ttl", "0s"], "--ttl"),
    (["shell", "initnewcluster", "--timeout", "nan"], "--timeout"),
    (["shell", "initnewcluster", "--timeout", "inf"], "--timeout"),
])
def test_shell_numeric_options_are_usage_errors(args, option):
    res = invoke(*args, *NO_ZK)
    assert res.exit_code == 2, (res.output, res.exception)
    assert "Invalid value for" in res.stderr and option in res.stderr, res.stderr
    assert "Traceback" not in res.output


@pytest.mark.parametrize("args,option", [
    (["workload", "write", "--zk", "h:1", "--continuous", "--duration", "nan"], "--duration"),
    (["workload", "write", "--zk", "h:1", "--continuous", "--rate", "inf"], "--rate"),
    (["workload", "write", "--zk", "h:1", "--entry-size", HUGE], "--entry-size"),
    (["export", "--out", "x", "--synthetic", "--violations", "nan"], "--violations"),
    (["export", "--out", "x", "--synthetic", "--ledgers", HUGE], "--ledgers"),
])
def test_other_numeric_options_are_usage_errors(args, option):
    res = invoke(*args)
    assert res.exit_code == 2, (res.output, res.exception)
    assert "Invalid value for" in res.stderr and option in res.stderr, res.stderr


def test_shell_and_http_share_the_timeout_rule():
    for bad in (math.nan, math.inf, -math.inf, 0, -1, 1e300, 10**400, True, "5"):
        with pytest.raises(BadRequestError, match="timeout_s"):
            _timeout_s(bad)
        if not isinstance(bad, (bool, str)):
            with pytest.raises(ValueError, match="bad timeout "):
                params.seconds(str(bad), "timeout")
    assert _timeout_s(30) == params.seconds("30", "timeout") == 30.0
    assert _timeout_s(None) is None
    assert params.seconds("0", "lock-wait", allow_zero=True) == 0.0


def test_delay_and_ledger_id_rules():
    assert params.recovery_delay("7") == 7 and params.recovery_delay(YEAR_S) == YEAR_S
    for bad in ("-5", HUGE, "1e3", "", str(YEAR_S + 1), True):
        with pytest.raises(ValueError, match=r"^bad lostBookieRecoveryDelay .*: expected seconds, an integer in \[0, 31536000\]$"):
            params.recovery_delay(bad)
    assert check_ledger_id(" 12 ") == 12 and check_ledger_id(2**63 - 1) == 2**63 - 1
    for bad in ("x1", "-1", str(2**63), "9" * 5000):
        with pytest.raises(BadRequestError, match=r"^bad ledger id "):
            check_ledger_id(bad)
