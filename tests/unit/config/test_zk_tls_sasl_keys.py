"""Issue 15: the ZooKeeper TLS (``zookeeper.client.secure``, ``zookeeper.ssl.*``) and SASL
(``zkSaslMechanism``/``zkSaslUsername``/``zkSaslPasswordFile``) keys: what they build, what they
refuse (naming the key, never quoting a secret), and the kazoo arguments made from them. The real
connections are tested in tests/integration/test_zk_tls_sasl.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from autorecovery.cli.main import main
from autorecovery.config.load import load_settings
from autorecovery.config.settings import ZkSasl, ZkSecurity, ZkTls
from autorecovery.errors import ConfigError
from autorecovery.zk.client_security import kazoo_security_kwargs

BASE = {"zkServers": "zk1:2281"}
CERT = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "ca.pem").write_text(CERT)
    (tmp_path / "ks.pem").write_text(CERT + KEY)
    (tmp_path / "cert-only.pem").write_text(CERT)
    (tmp_path / "enc.pem").write_text(CERT + KEY.replace("PRIVATE KEY", "ENCRYPTED PRIVATE KEY"))
    (tmp_path / "pw").write_text("pa:ss word\n")
    (tmp_path / "empty").write_text("")
    return {n: str(tmp_path / n) for n in ("ca.pem", "ks.pem", "cert-only.pem", "enc.pem", "pw", "empty")}


def _load(**props: str):
    return load_settings(None, env={}, overrides={**BASE, **props})


def test_default_is_plaintext_without_sasl():
    sec = _load().zk_security
    assert sec == ZkSecurity()
    assert kazoo_security_kwargs(sec) == {"auth_data": None}
    assert sec.describe() == "acl=OPEN_ACL_UNSAFE auth=none tls=off"


def test_tls_keys_build_kazoo_tls_arguments(files):
    s = _load(**{"zookeeper.client.secure": "true", "zookeeper.ssl.trustStore.location": files["ca.pem"],
                 "zookeeper.ssl.keyStore.location": files["ks.pem"], "zookeeper.ssl.keyStore.type": "PEM",
                 "zookeeper.ssl.hostnameVerification": "false"})
    assert s.zk_security.tls == ZkTls(trust_path=files["ca.pem"], keystore_path=files["ks.pem"],
                                      hostname_verification=False)
    kw = kazoo_security_kwargs(s.zk_security)
    assert kw["use_ssl"] is True and kw["verify_certs"] is True and kw["check_hostname"] is False
    assert kw["ca"] == files["ca.pem"] and kw["certfile"] == kw["keyfile"] == files["ks.pem"]
    assert "tls=on (trust " in s.zk_security.describe()
    # hostname verification is on by default, as upstream
    s = _load(**{"zookeeper.client.secure": "true"})
    assert s.zk_security.tls == ZkTls() and kazoo_security_kwargs(s.zk_security)["check_hostname"] is True


@pytest.mark.parametrize("props, key, words", [
    ({"zookeeper.ssl.keyStore.type": "JKS"}, "zookeeper.ssl.keyStore.type", "only PEM"),
    ({"zookeeper.ssl.trustStore.type": "PKCS12"}, "zookeeper.ssl.trustStore.type", "only PEM"),
    ({"zookeeper.ssl.keyStore.location": "{cert-only.pem}"}, "zookeeper.ssl.keyStore.location", "no PEM private key"),
    ({"zookeeper.ssl.keyStore.location": "{enc.pem}"}, "zookeeper.ssl.keyStore.location", "encrypted"),
    ({"zookeeper.ssl.keyStore.location": "/nonexistent/ks.pem"}, "zookeeper.ssl.keyStore.location", "cannot read"),
    ({"zookeeper.ssl.trustStore.location": "{pw}"}, "zookeeper.ssl.trustStore.location", "not a PEM file"),
    ({"zookeeper.ssl.keyStore.password": "hunter2"}, "zookeeper.ssl.keyStore.password", "unencrypted PEM"),
    ({"zookeeper.ssl.keyStore.passwordPath": "{pw}"}, "zookeeper.ssl.keyStore.passwordPath", "unencrypted PEM"),
])
def test_tls_refusals_name_the_key(files, props, key, words):
    props = {k: files[v[1:-1]] if v.startswith("{") else v for k, v in props.items()}
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as err:
        _load(**{"zookeeper.client.secure": "true", **props})
    assert words in str(err.value)
    assert "hunter2" not in str(err.value)


def test_tls_files_without_the_switch_warn(files):
    s = _load(**{"zookeeper.ssl.trustStore.location": files["ca.pem"]})
    assert s.zk_security.tls is None
    assert ("zookeeper.ssl.trustStore.location set without zookeeper.client.secure=true: no effect, ZooKeeper "
            "connections stay plaintext") in s.warnings


def test_sasl_keys_build_sasl_options_and_keep_the_password_secret(files):
    s = _load(zkSaslMechanism="digest-md5", zkSaslUsername="ar", zkSaslPasswordFile=files["pw"],
              zkEnableSecurity="true")
    sec = s.zk_security
    assert sec.enabled and sec.sasl == ZkSasl("DIGEST-MD5", "ar", "pa:ss word", files["pw"])
    assert sec.user == "ar" and sec.digest is None
    assert kazoo_security_kwargs(sec)["sasl_options"] == {"mechanism": "DIGEST-MD5", "username": "ar",
                                                          "password": "pa:ss word"}
    assert "pa:ss word" not in repr(s) and "pa:ss word" not in sec.describe()
    assert sec.describe() == "acl=CREATOR_ALL_ACL auth=sasl DIGEST-MD5 user ar tls=off"


@pytest.mark.parametrize("props, words", [
    ({"zkSaslMechanism": "GSSAPI"}, "bad value for zkSaslMechanism: 'GSSAPI' (only DIGEST-MD5"),
    ({"zkSaslMechanism": "PLAIN", "zkSaslUsername": "ar"}, "only DIGEST-MD5"),
    ({"zkSaslUsername": "ar", "zkSaslPasswordFile": "{pw}"}, "set without zkSaslMechanism"),
    ({"zkSaslMechanism": "DIGEST-MD5"}, "needs zkSaslUsername and zkSaslPasswordFile"),
    ({"zkSaslMechanism": "DIGEST-MD5", "zkSaslUsername": "ar"}, "needs zkSaslPasswordFile"),
    ({"zkSaslMechanism": "DIGEST-MD5", "zkSaslUsername": "ar", "zkSaslPasswordFile": "{empty}"},
     "bad value for zkSaslPasswordFile"),
    ({"zkSaslMechanism": "DIGEST-MD5", "zkSaslUsername": "ar", "zkSaslPasswordFile": "/nonexistent/pw"},
     "cannot read /nonexistent/pw"),
    ({"zkSaslMechanism": "DIGEST-MD5", "zkSaslUsername": "ar", "zkSaslPasswordFile": "{pw}",
      "zkDigestAuth": "u:p"}, "zkDigestAuth and zkSaslMechanism are both set"),
])
def test_sasl_refusals_name_the_key(files, props, words):
    props = {k: files[v[1:-1]] if v.startswith("{") else v for k, v in props.items()}
    with pytest.raises(ConfigError) as err:
        _load(**props)
    assert words in str(err.value)
    assert "pa:ss word" not in str(err.value)


def test_security_without_identity_names_the_sasl_keys_too():
    with pytest.raises(ConfigError) as err:
        _load(zkEnableSecurity="true")
    assert "zkDigestAuth" in str(err.value) and "zkSaslMechanism" in str(err.value)


def test_config_check_prints_sasl_and_tls_without_the_password(files):
    res = CliRunner().invoke(main, [
        "config", "check", "-D", "zkServers=zk1:2281", "-D", "zkEnableSecurity=true",
        "-D", "zkSaslMechanism=DIGEST-MD5", "-D", "zkSaslUsername=ar", "-D", f"zkSaslPasswordFile={files['pw']}",
        "-D", "zookeeper.client.secure=true", "-D", f"zookeeper.ssl.trustStore.location={files['ca.pem']}"], env={})
    assert res.exit_code == 0, res.output
    assert (f"# zookeeper: acl=CREATOR_ALL_ACL auth=sasl DIGEST-MD5 user ar tls=on (trust {files['ca.pem']})"
            in res.stdout)
    assert "pa:ss word" not in res.output
