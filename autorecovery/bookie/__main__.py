"""``python -m autorecovery.bookie``: the same command as ``autorecovery bookie``."""

from autorecovery.cli.bookie import bookie_command

if __name__ == "__main__":
    bookie_command(prog_name="python -m autorecovery.bookie")
