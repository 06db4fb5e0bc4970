"""Bookie cookies: proof that a bookie id, its data directory and its cluster belong together.

Upstream ``org.apache.bookkeeper.bookie.Cookie`` and ``LegacyCookieValidation``. A cookie is written,
on a bookie's first start, both to ZooKeeper (``<root>/cookies/<bookieId>``, persistent) and to every
bookie directory (``<dir>/current/VERSION``). Later starts must find both, equal. This stops a bookie
whose disk was wiped or swapped from rejoining under its old id and silently serving "no such entry"
for data that clients and the auditor believe it holds.

Text format (byte for byte what upstream ``Cookie.toString()`` writes: ``CURRENT_COOKIE_LAYOUT_VERSION``,
5 since 4.16 (apache/bookkeeper#3372; 4 before), then the text ``CookieFormat``; every upstream version
reads any layout >= 4 the same way)::

    5
    bookieHost: "127.0.0.1:3181"
    journalDir: "/data/bk1"
    ledgerDirs: "1\\t/data/bk1"
    instanceId: "6d3b..."

i.e. the layout version, a newline, and the protobuf text format of ``CookieFormat``. ``ledgerDirs`` is
upstream's encoding: the number of directories, then each one after a tab. Bookies of 4.16+ with
separate index directories add ``indexDirs`` (field 5, same encoding); a cookie without it means
"index in the ledger directories", as upstream ``Cookie.verifyInternal`` reads it. Our bookie has one
data directory that serves as journal, ledger and index directory, and writes no ``indexDirs``.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format

from autorecovery.bookie.storage import CURRENT_DIR, database_exists
from autorecovery.errors import CookieError
from autorecovery.ledger import textformat
from autorecovery.proto import bookkeeper_formats_pb2 as fmt
from autorecovery.zk.bridge import NodeExistsError, NoNodeError, ZkClient
from autorecovery.zk.paths import Paths

COOKIE_LAYOUT_VERSION = 5
VERSION_FILENAME = "VERSION"


class ClusterNotFormattedError(CookieError):
    """``<root>/INSTANCEID`` is missing: the cluster's metadata was never initialised
    (upstream: ``BookieException.MetadataStoreException`` "Failed to get cluster instance id")."""

    upstream_name = "MetadataStoreException"


@dataclass(frozen=True)
class Cookie:
    """One cookie (upstream ``Cookie``; fields of ``CookieFormat``)."""

    bookie_host: str
    journal_dirs: str
    ledger_dirs: str
    instance_id: str | None
    layout_version: int = COOKIE_LAYOUT_VERSION
    index_dirs: str | None = None

    @classmethod
    def for_bookie(cls, bookie_id: str, data_dir: Path, instance_id: str | None) -> Cookie:
        """The cookie a bookie ``bookie_id`` (``host:port``) with data directory ``data_dir`` should
        have in cluster ``instance_id`` (upstream ``Cookie.generateCookie``)."""
        d = str(Path(data_dir).resolve())
        return cls(bookie_host=bookie_id, journal_dirs=d, ledger_dirs=f"1\t{d}", instance_id=instance_id)

    def to_text(self) -> str:
        """Upstream's text form: ``"5\\n"`` (``CURRENT_COOKIE_LAYOUT_VERSION``) + protobuf text format of
        ``CookieFormat``."""
        msg = fmt.CookieFormat(bookieHost=self.bookie_host, journalDir=self.journal_dirs, ledgerDirs=self.ledger_dirs)
        if self.instance_id is not None:
            msg.instanceId = self.instance_id
        if self.index_dirs is not None:
            msg.indexDirs = self.index_dirs
        return f"{COOKIE_LAYOUT_VERSION}\n{textformat.print_message(msg)}"

    @classmethod
    def parse(cls, text: str, source: str) -> Cookie:
        """Parse a cookie in upstream's layout 3 or 4+ text form (4 and 5 differ only by ``indexDirs``).

        Raises:
            CookieError: naming ``source`` (a znode path or file) when the text does not parse.
        """
        first, _, rest = text.partition("\n")
        try:
            version = int(first.strip())
        except ValueError:
            raise CookieError(f"cookie {source}: invalid layout version line {first.strip()[:100]!r}") from None
        if version == 3:
            lines = rest.split("\n")
            if len(lines) < 3:
                raise CookieError(f"cookie {source}: truncated layout-3 cookie")
            return cls(lines[0], lines[1], lines[2], None, 3)
        if version < 3:
            raise CookieError(f"cookie {source}: layout version {version} is too old")
        msg = fmt.CookieFormat()
        try:
            textformat.parse(rest, msg)
        except text_format.ParseError as exc:
            raise CookieError(f"cookie {source}: cannot parse: {str(exc)[:500]}") from exc
        return cls(
            bookie_host=msg.bookieHost,
            journal_dirs=msg.journalDir,
            ledger_dirs=msg.ledgerDirs,
            instance_id=msg.instanceId if msg.HasField("instanceId") and msg.instanceId else None,
            layout_version=version,
            index_dirs=msg.indexDirs if msg.HasField("indexDirs") else None,
        )

    def mismatch(self, other: Cookie) -> str | None:
        """Why ``other`` does not match this cookie (upstream ``Cookie.verify``), or None if it does."""
        if other.layout_version < 3 and other.layout_version != self.layout_version:
            return f"cookie is of too old layout version {other.layout_version}"
        for name, a, b in (
            ("bookieHost", self.bookie_host, other.bookie_host),
            ("journalDir", self.journal_dirs, other.journal_dirs),
            ("ledgerDirs", self.ledger_dirs, other.ledger_dirs),
            ("instanceId", self.instance_id, other.instance_id),
            # upstream: a blank indexDirs means the ledger directories
            ("indexDirs", self.index_dirs or self.ledger_dirs, other.index_dirs or other.ledger_dirs),
        ):
            if a != b:
                return f"{name} {a!r} does not match {b!r}"
        return None


def dir_cookie_path(data_dir: Path) -> Path:
    """``<data_dir>/current/VERSION``."""
    return Path(data_dir) / CURRENT_DIR / VERSION_FILENAME


def read_dir_cookie(data_dir: Path) -> Cookie | None:
    """The cookie in ``data_dir`` or None when there is none (blocking file I/O).

    Raises:
        CookieError: when the file exists but does not parse or cannot be read.
    """
    path = dir_cookie_path(data_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CookieError(f"cannot read cookie file {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise CookieError(f"cookie file {path} is not UTF-8 text: {exc}") from exc
    return Cookie.parse(text, str(path))


def _utf8(raw: bytes, source: str) -> str:
    """``raw`` decoded as UTF-8; CookieError naming ``source`` (a znode path) when it is not."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CookieError(f"{source} is not UTF-8 text: {exc}") from exc


def write_dir_cookie(data_dir: Path, cookie: Cookie) -> None:
    """Write ``<data_dir>/current/VERSION`` atomically and durably (temporary file, fsync, rename,
    fsync of the directory). Blocking file I/O."""
    path = dir_cookie_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(VERSION_FILENAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(cookie.to_text())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


async def read_instance_id(zk: ZkClient, paths: Paths) -> str:
    """The cluster's instance id from ``<root>/INSTANCEID``.

    Raises:
        ClusterNotFormattedError: naming the znode when it is missing (the cluster was never
            formatted: upstream ``bookkeeper shell metaformat`` / our cluster init must run first).
    """
    try:
        data, _ = await zk.get(paths.instance_id)
    except NoNodeError:
        raise ClusterNotFormattedError(
            f"{paths.instance_id} does not exist on ZooKeeper {zk.hosts}: the cluster is not formatted "
            f"(initialise it before starting bookies)"
        ) from None
    return _utf8(data, paths.instance_id).strip()


async def check_and_stamp_cookie(zk: ZkClient, paths: Paths, bookie_id: str, data_dir: Path) -> Cookie:
    """Validate the bookie's cookies, writing them on the bookie's first start (upstream
    ``LegacyCookieValidation.checkCookies``). Returns the bookie's cookie.

    * no cookie in ZooKeeper, none in the data dir, no entry database → new bookie: write the
      directory cookie first, then the ZooKeeper cookie (upstream order);
    * both present → they must match each other and this bookie's id, data dir and cluster;
    * ZooKeeper cookie but no directory cookie → the data directory was wiped or replaced: refuse;
    * directory cookie but no ZooKeeper cookie → refuse (the cookie was deleted, e.g. the bookie was
      decommissioned, or the cluster was re-formatted), except when the data dir holds no entry
      database yet and the directory cookie is this bookie's for this cluster: then a previous first
      start died between the two writes and the ZooKeeper cookie is written now.

    Raises:
        ClusterNotFormattedError: ``<root>/INSTANCEID`` is missing.
        CookieError: naming the bookie id, the directory and the znode when a cookie is missing or
            does not match.
    """
    instance_id = await read_instance_id(zk, paths)
    expected = Cookie.for_bookie(bookie_id, data_dir, instance_id)
    data_dir = await asyncio.to_thread(Path(data_dir).resolve)
    zpath = paths.cookie(bookie_id)
    fpath = dir_cookie_path(data_dir)
    try:
        raw, _stat = await zk.get(zpath)
        zk_cookie: Cookie | None = Cookie.parse(_utf8(raw, zpath), zpath)
    except NoNodeError:
        zk_cookie = None
    dir_cookie = await asyncio.to_thread(read_dir_cookie, data_dir)
    has_db = await asyncio.to_thread(database_exists, data_dir)

    if zk_cookie is not None and dir_cookie is None:
        raise CookieError(
            f"bookie {bookie_id}: cookie exists in ZooKeeper ({zpath}) but not in data directory {data_dir} "
            f"(no {fpath}): the directory was wiped or replaced, so this bookie lost its data; refusing to "
            f"start. Recover or decommission the bookie (which deletes its cookie) before reusing its id."
        )
    if zk_cookie is None and dir_cookie is not None:
        if not has_db and expected.mismatch(dir_cookie) is None:
            await _create_zk_cookie(zk, zpath, expected, bookie_id)
            return expected
        raise CookieError(
            f"bookie {bookie_id}: data directory {data_dir} has a cookie ({fpath}) but ZooKeeper has none at "
            f"{zpath}: the cookie was deleted (decommissioned bookie?) or the cluster was re-formatted; "
            f"refusing to start with stale data"
        )
    if zk_cookie is None and dir_cookie is None:
        if has_db:
            raise CookieError(
                f"bookie {bookie_id}: data directory {data_dir} holds ledger data but no cookie, and ZooKeeper "
                f"has no cookie at {zpath}: refusing to start with data of unknown origin"
            )
        await asyncio.to_thread(write_dir_cookie, data_dir, expected)
        await _create_zk_cookie(zk, zpath, expected, bookie_id)
        return expected
    assert zk_cookie is not None and dir_cookie is not None
    why = expected.mismatch(dir_cookie)
    if why is not None:
        raise CookieError(f"bookie {bookie_id}: cookie in {fpath} does not match this bookie: {why}")
    why = zk_cookie.mismatch(dir_cookie)
    if why is not None:
        raise CookieError(
            f"bookie {bookie_id}: cookie in {fpath} does not match the cookie in ZooKeeper {zpath}: {why}"
        )
    return expected


async def _create_zk_cookie(zk: ZkClient, zpath: str, cookie: Cookie, bookie_id: str) -> None:
    try:
        await zk.create(zpath, cookie.to_text().encode("utf-8"), makepath=True)
    except NodeExistsError:
        raw, _ = await zk.get(zpath)
        other = Cookie.parse(_utf8(raw, zpath), zpath)
        why = cookie.mismatch(other)
        if why is not None:
            raise CookieError(
                f"bookie {bookie_id}: another cookie appeared at {zpath} while this bookie was being "
                f"formatted: {why}"
            ) from None
