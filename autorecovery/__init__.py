"""autorecovery: BookKeeper AutoRecovery in Python (see README.md and docs/architecture.md).

The packages form floors, kept by the import-linter contract in ``.importlinter`` (a package imports
only from its own floor and the floors below; ``make lint`` and CI fail otherwise), lowest first:
the PURE core (``ledger``, ``plan``, ``audit``, ``placement``, ``config.keys``/``config.sections``,
``errors``, ``proto``: no I/O, time passed in); process services (``config.load``, ``config.tls``,
``metrics``, ``logs``, ``malloc``); the EDGES (``zk``, ``rpc``, ``client``, ``bookie``: ZooKeeper,
gRPC, upstream's wire protocol, SQLite); ``roles`` (the Auditor and ReplicationWorker loops);
``admin`` (operations shared by the shell and the HTTP API); ``daemon``, ``reports``, ``workload``;
and on top ``cli`` and ``deploy``. ``testing`` (local clusters for tests, benchmarks and the demo)
stands outside the floors: nothing on the daemon's path imports it.

Importing the package installs quiet logging defaults for library use (:func:`autorecovery.logs.library_defaults`):
nothing reaches the console until the program configures logging.
"""

from autorecovery.logs import library_defaults as _library_defaults

_library_defaults()
