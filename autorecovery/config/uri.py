"""The ZooKeeper location in a configuration: ``metadataServiceUri`` (``zk+<manager>://host:port;.../root``),
Pulsar's ``metadataStoreUrl``-style ``zk:`` prefixes on ``zkServers``, and the ledgers root path check.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from autorecovery.errors import ConfigError


def parse_metadata_service_uri(uri: str) -> tuple[str, str]:
    """Split a metadata service URI into (ZooKeeper connect string, ledgers root).

    See :func:`parse_metadata_service_uri_manager` for the forms accepted.

    Raises:
        ConfigError: naming ``metadataServiceUri`` and the value.
    """
    hosts, root, _manager = parse_metadata_service_uri_manager(uri)
    return hosts, root


def parse_metadata_service_uri_manager(uri: str) -> tuple[str, str, str | None]:
    """Split ``zk+hierarchical://h1:2181;h2:2181/ledgers`` into (``h1:2181,h2:2181``, ``/ledgers``,
    ``"hierarchical"``).

    Accepted forms:

    * upstream ``ZKMetadataDriverBase``: ``zk://``, ``zk+hierarchical://``, ``zk+longhierarchical://``,
      ``zk+legacyhierarchical://``, ``zk+null://`` (``null`` or plain ``zk`` = use the layout the
      cluster was formatted with). Hosts are separated by ``;`` (upstream) or ``,``;
    * Pulsar's ``metadata-store:zk:h1:2181,h2:2181/ledgers`` (``PulsarMetadataBookieDriver``; the
      ``zk:`` part may be ``zk://``); other Pulsar metadata stores (etcd, rocksdb, memory) are refused.

    An empty path means ``/ledgers``. The third item is the manager type the scheme names, or None.

    Raises:
        ConfigError: naming ``metadataServiceUri`` and the value.
    """
    def bad(why: str) -> ConfigError:
        return ConfigError(f"bad value for metadataServiceUri: {uri!r} ({why})")

    text = uri.strip()
    if text.lower().startswith("metadata-store:"):
        rest = text[len("metadata-store:"):]
        if not rest.lower().startswith("zk:"):
            raise bad("only a ZooKeeper metadata store (metadata-store:zk:host:2181/ledgers) is supported")
        rest = rest[3:]
        if rest.startswith("//"):
            rest = rest[2:]
        text = "zk://" + rest
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise bad(str(exc)) from None
    scheme = parts.scheme.lower()
    base, _, manager = scheme.partition("+")
    if base != "zk":
        raise bad("expected a zk:// or zk+hierarchical:// URI; only ZooKeeper metadata stores are supported")
    if manager not in ("", "hierarchical", "longhierarchical", "legacyhierarchical", "null"):
        raise bad(f"ledger manager {manager!r} is not supported; use hierarchical or longhierarchical")
    hosts = [h.strip() for h in parts.netloc.replace(";", ",").split(",") if h.strip()]
    if not hosts:
        raise bad("no ZooKeeper servers in the URI")
    for h in hosts:
        host, _, port = h.rpartition(":")
        if not host or not port.isdigit():
            raise bad(f"server {h!r} is not host:port")
    root = parts.path.rstrip("/") or "/ledgers"
    return ",".join(hosts), root, (manager if manager not in ("", "null") else None)


def strip_pulsar_store_prefix(servers: str) -> str:
    """Pulsar's ``metadataStoreUrl`` / ``zookeeperServers`` value as a ZooKeeper connect string:
    ``zk:h1:2181,h2:2181/chroot`` → ``h1:2181,h2:2181/chroot``.

    Raises:
        ConfigError: another metadata store (``etcd:``, ``rocksdb:``, ``memory:``), naming the value.
    """
    text = servers.strip()
    low = text.lower()
    if low.startswith("metadata-store:"):
        text, low = text[len("metadata-store:"):], low[len("metadata-store:"):]
    if low.startswith("zk:"):
        text = text[3:].lstrip("/")
    elif any(low.startswith(p) for p in ("etcd:", "rocksdb:", "memory:", "oxia:")):
        raise ConfigError(f"bad value for zkServers: {servers!r} (only a ZooKeeper metadata store is supported)")
    return text


def validate_root(root: str, key: str) -> str:
    if not root.startswith("/") or root.endswith("/") or "//" in root or len(root) < 2:
        raise ConfigError(f"bad value for {key}: {root!r} (expected an absolute znode path like /ledgers)")
    return root
