"""What a stock Java cluster's metadata says, read through its fixture's kazoo client, and our daemons
started next to its bookies (tests, benchmarks and the demo)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kazoo.exceptions import NoNodeError

from autorecovery.ledger.formats import deserialize
from autorecovery.ledger.ids import ledger_path
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.testing.daemon_proc import DaemonProcess
from autorecovery.testing.upstream_cluster import JavaCluster


def ledger_metadata(c: JavaCluster, ledger_id: int) -> LedgerMetadata:
    """The ledger's metadata as its znode holds it now.

    Raises:
        kazoo's NoNodeError: the ledger does not exist.
    """
    assert c.kz is not None
    data, _ = c.kz.get(ledger_path(c.ledgers_root, ledger_id))
    return deserialize(data, ledger_path(c.ledgers_root, ledger_id))


def marked_ledgers(c: JavaCluster) -> set[int]:
    """Ledger ids with an under-replication marker (upstream's layout: ``.../urL<10 digits>``)."""
    kz = c.kz
    assert kz is not None
    found: set[int] = set()

    def walk(path: str) -> None:
        try:
            children = kz.get_children(path)
        except NoNodeError:  # a level removed meanwhile
            return
        for ch in children:
            if ch.startswith("urL"):
                found.add(int(ch[3:]))
            else:
                walk(f"{path}/{ch}")

    walk(f"{c.ledgers_root}/underreplication/ledgers")
    return found


def healed(c: JavaCluster, ledgers: Iterable[int], victims: Iterable[str]) -> bool:
    """No marker left and no ledger's metadata names a bookie of ``victims``."""
    gone = set(victims)
    return not marked_ledgers(c) and all(not (gone & ledger_metadata(c, lid).all_bookies()) for lid in ledgers)


def start_our_daemons(c: JavaCluster, nodes: Iterable[int], properties: Mapping[str, object],
                      timeout_s: float = 30.0) -> dict[int, DaemonProcess]:
    """Our daemon next to each Java bookie in ``nodes`` (``bookieId`` = that bookie's id, the cluster's
    ZooKeeper and ledgers root, then ``properties``), each started and ready.

    Raises:
        RuntimeError: a daemon did not start (with its log's tail).
    """
    out = {}
    for i in nodes:
        props = {**c.daemon_properties(), "bookieId": c.bookie_ids[i], **properties}
        out[i] = DaemonProcess(c.workdir, f"ours-{i}", props).start(timeout_s)
    return out
