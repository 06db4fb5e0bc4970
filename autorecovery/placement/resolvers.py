"""Bookie -> network location resolvers (upstream ``DNSToSwitchMapping`` implementations).

A resolver maps bookie ids (``host:port``) to network locations (``/rack``, ``/region/rack``,
``/zone/upgradeDomain``). It returns ``None`` for a bookie it does not know; the policy then uses its
default rack (rack/region-aware ``/default-region/default-rack``, zone-aware
``/default-zone/default-upgradedomain``), as upstream's resolver decorator does.

PURE except :class:`ScriptResolver`, which runs an external command (the only ``subprocess`` user of the
placement package).
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any, Protocol, runtime_checkable
from collections.abc import Callable, Mapping, Sequence

from autorecovery.errors import ConfigError, MalformedMetadataError

from .topology import normalize_location

__all__ = [
    "Resolver",
    "StaticResolver",
    "PulsarRackResolver",
    "ScriptResolver",
    "DefaultRackResolver",
    "host_of",
    "resolver_from_config",
]

PULSAR_BOOKIES_PATH = "/bookies"


@runtime_checkable
class Resolver(Protocol):
    """Maps bookie ids to network locations; ``None`` means unknown (the policy's default rack is used)."""

    def resolve(self, bookie_ids: Sequence[str]) -> list[str | None]:  # pragma: no cover - protocol
        ...


def host_of(bookie_id: str) -> str:
    """The host part of a ``host:port`` bookie id (``[v6]:port`` is unbracketed)."""
    host = bookie_id.rsplit(":", 1)[0] if ":" in bookie_id else bookie_id
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


def _norm_or_none(location: str | None) -> str | None:
    if location is None:
        return None
    try:
        loc = normalize_location(location)
    except ValueError:
        return None
    return loc or None


class StaticResolver:
    """A fixed mapping (upstream test ``StaticDNSResolver``).

    Args:
        mapping: bookie id (``host:port``) or bare host -> network location. A bookie id is looked up first,
            then its host.

    Raises:
        ValueError: a location that does not start with ``/``.
    """

    def __init__(self, mapping: Mapping[str, str] | None = None) -> None:
        self._map: dict[str, str] = {}
        for k, v in (mapping or {}).items():
            self.set_location(k, v)

    def set_location(self, key: str, location: str) -> None:
        """Map a bookie id or host to ``location`` (e.g. to simulate a rack change)."""
        loc = normalize_location(location)
        if not loc:
            raise ValueError(f"empty network location for {key!r}")
        self._map[key] = loc

    def remove(self, key: str) -> None:
        self._map.pop(key, None)

    def resolve(self, bookie_ids: Sequence[str]) -> list[str | None]:
        out: list[str | None] = []
        for b in bookie_ids:
            loc = self._map.get(b)
            if loc is None:
                loc = self._map.get(host_of(b))
            out.append(loc)
        return out


class DefaultRackResolver:
    """Puts every bookie in the policy's default rack (upstream ``DefaultResolver`` fallback)."""

    def resolve(self, bookie_ids: Sequence[str]) -> list[str | None]:
        return [None] * len(bookie_ids)


class PulsarRackResolver:
    """Reads Pulsar's rack-info document kept at ``/bookies`` (Pulsar ``BookieRackAffinityMapping``).

    The document is ``{"group": {"host:port": {"rack": "/r1", "hostname": "...", ...}}}``. A bookie is looked
    up by its id, then by its host (the address host or a ``hostname`` field), but only when every entry of
    that host names the same rack: several bookies on one host in different racks (a local cluster) must
    not lend their rack to an unknown bookie of that host (ours; Pulsar takes whichever entry came last). A rack without a leading ``/`` gets one;
    an empty rack or ``"/"`` means unknown (default rack), as in Pulsar.

    Args:
        data: the znode bytes/str, an already decoded dict, or None (nothing known yet).

    Raises:
        MalformedMetadataError: the document is not JSON of the shape above (names ``/bookies``).
    """

    def __init__(self, data: bytes | str | Mapping[str, Any] | None = None) -> None:
        self._by_key: dict[str, str | None] = {}
        self.update(data)

    def update(self, data: bytes | str | Mapping[str, Any] | None) -> None:
        """Replace the mapping with a new version of the ``/bookies`` document."""
        if data is None or data == b"" or data == "":
            self._by_key = {}
            return
        if isinstance(data, (bytes, bytearray)):
            try:
                data = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise MalformedMetadataError(f"{PULSAR_BOOKIES_PATH}: not UTF-8: {e}") from e
        if isinstance(data, str):
            try:
                doc = json.loads(data)
            except (ValueError, RecursionError) as e:  # bad JSON, a >4300-digit number, nesting too deep
                raise MalformedMetadataError(f"{PULSAR_BOOKIES_PATH}: not JSON: {str(e)[:200]}") from e
        else:
            doc = data
        if not isinstance(doc, Mapping):
            raise MalformedMetadataError(f"{PULSAR_BOOKIES_PATH}: expected an object of groups, got {type(doc).__name__}")
        by_key: dict[str, str | None] = {}
        by_host: dict[str, set[str | None]] = {}
        for group, bookies in doc.items():
            if not isinstance(bookies, Mapping):
                raise MalformedMetadataError(f"{PULSAR_BOOKIES_PATH}: group {group!r} is not an object")
            for addr, info in bookies.items():
                if not isinstance(info, Mapping):
                    raise MalformedMetadataError(f"{PULSAR_BOOKIES_PATH}: entry {addr!r} is not an object")
                rack = self._rack(info.get("rack"))
                by_key[str(addr)] = rack
                hostname = info.get("hostname")
                if isinstance(hostname, str) and hostname:
                    by_host.setdefault(hostname, set()).add(rack)
                by_host.setdefault(host_of(str(addr)), set()).add(rack)
        for h, racks in by_host.items():
            if len(racks) == 1:  # a host shared by bookies in different racks tells nothing
                by_key.setdefault(h, next(iter(racks)))
        self._by_key = by_key

    @staticmethod
    def _rack(rack: Any) -> str | None:
        if not isinstance(rack, str):
            return None
        r = rack.strip()
        if not r or r == "/":
            return None
        if not r.startswith("/"):
            r = "/" + r
        return _norm_or_none(r)

    def resolve(self, bookie_ids: Sequence[str]) -> list[str | None]:
        out: list[str | None] = []
        for b in bookie_ids:
            if b in self._by_key:
                out.append(self._by_key[b])
            else:
                out.append(self._by_key.get(host_of(b)))
        return out


Runner = Callable[[list[str], float], str]


def _run_script(argv: list[str], timeout_s: float) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=True)
    return done.stdout


class ScriptResolver:
    """Runs a topology script with host names and reads one location per host (upstream ``ScriptBasedMapping``).

    The command is called with up to ``max_args`` host names as arguments and must print one location per
    host, separated by whitespace (one per line is conventional). If the script fails, times out or prints
    the wrong number of locations, the hosts of that call resolve to ``None`` (default rack), as upstream.
    Successful answers are cached per host (upstream ``CachedDNSToSwitchMapping``); a failed host is not
    asked again for ``retry_after_s`` (ours: upstream runs the script again on every lookup).

    Running the script blocks: the daemon calls :meth:`resolve` for :meth:`pending` hosts in a worker
    thread before it tells the policy about new bookies, so the policy's own (event-loop) lookups hit
    the cache and never run the script.

    Args:
        script: the command (a path, or argv list). None: not configured; every bookie resolves to None
            and :attr:`configured` is False (the rack-aware policy then refuses to start when
            ``enforceMinNumRacksPerWriteQuorum`` is on, as upstream).
        max_args: ``networkTopologyScriptNumberArgs``.
        timeout_s: seconds allowed per script call.
        runner: ``(argv, timeout_s) -> stdout`` (tests inject a fake); default runs a subprocess.
    """

    def __init__(self, script: str | Sequence[str] | None, max_args: int = 100, timeout_s: float = 10.0,
                 runner: Runner | None = None, retry_after_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if script is None or (isinstance(script, str) and not script.strip()):
            self._argv: list[str] | None = None
        elif isinstance(script, str):
            self._argv = [script]
        else:
            self._argv = list(script)
        self.max_args = max(1, int(max_args))
        self.timeout_s = timeout_s
        self._runner = runner or _run_script
        self._cache: dict[str, str] = {}
        self._failed: dict[str, float] = {}  # host -> clock time of its last failed lookup
        self.retry_after_s = retry_after_s
        self._clock = clock
        self.script_runs = 0

    @property
    def configured(self) -> bool:
        return self._argv is not None

    def clear_cache(self) -> None:
        """Forget cached answers (upstream ``reloadCachedMappings``)."""
        self._cache.clear()
        self._failed.clear()

    def pending(self, bookie_ids: Sequence[str]) -> list[str]:
        """The bookies whose lookup would run the script now (not cached, not failed recently)."""
        if self._argv is None:
            return []
        now = self._clock()
        return [b for b in bookie_ids if (h := host_of(b)) not in self._cache
                and now - self._failed.get(h, -1e18) >= self.retry_after_s]

    def resolve(self, bookie_ids: Sequence[str]) -> list[str | None]:
        hosts = [host_of(b) for b in bookie_ids]
        if self._argv is not None:
            todo = list(dict.fromkeys(host_of(b) for b in self.pending(bookie_ids)))
            for i in range(0, len(todo), self.max_args):
                batch = todo[i:i + self.max_args]
                self.script_runs += 1
                try:
                    out = self._runner(self._argv + batch, self.timeout_s)
                    tokens = out.split()
                except (OSError, subprocess.SubprocessError, ValueError):
                    tokens = []
                if len(tokens) != len(batch):
                    now = self._clock()
                    self._failed.update((h, now) for h in batch)
                    continue
                for h, tok in zip(batch, tokens, strict=True):
                    loc = _norm_or_none(tok)
                    if loc is not None:
                        self._cache[h] = loc
                        self._failed.pop(h, None)
                    else:
                        self._failed[h] = self._clock()
        return [self._cache.get(h) for h in hosts]


_SCRIPT = "org.apache.bookkeeper.net.ScriptBasedMapping"
_STATIC = "org.apache.bookkeeper.util.StaticDNSResolver"
_PULSAR = (
    "org.apache.pulsar.bookie.rackawareness.BookieRackAffinityMapping",
    "org.apache.pulsar.zookeeper.ZkBookieRackAffinityMapping",
)


def resolver_from_config(config: Any, *, pulsar_data: bytes | str | Mapping[str, Any] | None = None,
                         static_mapping: Mapping[str, str] | None = None,
                         script_runner: Runner | None = None) -> Resolver:
    """Build the resolver named by ``reppDnsResolverClass`` (upstream class names, or ``script``/``static``/``pulsar``).

    Args:
        config: a :class:`~autorecovery.placement.config.PlacementConfig`.
        pulsar_data: the current ``/bookies`` document for the Pulsar resolver (the caller reads ZooKeeper).
        static_mapping: the mapping for the static resolver.
        script_runner: test hook for the script resolver.

    Raises:
        ConfigError: unknown resolver class (names ``reppDnsResolverClass``).
    """
    name = config.repp_dns_resolver_class or _SCRIPT  # unset: upstream default ScriptBasedMapping
    if name in (_SCRIPT, "script"):
        return ScriptResolver(config.network_topology_script_file_name, config.network_topology_script_number_args,
                              runner=script_runner)
    if name in (_STATIC, "static"):
        return StaticResolver(static_mapping or {})
    if name in _PULSAR or name == "pulsar":
        return PulsarRackResolver(pulsar_data)
    raise ConfigError(f"config key reppDnsResolverClass: unknown resolver class {name!r}")
