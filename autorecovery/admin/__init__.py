"""Admin operations (floor ``admin``, above ``roles``): one async function per shell command, shared
by the CLI and the HTTP API (``/api/v1/autorecovery/*``, ``/metrics``, ``/healthz``), the HTTP
server with its authentication and input checks, recover, decommission and maintenance.

May import ``roles``, the edges (``zk``, ``rpc``, ``client``), the process services (``config``,
``metrics``, ``logs``) and the PURE core; never ``daemon``, ``reports``, ``workload`` or ``cli``
(``.importlinter``), which call it.
"""
