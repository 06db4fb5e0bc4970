"""The configuration keys autorecovery reads: one table, upstream names first (PURE).

Every key a ``bk_server.conf`` may carry for AutoRecovery is listed once in :data:`KEYS` with its type,
unit, default, a one-line doc and where it comes from:

* ``upstream`` — Apache BookKeeper's ``ServerConfiguration`` / ``ClientConfiguration`` /
  ``AbstractConfiguration`` key, same name, same unit, same default unless ``upstream_default`` says
  otherwise (the docs explain each such difference);
* ``ours`` — a key autorecovery adds, named in the same style.

:data:`PULSAR_ALIASES` maps Pulsar ``broker.conf`` names (``bookkeeperClient...``) onto the upstream
keys, and :data:`NO_EFFECT_KEYS` lists the upstream keys that a shared ``bk_server.conf`` usually
contains but that have no effect on AutoRecovery, each with its reason (they are accepted and listed
by ``config check`` instead of being reported as unknown).

Parsing one raw string value is :meth:`Key.parse`; it raises :class:`~autorecovery.errors.ConfigError`
naming the key and the value. No I/O here: :mod:`autorecovery.config.load` reads files and the
environment.

The typed settings sections (``AuditorSettings``, ``WorkerSettings``, ``PlacementConfig``) derive from
:class:`Section`: each maps table keys to its fields and is built from the values the loader parsed
once (:meth:`Section.from_values`); :meth:`Section.from_properties` (tests, tools) parses raw strings
with the same :meth:`Key.parse` and fills the table's defaults, so there is one parser and one default
per key.

The table lives in the modules of this package, one idea each (:mod:`.model`: a key; :mod:`.table`:
the table; :mod:`.aliases`: other names; :mod:`.no_effect`: keys that do nothing; :mod:`.sections`:
typed sections); this package's interface (``__all__``) names them all and adds the look-ups over them.
"""

from __future__ import annotations

import difflib

from autorecovery.config.keys.aliases import (
    DEFAULT_POLICY_CLASS,
    OUR_ALIASES,
    PULSAR_ALIASES,
    PULSAR_PASSTHROUGH_PREFIX,
    PULSAR_POLICY_SWITCHES,
    RACKAWARE_CLASS,
    REGIONAWARE_CLASS,
    pulsar_policy,
)
from autorecovery.config.keys.model import INT_MAX, OURS, UPSTREAM, YEAR_S, Key
from autorecovery.config.keys.no_effect import (
    IGNORED_UPSTREAM_KEYS,
    NO_EFFECT_GROUPS,
    NO_EFFECT_KEYS,
    REFUSED_WHEN_ASKED,
    UNIMPLEMENTED_SECURITY_KEYS,
    asks_for_security,
    no_effect_reason,
)
from autorecovery.config.keys.table import KEYS, KEY_BY_NAME, LIBRARY_KEY_BY_NAME

__all__ = [
    "Key", "KEYS", "KEY_BY_NAME", "LIBRARY_KEY_BY_NAME", "UPSTREAM", "OURS",
    "INT_MAX", "YEAR_S",
    "PULSAR_ALIASES", "OUR_ALIASES", "PULSAR_POLICY_SWITCHES", "PULSAR_PASSTHROUGH_PREFIX", "RACKAWARE_CLASS",
    "REGIONAWARE_CLASS", "DEFAULT_POLICY_CLASS", "pulsar_policy",
    "NO_EFFECT_GROUPS", "NO_EFFECT_KEYS", "IGNORED_UPSTREAM_KEYS", "UNIMPLEMENTED_SECURITY_KEYS",
    "REFUSED_WHEN_ASKED", "no_effect_reason", "asks_for_security", "known", "classified", "suggest", "keys_in_group"]


def known(name: str) -> bool:
    """True for a key of the table (not an alias, not an ignored bookie key)."""
    return name in KEY_BY_NAME


def classified(name: str) -> bool:
    """True for every name the loader does not call unknown: a key of the table, one of its aliases
    (Pulsar's, ours), a key accepted with no effect, or an unimplemented security key (refused when it
    asks for something)."""
    return (name in KEY_BY_NAME or name in PULSAR_ALIASES or name in OUR_ALIASES or name in PULSAR_POLICY_SWITCHES
            or name in NO_EFFECT_KEYS or name in UNIMPLEMENTED_SECURITY_KEYS)


def suggest(name: str, extra: tuple[str, ...] = ()) -> str | None:
    """The closest known key to a misspelled ``name`` ("did you mean"), or None.

    A case-insensitive exact match wins (``zktimeout`` → ``zkTimeout``); otherwise difflib's closest
    name with a similarity of at least 0.8.
    """
    names = (list(KEY_BY_NAME) + list(PULSAR_ALIASES) + list(OUR_ALIASES) + list(PULSAR_POLICY_SWITCHES)
             + list(NO_EFFECT_KEYS) + sorted(UNIMPLEMENTED_SECURITY_KEYS) + list(extra))
    low = name.lower()
    for n in names:
        if n.lower() == low:
            return n
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
    if close:
        return close[0]
    close = difflib.get_close_matches(low, [n.lower() for n in names], n=1, cutoff=0.8)
    if close:
        return next(n for n in names if n.lower() == close[0])
    return None


def keys_in_group(group: str) -> tuple[Key, ...]:
    """The keys of the table in ``group`` (``metadata``, ``http``, ``auditor``...), in table order."""
    return tuple(k for k in KEYS if k.group == group)
