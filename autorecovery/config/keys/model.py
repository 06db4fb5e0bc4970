"""One configuration key (PURE): :class:`Key` (name, type, unit, default, bounds, choices, where it comes
from), how it parses one raw string (:meth:`Key.parse`, raising a one-line
:class:`~autorecovery.errors.ConfigError` naming the key and the value) and renders a value, and the
numeric limits the table's bounds use. The table itself: :mod:`autorecovery.config.keys.table`; the
public face: :mod:`autorecovery.config.keys`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from autorecovery.errors import ConfigError

UPSTREAM = "upstream"
OURS = "ours"

_TRUE = {"true", "yes", "on", "1", "y", "t"}
_FALSE = {"false", "no", "off", "0", "n", "f"}

#: Bounds shared by the number keys of :data:`KEYS` (every ``int`` and ``float`` key has both).
#: Java's ``int``: upstream reads most of these keys with ``getInt``, so a larger value never worked there.
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
#: A period: at most a year, in the key's unit (upstream reads periods as ``int`` or ``long``; a
#: longer period is a typo, and bounding it keeps every timer and ``float`` conversion finite).
YEAR_S = 365 * 24 * 3600
YEAR_MS = YEAR_S * 1000
PORT_MAX = 65535
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_MAX_DIGITS = 30  # more significant digits than this is out of every key's range, whatever its sign
_QUOTE_MAX = 40


@dataclass(frozen=True)
class Key:
    """One configuration key.

    Attributes:
        name: the exact key (case-sensitive, as upstream: ``auditorAcquireConcurrentOpenLedgerOperationsTimeOutMSec``).
        type: ``int``, ``float``, ``bool`` or ``str``.
        default: the value used when the key is not set (already typed; None = unset).
        unit: ``ms``, ``s``, ``bytes``, ``bytes/s``, ``%``, ``count``, ``tasks/s`` or ``""``.
        doc: one line for ``config check`` and docs/operators.md.
        origin: :data:`UPSTREAM` or :data:`OURS`.
        group: ``metadata``, ``daemon``, ``http``, ``tls``, ``stats``, ``logging``, ``auditor``, ``worker``, ``placement``,
            ``bookieinfo``.
        min_value / max_value: inclusive bounds for numbers (None = unbounded).
        choices: allowed values for strings (lower-cased comparison), None = any.
        upstream_default: upstream's default when ours differs (documented), else None.
        secret: the value is a credential: ``config check`` prints ``******`` instead of it and no
            error message quotes it.
    """

    name: str
    type: str
    default: Any
    unit: str
    doc: str
    origin: str = UPSTREAM
    group: str = ""
    min_value: float | None = None
    max_value: float | None = None
    choices: tuple[str, ...] | None = None
    upstream_default: Any = None
    secret: bool = False

    def parse(self, raw: str) -> Any:
        """Turn the raw property string into a typed value.

        Booleans accept true/false, yes/no, on/off, 1/0 (any case), as Commons Configuration does.
        Integers are decimal (an optional sign; ``_`` separators are not allowed, as in Java).

        Raises:
            ConfigError: ``bad value for <key>: <value!r> (expected ...)``.
        """
        text = raw.strip()
        try:
            if self.type == "bool":
                low = text.lower()
                if low in _TRUE:
                    return True
                if low in _FALSE:
                    return False
                raise ValueError("expected true or false")
            if self.type == "int":
                if not text or "_" in text:
                    raise ValueError("expected an integer")
                if _INT_TEXT.fullmatch(text) and len(text.lstrip("+-").lstrip("0")) > _MAX_DIGITS:
                    raise OverflowError  # far outside every key's range: not even converted
                value: Any = int(text, 10)
            elif self.type == "float":
                if not text or "_" in text:
                    raise ValueError("expected a number")
                value = float(text)
                if value != value:  # NaN
                    raise ValueError(f"expected a finite number, {self.allowed()}")
                if value in (math.inf, -math.inf):  # "inf", or a literal beyond the double range ("1e400")
                    raise OverflowError
            else:
                value = text
                if self.choices is not None and text.lower() not in self.choices:
                    raise ValueError("expected one of " + ", ".join(self.choices))
                return value
        except OverflowError:
            raise ConfigError(f"bad value for {self.name}: {_quote(raw)} (out of range: {self.allowed()})") from None
        except ValueError as exc:
            raise ConfigError(f"bad value for {self.name}: {_quote(raw)} ({_describe(self, exc)})") from None
        if (self.min_value is not None and value < self.min_value) or (
                self.max_value is not None and value > self.max_value):
            raise ConfigError(f"bad value for {self.name}: {_quote(raw)} (out of range: {self.allowed()})")
        return value

    def allowed(self) -> str:
        """The allowed range of a number key as text: ``allowed 0..65535``, ``allowed 1..31536000 s``."""
        low = "-inf" if self.min_value is None else _num(self.min_value)
        high = "inf" if self.max_value is None else _num(self.max_value)
        return f"allowed {low}..{high}{_unit(self)}"

    def render(self, value: Any) -> str:
        """The property-file form of a typed value (``true``/``false`` for booleans)."""
        if value is None:
            return ""
        if self.type == "bool":
            return "true" if value else "false"
        if self.type == "float" and float(value).is_integer():
            return str(value)
        return str(value)


def _quote(raw: str) -> str:
    """``raw`` quoted for an error line; a long value is cut (a 400-digit number stays one short line)."""
    if len(raw) <= _QUOTE_MAX:
        return repr(raw)
    return repr(raw[:_QUOTE_MAX]) + f"... ({len(raw)} characters)"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _unit(key: Key) -> str:
    return f" {key.unit}" if key.unit and key.unit not in ("count", "") else ""


def _describe(key: Key, exc: ValueError) -> str:
    msg = str(exc)
    if msg.startswith("expected ") and "allowed" in msg:
        return msg
    if msg.startswith("expected"):
        return msg + (f", in {key.unit}" if key.unit and key.unit != "count" and key.type != "bool" else "")
    return {"int": "expected an integer", "float": "expected a number"}.get(key.type, msg)
