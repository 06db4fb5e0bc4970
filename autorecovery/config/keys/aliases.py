"""Other names for the table's keys (PURE): Pulsar ``broker.conf`` aliases, the ``bookkeeper_<key>``
pass-through, Pulsar's rack-/region-aware switches (:func:`pulsar_policy`) and our own older names.
Names resolve from :mod:`autorecovery.config.keys`.
"""

from __future__ import annotations

#: Pulsar ``broker.conf`` names → upstream key (same meaning, same unit). The two policy switches are
#: handled by :func:`pulsar_policy` instead.
PULSAR_ALIASES: dict[str, str] = {
    "bookkeeperMetadataServiceUri": "metadataServiceUri",
    # broker.conf's metadata store (``zk:h1:2181,h2:2181`` or ``metadata-store:zk:...``; the ``zk:`` prefix
    # is stripped in config.load) and its deprecated predecessor
    "metadataStoreUrl": "zkServers",
    "zookeeperServers": "zkServers",
    "bookkeeperClientMinNumRacksPerWriteQuorum": "minNumRacksPerWriteQuorum",
    "bookkeeperClientEnforceMinNumRacksPerWriteQuorum": "enforceMinNumRacksPerWriteQuorum",
    "bookkeeperDiskWeightBasedPlacementEnabled": "diskWeightBasedPlacementEnabled",
    "bookkeeperClientGetBookieInfoIntervalSeconds": "getBookieInfoIntervalSeconds",
    "bookkeeperClientGetBookieInfoRetryIntervalSeconds": "getBookieInfoRetryIntervalSeconds",
}

#: Our own older names → the upstream key that replaced them (same meaning). In one source the upstream
#: name wins, with a warning when the two differ; a later source (env over file, flag over env) wins
#: whichever name it uses.
OUR_ALIASES: dict[str, str] = {
    "httpServerAddress": "httpServerHost",
    # upstream's ClientConfiguration accessors are named getBookieRecoveryDigestType/getBookieRecoveryPasswd
    # but read the keys digestType and passwd; the accessor names are accepted too
    "bookieRecoveryDigestType": "digestType",
    "bookieRecoveryPasswd": "passwd",
}

#: Pulsar's boolean policy switches (``bookkeeperClientRegionawarePolicyEnabled`` wins, as in Pulsar's
#: BookKeeperClientFactoryImpl; both false → the default policy).
PULSAR_POLICY_SWITCHES = ("bookkeeperClientRackawarePolicyEnabled", "bookkeeperClientRegionawarePolicyEnabled")

#: Pulsar passes ``bookkeeper_<key>=v`` through to the BookKeeper client as ``<key>=v``; so do we.
PULSAR_PASSTHROUGH_PREFIX = "bookkeeper_"

RACKAWARE_CLASS = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
REGIONAWARE_CLASS = "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy"
DEFAULT_POLICY_CLASS = "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy"


def pulsar_policy(rackaware: bool | None, regionaware: bool | None) -> str | None:
    """The ``ensemblePlacementPolicy`` class Pulsar's two switches select (None when neither is set)."""
    if rackaware is None and regionaware is None:
        return None
    if regionaware:
        return REGIONAWARE_CLASS
    if rackaware:
        return RACKAWARE_CLASS
    return DEFAULT_POLICY_CLASS
