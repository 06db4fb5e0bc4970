"""Roles: loops that feed the pure decisions and carry out their commands (EDGE).

``auditor.Auditor`` (with ``checker.LedgerChecker``) runs on the elected node; the replication worker
and the bookie-info poller live beside it.
"""
