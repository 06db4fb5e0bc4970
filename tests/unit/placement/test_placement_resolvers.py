"""Resolvers: static, Pulsar /bookies rack info, script (upstream ScriptBasedMapping and
TestRackawareEnsemblePlacementPolicyUsingScript), and the default-rack treatment of unknown bookies."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from autorecovery.errors import MalformedMetadataError
from autorecovery.placement import (
    Adherence,
    ConfigError,
    PlacementConfig,
    PulsarRackResolver,
    RackawarePolicy,
    ScriptResolver,
    StaticResolver,
    ZoneawarePolicy,
    resolver_from_config,
)

from _placement_testkit import DEFAULT_RR, make


def test_static_resolver_by_id_then_host():
    r = StaticResolver({"h1:3181": "/r1/", "h2": "/r2"})
    assert r.resolve(["h1:3181", "h2:4000", "h3:1"]) == ["/r1", "/r2", None]
    with pytest.raises(ValueError):
        StaticResolver({"h": "rack-without-slash"})


def test_pulsar_resolver_parses_bookies_document():
    doc = {"default": {"127.0.0.1:3181": {"rack": "/r1", "hostname": "bk1"},
                       "127.0.0.1:3182": {"rack": "r2", "hostname": "bk2"},
                       "10.0.0.9:3181": {"rack": "/", "hostname": "bk9"}},
           "other": {"bk3.example:3181": {"rack": "/region-a/rack-3"}}}
    r = PulsarRackResolver(json.dumps(doc).encode())
    assert r.resolve(["127.0.0.1:3181", "127.0.0.1:3182", "10.0.0.9:3181", "bk3.example:3181", "nope:1"]) == [
        "/r1", "/r2", None, "/region-a/rack-3", None]
    # same host, different ports (a local cluster): looked up by bookie id first
    assert r.resolve(["127.0.0.1:3182"]) == ["/r2"]
    r.update(b"")
    assert r.resolve(["127.0.0.1:3181"]) == [None]


@pytest.mark.parametrize("data", [b"{not json", b"[1, 2]", b'{"g": ["x"]}', b'{"g": {"h:1": "r"}}'])
def test_pulsar_resolver_rejects_malformed_documents(data):
    with pytest.raises(MalformedMetadataError, match="/bookies"):
        PulsarRackResolver(data)


def test_pulsar_resolver_feeds_a_policy():
    doc = {"default": {"127.0.0.1:3181": {"rack": "/rack1"}, "127.0.0.1:3182": {"rack": "/rack2"}}}
    p = RackawarePolicy(PlacementConfig(), PulsarRackResolver(json.dumps(doc)), default_rack="/default-rack")
    p.on_cluster_changed({"127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183"}, set())
    assert p.location_of("127.0.0.1:3182") == "/rack2"
    assert p.location_of("127.0.0.1:3183") == "/default-rack"


def test_script_resolver_batches_and_caches():
    calls = []

    def runner(argv, timeout):
        calls.append(argv[1:])
        return "\n".join(f"/rack-{h[-1]}" for h in argv[1:]) + "\n"

    r = ScriptResolver("topo.sh", max_args=2, runner=runner)
    assert r.resolve(["h1:1", "h2:1", "h3:1"]) == ["/rack-1", "/rack-2", "/rack-3"]
    assert calls == [["h1", "h2"], ["h3"]]
    r.resolve(["h1:1"])
    assert len(calls) == 2  # cached


def test_script_resolver_wrong_count_or_failure_gives_unknown():
    r = ScriptResolver("topo.sh", runner=lambda argv, t: "/only-one")
    assert r.resolve(["a:1", "b:1"]) == [None, None]

    def boom(argv, t):
        raise OSError("no such file")

    assert ScriptResolver("x", runner=boom).resolve(["a:1"]) == [None]
    assert ScriptResolver(None).resolve(["a:1"]) == [None]


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX shell script")
def test_script_resolver_runs_a_real_script_upstream_TestRackawareEnsemblePlacementPolicyUsingScript(tmp_path):
    script = tmp_path / "networkmapping.sh"
    script.write_text("#!/bin/sh\nfor h in \"$@\"; do case $h in 127.0.0.2) echo /default-region/r1;;"
                      " 127.0.0.3) echo /default-region/r2;; *) echo /default-region/r3;; esac; done\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    r = ScriptResolver(str(script))
    p = RackawarePolicy(PlacementConfig(), r)
    ids = ["127.0.0.2:3181", "127.0.0.3:3181", "127.0.0.4:3181", "127.0.0.5:3181"]
    p.on_cluster_changed(set(ids), set())
    assert [p.location_of(b) for b in ids] == ["/default-region/r1", "/default-region/r2",
                                                "/default-region/r3", "/default-region/r3"]
    res = p.new_ensemble(3, 2, 2)
    assert res.adherence == Adherence.MEETS_STRICT
    assert os.path.exists(script)


def test_unknown_bookies_get_the_policy_default_location():
    p = make(RackawarePolicy, {"a:1": "/x/r1"}, writable={"a:1", "b:1"})
    assert p.location_of("b:1") == DEFAULT_RR
    z = make(ZoneawarePolicy, {"a:1": "/z1/u1"}, writable={"a:1", "b:1"})
    assert z.location_of("b:1") == "/default-zone/default-upgradedomain"
    assert z.zone_and_ud("b:1") is None


def test_resolver_from_config():
    cfg = PlacementConfig.from_properties({"reppDnsResolverClass": "org.apache.pulsar.bookie.rackawareness."
                                                                   "BookieRackAffinityMapping"})
    assert isinstance(resolver_from_config(cfg, pulsar_data=b"{}"), PulsarRackResolver)
    assert isinstance(resolver_from_config(PlacementConfig()), ScriptResolver)
    with pytest.raises(ConfigError, match="reppDnsResolverClass"):
        resolver_from_config(PlacementConfig.from_properties({"reppDnsResolverClass": "com.example.Nope"}))


def test_script_resolver_pending_and_failures_not_retried_at_once():
    """Issue 12: ``pending`` names what a lookup would run the script for (the daemon runs those off the
    event loop); a failed host is not asked again within ``retry_after_s``."""
    now = [0.0]
    runs = []

    def runner(argv, timeout_s):
        runs.append(argv[1:])
        if "bad" in argv:
            raise OSError("boom")
        return "\n".join(f"/r-{h}" for h in argv[1:])

    r = ScriptResolver("topo.sh", runner=runner, retry_after_s=60, clock=lambda: now[0])
    assert r.pending(["a:1", "bad:1"]) == ["a:1", "bad:1"]
    assert r.resolve(["a:1"]) == ["/r-a"] and r.pending(["a:1"]) == []
    assert r.resolve(["bad:1"]) == [None] and r.pending(["bad:1"]) == []
    assert r.resolve(["bad:1"]) == [None] and len(runs) == 2  # not run again within 60 s
    now[0] = 61.0
    assert r.pending(["bad:1"]) == ["bad:1"]
