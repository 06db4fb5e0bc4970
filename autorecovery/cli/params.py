"""Click parameter types for numeric options: bounded, finite, and checked like the HTTP API.

* :class:`FiniteFloatRange`: click's ``FloatRange`` that also refuses NaN and infinities (click's
  own lets ``nan`` through every range: NaN compares false to both bounds);
* :class:`Checked`: any checker of :mod:`autorecovery.admin.params` (or another function raising
  ``ValueError``) as a parameter type, so a bad value is click's usage error naming the option (exit 2)
  before anything connects to the cluster.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import click

from autorecovery.admin import params
from autorecovery.audit.maintenance import parse_ttl
from autorecovery.errors import ConfigError

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` refusing ``nan``, ``inf`` and ``-inf``."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(rv, param, ctx)


class Checked(click.ParamType):
    """A parameter type from a checker ``fn(value) -> typed value`` that raises ``ValueError``."""

    def __init__(self, fn: Callable[[Any], Any], name: str) -> None:
        self.fn = fn
        self.name = name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return self.fn(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


#: ``lostbookierecoverydelay -s``: the HTTP API's and the config key's range.
RECOVERY_DELAY = Checked(params.recovery_delay, "seconds")
#: a ledger id, 0..2^63-1 (``ledgermetadata -l``, ``recover -l``).
LEDGER_ID = Checked(params.ledger_id, "ledger id")


def seconds(option: str, *, allow_zero: bool = False) -> Checked:
    """Seconds as :func:`autorecovery.admin.params.seconds` checks them (finite, > 0, at most a year)."""
    return Checked(lambda v: params.seconds(v, option, allow_zero=allow_zero), "seconds")


def _ttl(value: Any) -> str:
    try:
        parse_ttl(str(value))
    except ConfigError as exc:
        raise ValueError(str(exc)) from None  # click's prefix names the option
    return str(value)


#: A maintenance ``--ttl`` (``90s``, ``30m``, ``2h``, ``1d``; > 0, at most 365 days), checked by
#: :func:`autorecovery.audit.maintenance.parse_ttl` as the HTTP API checks its ``ttl``; the text is kept.
DURATION = Checked(_ttl, "duration")


def integer(option: str, minimum: int, maximum: int, unit: str = "") -> Checked:
    """An integer in ``[minimum, maximum]`` (:func:`autorecovery.admin.params.integer`)."""
    return Checked(lambda v: params.integer(v, option, minimum=minimum, maximum=maximum, unit=unit), "integer")
