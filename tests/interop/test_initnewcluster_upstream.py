"""Our ``shell initnewcluster`` leaves the same tree as upstream 4.17.2's own ``BookieShell initnewcluster``
on an empty root (issue 28 item 6): same znodes, same LAYOUT bytes, an INSTANCEID UUID each, nothing else.
Needs ``make upstream`` (the 4.17.2 jars)."""

from __future__ import annotations


from click.testing import CliRunner

from autorecovery.cli.main import main
from autorecovery.testing.znodes import UUID_V4 as UUID
from autorecovery.testing.znodes import znode_tree as tree





def test_initnewcluster_tree_is_upstreams(java_cluster, zk_server):
    upstream = java_cluster(bookies=0)  # formats <root>/ledgers with upstream's shell, starts no bookie
    theirs = tree(zk_server.connect_string, upstream.ledgers_root)
    root = f"/o{upstream.root[2:]}"
    res = CliRunner().invoke(main, ["shell", "initnewcluster", "--zk", zk_server.connect_string,
                                    "--ledgers-root", f"{root}/ledgers"], env={})
    assert res.exit_code == 0, res.output
    ours = tree(zk_server.connect_string, f"{root}/ledgers")
    assert sorted(ours) == sorted(theirs)
    assert UUID.fullmatch(ours.pop("/INSTANCEID")) and UUID.fullmatch(theirs.pop("/INSTANCEID"))
    assert ours == theirs


def test_autorecovery_status_line_is_upstreams(java_cluster, zk_server):
    """The status line of upstream's own ``shell autorecovery`` (no option; its log prefix stripped) is
    what our ``autorecovery -s/--status`` and option-less form print, enabled and disabled."""
    upstream = java_cluster(bookies=0)
    ours = ["shell", "autorecovery", "--zk", zk_server.connect_string, "--ledgers-root", upstream.ledgers_root]

    def theirs() -> str:
        r = upstream.shell("autorecovery")
        assert r.returncode == 0, r.stdout[-1000:]
        return r.stdout.strip().splitlines()[-1].split("INFO  ", 1)[1] + "\n"

    enabled = theirs()
    assert enabled == "Autorecovery is enabled.\n"
    for flags in ([], ["-s"], ["--status"]):
        assert CliRunner().invoke(main, [*ours, *flags], env={}).stdout == enabled
    assert upstream.shell("autorecovery", "-d").returncode == 0
    assert CliRunner().invoke(main, [*ours, "--status"], env={}).stdout == theirs() == "Autorecovery is disabled.\n"
