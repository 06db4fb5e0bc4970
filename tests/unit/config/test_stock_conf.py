"""Issue 28: upstream's own stock ``bk_server.conf`` (4.17.2), loaded verbatim, works unchanged.

``tests/data/bk_server-4.17.2.conf`` is ``conf/bk_server.conf`` of apache/bookkeeper at tag
``release-4.17.2`` (git blob 3ea2a377c2e824be4d4f5eb39903dac3a9778420), Apache License 2.0, kept
byte for byte with its license header (checked below). Every key it sets — and every key of its
commented ``#key=value`` lines — is read (tests/unit/config/test_keys_read.py proves each key of the
table is), listed "no effect here" with its reason, or refused by name when the value asks for what
this implementation does not do.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from autorecovery.cli.main import main
from autorecovery.config import keys as K
from autorecovery.config.load import load_settings
from autorecovery.config.sources import read_properties_file
from autorecovery.errors import ConfigError

STOCK = Path(__file__).resolve().parents[2] / "data" / "bk_server-4.17.2.conf"
STOCK_BLOB = "3ea2a377c2e824be4d4f5eb39903dac3a9778420"
#: ``# key=value`` / ``#key=value`` / ``#   key=value`` lines: upstream's commented settings and examples
COMMENTED = re.compile(r"^#\s*([A-Za-z][A-Za-z0-9_.]*)=(.*)$")
#: The keys upstream's stock file sets that used to be shown as effective while nothing read them.
NOT_READ_BEFORE = ("stickyReadSEnabled", "reorderReadSequenceEnabled",
                   "useHostnameResolveLocalNodePlacementPolicy", "enableBookieFailureTracking",
                   "delayEnsembleChange", "disableEnsembleChangeFeatureName")
#: Commented values of the stock file that are refused when uncommented, each with the reason:
#: upstream writes ``null`` for "unset" in its examples (a file named ``null`` does not exist), its TLS
#: example is JKS (PEM only here), and ``null`` as an authentication plugin class asks for a plugin.
REFUSED_EXAMPLES = {
    "bookieAuthProviderFactoryClass": "authentication plugins are not implemented (issue 15)",
    "tlsKeyStoreType": "JKS: PEM only",
    "tlsKeyStorePasswordPath": "an encrypted key: gRPC needs an unencrypted PEM key",
    "tlsTrustStoreType": "'null' is not a store type",
    "tlsTrustStore": "no file named null",
    "tlsKeyStore": "no file named null",
    "tlsCertificatePath": "no file named null",
}


def _commented(text: str) -> dict[str, str]:
    """Every ``#key=value`` line of ``text`` (the last one of a key wins, as a properties file)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = COMMENTED.match(line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def _check(path: Path):
    return CliRunner().invoke(main, ["config", "check", "-c", str(path)], env={})


def test_the_vendored_file_is_upstreams_byte_for_byte():
    data = STOCK.read_bytes()
    assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == STOCK_BLOB
    assert data.startswith(b"#/**\n# * Licensed to the Apache Software Foundation (ASF)")


def test_config_check_accepts_the_stock_file_and_shows_nothing_effective_that_nothing_reads():
    res = _check(STOCK)
    assert res.exit_code == 0, res.output
    assert "ERROR" not in res.stderr and "WARNING" not in res.stderr, res.stderr
    effective = {line.split("=", 1)[0]: line for line in res.stdout.splitlines()
                 if line and not line.startswith("#")}
    no_effect = {line[2:].split(":", 1)[0] for line in res.stdout.splitlines()
                 if line.startswith("# ") and ": accepted for compatibility, no effect here: " in line}
    # every effective line is a key of the table, each proven read by test_keys_read.py
    assert set(effective) <= set(K.KEY_BY_NAME)
    assert not [line for line in effective.values() if "not in the key table" in line]
    # the keys upstream's file sets that nothing reads are listed with their reason, never as effective
    for name in NOT_READ_BEFORE:
        assert name not in effective, effective.get(name)
    assert {"stickyReadSEnabled", "reorderReadSequenceEnabled"} <= no_effect
    # every active line of the file is either effective (from the file; zkServers=localhost:2181 agrees
    # with metadataServiceUri, which derives it) or listed as no effect
    active = read_properties_file(STOCK)
    for name in active:
        shown = effective.get(name, "")
        assert "  # file" in shown or "  # derived (metadataServiceUri)" in shown or name in no_effect, name
    # upstream's bind key of the HTTP server is the one shown, from the file
    assert effective["httpServerHost"] == "httpServerHost=0.0.0.0  # file, upstream, upstream default 0.0.0.0"


def test_the_stock_file_binds_where_upstream_binds():
    settings = load_settings(STOCK, env={})
    assert settings.http.address == "0.0.0.0"  # httpServerHost=0.0.0.0 (it used to bind 127.0.0.1)
    assert set(settings.ignored) >= {"stickyReadSEnabled", "reorderReadSequenceEnabled", "journalDirectories",
                                     "gcEntryLogMetadataCacheEnabled", "storage.range.store.dirs"}
    assert not settings.warnings


def test_every_commented_key_of_the_stock_file_is_known_to_the_table():
    commented = _commented(STOCK.read_text())
    assert len(commented) > 180
    unknown = sorted(name for name in commented if not K.classified(name))
    assert not unknown, f"keys of upstream's stock bk_server.conf that are not classified: {unknown}"


def test_uncommenting_every_line_of_the_stock_file_is_accepted_or_refused_by_name(tmp_path):
    """Every commented setting, uncommented with upstream's example value, is either accepted (read or
    listed with no effect) or refused by an error naming it (only the documented refusals)."""
    text = STOCK.read_text()
    commented = _commented(text)
    active = read_properties_file(STOCK)
    props = {**commented, **active}
    with pytest.raises(ConfigError) as err:
        load_settings(None, env={}, overrides=props)
    lines = str(err.value).splitlines()[1:]
    assert lines
    for line in lines:  # every error names one of the documented refusals, none is "unknown"
        assert any(re.search(rf"\b{name}\b", line) for name in REFUSED_EXAMPLES), line
    # without the refusals, and with PEM files where the example names JKS stores, everything loads
    for name, marker in (("cert.pem", "CERTIFICATE"), ("key.pem", "PRIVATE KEY")):
        (tmp_path / name).write_text(f"-----BEGIN {marker}-----\nAA==\n-----END {marker}-----\n")
    rest = {k: v for k, v in props.items() if k not in REFUSED_EXAMPLES}
    rest.update(tlsCertificatePath=str(tmp_path / "cert.pem"), tlsKeyStore=str(tmp_path / "key.pem"),
                tlsTrustStore=str(tmp_path / "cert.pem"))
    settings = load_settings(None, env={}, overrides=rest)
    assert settings.tls.enabled and not settings.warnings, settings.warnings
    unread = [n for n in rest if n not in K.KEY_BY_NAME and n not in settings.ignored]
    assert not unread, unread

def test_the_six_keys_are_no_effect_and_enforce_min_num_fault_domains_for_write_is_read():
    base = {"zkServers": "zk1:2181"}
    for name in NOT_READ_BEFORE:
        assert name not in K.KEY_BY_NAME and name in K.NO_EFFECT_KEYS, name
    s = load_settings(None, env={}, overrides={**base, "delayEnsembleChange": "true"})
    assert set(s.ignored) == {"delayEnsembleChange"}
    # upstream reads it in PendingAddOp only (our client's adds, ledger recovery included): accepted and read
    s = load_settings(None, env={}, overrides={**base, "enforceMinNumFaultDomainsForWrite": "true"})
    assert s.placement.enforce_min_num_fault_domains_for_write is True and not s.ignored
    assert "enforceMinNumFaultDomainsForWrite" not in K.NO_EFFECT_KEYS


def test_pulsar_names_of_no_effect_keys_are_listed_not_unknown():
    s = load_settings(None, env={}, overrides={"zkServers": "zk1:2181", "bookkeeperEnableStickyReads": "true",
                                              "bookkeeper_reorderReadSequenceEnabled": "false"})
    assert set(s.ignored) == {"bookkeeperEnableStickyReads", "reorderReadSequenceEnabled"}
    assert s.sources["reorderReadSequenceEnabled"] == "flag (alias bookkeeper_reorderReadSequenceEnabled)"


def test_read_order_and_local_node_keys_have_no_effect_in_the_daemon_but_stay_in_the_library():
    """The daemon never calls the policy's read reordering nor gives it a local node, so these keys
    used to be shown as effective while nothing the daemon runs read them."""
    from autorecovery.placement import PlacementConfig

    props = {"ensembleRandomReadReordering": "true", "readReorderThresholdPendingRequests": "10",
             "bookieFailureHistoryExpirationMSec": "1000", "ignoreLocalNodeInPlacementPolicy": "true"}
    s = load_settings(None, env={}, overrides={"zkServers": "zk1:2181", **props})
    assert set(s.ignored) == set(props)
    assert s.placement == PlacementConfig()
    lib = PlacementConfig.from_properties(props)
    assert (lib.ensemble_random_read_reordering, lib.read_reorder_threshold_pending_requests,
            lib.bookie_failure_history_expiration_ms, lib.ignore_local_node_in_placement_policy) == (True, 10, 1000, True)
    with pytest.raises(ConfigError, match="readReorderThresholdPendingRequests"):
        PlacementConfig.from_properties({"readReorderThresholdPendingRequests": "-1"})
