"""The ``autorecovery`` command: one click group for every sub-command."""

from __future__ import annotations

import importlib
import importlib.util

import click

# (module, attribute) of each sub-command; imported lazily so `autorecovery bookie` does not pay for
# the admin shell's imports and a broken optional part never breaks the others.
SUBCOMMANDS = {
    "bookie": ("autorecovery.cli.bookie", "bookie_command"),
    "local-cluster": ("autorecovery.cli.local_cluster", "local_cluster"),
    "workload": ("autorecovery.cli.workload", "workload"),
    "demo": ("autorecovery.cli.demo", "demo"),
    "run": ("autorecovery.cli.run", "run"),
    "shell": ("autorecovery.cli.shell", "shell"),
    "config": ("autorecovery.cli.config", "config"),
    "export": ("autorecovery.cli.report", "export_command"),
    "report": ("autorecovery.cli.report", "report_command"),
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = []
        for name, (mod, _attr) in SUBCOMMANDS.items():
            if importlib.util.find_spec(mod) is not None:
                names.append(name)
        return sorted(names)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        mod, attr = SUBCOMMANDS[name]
        if importlib.util.find_spec(mod) is None:
            return None
        return getattr(importlib.import_module(mod), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """autorecovery: BookKeeper AutoRecovery (Auditor + ReplicationWorker), placement repair (BP-54),
    a reference bookie, a ledger client and a local cluster."""


if __name__ == "__main__":  # pragma: no cover
    main()
