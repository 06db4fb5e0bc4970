"""ReplicationWorker settings (PURE): the worker keys of :class:`~autorecovery.config.sections.WorkerSettings`.

The dataclass lives in :mod:`autorecovery.config.sections` so that the loader builds ``Settings.worker``
without importing the roles; every worker key (upstream's and our four) is in
:data:`autorecovery.config.keys.KEYS`. :data:`CONFIG_KEYS` lists our worker keys (from the table).
"""

from __future__ import annotations

from autorecovery.config.keys.model import OURS, Key
from autorecovery.config.keys.table import KEY_BY_NAME
from autorecovery.config.sections import WorkerSettings

#: The worker keys that are ours (origin ``ours``), as they are in the key table.
CONFIG_KEYS: tuple[Key, ...] = tuple(KEY_BY_NAME[name] for name in WorkerSettings.KEY_FIELDS
                                     if KEY_BY_NAME[name].origin == OURS)

__all__ = ["CONFIG_KEYS"]
