"""Checking the inputs of the admin HTTP API (issue 25): every bad input is a 400 whose one-line text
names the field, never a 500.

* :func:`json_object` parses a request body: UTF-8, at most :data:`MAX_JSON_DEPTH` levels of nesting
  (checked before parsing, so a deeply nested body cannot exhaust the parser's recursion), no
  duplicate keys, no ``NaN``/``Infinity``, a JSON object whose fields are all known to the endpoint.
* :func:`query_choice` and :func:`query_bool` check a query parameter against its allowed values.
* :func:`one_line` makes an error text one bounded line.

Every check raises :class:`~autorecovery.admin.ops.BadRequestError`, which the HTTP layer answers 400
with its text (a one-line ``text/plain`` body). Source: ours (issue 25); upstream's HTTP handlers have
no such checks, and the accepted field names and values are upstream's where the endpoint is upstream's.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from autorecovery.admin import ops

#: Deepest nesting of arrays and objects accepted in a request body (the admin bodies are flat).
MAX_JSON_DEPTH = 16


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (every run of whitespace, line ends included, as one space), cut to
    ``limit`` characters (then ``...`` is appended, so at most ``limit + 3``). Never raises: a
    non-string is shown with ``str``."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def _depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in a JSON text, brackets inside strings not counted."""
    depth = deepest = 0
    in_str = escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: the object of ``pairs``; raises BadRequestError naming a repeated key."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ops.BadRequestError(f"request body: field {k[:50]!r} appears twice")
        out[k] = v
    return out


class _NonFinite:
    """What ``NaN``/``Infinity``/``-Infinity`` parse to, so the error can name the field holding it."""

    def __init__(self, name: str) -> None:
        self.name = name


def _find_non_finite(value: Any, where: str) -> None:
    """Raise BadRequestError naming the field (``where``) of the first ``NaN``/``Infinity`` in ``value``."""
    if isinstance(value, _NonFinite):
        raise ops.BadRequestError(f"{where}: {value.name} is not a JSON number")
    if isinstance(value, dict):
        for k, v in value.items():
            _find_non_finite(v, f"field {k[:50]!r}" if where == "request body" else where)
    elif isinstance(value, list):
        for v in value:
            _find_non_finite(v, where)


def parse_json(raw: bytes) -> Any:
    """Parse a request body (``raw``: its bytes, UTF-8 JSON) into a JSON value: a dict, list, str, int,
    float, bool or None. The nesting is checked on the text before parsing (a linear scan), so a
    hostile body costs no recursion.

    Raises:
        BadRequestError: empty, not UTF-8, nested deeper than :data:`MAX_JSON_DEPTH`, not JSON, a
            duplicate key, ``NaN``/``Infinity``, or a number of more than 4300 digits.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ops.BadRequestError("request body is not UTF-8 text") from None
    if not text.strip():
        raise ops.BadRequestError("no request body provided")
    if _depth(text) > MAX_JSON_DEPTH:
        raise ops.BadRequestError(f"request body is not JSON this API accepts: it nests deeper than {MAX_JSON_DEPTH} levels")
    import json

    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_NonFinite)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, ops.BadRequestError):
            raise
        raise ops.BadRequestError(f"request body is not JSON: {one_line(str(exc), 200)}") from None
    _find_non_finite(doc, "request body")  # depth <= MAX_JSON_DEPTH: the walk is bounded
    return doc


async def json_object(request: web.Request, fields: frozenset[str] | set[str], *, check: bool = True
                      ) -> dict[str, Any]:
    """The request body as a JSON object whose keys are all in ``fields`` (with ``check=False`` the
    caller runs :func:`known_fields` itself, after answering a missing field as upstream does).

    Raises:
        BadRequestError: see :func:`parse_json`; not an object; an unknown field (named, with the
            known ones).
    """
    body = parse_json(await request.read())
    if not isinstance(body, dict):
        raise ops.BadRequestError(f"request body must be a JSON object with fields {', '.join(sorted(fields))}")
    if check:
        known_fields(body, fields)
    return body


def known_fields(body: dict[str, Any], fields: frozenset[str] | set[str]) -> None:
    """Check that every key of ``body`` (a parsed JSON object) is in ``fields``; returns nothing.

    Raises:
        BadRequestError: naming the first unknown field in sorted order (cut to 50 characters) and
            listing the known ones.
    """
    unknown = sorted(k for k in body if k not in fields)
    if unknown:
        raise ops.BadRequestError(f"request body: unknown field {unknown[0][:50]!r} (known: {', '.join(sorted(fields))})")


def query_choice(request: web.Request, name: str, choices: tuple[str, ...], default: str | None = None) -> str | None:
    """The query parameter ``name`` when it is one of ``choices`` (compared exactly, case included),
    ``default`` when absent.

    Raises:
        BadRequestError: ``bad value for query parameter <name>: expected a|b``.
    """
    value = request.query.get(name)
    if value is None:
        return default
    if value not in choices:
        raise ops.BadRequestError(f"bad value {one_line(value, 50)!r} for query parameter {name}: expected "
                                  f"{' or '.join(choices)}")
    return value


def query_bool(request: web.Request, name: str, default: bool = False) -> bool:
    """``true``/``false`` (any case) of the query parameter ``name``; a bare ``?name`` is true.

    Raises:
        BadRequestError: another value, naming the parameter.
    """
    value = request.query.get(name)
    if value is None:
        return default
    v = value.strip().lower()
    if v in ("true", ""):
        return True
    if v == "false":
        return False
    raise ops.BadRequestError(f"bad value {one_line(value, 50)!r} for query parameter {name}: expected true or false")
