"""The admin port's HTTPS files reloaded through the bookie ends' PemFiles check (real certificates
and files; the live-daemon rotation is in test_http_security.py)."""

from __future__ import annotations

import os
import shutil

import pytest
from structlog.testing import capture_logs

from autorecovery.admin.http_auth import ReloadableTls
from tls_certs import make_ca

pytestmark = pytest.mark.integration

WARNING = "admin HTTPS certificate not reloaded; the previous one is still served"


def _replace(path, src: str) -> None:
    shutil.copyfile(src, f"{path}.new")
    os.replace(f"{path}.new", path)


def test_only_whole_versions_are_taken_and_a_broken_one_warns_once(tmp_path) -> None:
    ca = make_ca(tmp_path / "ca")
    one, two = ca.issue("adm-one"), ca.issue("adm-two")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    shutil.copyfile(one.cert, cert)
    shutil.copyfile(one.key, key)
    tls = ReloadableTls(str(cert), str(key))
    first = tls.current
    assert not tls.reload()  # nothing changed
    with capture_logs() as logs:
        _replace(cert, two.cert)  # half a rotation: the new certificate, the old key
        assert not tls.reload() and not tls.reload()
        assert tls.current is first
        warned = [e for e in logs if e["event"] == WARNING]
        assert len(warned) == 1 and warned[0]["key"] == "httpServerKeyPath"
        _replace(key, two.key)  # the rotation completes
        assert tls.reload() and tls.current is not first
        (cert_path := tmp_path / "bad.pem").write_text("not a certificate\n")
        _replace(cert, str(cert_path))
        assert not tls.reload()
        assert [e["key"] for e in logs if e["event"] == WARNING] == ["httpServerKeyPath", "httpServerCertificatePath"]
