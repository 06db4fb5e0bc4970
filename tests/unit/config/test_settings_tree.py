"""Issue 12: settings are parsed once, from one key table, into one typed tree.

* every key a section (AuditorSettings, WorkerSettings, PlacementConfig) maps is in the key table, and
  the section's field default equals the table's default (after the section's converter);
* ``load_settings`` builds ``.zk``, ``.auditor``, ``.worker`` and ``.placement`` from the values
  :meth:`Key.parse` produced (so every spelling the table accepts reaches the roles);
* no module outside the config package declares keys of its own.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from autorecovery.cli.config import validate_roles
from autorecovery.config import keys as K
from autorecovery.config.load import load_settings
from autorecovery.config.settings import ZkSettings
from autorecovery.config.sections import AuditorSettings, WorkerSettings
from autorecovery.errors import ConfigError
from autorecovery.placement.config import PlacementConfig

SRC = Path(__file__).resolve().parents[3] / "autorecovery"
SECTIONS = (AuditorSettings, WorkerSettings, PlacementConfig)


def _field_defaults(cls) -> dict[str, object]:
    return {f.name: f.default for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_every_mapped_key_is_in_the_table_and_every_field_is_mapped(cls):
    assert set(cls.KEY_FIELDS) <= set(K.KEY_BY_NAME), set(cls.KEY_FIELDS) - set(K.KEY_BY_NAME)
    # library-only keys (PlacementConfig: upstream's read order and local node, no effect in the daemon)
    library = getattr(cls, "LIBRARY_FIELDS", {})
    assert set(library) <= set(K.LIBRARY_KEY_BY_NAME) and not set(library) & set(K.KEY_BY_NAME)
    assert set(cls.KEY_FIELDS.values()) | set(library.values()) == {f.name for f in dataclasses.fields(cls)}
    defaults = _field_defaults(cls)
    assert all(defaults[field] == K.LIBRARY_KEY_BY_NAME[name].default for name, field in library.items())


@pytest.mark.parametrize("key_name, cls", [(k, c) for c in SECTIONS for k in c.KEY_FIELDS],
                         ids=lambda x: x if isinstance(x, str) else x.__name__)
def test_dataclass_default_equals_the_table_default(key_name, cls):
    """One default per key: a settings object built directly (tests) behaves like one the loader built."""
    key = K.KEY_BY_NAME[key_name]
    conv = cls.CONVERT.get(key_name)
    expected = conv(key.default) if conv is not None else key.default
    actual = _field_defaults(cls)[cls.KEY_FIELDS[key_name]]
    assert actual == expected and type(actual) is type(expected), (
        f"{cls.__name__}.{cls.KEY_FIELDS[key_name]} defaults to {actual!r}, the key table's {key_name} to "
        f"{key.default!r} ({expected!r} after conversion)")


def test_loader_tree_with_nothing_set_equals_the_dataclass_defaults():
    s = load_settings(None, env={}, overrides={"zkServers": "zk1:2181"})
    assert s.auditor == AuditorSettings() == AuditorSettings.from_properties({})
    assert s.worker == WorkerSettings() == WorkerSettings.from_properties({})
    assert s.placement == PlacementConfig() == PlacementConfig.from_properties({})


def test_tree_is_built_from_the_parsed_values():
    s = load_settings(None, env={}, overrides={
        "metadataServiceUri": "zk+hierarchical://h1:2181;h2:2181/bk", "zkTimeout": "7000",
        # spellings Key.parse accepts; AuditorSettings' own parser used to refuse "no" (true/false only)
        "storeSystemTimeAsLedgerUnderreplicatedMarkTime": "no", "auditorReplicasCheckMarkUnderReplicated": "on",
        "autorecoveryDownOutSubtreeLimit": "RACK", "lostBookieRecoveryDelay": " 30 ",
        "replicationWorkerConcurrentLedgers": "2", "replicationMaxStreamsPerSourceBookie": "0",
        "zkReplicationTaskRateLimit": "1.5",
        "reppRegionsToWrite": "r1; r2", "bookieMaxMultipleForWeightBasedPlacement": "5",
        "ensemblePlacementPolicy": "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy",
    })
    assert s.zk == ZkSettings(connect="h1:2181,h2:2181", root="/bk", timeout_ms=7000, security=s.zk.security)
    assert (s.zk_servers, s.ledgers_root, s.zk_timeout_ms) == ("h1:2181,h2:2181", "/bk", 7000)
    a = s.auditor
    assert a.store_system_time_as_ledger_underreplicated_mark_time is False
    assert a.auditor_replicas_check_mark_under_replicated is True
    assert a.autorecovery_down_out_subtree_limit == "rack" and a.lost_bookie_recovery_delay == 30
    w = s.worker
    assert (w.concurrent_ledgers, w.max_streams_per_source, w.task_rate_per_s) == (2, 0, 1.5)
    p = s.placement
    assert p.repp_regions_to_write == ("r1", "r2")
    assert p.bookie_max_multiple_for_weight_based_placement == 5.0
    assert p.ensemble_placement_policy.endswith("RegionAwareEnsemblePlacementPolicy")
    # the sections are the raw strings parsed by the same Key.parse: from_properties agrees
    props = dict(s.properties)
    assert AuditorSettings.from_properties(props) == a and WorkerSettings.from_properties(props) == w
    assert PlacementConfig.from_properties(PlacementConfig.select(props)) == p


def test_a_bad_value_is_refused_once_naming_the_key():
    with pytest.raises(ConfigError, match=r"bad value for replicationWorkerConcurrentLedgers: '0'"):
        load_settings(None, env={}, overrides={"zkServers": "zk1:2181", "replicationWorkerConcurrentLedgers": "0"})
    with pytest.raises(ConfigError, match=r"bad value for autorecoveryDownOutSubtreeLimit: 'host'"):
        load_settings(None, env={}, overrides={"zkServers": "zk1:2181", "autorecoveryDownOutSubtreeLimit": "host"})
    with pytest.raises(ConfigError, match="minNumRacksPerWriteQuorum"):
        PlacementConfig.from_properties({"minNumRacksPerWriteQuorum": True})


def test_validate_roles_checks_the_policy_of_the_tree():
    ok = load_settings(None, env={}, overrides={"zkServers": "zk1:2181"})
    assert validate_roles(ok) == []
    bad = load_settings(None, env={},
                        overrides={"zkServers": "zk1:2181", "ensemblePlacementPolicy": "com.example.Nope"})
    errors = validate_roles(bad)
    assert errors and "Nope" in errors[0]


def _key_constructions(path: Path) -> list[int]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name in ("Key", "_k"):
                out.append(node.lineno)
    return out


def test_no_module_outside_the_config_package_declares_keys():
    """The loader no longer finds keys by reflection over role modules: a key declared elsewhere would
    be reported as unknown. Every Key is made in the config package."""
    found = {str(p.relative_to(SRC)): lines for p in SRC.rglob("*.py")
             if "config" not in p.relative_to(SRC).parts[:-1] and (lines := _key_constructions(p))}
    assert found == {}
