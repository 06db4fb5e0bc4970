"""Typed settings sections built from the key table (PURE): :class:`Section`, the base of
``AuditorSettings``, ``WorkerSettings`` and ``PlacementConfig`` (one parser and one default per key), and
:func:`typed_value` / :func:`typed_values`. Names resolve from :mod:`autorecovery.config.keys`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from autorecovery.config.keys.model import Key
from autorecovery.config.keys.table import KEY_BY_NAME
from autorecovery.errors import ConfigError


# -- typed sections ---------------------------------------------------------------------------------
def typed_value(key: Key, value: Any) -> Any:
    """``value`` as the typed value of ``key``: a string goes through :meth:`Key.parse`; an already
    typed value (``True``, ``2``, ``0.5``, as tests and tools pass them) is checked the same way
    (type, bounds, choices).

    Raises:
        ConfigError: ``bad value for <key>: <value!r> (...)``.
    """
    if isinstance(value, str):
        return key.parse(value)
    if key.type == "bool" and isinstance(value, bool):
        return value
    if key.type in ("int", "float") and isinstance(value, (int, float)) and not isinstance(value, bool):
        if key.type == "int" and isinstance(value, float):
            if not value.is_integer():
                raise ConfigError(f"bad value for {key.name}: {value!r} (expected an integer)")
            value = int(value)
        return key.parse(str(value))
    expected = {"bool": "true or false", "int": "an integer", "float": "a number"}.get(key.type, "a string")
    raise ConfigError(f"bad value for {key.name}: {value!r} (expected {expected})")


def typed_values(props: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """Typed value of every key of ``names``: parsed from ``props`` when set there, else the table's
    default.

    Raises:
        ConfigError: naming every key with a bad value (``; ``-separated), or a name that is not in
            :data:`KEYS`.
    """
    out: dict[str, Any] = {}
    errors: list[str] = []
    for name in names:
        key = KEY_BY_NAME.get(name)
        if key is None:
            raise ConfigError(f"{name} is not a configuration key of autorecovery")
        if name not in props:
            out[name] = key.default
            continue
        try:
            out[name] = typed_value(key, props[name])
        except ConfigError as exc:
            errors.append(str(exc))
    if errors:
        raise ConfigError("; ".join(errors))
    return out


class Section:
    """Base of the typed settings dataclasses built from the key table.

    Subclasses (frozen dataclasses) set, as plain class attributes:

    * ``KEY_FIELDS``: table key → field name (every key must be in :data:`KEYS`);
    * ``CONVERT``: table key → function from the typed value to the field value (e.g. ``;``-separated
      regions → tuple); keys without one are stored as parsed;
    * ``STRICT``: True when :meth:`from_properties` refuses keys that are not the section's
      (PlacementConfig), False when it ignores them (a whole ``bk_server.conf`` may be passed).

    Field defaults must equal ``CONVERT(table default)`` (tests/unit/config/test_settings_tree.py).
    """

    KEY_FIELDS: ClassVar[Mapping[str, str]] = {}
    CONVERT: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}
    STRICT = False
    SECTION = ""  # name used in messages (default: the class name)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Any:
        """The section from typed values by key name (what the loader parsed); keys missing from
        ``values`` keep the field default.

        Raises:
            ConfigError: a converter or the dataclass's own checks refuse a value (naming the key).
        """
        kw: dict[str, Any] = {}
        for key, fname in cls.KEY_FIELDS.items():
            if key in values:
                conv = cls.CONVERT.get(key)
                kw[fname] = conv(values[key]) if conv is not None else values[key]
        return cls(**kw)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None) -> Any:
        """The section from raw ``bk_server.conf`` strings (or typed values) by upstream key name,
        parsed by :meth:`Key.parse`; unset keys take the table's default.

        Raises:
            ConfigError: naming every key with a bad value; with ``STRICT``, a key that is not the
                section's (``unknown <section> config key 'x'``).
        """
        props = dict(props or {})
        if cls.STRICT:
            for name in props:
                if name not in cls.KEY_FIELDS:
                    raise ConfigError(f"unknown {cls.SECTION or cls.__name__} config key {name!r}")
        mine = {k: v for k, v in props.items() if k in cls.KEY_FIELDS}
        return cls.from_values(typed_values(mine, cls.KEY_FIELDS))

    @classmethod
    def key_map(cls) -> dict[str, str]:
        """config key → field name."""
        return dict(cls.KEY_FIELDS)
