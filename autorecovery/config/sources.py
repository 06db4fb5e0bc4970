"""Where raw properties come from and how their names become keys: the Java-properties file, the
``BK_<key>`` environment, and the mapping of each layer's names to canonical keys (Pulsar aliases,
``bookkeeper_<key>`` pass-through, placement switches, keys without effect, unknown keys with "did you
mean"). Used by :func:`autorecovery.config.load.load_settings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import javaproperties

from autorecovery.config import keys as K
from autorecovery.errors import ConfigError

ENV_PREFIX = "BK_"


def read_properties_file(path: str | Path) -> dict[str, str]:
    """Parse a Java-properties file.

    Raises:
        ConfigError: naming the file when it cannot be read.
    """
    p = Path(path)
    try:
        with open(p, encoding="latin-1") as f:  # Java's Properties.load reads ISO-8859-1
            return dict(javaproperties.load(f))
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}") from None
    except Exception as exc:  # noqa: BLE001 - javaproperties raises plain ValueErrors on bad escapes
        raise ConfigError(f"cannot parse config file {p}: {exc}") from None


def env_properties(env: Mapping[str, str]) -> dict[str, str]:
    """``BK_<key>`` environment variables as properties (``BK_zkServers`` → ``zkServers``).

    All-upper-case names (``BK_DATA_DIR``) are the Docker image's own variables, not config keys, and
    are skipped.
    """
    out = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or len(name) <= len(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX):]
        if key.upper() == key:
            continue
        out[key] = value
    return out


@dataclass
class Layer:
    source: str
    props: dict[str, str]


def normalise(layer: Layer, extra: frozenset[str], warnings: list[str],
               out: dict[str, tuple[str, str]], switches: dict[str, tuple[bool, str]],
               errors: list[str], ignored: dict[str, str]) -> None:
    """Map one layer's names to canonical keys and merge them into ``out`` (name → (raw, source));
    keys of :data:`~autorecovery.config.keys.NO_EFFECT_KEYS` go to ``ignored`` (name → source)."""
    aliased: dict[str, tuple[str, str]] = {}
    direct: dict[str, tuple[str, str]] = {}
    where = {"file": "in the config file", "env": "in the environment (BK_...)", "flag": "on the command line"}
    for name, raw in layer.props.items():
        name = name.strip()
        if name in K.KEY_BY_NAME or name in extra:
            direct[name] = (raw, layer.source)
        elif name in K.PULSAR_ALIASES:
            aliased[K.PULSAR_ALIASES[name]] = (raw, f"{layer.source} (alias {name})")
        elif name in K.OUR_ALIASES:
            target = K.OUR_ALIASES[name]
            aliased[target] = (raw, f"{layer.source} (alias {name})")
            other = layer.props.get(target)
            if other is not None and other.strip() != raw.strip():
                warnings.append(f"{name}={raw.strip()} is ignored: {target}={other.strip()} (upstream's name) "
                                f"{where[layer.source]} takes precedence")
        elif name in K.PULSAR_POLICY_SWITCHES:
            try:
                flag = K.Key(name, "bool", None, "", "").parse(raw)
            except ConfigError as exc:
                errors.append(str(exc))
                continue
            switches[name] = (flag, layer.source)
        elif name.startswith(K.PULSAR_PASSTHROUGH_PREFIX) and len(name) > len(K.PULSAR_PASSTHROUGH_PREFIX):
            target = name[len(K.PULSAR_PASSTHROUGH_PREFIX):]
            if target in K.KEY_BY_NAME or target in extra:
                aliased[target] = (raw, f"{layer.source} (alias {name})")
            elif target in K.NO_EFFECT_KEYS and not (target in K.REFUSED_WHEN_ASKED and K.asks_for_security(raw)):
                ignored.setdefault(target, f"{layer.source} (alias {name})")
            else:
                errors.append(_unknown(name, where[layer.source], extra))
        elif name in K.UNIMPLEMENTED_SECURITY_KEYS:
            if K.asks_for_security(raw):
                asks = ("certificate role authorization (BookieAuthZFactory)" if name == "authorizedRoles" else
                        "an authentication plugin (SASL, BookieAuthZFactory or another AuthProviderFactory)")
                errors.append(f"{name}={raw.strip()} {where[layer.source]} asks for {asks} that this "
                              f"implementation does not provide (issue 15); refusing to start without it. "
                              f"Authenticate with TLS client certificates instead (tlsProviderFactoryClass, "
                              f"tlsClientAuthentication; see docs/security.md), and remove the key or set it empty")
            else:
                ignored.setdefault(name, layer.source)
        elif name in K.REFUSED_WHEN_ASKED and K.asks_for_security(raw):
            errors.append(f"{name}={raw.strip()} {where[layer.source]} is not supported: {K.REFUSED_WHEN_ASKED[name]}")
        elif name in K.NO_EFFECT_KEYS:
            ignored.setdefault(name, layer.source)
        else:
            errors.append(_unknown(name, where[layer.source], extra))
    out.update(aliased)
    out.update(direct)  # the upstream name wins over its alias within a layer


def _unknown(name: str, where: str, extra: frozenset[str]) -> str:
    """The error line of a key nobody reads (a configuration error: it would be ignored)."""
    hint = K.suggest(name, tuple(extra))
    msg = f"unknown configuration key {name} {where}"
    return msg + (f"; did you mean {hint}?" if hint and hint != name else "")
