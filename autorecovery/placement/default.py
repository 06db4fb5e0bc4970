"""Random placement (upstream ``DefaultEnsemblePlacementPolicy``). PURE.

Known bookies are the last writable set; read-only bookies are never used. With disk weights on, bookies
are drawn by capped free-disk weight (:mod:`.weights`); a bookie without disk info has weight 0, i.e. it is
treated like the lightest bookie with info (upstream).

Every ensemble adheres (MEETS_STRICT): there are no fault domains. Differences from upstream (ours):
``replace_to_adhere`` returns the ensemble unchanged with MEETS_STRICT instead of throwing
UnsupportedOperationException (nothing can fail this policy, so zero swaps is the minimum); the caller's
exclude set is never mutated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


from .policy import Adherence, PlacementPolicy, PlacementResult

__all__ = ["DefaultPolicy"]


class DefaultPolicy(PlacementPolicy):
    """Uniform (or disk-weighted) random placement among writable bookies."""

    upstream_class = "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy"

    def _draw(self, n: int, excluded: set[str]) -> list[str]:
        return self._draw_distinct(self._writable - excluded, n, self._cluster_selection())

    def new_ensemble(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                     exclude: Iterable[str] = frozenset(), custom_metadata: Mapping[str, bytes] | None = None
                     ) -> PlacementResult:
        """E random writable, non-excluded bookies (MEETS_STRICT); E <= 0 gives an empty FAIL result (upstream).

        Raises:
            NotEnoughBookiesError: fewer than E candidates.
        """
        if ensemble_size <= 0:
            return PlacementResult([], Adherence.FAIL)
        return PlacementResult(self._draw(ensemble_size, set(exclude)), Adherence.MEETS_STRICT)

    def replace_bookie(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                       current_ensemble: Sequence[str], bookie_to_replace: str, exclude: Iterable[str] = frozenset(),
                       custom_metadata: Mapping[str, bytes] | None = None) -> PlacementResult:
        """A random writable bookie outside the ensemble and ``exclude``, at the replaced index.

        Raises:
            NotEnoughBookiesError: no candidate.
            ValueError: ``bookie_to_replace`` is not in a non-empty ``current_ensemble``.
        """
        current = list(current_ensemble)
        if current and bookie_to_replace not in current:
            raise ValueError(f"bookie {bookie_to_replace} is not in the ensemble {current}")
        b = self._draw(1, set(exclude) | set(current) | {bookie_to_replace})[0]
        idx = current.index(bookie_to_replace) if current else 0
        if current:
            current[idx] = b
        else:
            current = [b]
        return PlacementResult(current, Adherence.MEETS_STRICT, bookie=b, replaced=(idx,))

    def is_ensemble_adhering(self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int) -> Adherence:
        """Always MEETS_STRICT (upstream)."""
        return Adherence.MEETS_STRICT

    def replace_to_adhere(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                          exclude: Iterable[str], current_ensemble: Sequence[str]) -> PlacementResult:
        """The ensemble unchanged with MEETS_STRICT: every ensemble adheres, so the minimum is zero swaps."""
        return PlacementResult(list(current_ensemble), Adherence.MEETS_STRICT)
