"""Pure planning of the ReplicationWorker: priority, targets, throttles, backoff, progress (PURE)."""
