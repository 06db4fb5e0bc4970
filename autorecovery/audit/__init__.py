"""Pure auditor logic: the bookie→ledger index, fragment verdicts, lost-bookie delay decisions,
check schedules and replicas buckets. No asyncio, kazoo, grpc or sockets here; time comes in as
arguments (seconds or ms, named in each signature)."""
