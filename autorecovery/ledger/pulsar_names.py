"""Pulsar's names for a ledger, from its custom metadata (PURE).

Pulsar's ManagedLedger writes the custom metadata key ``pulsar/managed-ledger`` =
``<tenant>/<namespace>/<domain>/<topic>`` (e.g. ``public/default/persistent/orders``) on every ledger
it creates. Used by the offline reports (:mod:`autorecovery.reports.model`) and by the live by-topic
rollups (:mod:`autorecovery.audit.topics`).
"""

from __future__ import annotations

from collections.abc import Mapping

#: The custom metadata key Pulsar's ManagedLedger stores.
ML_KEY = "pulsar/managed-ledger"

#: What the live rollups call a ledger without ``pulsar/managed-ledger`` (tenant, namespace and topic).
NOT_PULSAR = "not Pulsar"


def pulsar_names(custom: Mapping[str, bytes | str] | None) -> tuple[str, str, str]:
    """``(tenant, namespace, topic)`` from a Pulsar managed ledger's custom metadata, else empty strings.

    The namespace is returned as ``tenant/namespace`` and the topic as ``<domain>://tenant/namespace/topic``;
    a value with fewer than four parts gives what it has (tenant, namespace) and an empty topic. Bytes
    that are not UTF-8 are replaced (U+FFFD), never an error.
    """
    if not custom:
        return "", "", ""
    raw = custom.get(ML_KEY)
    if raw is None:
        return "", "", ""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    parts = text.split("/")
    if len(parts) < 4:
        return (parts[0], "/".join(parts[:2]), "") if parts else ("", "", "")
    tenant, ns, domain, topic = parts[0], parts[1], parts[2], "/".join(parts[3:])
    return tenant, f"{tenant}/{ns}", f"{domain}://{tenant}/{ns}/{topic}"
