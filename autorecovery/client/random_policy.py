"""A minimal random placement policy with the placement-library interface (PURE).

Used by the ledger client when no topology-aware policy is configured. It picks distinct writable
bookies uniformly at random, never a read-only or excluded one (upstream DefaultEnsemblePlacementPolicy
without weights).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from autorecovery.errors import NotEnoughBookiesError


@dataclass
class _Result:
    ensemble: list[str] = field(default_factory=list)
    bookie: str | None = None
    adherence: object = None


class RandomPolicy:
    """Random ensemble choice among writable bookies (the interface of ``autorecovery.placement``)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self.writable: set[str] = set()
        self.readonly: set[str] = set()

    def on_cluster_changed(self, writable: set[str], readonly: set[str]) -> set[str]:
        dead = (self.writable | self.readonly) - (set(writable) | set(readonly))
        self.writable, self.readonly = set(writable), set(readonly)
        return dead

    def new_ensemble(self, ensemble_size, write_quorum_size, ack_quorum_size, exclude=frozenset(), custom_metadata=None):
        """Raises NotEnoughBookiesError when fewer than ``ensemble_size`` candidates remain."""
        cands = sorted(self.writable - set(exclude))
        if len(cands) < ensemble_size:
            raise NotEnoughBookiesError(f"need {ensemble_size} bookies, {len(cands)} writable and not excluded")
        return _Result(ensemble=self.rng.sample(cands, ensemble_size))

    def replace_bookie(self, ensemble_size, write_quorum_size, ack_quorum_size, current_ensemble, bookie_to_replace,
                       exclude=frozenset(), custom_metadata=None):
        """Raises NotEnoughBookiesError when no writable bookie outside the ensemble and ``exclude`` is left."""
        cands = sorted(self.writable - set(exclude) - set(current_ensemble))
        if not cands:
            raise NotEnoughBookiesError(f"no bookie to replace {bookie_to_replace}")
        return _Result(bookie=self.rng.choice(cands))
