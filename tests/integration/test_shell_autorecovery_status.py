"""``shell autorecovery -s/--status`` (upstream bkctl ``autorecovery toggle -s/--status``; issue 28) and the
status line as upstream prints it (ToggleCommand: ``Autorecovery is enabled.``, period included).
Real ZooKeeper, a cluster formatted by ``initnewcluster``; no bookie needed."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from autorecovery.cli.main import main


def shell(*args: str):
    return CliRunner().invoke(main, ["shell", *args], env={})


@pytest.mark.parametrize("flag", ["-s", "--status", "-status"])
def test_status_flag_spellings_print_upstreams_line(zk_connect, flag):
    assert shell("initnewcluster", "--zk", zk_connect).exit_code == 0
    res = shell("autorecovery", "--zk", zk_connect, flag)
    assert (res.exit_code, res.stdout) == (0, "Autorecovery is enabled.\n"), res.output
    assert shell("autorecovery", "--zk", zk_connect, "-d").stdout == "Disabling autorecovery\n"
    res = shell("autorecovery", "--zk", zk_connect, flag)
    assert (res.exit_code, res.stdout) == (0, "Autorecovery is disabled.\n"), res.output
    assert shell("autorecovery", "--zk", zk_connect).stdout == "Autorecovery is disabled.\n"  # no flag: the same


def test_status_with_a_change_is_a_usage_error(zk_connect):
    assert shell("initnewcluster", "--zk", zk_connect).exit_code == 0
    res = shell("autorecovery", "--zk", zk_connect, "-s", "-d")
    assert res.exit_code == 2 and "only one of -e/--enable, -d/--disable and -s/--status" in res.stderr
    assert shell("autorecovery", "--zk", zk_connect).stdout == "Autorecovery is enabled.\n"  # nothing changed
