"""Where `workload write` puts its manifest and ack log by default, and what `workload verify` finds
without arguments (autorecovery/workload.py): beside the local cluster (./.cluster) when it exists, so the
README's commands leave nothing untracked in the repository root."""

from __future__ import annotations

from autorecovery.workload import default_verify_inputs, default_workload_dir


def test_the_defaults_go_into_the_local_cluster_directory_when_there_is_one(tmp_path):
    assert default_workload_dir(tmp_path) == tmp_path
    (tmp_path / ".cluster").mkdir()
    assert default_workload_dir(tmp_path) == tmp_path / ".cluster"


def test_verify_finds_the_manifest_first_then_the_ack_log_beside_the_cluster_then_here(tmp_path):
    assert default_verify_inputs(tmp_path) == (None, None)
    (tmp_path / "workload.acks").write_text("# autorecovery-acks v1\n")
    assert default_verify_inputs(tmp_path) == (None, tmp_path / "workload.acks")
    (tmp_path / "workload.json").write_text("{}")
    assert default_verify_inputs(tmp_path) == (tmp_path / "workload.json", None)  # an older version's file
    (tmp_path / ".cluster").mkdir()
    (tmp_path / ".cluster" / "workload.json").write_text("{}")
    assert default_verify_inputs(tmp_path) == (tmp_path / ".cluster" / "workload.json", None)
