"""``autorecovery config check`` through click's runner (no cluster needed)."""

from __future__ import annotations

from click.testing import CliRunner

from autorecovery.cli.main import main


def run(args, env=None):
    return CliRunner().invoke(main, args, env=env or {})


def test_check_valid_prints_effective_config(tmp_path):
    conf = tmp_path / "bk_server.conf"
    conf.write_text("zkServers=127.0.0.1:2181\nzkTimeout=8000\nlostBookieRecovryDelay=5\n")
    res = run(["config", "check", "-c", str(conf)], env={"BK_rwRereplicateBackoffMs": "100"})
    # issue 28: a key read by nothing is a configuration error (exit 2, as `run` and the shell)
    assert res.exit_code == 2, res.output
    assert "unknown configuration key lostBookieRecovryDelay in the config file; " \
           "did you mean lostBookieRecoveryDelay?" in res.stderr
    assert run(["config", "check", "-c", str(conf), "--strict"]).exit_code == 2
    conf.write_text("zkServers=127.0.0.1:2181\nzkTimeout=8000\n")
    res = run(["config", "check", "-c", str(conf)], env={"BK_rwRereplicateBackoffMs": "100"})
    assert res.exit_code == 0, res.output
    assert "zkTimeout=8000  # file, upstream" in res.stdout
    assert "rwRereplicateBackoffMs=100  # env, upstream" in res.stdout
    # a key that yields to another key is a warning: valid, exit 1
    conf.write_text("zkServers=127.0.0.1:2181\nhttpServerHost=0.0.0.0\nhttpServerAddress=127.0.0.1\n")
    res = run(["config", "check", "-c", str(conf)])
    assert res.exit_code == 1, res.output
    assert ("WARNING: no effect: httpServerAddress=127.0.0.1 is ignored: httpServerHost=0.0.0.0 (upstream's name) "
            "in the config file takes precedence") in res.stderr
    assert "httpServerHost=0.0.0.0  # file, upstream" in res.stdout


def test_check_bad_value_exits_2_naming_key_and_value(tmp_path):
    conf = tmp_path / "bk_server.conf"
    conf.write_text("zkServers=127.0.0.1:2181\nrereplicationEntryBatchSize=lots\n")
    res = run(["config", "check", "-c", str(conf)])
    assert res.exit_code == 2
    assert "bad value for rereplicationEntryBatchSize: 'lots'" in res.stderr


def test_check_flags_override(tmp_path):
    res = run(["config", "check", "--zk", "h:1", "--ledgers-root", "/x", "-D", "zkTimeout=1234"])
    assert res.exit_code == 0, res.output
    assert "zkServers=h:1" in res.stdout and "zkLedgersRootPath=/x" in res.stdout and "zkTimeout=1234  # flag" in res.stdout


def test_keys_markdown():
    res = run(["config", "keys", "--markdown"])
    assert res.exit_code == 0
    assert "| `getBookieInfoIntervalSeconds` | int | s | 60 | upstream (upstream default 86400) |" in res.stdout
