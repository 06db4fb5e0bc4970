"""Issue 10: ``zkEnableSecurity`` / ``zkDigestAuth[File]`` and the upstream Prometheus listener keys
(``statsProviderClass``, ``prometheusStatsHttp*``, ``enableStatistics``) as the loader decides them."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from autorecovery.cli.main import main
from autorecovery.config.load import load_settings
from autorecovery.config.listeners import PROMETHEUS_PROVIDER
from autorecovery.config.zk_auth import zk_security
from autorecovery.errors import ConfigError

BASE = {"zkServers": "zk1:2181"}
SECRET = "ar:very-secret-pw"


def load(**kw: str):
    return load_settings(None, env={}, overrides={**BASE, **kw})


# -- zkEnableSecurity -----------------------------------------------------------------------------------
def test_default_is_open_and_unauthenticated():
    sec = load().zk_security
    assert not sec.enabled and sec.digest is None


def test_security_without_identity_names_both_keys():
    with pytest.raises(ConfigError) as err:
        load(zkEnableSecurity="true")
    msg = str(err.value)
    assert "zkEnableSecurity=true" in msg and "zkDigestAuth=" in msg and "zkDigestAuthFile=" in msg


def test_inline_digest_is_masked_everywhere():
    s = load(zkEnableSecurity="true", zkDigestAuth=SECRET)
    assert s.zk_security.enabled and s.zk_security.digest == SECRET and s.zk_security.user == "ar"
    assert "very-secret-pw" not in repr(s)
    assert s.get("zkDigestAuth") == "******" and s.properties["zkDigestAuth"] == "******"
    assert "zkDigestAuth=******  # flag, ours" in s.effective_lines()
    res = CliRunner().invoke(main, ["config", "check", "--zk", "zk1:2181", "-D", "zkEnableSecurity=true",
                                    "-D", f"zkDigestAuth={SECRET}"], env={})
    assert res.exit_code == 0, res.output
    assert "very-secret-pw" not in res.output
    assert "# zookeeper: acl=CREATOR_ALL_ACL auth=digest user ar (zkDigestAuth)" in res.stdout


def test_digest_file(tmp_path):
    f = tmp_path / "digest"
    f.write_text(SECRET + "\nignored second line\n")
    s = load(zkEnableSecurity="true", zkDigestAuthFile=str(f))
    assert s.zk_security.digest == SECRET and s.zk_security.source == "zkDigestAuthFile"


@pytest.mark.parametrize("setup, expected", [
    (lambda p: {"zkDigestAuthFile": str(p / "missing")}, "bad value for zkDigestAuthFile: cannot read"),
    (lambda p: {"zkDigestAuthFile": str(p / "empty")}, "is empty"),
    (lambda p: {"zkDigestAuthFile": str(p / "nocolon")}, "bad value for zkDigestAuthFile"),
    (lambda p: {"zkDigestAuth": "no-colon-secret"}, "bad value for zkDigestAuth: expected user:password"),
    (lambda p: {"zkDigestAuth": SECRET, "zkDigestAuthFile": str(p / "empty")}, "both set"),
])
def test_bad_identity_is_refused_without_quoting_the_secret(tmp_path, setup, expected):
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "nocolon").write_text("no-colon-secret\n")
    with pytest.raises(ConfigError) as err:
        load(**setup(tmp_path))
    assert expected in str(err.value)
    assert "secret" not in str(err.value).replace("the value is a secret", "")


def test_zk_security_helper_for_the_bookie(tmp_path):
    f = tmp_path / "digest"
    f.write_text(SECRET)
    assert zk_security(True, digest_file=str(f)).digest == SECRET
    with pytest.raises(ConfigError, match="zkDigestAuthFile"):
        zk_security(True)


# -- Prometheus listener -------------------------------------------------------------------------------
def test_upstream_shipped_provider_listens_on_every_interface_port_8000():
    st = load(statsProviderClass=PROMETHEUS_PROVIDER).stats
    assert (st.prometheus_enabled, st.address, st.port) == (True, "0.0.0.0", 8000)
    assert load(statsProviderClass="PrometheusMetricsProvider").stats.prometheus_enabled


def test_port_or_address_alone_turns_it_on():
    st = load(prometheusStatsHttpPort="9100").stats
    assert (st.prometheus_enabled, st.address, st.port) == (True, "0.0.0.0", 9100)
    assert load(prometheusStatsHttpAddress="127.0.0.1").stats.prometheus_enabled


@pytest.mark.parametrize("extra", [
    {},
    {"statsProviderClass": "org.apache.bookkeeper.stats.NullStatsProvider", "prometheusStatsHttpPort": "9100"},
    {"statsProviderClass": PROMETHEUS_PROVIDER, "enableStatistics": "false"},
    {"statsProviderClass": PROMETHEUS_PROVIDER, "prometheusStatsHttpEnable": "false"},
    # upstream: with the BookKeeper HTTP server on, the provider leaves /metrics to it
    {"statsProviderClass": PROMETHEUS_PROVIDER, "httpServerEnabled": "true"},
])
def test_listener_off(extra):
    st = load(**extra).stats
    assert not st.prometheus_enabled and st.reason


def test_other_providers_are_refused_naming_the_key():
    with pytest.raises(ConfigError) as err:
        load(statsProviderClass="org.apache.bookkeeper.stats.codahale.CodahaleMetricsProvider")
    assert "statsProviderClass=org.apache.bookkeeper.stats.codahale.CodahaleMetricsProvider is not supported" \
        in str(err.value)


def test_config_check_prints_the_listener_decision():
    res = CliRunner().invoke(main, ["config", "check", "--zk", "zk1:2181", "-D",
                                    f"statsProviderClass={PROMETHEUS_PROVIDER}"], env={})
    assert res.exit_code == 0, res.output
    assert f"# prometheus listener: 0.0.0.0:8000/metrics (statsProviderClass={PROMETHEUS_PROVIDER})" in res.stdout
