"""The committed generated protobuf code must match proto/ (regenerate with `make proto`)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ["bookie_pb2.py", "bookie_pb2.pyi", "bookie_pb2_grpc.py", "bookkeeper_formats_pb2.py",
             "bookkeeper_formats_pb2.pyi", "bookkeeper_protocol_pb2.py", "bookkeeper_protocol_pb2.pyi"]


def test_generated_code_is_fresh(tmp_path):
    protos = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-Iproto", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}",
         f"--grpc_python_out={tmp_path}", *protos],
        cwd=ROOT, check=True,
    )
    stale = [name for name in GENERATED
             if (tmp_path / "autorecovery/proto" / name).read_bytes() != (ROOT / "autorecovery/proto" / name).read_bytes()]
    assert not stale, f"generated code is stale, run `make proto`: {stale}"


def test_formats_keep_upstream_field_numbers():
    from autorecovery.proto import bookkeeper_formats_pb2 as pb

    f = pb.LedgerMetadataFormat.DESCRIPTOR.fields_by_name
    assert {n: f[n].number for n in ("quorumSize", "ensembleSize", "length", "lastEntryId", "state", "segment",
                                      "digestType", "password", "ackQuorumSize", "ctime", "customMetadata",
                                      "cToken")} == {
        "quorumSize": 1, "ensembleSize": 2, "length": 3, "lastEntryId": 4, "state": 5, "segment": 6,
        "digestType": 7, "password": 8, "ackQuorumSize": 9, "ctime": 10, "customMetadata": 11, "cToken": 12}
    assert pb.UnderreplicatedLedgerFormat.DESCRIPTOR.fields_by_name["ctime"].number == 2
    assert pb.BookieServiceInfoFormat.DESCRIPTOR.fields_by_name["endpoints"].number == 6
    assert pb.BookieServiceInfoFormat.DESCRIPTOR.fields_by_name["properties"].number == 7
