"""Issue 25: structure-aware fuzzing of every admin HTTP endpoint against a live daemon process.

The endpoints come from the router table of :func:`autorecovery.admin.http.build_app` (built with the
daemon's switches), so a new endpoint is fuzzed without touching this test. Each example is one
request on a new connection: a route (or a random method / path now and then), query parameters
drawn from the names the endpoints read plus random ones (huge, NaN, negative, non-UTF-8
percent-escapes, long), a body that is JSON built from the fields the endpoints read (wrong types,
duplicates, deep nesting) or raw bytes, and an ``Authorization`` header that is the admin token, the
read token, garbage or non-UTF-8 bytes.

Every answer must be a status below 500 with a one-line body without a traceback, on a connection
that was not dropped; at the end the process is alive, answers ``/healthz``, and its log holds no
traceback and no ``admin request failed`` (the 500 path). Seeded (``@seed``) and time-bounded:
``FUZZ_HTTP_EXAMPLES`` examples (default 1500, about 15 s here; raise it for a longer local run).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from autorecovery.admin.http_routes import HttpDeps, build_app
from http_support import call, daemon, formatted_cluster

pytestmark = pytest.mark.integration

ADMIN, READ = "fuzz-Admin-Token", "fuzz-Read-Token"
EXAMPLES = int(os.environ.get("FUZZ_HTTP_EXAMPLES", "1500"))
BUDGET_S = 40.0  # the whole fuzz stops drawing new examples after this

#: query parameter names the endpoints read
QUERY_NAMES = ("ledger_id", "format", "withPassword", "type", "print_hostnames", "enabled", "missingreplica",
               "excludingmissingreplica", "printmissingreplica")
#: JSON body fields the endpoints read
FIELDS = ("bookie_src", "delete_cookie", "force", "delay_seconds", "timeout_s", "action", "bookie", "rack",
          "ttl", "reason", "override")
ODD = ["", "0", "-1", "1", "true", "false", "True", "NaN", "nan", "inf", "-inf", "1e999", "9" * 400, "0x10",
       "rw", "ro", "upstream", "autorecovery", "127.0.0.1:3181", "127.0.0.1:99999", "[::1]:1", "/rack1", "2h",
       "start", "stop", "override", "\u0661\u0662", "a" * 2000, "%ff", "\x00", "null", "{}", "[]"]


def routes() -> list[tuple[str, str]]:
    """(method, path) of every route the daemon serves with mutations on and debug endpoints off."""
    app = build_app(HttpDeps(ctx=SimpleNamespace(), mutations_enabled=True))  # type: ignore[arg-type]
    out = sorted({(r.method, r.resource.canonical) for r in app.router.routes()
                  if r.method != "HEAD" and r.resource is not None})
    assert any(p.endswith("/ledger/metadata") for _m, p in out) and len(out) >= 20, out
    return out


ROUTES = routes()

values = st.one_of(
    st.sampled_from(ODD),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.text(max_size=30),
)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
                         st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(ODD), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)), inner,
                                                 max_size=4)), max_leaves=12)


@st.composite
def bodies(draw) -> bytes | None:
    kind = draw(st.sampled_from(["none", "object", "json", "raw", "deep", "dup", "constant"]))
    if kind == "none":
        return None
    if kind == "object":
        doc = draw(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=5))
        return json.dumps(doc).encode()
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "raw":
        return draw(st.binary(max_size=300))
    if kind == "deep":
        n = draw(st.integers(min_value=10, max_value=20000))
        return draw(st.sampled_from([b"[", b'{"a":'])) * n
    if kind == "dup":
        f = draw(st.sampled_from(FIELDS))
        return f'{{"{f}": 1, "{f}": 2}}'.encode()
    return draw(st.sampled_from([b'{"delay_seconds": NaN}', b'{"timeout_s": Infinity}', b"-Infinity",
                                 b'{"delay_seconds": 1' + b"0" * 5000 + b"}"]))


@st.composite
def requests(draw, ledger_id: int) -> tuple[str, str, bytes | None, bytes | None]:
    method, path = draw(st.sampled_from(ROUTES))
    odd = draw(st.integers(min_value=0, max_value=19))
    if odd == 0:
        method = draw(st.sampled_from(["POST", "DELETE", "PATCH", "OPTIONS", "HEAD", "GET", "PUT"]))
    elif odd == 1:
        path = draw(st.sampled_from(["/", "/api/v1", "/api/v1/autorecovery", "/api/v1/nope", path + "/x",
                                     path + "%00", "//" + path]))
    names = draw(st.lists(st.one_of(st.sampled_from(QUERY_NAMES), st.text(min_size=1, max_size=10)), max_size=4))
    pairs = []
    for name in names:
        v = str(ledger_id) if name == "ledger_id" and draw(st.booleans()) else draw(values)
        pairs.append((name, v))
    query = urllib.parse.urlencode(pairs, quote_via=urllib.parse.quote)
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        query += draw(st.sampled_from(["&ledger_id=%ff%fe", "&%zz=1", "&enabled", "&withPassword", "&a=%"]))
    target = path + ("?" + query if query else "")
    admin, read = b"Bearer " + ADMIN.encode(), b"Bearer " + READ.encode()
    auth = draw(st.sampled_from([admin] * 8 + [read] * 3 + [None, b"Bearer x", b"Basic Zm9vOmJhcg==",
                                                          b"Bearer \xff\xfe", b"\xc3\x28", b"Bearer", b""]))
    return method, target, draw(bodies()), auth


@pytest.fixture(scope="module")
def live(zk_server, tmp_path_factory):
    connect, lid = formatted_cluster(zk_server.connect_string)
    work = tmp_path_factory.mktemp("fuzz-http")
    (work / "admin.token").write_text(ADMIN + "\n")
    (work / "read.token").write_text(READ + "\n")
    d = daemon(work, connect, name="fuzz", httpAdminMutationsEnabled="true", zkTimeout="20000",
               httpAdminTokenFile=str(work / "admin.token"), httpReadTokenFile=str(work / "read.token"))
    # the elected auditor seeds lostBookieRecoveryDelay: until then some endpoints rightly answer 503
    deadline = time.monotonic() + 30
    auth = {"Authorization": f"Bearer {READ}"}
    while call(d.http_port, "GET", "/api/v1/autorecovery/lost_bookie_recovery_delay", headers=auth)[0] != 200:
        assert time.monotonic() < deadline, "no auditor elected within 30 s: " + d.tail(2000)
        time.sleep(0.05)
    yield d, lid
    d.stop()


def test_fuzz_every_endpoint_of_a_live_daemon(live):
    d, lid = live
    port = d.http_port
    seen: Counter[tuple[str, str]] = Counter()
    statuses: Counter[int] = Counter()
    bad: list[str] = []
    start = time.monotonic()

    @seed(25)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(requests(lid))
    def one(req) -> None:
        if time.monotonic() - start > BUDGET_S:
            return
        method, target, body, auth = req
        headers = {"Authorization": auth} if auth is not None else {}
        try:
            code, text, _ = call(port, method, target, body=body, headers=headers, timeout_s=20)
        except (ConnectionError, OSError) as exc:
            bad.append(f"{method} {target[:120]}: connection {type(exc).__name__}: {exc}")
            return
        statuses[code] += 1
        seen[(method, urllib.parse.urlsplit(target).path)] += 1
        if code >= 500 or "Traceback" in text or (code >= 400 and method != "HEAD" and "\n" in text.strip()):
            bad.append(f"{method} {target[:120]} body={body[:80] if body else body!r}: {code} {text[:200]!r}")

    one()
    assert not bad, f"{len(bad)} unexpected outcomes (statuses {dict(statuses)}):\n" + "\n".join(bad[:20])
    missed = [r for r in ROUTES if seen[r] == 0]
    assert not missed, f"routes never fuzzed: {missed}"
    assert statuses[200] > 0 and statuses[400] > 0 and statuses[401] > 0, statuses
    # the process is alive, still answers, and logged no traceback and no 500
    assert d.alive
    assert call(port, "GET", "/healthz", headers={"Authorization": b"Bearer " + READ.encode()})[0] == 200
    log = d.tail(10**8)
    assert "Traceback" not in log and "admin request failed" not in log, d.lines("error", "critical")[:5]
