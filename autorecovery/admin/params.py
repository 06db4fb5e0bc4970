"""Checks of the numeric arguments the admin commands take, shared by the HTTP API and the shell (PURE).

One rule per kind of argument, so ``decommissionbookie --timeout`` and the HTTP body's ``timeout_s``
accept and refuse the same values:

* :func:`seconds`: a finite number of seconds, > 0 (or >= 0 with ``allow_zero``), at most a year
  (:data:`~autorecovery.config.keys.YEAR_S`); NaN, infinities, booleans and non-numbers are refused;
* :func:`integer`: a decimal integer within ``[minimum, maximum]`` (more than 30 digits is refused
  before any conversion);
* :func:`recovery_delay`: ``lostBookieRecoveryDelay`` seconds, the config key's own bounds;
* :func:`ledger_id`: a ledger id, 0..2^63-1.

Every function raises :class:`ValueError` with a one-line message that names the argument (``name``)
and the allowed range; the HTTP API turns it into a 400 (``BadRequestError``), the shell into click's
usage error (exit 2). No I/O here.
"""

from __future__ import annotations

import math
from typing import Any

from autorecovery.config.keys.model import INT_MAX, INT_MIN, YEAR_S
from autorecovery.config.keys.table import KEY_BY_NAME
from autorecovery.ledger.ids import MAX_LEDGER_ID

_MAX_DIGITS = 30
_SHOW = 50  # characters of a refused value quoted in a message


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOW else text[:_SHOW] + f"... ({len(text)} characters)"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def seconds(value: Any, name: str, *, allow_zero: bool = False, maximum: float = YEAR_S) -> float:
    """``value`` (a number, or its decimal text as a command line gives it) as seconds.

    Returns:
        the seconds as a float: finite, > 0 (>= 0 when ``allow_zero``), <= ``maximum`` (a year).

    Raises:
        ValueError: ``bad <name> 'nan': expected a finite number of seconds in (0, 31536000]``.
    """
    low = "[0" if allow_zero else "(0"
    why = f"bad {name} {_shown(value)}: expected a finite number of seconds in {low}, {_num(maximum)}]"
    if isinstance(value, bool):
        raise ValueError(why)
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(why) from None
    if not isinstance(value, (int, float)):
        raise ValueError(why)
    try:
        v = float(value)
    except OverflowError:  # an int beyond the double range
        raise ValueError(why) from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero) or v > maximum:
        raise ValueError(why)
    return v


def integer(value: Any, name: str, *, minimum: int = INT_MIN, maximum: int = INT_MAX, unit: str = "") -> int:
    """``value`` (an int, or decimal text) as an integer within ``[minimum, maximum]``.

    Raises:
        ValueError: ``bad <name> '1e3': expected an integer in [0, 2147483647]``.
    """
    why = f"bad {name} {_shown(value)}: expected {unit + ', ' if unit else ''}an integer in [{minimum}, {maximum}]"
    if isinstance(value, bool):
        raise ValueError(why)
    if isinstance(value, int):
        v = value
    else:
        text = str(value).strip()
        digits = text.lstrip("+-").lstrip("0")
        if not text or "_" in text or len(digits) > _MAX_DIGITS:
            raise ValueError(why)
        try:
            v = int(text, 10)
        except ValueError:
            raise ValueError(why) from None
    if v < minimum or v > maximum:
        raise ValueError(why)
    return v


def recovery_delay(value: Any, name: str = "lostBookieRecoveryDelay") -> int:
    """``lostBookieRecoveryDelay`` seconds: an integer within the config key's bounds (0 .. a year).

    Raises:
        ValueError: naming ``name`` and the range.
    """
    key = KEY_BY_NAME["lostBookieRecoveryDelay"]
    assert key.min_value is not None and key.max_value is not None
    return integer(value, name, minimum=int(key.min_value), maximum=int(key.max_value), unit="seconds")


def ledger_id(value: Any, name: str = "ledger id") -> int:
    """A ledger id: a decimal integer in [0, 2^63-1].

    Raises:
        ValueError: ``bad ledger id 'x': expected an integer in [0, 9223372036854775807]``.
    """
    return integer(value, name, minimum=0, maximum=MAX_LEDGER_ID)
