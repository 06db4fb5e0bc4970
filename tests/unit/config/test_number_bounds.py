"""Every integer and float key of the table is bounded (issue 25): a 400-digit value, a huge negative
value, NaN or an infinity is a one-line configuration error naming the key and its allowed range,
from the config file, a ``BK_<key>`` variable or a flag; ``config check``, ``run`` and the shell exit 2.
The reference bookie's numeric flags are bounded and finite too (click usage error, exit 2)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from autorecovery.cli.bookie import bookie_command
from autorecovery.cli.main import main
from autorecovery.config import keys as K
from autorecovery.config.load import load_settings
from autorecovery.errors import ConfigError

NUMBER_KEYS = [k for k in K.KEYS if k.type in ("int", "float")]
FLOAT_KEYS = [k for k in NUMBER_KEYS if k.type == "float"]
HUGE = "9" * 400
HUGE_NEGATIVE = "-" + "9" * 400


def _error_line(exc: ConfigError, key: str) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if key in line]
    assert len(lines) == 1, str(exc)[:2000]
    return lines[0]


def test_every_number_key_has_both_bounds():
    unbounded = [k.name for k in NUMBER_KEYS if k.min_value is None or k.max_value is None]
    assert not unbounded, unbounded
    for k in NUMBER_KEYS:  # and every default lies inside them
        assert k.parse(k.render(k.default)) == k.default, k.name


@pytest.mark.parametrize("key", NUMBER_KEYS, ids=lambda k: k.name)
@pytest.mark.parametrize("raw", [HUGE, HUGE_NEGATIVE], ids=["400-digits", "minus-400-digits"])
def test_huge_values_are_one_line_errors_naming_key_and_range(key, raw, tmp_path):
    conf = tmp_path / "bk_server.conf"
    conf.write_text(f"zkServers=127.0.0.1:2181\n{key.name}={raw}\n")
    with pytest.raises(ConfigError) as ei:
        load_settings(conf, env={})
    line = _error_line(ei.value, key.name)
    assert line.startswith(f"bad value for {key.name}: ")
    assert key.allowed() in line and "out of range" in line
    assert len(line) < 200  # the value is cut, not echoed 400 digits long


@pytest.mark.parametrize("key", FLOAT_KEYS, ids=lambda k: k.name)
@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400"])
def test_float_keys_refuse_nan_and_infinities(key, raw):
    with pytest.raises(ConfigError) as ei:
        load_settings(None, env={}, overrides={"zkServers": "127.0.0.1:2181", key.name: raw})
    line = _error_line(ei.value, key.name)
    assert line.startswith(f"bad value for {key.name}: {raw!r}") and key.allowed() in line


@pytest.mark.parametrize("source", ["file", "env", "flag"])
def test_every_source_is_checked(source, tmp_path):
    conf = tmp_path / "bk_server.conf"
    conf.write_text("zkServers=127.0.0.1:2181\n" + (f"getBookieInfoIntervalSeconds={HUGE}\n" if source == "file" else ""))
    env = {"BK_getBookieInfoIntervalSeconds": HUGE} if source == "env" else {}
    flags = {"getBookieInfoIntervalSeconds": HUGE} if source == "flag" else None
    with pytest.raises(ConfigError) as ei:  # was an OverflowError traceback (int too large to convert to float)
        load_settings(conf, env=env, overrides=flags)
    assert f"allowed 0..{K.YEAR_S} s) [{source}]" in _error_line(ei.value, "getBookieInfoIntervalSeconds")


def test_bounds_in_range_still_parse():
    assert K.KEY_BY_NAME["zkTimeout"].parse(str(K.INT_MAX)) == K.INT_MAX
    assert K.KEY_BY_NAME["lostBookieRecoveryDelay"].parse(str(K.YEAR_S)) == K.YEAR_S
    assert K.KEY_BY_NAME["replicationMaxStreamsPerSourceBookie"].parse("-1") == -1  # <= 0: unlimited, as before
    assert K.KEY_BY_NAME["bookieMaxMultipleForWeightBasedPlacement"].parse("0") == 0  # <= 0: no cap
    with pytest.raises(ConfigError, match=r"lostBookieRecoveryDelay: '31536001' \(out of range: allowed 0..31536000 s\)"):
        K.KEY_BY_NAME["lostBookieRecoveryDelay"].parse(str(K.YEAR_S + 1))


def _invoke(args, env=None):
    return CliRunner().invoke(main, args, env=env or {})


def test_config_check_exits_2_on_an_out_of_range_value(tmp_path):
    conf = tmp_path / "bk_server.conf"
    conf.write_text(f"zkServers=127.0.0.1:2181\ngetBookieInfoTimeoutSecs={HUGE}\n")
    res = _invoke(["config", "check", "-c", str(conf)])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert f"bad value for getBookieInfoTimeoutSecs: '{'9' * 40}'... (400 characters) (out of range: " \
           f"allowed 1..{K.YEAR_S} s) [file]" in res.stderr
    res = _invoke(["config", "check", "--zk", "127.0.0.1:2181"], env={"BK_shutdownTimeoutSeconds": "inf"})
    assert res.exit_code == 2 and "bad value for shutdownTimeoutSeconds: 'inf' (out of range" in res.stderr


def test_run_and_shell_exit_2_before_connecting():
    res = _invoke(["run", "--zk", "127.0.0.1:1", "-D", f"bookieMaxMultipleForWeightBasedPlacement={HUGE}"])
    assert res.exit_code == 2, res.output
    assert "bad value for bookieMaxMultipleForWeightBasedPlacement" in res.stderr
    res = _invoke(["shell", "whoisauditor", "--zk", "127.0.0.1:1", "-D", "zkReplicationTaskRateLimit=nan"])
    assert res.exit_code == 2, res.output
    assert "bad value for zkReplicationTaskRateLimit: 'nan' (expected a finite number, allowed 0..1000000 tasks/s)" \
        in res.stderr


@pytest.mark.parametrize("flag,value", [
    ("--disk-check-interval-ms", HUGE), ("--zk-session-timeout-ms", HUGE), ("--stream-idle-timeout-ms", HUGE),
    ("--shutdown-grace-ms", HUGE), ("--max-entry-size", HUGE), ("--max-adds-in-progress", str(2**31)),
    ("--readonly-free-bytes", HUGE), ("--max-concurrent-streams", HUGE), ("--max-reads-in-progress", HUGE),
    ("--disk-usage-threshold", "nan"), ("--disk-usage-lwm-threshold", "nan"),
])
def test_bookie_numeric_flags_are_bounded(flag, value, tmp_path):
    res = CliRunner().invoke(bookie_command, ["--zk", "127.0.0.1:1", "--data-dir", str(tmp_path / "d"), flag, value])
    assert res.exit_code == 2, (res.output, res.exception)
    assert f"Invalid value for '{flag}'" in res.output
