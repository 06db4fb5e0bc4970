"""Loading bk_server.conf + BK_<key> env + flags into frozen settings."""

from __future__ import annotations

import dataclasses

import pytest

from autorecovery.config.load import load_settings
from autorecovery.config.sources import env_properties
from autorecovery.config.uri import parse_metadata_service_uri
from autorecovery.errors import ConfigError

UPSTREAM_CONF = r"""
# a bk_server.conf as an operator would write it (upstream keys)
metadataServiceUri=zk+hierarchical://zk1:2181;zk2:2181;zk3:2181/pulsar/ledgers
zkTimeout = 12000
bookieId: bk-1.example.com:3181
auditorPeriodicCheckInterval=3600
auditorPeriodicBookieCheckInterval=600
auditorPeriodicPlacementPolicyCheckInterval=1800
lostBookieRecoveryDelay=30
openLedgerRereplicationGracePeriod=15000
rereplicationEntryBatchSize=50
replicationRateByBytes=10485760
ensemblePlacementPolicy=org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy
minNumRacksPerWriteQuorum=2
enforceMinNumRacksPerWriteQuorum=true
httpServerPort=8081
# bookie-side keys of the same file are accepted silently
journalDirectories=/data/bk/journal
ledgerDirectories=/data/bk/ledgers
storeSystemTimeAsLedgerUnderreplicatedMarkTime=\
  true
"""


def write(tmp_path, text, name="bk_server.conf"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_upstream_conf_parsed(tmp_path):
    s = load_settings(write(tmp_path, UPSTREAM_CONF), env={}, extra_keys=())
    assert s.zk_servers == "zk1:2181,zk2:2181,zk3:2181"
    assert s.ledgers_root == "/pulsar/ledgers"
    assert s.zk_timeout_ms == 12000
    assert s.bookie_id == "bk-1.example.com:3181"
    assert s.get("auditorPeriodicCheckInterval") == 3600
    assert s.get("enforceMinNumRacksPerWriteQuorum") is True
    assert s.get("storeSystemTimeAsLedgerUnderreplicatedMarkTime") is True
    assert s.http.port == 8081 and s.http.address == "127.0.0.1" and s.http.mutations_enabled is False
    assert s.warnings == ()
    # raw properties for the role parsers, canonical names
    assert s.properties["lostBookieRecoveryDelay"] == "30"
    assert s.properties["zkServers"] == "zk1:2181,zk2:2181,zk3:2181"
    assert "journalDirectories" not in s.properties
    assert s.sources["zkTimeout"] == "file" and s.sources["rwRereplicateBackoffMs"] == "default"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.zk_timeout_ms = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.values["zkTimeout"] = 1  # type: ignore[index]


def test_precedence_file_env_flags(tmp_path):
    conf = write(tmp_path, "zkServers=file:2181\nzkTimeout=1000\nrwRereplicateBackoffMs=1\n")
    env = {"BK_zkTimeout": "2000", "BK_rwRereplicateBackoffMs": "2", "BK_DATA_DIR": "/x", "PATH": "/bin"}
    s = load_settings(conf, env=env, overrides={"rwRereplicateBackoffMs": "3"}, extra_keys=())
    assert s.zk_servers == "file:2181"
    assert s.zk_timeout_ms == 2000 and s.sources["zkTimeout"] == "env"
    assert s.get("rwRereplicateBackoffMs") == 3 and s.sources["rwRereplicateBackoffMs"] == "flag"
    assert s.ledgers_root == "/ledgers"
    assert s.metadata_service_uri == "zk+hierarchical://file:2181/ledgers"


def test_env_properties_skips_docker_variables():
    assert env_properties({"BK_zkServers": "a:1", "BK_DATA_DIR": "/d", "BK_": "x", "HOME": "/"}) == {"zkServers": "a:1"}


def test_unknown_key_is_an_error_with_suggestion(tmp_path):
    """Issue 28: a key read by nothing is a configuration error naming it (every one is listed)."""
    conf = write(tmp_path, "zkServers=z:2181\nauditorPeriodicCheckIntrval=5\nfooBarBaz=1\n")
    with pytest.raises(ConfigError) as err:
        load_settings(conf, env={"BK_zktimeout": "5"}, extra_keys=())
    joined = str(err.value)
    assert "unknown configuration key auditorPeriodicCheckIntrval in the config file; " \
           "did you mean auditorPeriodicCheckInterval?" in joined
    assert "unknown configuration key zktimeout in the environment (BK_...); did you mean zkTimeout?" in joined
    assert "unknown configuration key fooBarBaz in the config file" in joined and "fooBarBaz in the config file;" not in joined
    # a key of a no-effect group is suggested too (upstream's spelling has a capital S)
    with pytest.raises(ConfigError, match="did you mean stickyReadSEnabled"):
        load_settings(None, env={}, overrides={"zkServers": "z:2181", "stickyReadsEnabled": "true"})


def test_extra_provider_keys_are_not_unknown(tmp_path):
    conf = write(tmp_path, "zkServers=z:2181\nreplicationWorkerConcurrency=4\n")
    s = load_settings(conf, env={}, extra_keys=("replicationWorkerConcurrency",))
    assert s.warnings == () and s.properties["replicationWorkerConcurrency"] == "4"


def test_bad_values_name_key_and_value(tmp_path):
    conf = write(tmp_path, "zkServers=z:2181\nzkTimeout=soon\nauditorLedgerVerificationPercentage=150\n")
    with pytest.raises(ConfigError) as ei:
        load_settings(conf, env={}, extra_keys=())
    msg = str(ei.value)
    assert "bad value for zkTimeout: 'soon'" in msg
    assert "bad value for auditorLedgerVerificationPercentage: '150' (out of range: allowed 0..100 %)" in msg


def test_missing_metadata_store(tmp_path):
    with pytest.raises(ConfigError, match="no metadata store configured"):
        load_settings(write(tmp_path, "zkTimeout=1000\n"), env={}, extra_keys=())
    s = load_settings(write(tmp_path, "zkTimeout=1000\n"), env={}, extra_keys=(), require_metadata=False)
    assert s.zk_servers == ""


@pytest.mark.parametrize("uri,hosts,root", [
    ("zk+hierarchical://h1:2181;h2:2181/ledgers", "h1:2181,h2:2181", "/ledgers"),
    ("zk://h1:2181/", "h1:2181", "/ledgers"),
    ("zk+null://h1:2181,h2:2182/a/b", "h1:2181,h2:2182", "/a/b"),
])
def test_metadata_service_uri(uri, hosts, root):
    assert parse_metadata_service_uri(uri) == (hosts, root)


@pytest.mark.parametrize("uri,fragment", [
    ("etcd://h:2379/ledgers", "only ZooKeeper"),
    ("zk+flat://h:2181/ledgers", "not supported"),
    ("zk+hierarchical:///ledgers", "no ZooKeeper servers"),
    ("zk://h1/ledgers", "not host:port"),
])
def test_bad_metadata_service_uri(uri, fragment):
    with pytest.raises(ConfigError) as ei:
        parse_metadata_service_uri(uri)
    assert "metadataServiceUri" in str(ei.value) and repr(uri) in str(ei.value) and fragment in str(ei.value)


def test_uri_wins_over_zkservers_with_warning(tmp_path):
    conf = write(tmp_path, "metadataServiceUri=zk://a:1/l\nzkServers=b:2\n")
    s = load_settings(conf, env={}, extra_keys=())
    assert s.zk_servers == "a:1" and s.ledgers_root == "/l"
    assert any("zkServers=b:2 is ignored" in w for w in s.warnings)


def test_pulsar_keys(tmp_path):
    conf = write(tmp_path, "\n".join([
        "bookkeeperMetadataServiceUri=zk+hierarchical://p1:2181/ledgers",
        "bookkeeperClientRackawarePolicyEnabled=true",
        "bookkeeperClientRegionawarePolicyEnabled=false",
        "bookkeeperClientMinNumRacksPerWriteQuorum=3",
        "bookkeeperClientEnforceMinNumRacksPerWriteQuorum=true",
        "bookkeeperDiskWeightBasedPlacementEnabled=true",
        "bookkeeperClientGetBookieInfoIntervalSeconds=30",
        "bookkeeper_reppDnsResolverClass=org.apache.pulsar.zookeeper.ZkBookieRackAffinityMapping",
    ]) + "\n")
    s = load_settings(conf, env={}, extra_keys=())
    assert s.warnings == ()
    assert s.zk_servers == "p1:2181"
    assert s.get("ensemblePlacementPolicy") == "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
    assert s.get("minNumRacksPerWriteQuorum") == 3 and s.get("enforceMinNumRacksPerWriteQuorum") is True
    assert s.get("diskWeightBasedPlacementEnabled") is True
    assert s.bookie_info.interval_s == 30
    assert s.properties["minNumRacksPerWriteQuorum"] == "3"
    assert s.properties["reppDnsResolverClass"].endswith("ZkBookieRackAffinityMapping")
    assert "alias bookkeeperClientMinNumRacksPerWriteQuorum" in s.sources["minNumRacksPerWriteQuorum"]


def test_upstream_name_wins_over_pulsar_alias(tmp_path):
    conf = write(tmp_path, "zkServers=z:1\nminNumRacksPerWriteQuorum=4\nbookkeeperClientMinNumRacksPerWriteQuorum=3\n"
                           "ensemblePlacementPolicy=org.apache.bookkeeper.client.ZoneawareEnsemblePlacementPolicy\n"
                           "bookkeeperClientRackawarePolicyEnabled=true\n")
    s = load_settings(conf, env={}, extra_keys=())
    assert s.get("minNumRacksPerWriteQuorum") == 4
    assert s.get("ensemblePlacementPolicy").endswith("ZoneawareEnsemblePlacementPolicy")
    assert any("overrides the Pulsar switches" in w for w in s.warnings)


def test_pulsar_switches_both_off_select_default_policy(tmp_path):
    conf = write(tmp_path, "zkServers=z:1\nbookkeeperClientRackawarePolicyEnabled=false\n")
    s = load_settings(conf, env={}, extra_keys=())
    assert s.get("ensemblePlacementPolicy") == "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy"


def test_bad_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.conf", env={}, extra_keys=())


def test_bad_bookie_id_and_root(tmp_path):
    conf = write(tmp_path, "zkServers=z:1\nbookieId=nohostport\nzkLedgersRootPath=ledgers\n")
    with pytest.raises(ConfigError) as ei:
        load_settings(conf, env={}, extra_keys=())
    assert "bookieId: 'nohostport'" in str(ei.value) and "zkLedgersRootPath: 'ledgers'" in str(ei.value)


def test_default_bookie_id_from_advertised_address(tmp_path):
    conf = write(tmp_path, "zkServers=z:1\nadvertisedAddress=10.1.2.3\nbookiePort=3182\n")
    assert load_settings(conf, env={}, extra_keys=()).bookie_id == "10.1.2.3:3182"


def test_effective_lines_show_source_and_origin(tmp_path):
    s = load_settings(write(tmp_path, "zkServers=z:1\n"), env={"BK_zkTimeout": "9000"}, extra_keys=())
    lines = s.effective_lines()
    assert "zkTimeout=9000  # env, upstream" in lines
    assert any(l.startswith("getBookieInfoIntervalSeconds=60  # default, upstream, upstream default 86400") for l in lines)
    assert any(l.startswith("httpAdminMutationsEnabled=false  # default, ours") for l in lines)


def test_loading_needs_no_role_module(tmp_path, monkeypatch):
    """Issue 9 found that an import failure of a role module was swallowed and its keys reported as
    "unknown"; issue 12 removed the reflection: every key is in the one table, so loading imports no
    role module and a broken role cannot hide its keys."""
    import sys

    conf = write(tmp_path, "zkServers=z:2181\nauditorPeriodicCheckInterval=60\nreplicationWorkerConcurrentLedgers=2\n")
    monkeypatch.setitem(sys.modules, "autorecovery.roles.auditor", None)  # importing it would raise
    monkeypatch.setitem(sys.modules, "autorecovery.roles.worker_settings", None)
    s = load_settings(conf, env={})
    assert s.warnings == ()
    assert s.auditor.auditor_periodic_check_interval == 60 and s.worker.concurrent_ledgers == 2


# -- issue 10: ledger managers named by the configuration, Pulsar metadata-store forms ------------------
@pytest.mark.parametrize("uri, hosts, root, manager", [
    ("zk+longhierarchical://h1:2181;h2:2181/ledgers", "h1:2181,h2:2181", "/ledgers", "longhierarchical"),
    ("zk+null://h1:2181/ledgers", "h1:2181", "/ledgers", None),
    ("zk://h1:2181/ledgers", "h1:2181", "/ledgers", None),
    ("metadata-store:zk:h1:2181,h2:2181/ledgers", "h1:2181,h2:2181", "/ledgers", None),
    ("metadata-store:zk://h1:2181/pulsar/ledgers", "h1:2181", "/pulsar/ledgers", None),
])
def test_metadata_service_uri_forms(uri, hosts, root, manager):
    from autorecovery.config.uri import parse_metadata_service_uri_manager
    assert parse_metadata_service_uri_manager(uri) == (hosts, root, manager)


def test_pulsar_non_zookeeper_metadata_store_is_refused():
    from autorecovery.config.uri import parse_metadata_service_uri_manager
    with pytest.raises(ConfigError, match="only a ZooKeeper metadata store"):
        parse_metadata_service_uri_manager("metadata-store:etcd:h1:2379/ledgers")


def test_configured_ledger_manager_comes_from_uri_or_keys(tmp_path):
    from autorecovery.ledger.layout import HIERARCHICAL, LONG_HIERARCHICAL
    s = load_settings(write(tmp_path, "metadataServiceUri=zk+longhierarchical://a:1/ledgers\n"))
    assert (s.ledger_manager, s.ledger_manager_key) == (LONG_HIERARCHICAL, "metadataServiceUri")
    s = load_settings(write(tmp_path, "zkServers=a:1\nledgerManagerFactoryClass=" + HIERARCHICAL + "\n"))
    assert (s.ledger_manager, s.ledger_manager_key) == (HIERARCHICAL, "ledgerManagerFactoryClass")
    assert load_settings(write(tmp_path, "zkServers=a:1\n")).ledger_manager is None
    with pytest.raises(ConfigError, match="ledgerManagerType"):
        load_settings(write(tmp_path, "zkServers=a:1\nledgerManagerType=flat\n"))
    with pytest.raises(ConfigError, match="names another ledger manager"):
        load_settings(write(tmp_path, "metadataServiceUri=zk+longhierarchical://a:1/ledgers\n"
                                      "ledgerManagerFactoryClass=hierarchical\n"))


def test_pulsar_broker_metadata_store_keys_are_aliases(tmp_path):
    s = load_settings(write(tmp_path, "metadataStoreUrl=zk:zk1:2181,zk2:2181/chroot\n"))
    assert s.zk_servers == "zk1:2181,zk2:2181/chroot" and s.ledgers_root == "/ledgers"
    s = load_settings(write(tmp_path, "zookeeperServers=zk9:2181\n"))
    assert s.zk_servers == "zk9:2181" and "alias zookeeperServers" in s.sources["zkServers"]
    with pytest.raises(ConfigError, match="only a ZooKeeper metadata store"):
        load_settings(write(tmp_path, "metadataStoreUrl=etcd:e1:2379\n"))
