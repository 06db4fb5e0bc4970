"""The Apache Pulsar image's environment convention (AUTORECOVERY_ENV_KEYS=plain): the loader reads the
environment the Pulsar Helm chart gives its recovery component (the ConfigMap as envFrom), takes the
variables named after keys and PULSAR_PREFIX_<key>, skips the rest, and names the variable of a bad
value. Off by default: an unrelated variable is never a key."""

from __future__ import annotations

import pytest

from autorecovery.config.load import load_settings
from autorecovery.config.sources import plain_env_properties
from autorecovery.errors import ConfigError

# The data of the recovery ConfigMap that the Apache Pulsar Helm chart (charts/pulsar 4.7.0) renders with
# its default values for a release named "pulsar" (templates/autorecovery-configmap.yaml: the common
# bookkeeper config, then autorecovery.configData), plus what deploy/helm/pulsar-values-autorecovery.yaml
# adds, plus what the container's image and Kubernetes put in every environment.
CHART_CONFIGMAP = {
    "zkServers": "",
    "zkLedgersRootPath": "",
    "metadataServiceUri": "zk+hierarchical://pulsar-zookeeper:2181/ledgers",
    "zkTimeout": "30000",
    "httpServerEnabled": "true",
    "httpServerPort": "8000",
    "useHostNameAsBookieID": "true",
    "BOOKIE_MEM": "-Xms64m -Xmx128m\n",
    "PULSAR_PREFIX_useV2WireProtocol": "true",
}
OVERRIDE = {"AUTORECOVERY_ENV_KEYS": "plain", "httpServerHost": "0.0.0.0"}
CONTAINER = {
    "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/var/lib/autorecovery", "HOSTNAME": "pulsar-recovery-0",
    "PYTHONUNBUFFERED": "1", "PULSAR_RECOVERY_SERVICE_PORT": "tcp://10.0.0.7:8000", "KUBERNETES_SERVICE_HOST": "10.0.0.1",
}


def chart_env(**more: str) -> dict[str, str]:
    return {**CHART_CONFIGMAP, **OVERRIDE, **CONTAINER, **more}


def test_the_charts_environment_configures_the_daemon():
    s = load_settings(None, env=chart_env())
    assert s.metadata_service_uri == "zk+hierarchical://pulsar-zookeeper:2181/ledgers"
    assert s.zk_servers == "pulsar-zookeeper:2181" and s.ledgers_root == "/ledgers"
    assert s.zk_timeout_ms == 30000
    assert s.http.port == 8000 and s.http.address == "0.0.0.0"
    assert s.sources["zkTimeout"] == "environment variable zkTimeout"
    assert s.get("useHostNameAsBookieID") is True
    # the chart's empty zkServers/zkLedgersRootPath mean "not set": no "is ignored" warning about them
    assert not [w for w in s.warnings if "zkServers" in w or "zkLedgersRootPath" in w], s.warnings
    # PULSAR_PREFIX_useV2WireProtocol is a key accepted with no effect here: listed, not an error
    assert "useV2WireProtocol" in s.ignored
    # the JVM's and Kubernetes' variables are not keys
    assert "BOOKIE_MEM" not in s.properties and "PATH" not in s.properties and "HOSTNAME" not in s.properties


def test_without_the_switch_only_bk_names_are_read():
    env = {k: v for k, v in chart_env(BK_zkServers="zk-bk:2181").items() if k != "AUTORECOVERY_ENV_KEYS"}
    s = load_settings(None, env=env)
    assert s.zk_servers == "zk-bk:2181"
    assert s.zk_timeout_ms != 30000 and s.http.port != 8000 and s.sources["zkTimeout"] == "default"


def test_precedence_bk_over_prefix_over_plain():
    env = chart_env(PULSAR_PREFIX_zkTimeout="20000", PULSAR_PREFIX_lostBookieRecoveryDelay="60",
                    lostBookieRecoveryDelay="30", BK_lostBookieRecoveryDelay="90")
    s = load_settings(None, env=env)
    assert s.zk_timeout_ms == 20000 and s.sources["zkTimeout"] == "environment variable PULSAR_PREFIX_zkTimeout"
    assert s.get("lostBookieRecoveryDelay") == 90 and s.sources["lostBookieRecoveryDelay"] == "env"


def test_values_are_stripped_and_follow_a_reference_to_another_variable():
    props = plain_env_properties({"zkTimeout": " 15000 \n", "rwRereplicateBackoffMs": "${BACKOFF}",
                                  "BACKOFF": "250", "auditorPeriodicCheckInterval": "${UNSET}"})
    assert props == {"zkTimeout": ("15000", "zkTimeout"), "rwRereplicateBackoffMs": ("250", "rwRereplicateBackoffMs")}


def test_a_bad_value_names_the_variable_in_one_line():
    with pytest.raises(ConfigError) as err:
        load_settings(None, env=chart_env(zkTimeout="thirty"))
    lines = str(err.value).splitlines()
    bad = [ln for ln in lines if "zkTimeout" in ln]
    assert len(bad) == 1 and "'thirty'" in bad[0] and "environment variable zkTimeout" in bad[0], lines
    with pytest.raises(ConfigError, match=r"PULSAR_PREFIX_httpServerPort"):
        load_settings(None, env=chart_env(PULSAR_PREFIX_httpServerPort="eighty"))


def test_an_unknown_prefixed_key_is_an_error_like_in_the_file():
    with pytest.raises(ConfigError) as err:
        load_settings(None, env=chart_env(PULSAR_PREFIX_lostBookieRecoveryDelya="5"))
    assert ("unknown configuration key lostBookieRecoveryDelya in environment variable "
            "PULSAR_PREFIX_lostBookieRecoveryDelya; did you mean lostBookieRecoveryDelay?") in str(err.value)


def test_a_bad_switch_value_is_a_one_line_error():
    with pytest.raises(ConfigError) as err:
        load_settings(None, env={"AUTORECOVERY_ENV_KEYS": "pulsar", "BK_zkServers": "z:2181"})
    assert str(err.value) == ("bad value for environment variable AUTORECOVERY_ENV_KEYS: 'pulsar' "
                              "(expected one of bk, plain)")
