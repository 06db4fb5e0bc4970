"""``autorecovery shell <command>``: upstream ``bin/bookkeeper shell`` admin commands (same names, same
single-dash options, same output wording) plus ours (``placementcheck``).

Every command takes the cluster location before or after its name: ``-c/-conf/--conf bk_server.conf``
(``listunderreplicated`` keeps upstream's ``-c`` = count: ``--conf`` there), ``--zk
host:port[,host:port][/chroot]``, ``--ledgers-root /ledgers``, ``-D/--define key=value`` (``--set`` too,
except on ``lostbookierecoverydelay`` where it is upstream's setter) and ``BK_<key>`` environment
variables. Upstream's options take one or two dashes, as upstream's commons-cli parser does
(``-ledgerid``/``--ledgerid``/``-l``). ``help [COMMAND]`` prints the usage. Output goes to stdout in
upstream's wording (bookies as ``BookieID:<id>, IP:<ip>, Port:<port>, Hostname:<name>``); logs and
progress to stderr. Deviations from upstream: docs/operators.md, "Compatibility with upstream".

Exit codes: 0 success; 1 the operation failed (no auditor, missing ledger, ZooKeeper unreachable,
recovery failed, decommission timed out...); 2 bad usage (bad bookie or ledger id, bad option values,
bad configuration). Every failure prints ``ERROR: <what and why>`` on stderr.

This module gathers the group and its commands (issue 30): ``shell_group`` (the group, ``command``,
``help``), ``shell_run`` (location options, settings, :func:`execute` and the exit codes), the commands in
``shell_status`` (AutoRecovery's state), ``shell_inspect`` (bookies, cluster, ledger metadata, placement),
``shell_recover`` (recover, decommission), ``maintenance`` and ``cluster_init`` (initnewcluster).
"""

from __future__ import annotations

from autorecovery.cli.shell_group import command, help_cmd, shell
from autorecovery.cli.shell_inspect import jackson_pretty
from autorecovery.cli.shell_run import EXIT_FAIL, EXIT_USAGE, CommandFailed, execute, shell_location, shell_settings

# each command module registers its commands on the group when imported
from autorecovery.cli import cluster_init  # noqa: F401  (initnewcluster)
from autorecovery.cli import maintenance as _maintenance  # noqa: F401  (maintenance group)
from autorecovery.cli import oktostop as _oktostop  # noqa: F401  (oktostop)
from autorecovery.cli import shell_inspect, shell_recover, shell_status  # noqa: F401

__all__ = ["shell", "command", "help_cmd", "jackson_pretty", "CommandFailed", "execute", "shell_location",
           "shell_settings", "EXIT_FAIL", "EXIT_USAGE"]
