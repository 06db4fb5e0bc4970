"""Secret, token and PEM files are read only when they are regular files under the size cap (issue 25):
``/dev/zero`` must not grow memory, a FIFO must not hang start-up, and the error names the key."""

from __future__ import annotations

import os
import threading

import pytest

from autorecovery.config.files import MAX_SECRET_FILE_BYTES, FileStamp, read_bounded, read_first_line
from autorecovery.config.load import load_settings
from autorecovery.config.tls import read_pem
from autorecovery.errors import ConfigError


def _load(**overrides: str):
    return load_settings(None, env={}, overrides={"zkServers": "127.0.0.1:2181", **overrides})


def test_dev_zero_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"bad value for httpAdminTokenFile: /dev/zero is not a regular file "
                                          r"\(a character device\)"):
        _load(httpAdminTokenFile="/dev/zero")


def test_fifo_is_refused_without_hanging(tmp_path) -> None:
    fifo = tmp_path / "pw"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def load() -> None:
        try:
            _load(zkSaslMechanism="DIGEST-MD5", zkSaslUsername="u", zkSaslPasswordFile=str(fifo))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            done.append(exc)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "reading a FIFO hung the configuration loader"
    assert isinstance(done[0], ConfigError)
    assert f"bad value for zkSaslPasswordFile: {fifo} is not a regular file (a FIFO)" in str(done[0])


def test_oversized_and_directory_files_are_refused(tmp_path) -> None:
    big = tmp_path / "big.pem"
    with open(big, "wb") as f:
        f.truncate(MAX_SECRET_FILE_BYTES + 1)
    with pytest.raises(ConfigError, match=r"bad value for tlsTrustStore: .*big\.pem is \d+ bytes, over the"):
        read_pem(str(big), "tlsTrustStore")
    with pytest.raises(ConfigError, match=r"bad value for zkDigestAuthFile: .* is not a regular file \(a directory\)"):
        _load(zkDigestAuthFile=str(tmp_path))


def test_regular_files_read_and_secret_never_quoted(tmp_path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\nsecond line\n")
    assert read_first_line(str(token), "httpAdminTokenFile") == "s3cret-token"
    assert read_bounded(str(token), "k") == b"s3cret-token\nsecond line\n"
    bad = tmp_path / "bad"
    bad.write_bytes(b"\xffs3cret")
    with pytest.raises(ConfigError) as err:
        read_first_line(str(bad), "httpAdminTokenFile")
    assert "s3cret" not in str(err.value) and "is not UTF-8 text" in str(err.value)


def test_file_stamp_changes_on_rotation(tmp_path) -> None:
    f = tmp_path / "cert.pem"
    f.write_text("a")
    before = FileStamp.of(str(f))
    new = tmp_path / "cert.pem.new"
    new.write_text("b")
    os.replace(new, f)  # how certificate managers rotate: rename over
    assert FileStamp.of(str(f)) != before
    assert FileStamp.of(str(tmp_path / "gone")).missing
