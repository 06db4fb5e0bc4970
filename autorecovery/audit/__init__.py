"""Pure auditor logic (PURE, lowest floor): the bookie→ledger index, fragment verdicts, lost-bookie
delay decisions, check schedules and replicas buckets. No asyncio, kazoo, grpc or sockets here; time
comes in as arguments (seconds or ms, named in each signature).

May import only the other PURE packages (``ledger``, ``errors``, ``proto``'s generated messages, and
by the contract ``plan``, ``placement``, ``config.keys``/``config.sections``); ``roles.auditor``
feeds it what ZooKeeper and the bookies answered and carries out what it decides.
"""
