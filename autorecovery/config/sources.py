"""Where raw properties come from and how their names become keys: the Java-properties file, the
``BK_<key>`` environment (or, when asked, the Apache Pulsar image's convention: variables named after
the keys and ``PULSAR_PREFIX_<key>``), and the mapping of each layer's names to canonical keys (Pulsar
aliases, ``bookkeeper_<key>`` pass-through, placement switches, keys without effect, unknown keys with
"did you mean"). Used by :func:`autorecovery.config.load.load_settings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import javaproperties

from autorecovery.config import keys as K
from autorecovery.errors import ConfigError

ENV_PREFIX = "BK_"
#: the environment variable choosing which names of the environment are keys: ``bk`` (the default:
#: ``BK_<key>`` only) or ``plain`` (also variables named exactly after a key, and ``PULSAR_PREFIX_<key>``)
ENV_KEYS_SWITCH = "AUTORECOVERY_ENV_KEYS"
ENV_KEYS_MODES = ("bk", "plain")
#: the Pulsar image's prefix for a key that bookkeeper.conf does not list (apply-config-from-env.py)
PULSAR_ENV_PREFIX = "PULSAR_PREFIX_"


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
    """One layer of raw properties: ``source`` is ``file``, ``env`` or ``flag``; ``origin`` names,
    for a property taken from an environment variable not called ``BK_<key>``, that variable (it
    stands in the property's source and in its error lines)."""

    source: str
    props: dict[str, str]
    origin: dict[str, str] = field(default_factory=dict)

    def source_of(self, name: str) -> str:
        """``file``/``env``/``flag``, or ``environment variable <NAME>`` for a Pulsar-convention variable."""
        var = self.origin.get(name)
        return f"environment variable {var}" if var else self.source


def env_keys_mode(env: Mapping[str, str]) -> str:
    """The value of ``AUTORECOVERY_ENV_KEYS`` (``bk`` when unset or empty).

    Raises:
        ConfigError: naming the variable and its value when it is neither ``bk`` nor ``plain``.
    """
    mode = env.get(ENV_KEYS_SWITCH, "").strip().lower() or "bk"
    if mode not in ENV_KEYS_MODES:
        raise ConfigError(f"bad value for environment variable {ENV_KEYS_SWITCH}: {env[ENV_KEYS_SWITCH]!r} "
                          f"(expected one of {', '.join(ENV_KEYS_MODES)})")
    return mode


def _env_key_name(name: str, extra: frozenset[str]) -> bool:
    """True for a name bookkeeper.conf could hold: a key of the table, a key accepted with no effect or
    refused when it asks for something, or a provider's extra key (never an alias: the Pulsar image
    applies a variable only when the conf file names it)."""
    return (name in K.KEY_BY_NAME or name in K.NO_EFFECT_KEYS or name in K.UNIMPLEMENTED_SECURITY_KEYS
            or name in K.REFUSED_WHEN_ASKED or name in extra)


def plain_env_properties(env: Mapping[str, str], extra: frozenset[str] = frozenset()) -> dict[str, tuple[str, str]]:
    """The Apache Pulsar image's environment convention as properties: key → (value, variable name).

    Source: Pulsar's ``docker/pulsar/scripts/apply-config-from-env.py``, which the Pulsar Helm chart
    runs before ``bin/bookkeeper autorecovery`` with the component's ConfigMap as the environment. As
    there, a variable named exactly after a key sets it, ``PULSAR_PREFIX_<key>`` sets it too and wins
    over the plain name, values are stripped, and a value ``${OTHER}`` is the value of variable OTHER
    (empty when unset). Unlike there, ``BK_<key>`` (our convention) wins over both.

    Only names of keys are taken: every other plain name (``PATH``, ``HOME``, ``BOOKIE_MEM``,
    ``PULSAR_MEM``) is not ours and is skipped. Every ``PULSAR_PREFIX_`` name is taken, so an unknown
    key there is reported as unknown, as it would be in the file. An empty value (the chart sets
    ``zkServers: ""`` to mean "not set") leaves the key unset, as an empty line value does upstream.
    """
    def value(raw: str) -> str:
        v = raw.strip()
        if v.startswith("${") and v.endswith("}"):
            v = env.get(v[2:-1], "").strip()
        return v

    plain: dict[str, tuple[str, str]] = {}
    prefixed: dict[str, tuple[str, str]] = {}
    for name in sorted(env):
        if name.startswith(PULSAR_ENV_PREFIX) and len(name) > len(PULSAR_ENV_PREFIX):
            key, into = name[len(PULSAR_ENV_PREFIX):], prefixed
        elif _env_key_name(name, extra):
            key, into = name, plain
        else:
            continue
        v = value(env[name])
        if v:
            into[key] = (v, name)
    return {**plain, **prefixed}


def env_layer(env: Mapping[str, str], extra: frozenset[str] = frozenset()) -> Layer:
    """The environment's layer: ``BK_<key>`` always; with ``AUTORECOVERY_ENV_KEYS=plain`` also the
    Pulsar image's names (:func:`plain_env_properties`), ``BK_<key>`` winning over them.

    Raises:
        ConfigError: for a bad ``AUTORECOVERY_ENV_KEYS``.
    """
    bk = env_properties(env)
    if env_keys_mode(env) == "bk":
        return Layer("env", bk)
    found = plain_env_properties(env, extra)
    props = {k: v for k, (v, _var) in found.items()}
    origin = {k: var for k, (_v, var) in found.items() if k not in bk}
    props.update(bk)
    return Layer("env", props, origin)


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
        src = layer.source_of(name)
        var = layer.origin.get(name)
        at = f"in environment variable {var}" if var else where[layer.source]
        if name in K.KEY_BY_NAME or name in extra:
            direct[name] = (raw, src)
        elif name in K.PULSAR_ALIASES:
            aliased[K.PULSAR_ALIASES[name]] = (raw, f"{src} (alias {name})")
        elif name in K.OUR_ALIASES:
            target = K.OUR_ALIASES[name]
            aliased[target] = (raw, f"{src} (alias {name})")
            other = layer.props.get(target)
            if other is not None and other.strip() != raw.strip():
                warnings.append(f"{name}={raw.strip()} is ignored: {target}={other.strip()} (upstream's name) "
                                f"{at} takes precedence")
        elif name in K.PULSAR_POLICY_SWITCHES:
            try:
                flag = K.Key(name, "bool", None, "", "").parse(raw)
            except ConfigError as exc:
                errors.append(f"{exc} [{src}]" if var else str(exc))
                continue
            switches[name] = (flag, src)
        elif name.startswith(K.PULSAR_PASSTHROUGH_PREFIX) and len(name) > len(K.PULSAR_PASSTHROUGH_PREFIX):
            target = name[len(K.PULSAR_PASSTHROUGH_PREFIX):]
            if target in K.KEY_BY_NAME or target in extra:
                aliased[target] = (raw, f"{src} (alias {name})")
            elif target in K.NO_EFFECT_KEYS and not (target in K.REFUSED_WHEN_ASKED and K.asks_for_security(raw)):
                ignored.setdefault(target, f"{src} (alias {name})")
            else:
                errors.append(_unknown(name, at, extra))
        elif name in K.UNIMPLEMENTED_SECURITY_KEYS:
            if K.asks_for_security(raw):
                asks = ("certificate role authorization (BookieAuthZFactory)" if name == "authorizedRoles" else
                        "an authentication plugin (SASL, BookieAuthZFactory or another AuthProviderFactory)")
                errors.append(f"{name}={raw.strip()} {at} asks for {asks} that this "
                              f"implementation does not provide (issue 15); refusing to start without it. "
                              f"Authenticate with TLS client certificates instead (tlsProviderFactoryClass, "
                              f"tlsClientAuthentication; see docs/security.md), and remove the key or set it empty")
            else:
                ignored.setdefault(name, src)
        elif name in K.REFUSED_WHEN_ASKED and K.asks_for_security(raw):
            errors.append(f"{name}={raw.strip()} {at} is not supported: {K.REFUSED_WHEN_ASKED[name]}")
        elif name in K.NO_EFFECT_KEYS:
            ignored.setdefault(name, src)
        else:
            errors.append(_unknown(name, at, extra))
    out.update(aliased)
    out.update(direct)  # the upstream name wins over its alias within a layer


def _unknown(name: str, where: str, extra: frozenset[str]) -> str:
    """The error line of a key nobody reads (a configuration error: it would be ignored)."""
    hint = K.suggest(name, tuple(extra))
    msg = f"unknown configuration key {name} {where}"
    return msg + (f"; did you mean {hint}?" if hint and hint != name else "")
