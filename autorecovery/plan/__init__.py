"""Pure planning of the ReplicationWorker (PURE, lowest floor): priority, targets, throttles,
backoff, progress and the pass plan (what to copy or swap first, and where).

May import only the PURE core (``audit``, ``ledger``, ``placement``, ``errors``); no I/O, time from
arguments. ``roles`` carries out what it decides.
"""
