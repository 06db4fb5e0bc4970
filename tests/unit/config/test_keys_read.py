"""Issue 10: no configuration key is accepted and ignored.

Every key autorecovery accepts is either
* in :data:`~autorecovery.config.keys.NO_EFFECT_KEYS` (accepted for compatibility, with a documented
  reason, listed by ``config check``), or
* proven to be read: setting it to a valid non-default value changes what the code builds from the
  settings — the typed :class:`Settings` tree (``.zk``, ``.http``, ``.auditor``, ``.worker``,
  ``.placement``, ...), which is all the roles are handed, counting only the fields of each subtree
  that some module reads (``.field``; issue 28: seven placement keys filled fields nothing read) — or it is refused with an error naming it when the value is one the code cannot honour, or, for the few
  keys the daemon reads straight from ``Settings.get`` at run time, the call ``.get("<key>")`` exists
  in the code outside the config package.

Every key is in the one table (:data:`KEYS`); no module declares keys of its own (issue 12).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from autorecovery.cli.main import main
from autorecovery.config import keys as K
from autorecovery.config.load import load_settings
from autorecovery.config.listeners import PROMETHEUS_PROVIDER
from autorecovery.config.settings import Settings
from autorecovery.errors import ConfigError
from autorecovery.config.tls import TLS_CONTEXT_FACTORY

SRC = Path(__file__).resolve().parents[3] / "autorecovery"
BASE = {"zkServers": "zk1:2181"}

#: TLS on, with our (placeholder PEM) certificate and key for client authentication; ``{tmp}`` is the
#: test's tmp_path, where :func:`_files` writes them.
_TLS = {"tlsProviderFactoryClass": TLS_CONTEXT_FACTORY}
_MTLS = {**_TLS, "tlsClientAuthentication": "true", "tlsCertificatePath": "{tmp}/cert.pem",
         "tlsKeyStore": "{tmp}/key.pem"}
_HTTPS = {"httpServerTlsEnable": "true", "httpServerCertificatePath": "{tmp}/cert.pem",
          "httpServerKeyPath": "{tmp}/key.pem"}

#: SASL to ZooKeeper with a password file, and TLS to ZooKeeper (issue 15).
_SASL = {"zkSaslMechanism": "DIGEST-MD5", "zkSaslUsername": "ar", "zkSaslPasswordFile": "{tmp}/token"}
_ZK_TLS = {"zookeeper.client.secure": "true"}

#: Keys whose effect only shows with another key set (the context is part of both sides of the diff).
CONTEXT: dict[str, dict[str, str]] = {
    "httpServerTlsEnable": {"httpServerCertificatePath": "{tmp}/cert.pem", "httpServerKeyPath": "{tmp}/key.pem"},
    "httpServerCertificatePath": _HTTPS,
    "httpServerKeyPath": _HTTPS,
    "httpServerClientCaPath": _HTTPS,
    "httpAdminCertificateSubjects": {**_HTTPS, "httpServerClientCaPath": "{tmp}/cert.pem"},
    "tlsClientAuthentication": {**_MTLS, "tlsClientAuthentication": "false"},
    "tlsCertificatePath": _MTLS,
    "tlsKeyStore": _MTLS,
    "tlsTrustStore": _TLS,
    "tlsKeyStoreType": _MTLS,
    "tlsTrustStoreType": _TLS,
    "tlsKeyStorePasswordPath": _TLS,
    "tlsHostnameVerificationEnabled": _TLS,
    "useShortHostName": {"useHostNameAsBookieID": "true"},
    "zkSaslUsername": _SASL,
    "zkSaslPasswordFile": _SASL,
    **{name: _ZK_TLS for name in ("zookeeper.ssl.keyStore.location", "zookeeper.ssl.keyStore.type",
                                  "zookeeper.ssl.keyStore.password", "zookeeper.ssl.keyStore.passwordPath",
                                  "zookeeper.ssl.trustStore.location", "zookeeper.ssl.trustStore.type",
                                  "zookeeper.ssl.hostnameVerification")},
    "zkEnableSecurity": {"zkDigestAuth": "ar:pw"},
    "enableStatistics": {"statsProviderClass": PROMETHEUS_PROVIDER},
    "prometheusStatsHttpEnable": {"statsProviderClass": PROMETHEUS_PROVIDER},
    "prometheusStatsHttpAddress": {"statsProviderClass": PROMETHEUS_PROVIDER},
    "prometheusStatsHttpPort": {"statsProviderClass": PROMETHEUS_PROVIDER},
    "networkTopologyScriptNumberArgs": {"reppDnsResolverClass": "org.apache.bookkeeper.net.ScriptBasedMapping",
                                        "networkTopologyScriptFileName": "/bin/true"},
}

#: Valid non-default values for string keys without choices (and a few numbers whose +1 would not do).
VALUES: dict[str, str] = {
    "metadataServiceUri": "zk+hierarchical://other:2181/bk",
    "passwd": "ledger-secret",  # the password of ledgers whose metadata stores none
    "zkServers": "other:2181",
    "ledgerManagerFactoryClass": "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory",
    "ledgerManagerType": "longhierarchical",
    "zkLedgersRootPath": "/bk",
    "bookieId": "10.9.9.9:3181",
    "advertisedAddress": "10.8.8.8",
    "zkDigestAuth": "ar:pw",
    "statsProviderClass": PROMETHEUS_PROVIDER,
    "prometheusStatsHttpAddress": "127.0.0.1",
    "httpServerHost": "0.0.0.0",
    "permittedStartupUsers": "bookkeeper,ops",
    "ensemblePlacementPolicy": "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy",
    "reppDnsResolverClass": "org.apache.bookkeeper.net.ScriptBasedMapping",
    "networkTopologyScriptFileName": "/bin/true",
    "reppRegionsToWrite": "r1;r2",
    "reppDisableDurabilityFeatureName": "my_feature",
    "reppDisallowBookiePlacementInRegionFeatureName": "disallow_region",
    "reppDisallowedRegions": "r2",
    "disableEnsembleChangeFeatureName": "my_disable_feature",
    "httpServerCertificatePath": "{tmp}/cert2.pem",
    "httpServerKeyPath": "{tmp}/key2.pem",
    "httpServerClientCaPath": "{tmp}/cert.pem",
    "httpAdminTokenFile": "{tmp}/token",
    "httpReadTokenFile": "{tmp}/token2",
    "httpAuditLogFile": "{tmp}/audit.log",
    "httpAdminCertificateSubjects": "ops;CN=admin,O=acme",
    "httpServerKeyStorePath": "",
    "httpServerKeyStorePassword": "",
    "httpServerTrustStorePath": "",
    "httpServerTrustStorePassword": "",
    "tlsProviderFactoryClass": TLS_CONTEXT_FACTORY,
    "tlsKeyStoreType": "PEM",
    "tlsTrustStoreType": "PEM",
    "tlsKeyStore": "{tmp}/key2.pem",
    "tlsCertificatePath": "{tmp}/cert2.pem",
    "tlsTrustStore": "{tmp}/cert.pem",
    "tlsKeyStorePasswordPath": "",
    "tlsHostnameVerificationEnabled": "true",
    "zkSaslMechanism": "",
    "zkSaslUsername": "ar2",
    "zkSaslPasswordFile": "{tmp}/cert.pem",
    "zookeeper.ssl.keyStore.location": "{tmp}/zk-keystore.pem",
    "zookeeper.ssl.keyStore.type": "PEM",
    "zookeeper.ssl.keyStore.password": "",
    "zookeeper.ssl.keyStore.passwordPath": "",
    "zookeeper.ssl.trustStore.location": "{tmp}/cert.pem",
    "zookeeper.ssl.trustStore.type": "PEM",
}

#: Keys refused (ConfigError naming them) for a value the code cannot honour: reading = validating.
REFUSED: dict[str, str] = {
    "ledgerManagerFactoryClass": "org.apache.bookkeeper.meta.FlatLedgerManagerFactory",
    "ledgerManagerType": "flat",
    "httpServerKeyStorePath": "/etc/bk/http.jks",
    "httpServerKeyStorePassword": "changeit",
    "httpServerTrustStorePath": "/etc/bk/trust.jks",
    "httpServerTrustStorePassword": "changeit",
    "tlsProviderFactoryClass": "com.example.MyTlsFactory",
    "tlsKeyStoreType": "JKS",
    "tlsTrustStoreType": "PKCS12",
    "tlsKeyStorePasswordPath": "{tmp}/token",
    "tlsHostnameVerificationEnabled": "false",
    "zkSaslMechanism": "GSSAPI",
    "zookeeper.ssl.keyStore.type": "JKS",
    "zookeeper.ssl.keyStore.password": "changeit",
    "zookeeper.ssl.keyStore.passwordPath": "{tmp}/token",
    "zookeeper.ssl.trustStore.type": "PKCS12",
}


def _files(tmp_path: Path) -> None:
    """Placeholder PEM files (only their markers are checked when settings load) and a token file."""
    for name in ("cert.pem", "cert2.pem"):
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n")
    for name in ("key.pem", "key2.pem"):
        (tmp_path / name).write_text("-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n")
    (tmp_path / "token").write_text("t0ken\n")
    (tmp_path / "token2").write_text("read-t0ken\n")
    # ZooKeeper's PEM key store: the certificate chain and the key in one file
    (tmp_path / "zk-keystore.pem").write_text((tmp_path / "cert.pem").read_text() + (tmp_path / "key.pem").read_text())


def _fmt(props: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return {k: v.replace("{tmp}", str(tmp_path)) for k, v in props.items()}


def _value(key: K.Key) -> str:
    if key.name in VALUES:
        return VALUES[key.name]
    if key.type == "bool":
        return "false" if key.default else "true"
    if key.type in ("int", "float"):
        base = key.default if key.default is not None else (key.min_value or 0)
        cand = base + 1
        if key.max_value is not None and cand > key.max_value:
            cand = base - 1
        return str(int(cand)) if key.type == "int" else str(float(cand) + 0.5)
    if key.choices:
        return next(c for c in key.choices if c != str(key.default).lower())
    raise AssertionError(f"no test value for string key {key.name}: add one to VALUES")


_SOURCE_TEXT: list[str] = []


def _accessed(attr: str) -> bool:
    """True when some module of the package reads the attribute (``.attr``) — a field of a settings
    section that no code reads is not an effect, however the section is built (issue 28)."""
    if not _SOURCE_TEXT:
        _SOURCE_TEXT.extend(path.read_text() for path in SRC.rglob("*.py"))
    pat = re.compile(r"\." + re.escape(attr) + r"\b")
    return any(pat.search(text) for text in _SOURCE_TEXT)


def _read_part(value: Any) -> Any:
    """A settings subtree reduced to the fields some code reads (dataclasses, one level down)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple((f.name, getattr(value, f.name)) for f in dataclasses.fields(value) if _accessed(f.name))
    return value


def _fingerprint(s: Settings) -> tuple[Any, ...]:
    """Everything the code builds from settings and reads — the typed tree, including ``.auditor``,
    ``.worker`` and ``.placement``, each reduced to the fields some module reads — minus the raw maps
    (which any key would change)."""
    return tuple((f.name, _read_part(getattr(s, f.name))) for f in dataclasses.fields(s)
                 if f.name not in ("values", "properties", "sources", "warnings", "conf_path", "ignored"))


def _read_via_get(name: str) -> bool:
    pat = re.compile(r"""\.get\(\s*["']""" + re.escape(name) + r"""["']""")
    for path in SRC.rglob("*.py"):
        if path.parent.name == "config":
            continue
        if pat.search(path.read_text()):
            return True
    return False


def _all_keys() -> list[K.Key]:
    return list(K.KEYS)


@pytest.fixture(autouse=True)
def _fqdn(monkeypatch):
    monkeypatch.setattr("socket.getfqdn", lambda *a: "node1.rack1.example.com")


def test_no_key_is_both_read_and_no_effect():
    names = {k.name for k in _all_keys()}
    assert not names & set(K.NO_EFFECT_KEYS)
    assert not set(K.NO_EFFECT_KEYS) & set(K.UNIMPLEMENTED_SECURITY_KEYS)
    assert all(reason.strip() for reason in K.NO_EFFECT_KEYS.values())


@pytest.mark.parametrize("key", _all_keys(), ids=lambda k: k.name)
def test_every_key_is_read(key, tmp_path):
    _files(tmp_path)
    if key.name == "zkDigestAuthFile":
        secret = tmp_path / "digest"
        secret.write_text("ar:pw\n")
        raw = str(secret)
    else:
        raw = _value(key).replace("{tmp}", str(tmp_path))
    key.parse(raw)  # the test value itself is valid for the key
    # metadataServiceUri replaces zkServers: its base is the other way of naming the store
    ctx = {**(BASE if key.name != "metadataServiceUri" else {"metadataServiceUri": "zk+hierarchical://zk1:2181/ledgers"}),
           **_fmt(CONTEXT.get(key.name, {}), tmp_path)}
    base = load_settings(None, env={}, overrides=ctx)
    if key.name in REFUSED:
        refused = REFUSED[key.name].replace("{tmp}", str(tmp_path))
        with pytest.raises(ConfigError, match=key.name) as err:
            load_settings(None, env={}, overrides={**ctx, key.name: refused})
        if key.secret:
            assert refused not in str(err.value)
    changed = load_settings(None, env={}, overrides={**ctx, key.name: raw})
    assert not changed.warnings, changed.warnings
    if _fingerprint(changed) != _fingerprint(base):
        return
    assert key.name in REFUSED or _read_via_get(key.name), (
        f"{key.name}={raw} changes nothing the code builds from the settings and no code reads it with "
        f".get({key.name!r}): it is accepted and ignored. Make it take effect, or move it to "
        f"NO_EFFECT_KEYS with the reason")


def test_tls_files_without_their_switch_warn(tmp_path):
    _files(tmp_path)
    s = load_settings(None, env={}, overrides={**BASE, "tlsTrustStore": f"{tmp_path}/cert.pem",
                                               "httpServerKeyPath": f"{tmp_path}/key.pem"})
    assert "tlsTrustStore set without tlsProviderFactoryClass: no effect, bookie connections stay plaintext" in s.warnings
    assert ("httpServerKeyPath set without httpServerTlsEnable=true: no effect, the admin port serves plain HTTP"
            in s.warnings)


def test_config_check_lists_no_effect_keys_with_reason_and_errors_on_unknown(tmp_path):
    conf = tmp_path / "bk_server.conf"
    conf.write_text("zkServers=zk1:2181\njournalDirectories=/data/journal\n")
    res = CliRunner().invoke(main, ["config", "check", "-c", str(conf)], env={})
    assert res.exit_code == 0, res.output
    assert ("# journalDirectories: accepted for compatibility, no effect here: "
            + K.NO_EFFECT_KEYS["journalDirectories"] + " [file]") in res.stdout
    conf.write_text("zkServers=zk1:2181\njournalDirectorys=/data/journal\n")
    res = CliRunner().invoke(main, ["config", "check", "-c", str(conf)], env={})
    # issue 28: a key read by nothing is a configuration error (exit 2), as for `run` and the shell
    assert res.exit_code == 2, res.output
    assert "unknown configuration key journalDirectorys in the config file; did you mean journalDirectory?" in res.stderr


def test_docs_list_every_no_effect_key_with_its_reason():
    out = CliRunner().invoke(main, ["config", "keys", "--no-effect", "--markdown"])
    assert out.exit_code == 0, out.output
    rows = [line for line in out.output.splitlines() if line.startswith("| `")]
    assert len(rows) == len(K.NO_EFFECT_GROUPS)
    doc = (SRC.parent / "docs" / "operators.md").read_text()
    stale = [row for row in rows if row not in doc]
    assert not stale, ("docs/operators.md no-effect table is stale; regenerate it with "
                       "`autorecovery config keys --no-effect --markdown`:\n" + "\n".join(stale))
