"""Issue 15: upstream security keys we do not implement (the authentication plugins) refuse to start
when they ask for security; TLS keys we cannot honour (JKS stores, missing files) refuse too.

``run`` is exercised as a real process (it must exit before touching ZooKeeper: the configured
server does not exist), ``config check`` through click's runner.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from autorecovery.cli.main import main
from autorecovery.config import keys as K
from autorecovery.config.load import load_settings
from autorecovery.errors import ConfigError

ASKING = {
    "clientAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLClientProviderFactory",
    "bookieAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLBookieAuthProviderFactory",
    "authorizedRoles": "ops,admin",
}


def test_every_unimplemented_key_is_neither_silently_ignored_nor_in_the_table():
    assert set(ASKING) == set(K.UNIMPLEMENTED_SECURITY_KEYS)
    assert not K.UNIMPLEMENTED_SECURITY_KEYS & K.IGNORED_UPSTREAM_KEYS
    assert not K.UNIMPLEMENTED_SECURITY_KEYS & set(K.KEY_BY_NAME)


@pytest.mark.parametrize("name", sorted(ASKING))
def test_asking_for_security_is_a_config_error_naming_the_key(tmp_path, name):
    conf = tmp_path / "bk_server.conf"
    conf.write_text(f"zkServers=127.0.0.1:2181\n{name}={ASKING[name]}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(conf, env={})
    assert f"{name}={ASKING[name]}" in str(err.value)
    assert "refusing to start" in str(err.value)
    # the environment layer is checked too
    with pytest.raises(ConfigError, match=name):
        load_settings(None, env={f"BK_{name}": ASKING[name], "BK_zkServers": "127.0.0.1:2181"})


@pytest.mark.parametrize("raw", ["", "false", "FALSE", "0", "none"])
def test_a_value_that_asks_for_nothing_is_accepted_without_warning(tmp_path, raw):
    conf = tmp_path / "bk_server.conf"
    conf.write_text("zkServers=127.0.0.1:2181\n" + "".join(f"{n}={raw}\n" for n in ASKING))
    settings = load_settings(conf, env={})
    assert not [w for w in settings.warnings if any(n in w for n in ASKING)]


def test_config_check_fails_naming_the_key(tmp_path):
    conf = tmp_path / "bk_server.conf"
    conf.write_text("zkServers=127.0.0.1:2181\ntlsProviderFactoryClass=org.apache.bookkeeper.tls.TLSContextFactory\n"
                    "tlsTrustStoreType=JKS\ntlsTrustStore=/etc/bk/trust.jks\n"
                    "bookieAuthProviderFactoryClass=org.apache.bookkeeper.tls.BookieAuthZFactory\n")
    res = CliRunner().invoke(main, ["config", "check", "-c", str(conf)], env={})
    assert res.exit_code == 2, res.output
    assert "tlsTrustStoreType=JKS is not supported" in res.stderr
    assert "bookieAuthProviderFactoryClass=org.apache.bookkeeper.tls.BookieAuthZFactory" in res.stderr


def test_run_process_refuses_to_start(tmp_path):
    conf = tmp_path / "bk_server.conf"
    # a port nobody listens on: the process must fail on the config, not on ZooKeeper
    conf.write_text("zkServers=127.0.0.1:1\ntlsProviderFactoryClass=org.apache.bookkeeper.tls.TLSContextFactory\n"
                    f"tlsTrustStore={tmp_path / 'missing-ca.pem'}\n"
                    "clientAuthProviderFactoryClass=org.apache.bookkeeper.sasl.SASLClientProviderFactory\n")
    proc = subprocess.run([sys.executable, "-m", "autorecovery.cli.main", "run", "-c", str(conf)],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "bad value for tlsTrustStore: cannot read" in proc.stderr
    assert "clientAuthProviderFactoryClass" in proc.stderr


def test_huge_integer_in_every_key_is_a_config_error_or_a_value(tmp_path):
    """Issue 15 regression: a huge integer in a config value used to escape as OverflowError."""
    for key in K.KEYS:
        for raw in ("9" * 400, "1e400", "-" + "9" * 5000):
            try:
                key.parse(raw)
            except ConfigError as exc:
                assert key.name in str(exc)


@pytest.mark.parametrize("line, named", [
    ("authorizedRoles=ops", "authorizedRoles=ops in the config file asks for certificate role authorization"),
    ("permittedStartupUsers=nobody-else,ops", "is not in permittedStartupUsers=nobody-else,ops: refusing to start"),
    ("permittedStartupUser=ops", "unknown configuration key permittedStartupUser in the config file; "
                                 "did you mean permittedStartupUsers?"),
])
def test_run_refuses_an_unsupported_or_unknown_security_key(tmp_path, line, named):
    """Issue 28: `run` used to warn about these and start; running with less security than asked is
    worse than not running, so it exits 2 (a configuration error) naming the key."""
    conf = tmp_path / "bk_server.conf"
    conf.write_text(f"zkServers=127.0.0.1:1\n{line}\n")  # nobody listens: it must fail on the config
    proc = subprocess.run([sys.executable, "-m", "autorecovery.cli.main", "run", "-c", str(conf)],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert named in proc.stderr
    assert "AUTORECOVERY_READY" not in proc.stdout


def test_permitted_startup_users():
    from autorecovery.cli.run import startup_user_refusal

    def never() -> str:
        raise AssertionError("the user is not looked up when every user is permitted")

    assert startup_user_refusal(None, never) is None
    assert startup_user_refusal(" , ", never) is None
    assert startup_user_refusal("ops, bookkeeper", lambda: "bookkeeper") is None
    assert startup_user_refusal("ops", lambda: "root") == (
        "user 'root' is not in permittedStartupUsers=ops: refusing to start (run as one of them, or add the "
        "user to the key)")
