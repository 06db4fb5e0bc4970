"""Read order of the topology-aware policies (upstream ``reorderReadSequenceWithRegion``). PURE.

Split from :mod:`.topology_aware` (the placement side stays there): which replica of an entry a read
tries first, from the policy's membership, slow-bookie memory, pending requests and regions.
"""

from __future__ import annotations

import random
from typing import Protocol
from collections.abc import Callable, Container, Sequence

from .config import PlacementConfig
from .policy import BookiesHealthInfo


class ReadOrderPolicy(Protocol):
    """What the read order needs from a topology-aware policy (:class:`.topology_aware.TopologyAwarePolicy`)."""

    @property
    def topology(self) -> Container[str]: ...
    @property
    def _readonly(self) -> Container[str]: ...
    @property
    def config(self) -> PlacementConfig: ...
    @property
    def rng(self) -> random.Random: ...

    def _is_slow(self, bookie: str) -> bool: ...

__all__ = ["reorder_with_region", "UNKNOWN_REGION"]

#: Region of a bookie whose location carries no region (upstream ``UNKNOWN_REGION``).
UNKNOWN_REGION = "UnknownRegion"

# read-order classes (upstream masks, in sort order)
_LOCAL, _LOCAL_FAIL, _REMOTE, _REMOTE_FAIL, _READ_ONLY, _SLOW, _UNAVAIL = range(7)


def reorder_with_region(policy: ReadOrderPolicy, ensemble: Sequence[str], health: BookiesHealthInfo,
                        write_set: Sequence[int], region_of: Callable[[str], str] | None, my_region: str,
                        remote_node_in_reorder: int) -> list[int]:
    """Upstream ``reorderReadSequenceWithRegion`` (see the reference §11), with its quirks:

    * nothing is reordered (except by pending requests) unless random reordering is on, the policy is
      region-aware with a known client region, or a write-set member is unavailable or slow;
    * inside the LOCAL_FAIL / REMOTE_FAIL / SLOW classes the original order is kept;
    * only the first remote member is promoted, to position <= ``remote_node_in_reorder``.
    """
    ws = list(write_set)
    use_region = region_of is not None and my_region != UNKNOWN_REGION
    known = policy.topology
    readonly = policy._readonly
    randomize = policy.config.ensemble_random_read_reordering
    any_unavailable = use_region or randomize
    if not any_unavailable:
        for idx in ws:
            b = ensemble[idx]
            if (b not in known and b not in readonly) or policy._is_slow(b):
                any_unavailable = True
                break
    threshold = policy.config.read_reorder_threshold_pending_requests
    if threshold > 0 and ws:
        pending = [health.pending_requests(ensemble[i]) for i in ws]
        best = 0
        for i in range(1, len(ws)):
            if pending[i] < pending[best]:
                best = i
        if best > 0 and pending[0] >= pending[best] + threshold:
            ws.insert(0, ws.pop(best))
    if not any_unavailable:
        return ws
    classes: list[tuple[int, int, int]] = []
    for pos, idx in enumerate(ws):
        b = ensemble[idx]
        if b not in known:
            cls = (_SLOW if policy._is_slow(b) else _READ_ONLY) if b in readonly else _UNAVAIL
        elif health.failure_history(b) < 0:
            if policy._is_slow(b):
                cls = _SLOW
            elif use_region and region_of(b) != my_region:  # type: ignore[misc]
                cls = _REMOTE
            else:
                cls = _LOCAL
        else:
            remote = use_region and region_of(b) != my_region  # type: ignore[misc]
            cls = _REMOTE_FAIL if remote else _LOCAL_FAIL
        classes.append((cls, pos, idx))
    classes.sort()
    if randomize:
        for group in (_LOCAL, _REMOTE, _READ_ONLY, _UNAVAIL):
            at = [i for i, c in enumerate(classes) if c[0] == group]
            if len(at) > 1:
                vals = [classes[i] for i in at]
                policy.rng.shuffle(vals)
                for i, v in zip(at, vals, strict=True):
                    classes[i] = v
    flat = [(_LOCAL if c == _LOCAL_FAIL else _REMOTE if c == _REMOTE_FAIL else c, idx) for c, _p, idx in classes]
    first_remote = next((i for i, (c, _) in enumerate(flat) if c == _REMOTE), -1)
    if first_remote != -1:
        i = 0
        while i < remote_node_in_reorder and i < len(flat) and flat[i][0] == _LOCAL:
            i += 1
        flat.insert(i, flat.pop(first_remote))
    return [idx for _c, idx in flat]
