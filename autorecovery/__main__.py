"""``python -m autorecovery`` runs the ``autorecovery`` command."""

from autorecovery.cli.main import main

main()
