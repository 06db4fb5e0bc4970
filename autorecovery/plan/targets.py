"""Where a fragment's entries come from and go to: replacement choice and copy-stream planning (PURE).

Upstream source: ``BookKeeperAdmin.replicateLedgerFragment`` / ``getReplacementBookiesByIndexes`` (one
``replaceBookie`` call per bad index, excludes accumulate) and ``LedgerFragmentReplicator`` (split the
fragment into batches of ``rereplicationEntryBatchSize`` entries, read each entry through the client's
read path, write it to every target with RECOVERY_ADD, then CAS the segment's ensemble).

Our copy does not read entry by entry. Under round-robin striping, entry ``e`` of a segment lives on
the ensemble indexes ``(e + k) mod E, k < WQ``, so every entry with the same *residue* ``r = e mod E``
has the same write set, the same surviving sources and the same targets. The plan assigns each residue
that some replaced index needs to one surviving source (balancing residues over sources), then merges
cyclically adjacent residues with the same source and targets into one server-side filtered range read::

    ReadEntries(source, ledger, first, last, ensemble_size=E, write_quorum=L, bookie_index=b)

which returns exactly the entries whose residue is in the arc ``b-L+1 .. b (mod E)``. With E3/WQ2 and
one lost bookie that is two streams, each reading only what the target lacks (upstream would read
every entry id of the range, including ids the lost index never stored, and write them all).

Where we beat upstream on target choice: each ``replace_bookie`` call sees the ensemble with the earlier
replacements applied (rack diversity counts them), read-only bookies are never accepted, and when no
other bookie exists but the lost index's bookie is alive and writable again (lost its disk, came back
with the same id, #3905) the entries are written back to it in place instead of getting stuck; the
same refill in place serves a live bookie that only lacks entries (restarted during a write) when the
spares are too few for every bad index, the dead and read-only ones taking the spares first. The
ReplicationWorker passes :class:`autorecovery.placement.spread.SpreadReplacer` as ``replace_bookie``:
replacements spread over every bookie that keeps the ensemble adhering, not the replaced bookie's rack
first (issue 29).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from autorecovery.errors import NotEnoughBookiesError
from autorecovery.ledger.striping import count_with_residue, entries_on_index, index_stores, write_set
from autorecovery.plan.entry_runs import Run

ReplaceFn = Callable[..., object]


@dataclass(frozen=True)
class StreamSpec:
    """One filtered range read from one source, fanned out to the targets that need those entries.

    Attributes:
        source: bookie id to read from; source_index: its ensemble index.
        first, last: entry range of the fragment (inclusive).
        arc_end, arc_len: the residue arc ``arc_end-arc_len+1 .. arc_end (mod E)`` this stream covers;
            sent as ``bookie_index=arc_end, write_quorum=arc_len``.
        targets: bookie ids every entry of this stream is written to.
        alternates: other readable replicas of these entries (tried when the source fails or serves a
            bad copy), best first.
        entries: how many entry ids fall in the stream.
    """

    source: str
    source_index: int
    first: int
    last: int
    arc_end: int
    arc_len: int
    ensemble_size: int
    targets: tuple[str, ...]
    alternates: tuple[str, ...]
    entries: int

    def residues(self) -> list[int]:
        """The residues of the arc, in arc order (``arc_end - arc_len + 1`` first, mod E)."""
        return [(self.arc_end - k) % self.ensemble_size for k in range(self.arc_len - 1, -1, -1)]

    def covers(self, entry_id: int) -> bool:
        """Whether the stream delivers ``entry_id``: the bookie's filter with ``bookie_index=arc_end``,
        ``write_quorum=arc_len`` (:func:`autorecovery.ledger.striping.index_stores`)."""
        return index_stores(self.arc_end, entry_id, self.ensemble_size, self.arc_len)

    def entry_ids(self) -> Iterator[int]:
        """The entry ids this stream should deliver, ascending, lazily (never a list: a fragment may
        claim 2**62 entries)."""
        return entries_on_index(self.first, self.last, self.arc_end, self.ensemble_size, self.arc_len)

    def run(self) -> Run:
        """The stream's entries as one :class:`~autorecovery.plan.entry_runs.Run` (O(1))."""
        return Run(self.first, self.last, self.arc_end, self.arc_len, self.ensemble_size)


@dataclass(frozen=True)
class FragmentPlan:
    """How to copy one fragment.

    Attributes:
        streams: the range reads to run (possibly concurrently).
        unsourced: entries some target needs but no readable replica holds (copy impossible now), as
            one :class:`~autorecovery.plan.entry_runs.Run` per residue (O(E) whatever the fragment's
            length; ``entry_runs.count`` / ``entry_runs.entry_ids`` read them).
        replacements: ensemble index → new bookie (the metadata update to CAS after the copy).
        entries_to_write: total (entry, target) writes planned.
    """

    streams: tuple[StreamSpec, ...]
    unsourced: tuple[Run, ...]
    replacements: Mapping[int, str]
    entries_to_write: int = 0
    entries_to_read: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)


#: How many entry ids in ``[first, last]`` are ``≡ residue (mod ensemble_size)`` (0 when empty);
#: :func:`autorecovery.ledger.striping.count_with_residue`.
residue_count = count_with_residue


def plan_fragment_copy(
    *,
    ensemble: tuple[str, ...] | list[str],
    write_quorum: int,
    first: int,
    last: int,
    replacements: Mapping[int, str],
    readable: Collection[str],
    last_resort: Collection[str] = (),
    source_load: Mapping[str, int] | None = None,
) -> FragmentPlan:
    """Plan the streams that copy the entries of ``[first, last]`` the replaced indexes must hold.

    Args:
        ensemble: the segment's ensemble (size E) *before* the replacement.
        write_quorum: WQ.
        first, last: the fragment's entry range (inclusive); ``last < first`` means empty (nothing to
            copy, only the ensemble update).
        replacements: ensemble index → the bookie that will hold that index (may equal the current
            bookie for an in-place rewrite).
        readable: bookies we may read from (callers drop lost bookies and, for data loss, the bad ones;
            for a placement move the bookie being moved out is still a good source).
        last_resort: bookies to read from only for residues no ``readable`` bookie holds (e.g. bookies
            the checker flagged but that are still registered: they may hold most entries).
        source_load: open streams per bookie; less loaded sources are preferred.

    Raises:
        ValueError: when an index in ``replacements`` is outside the ensemble.
    """
    e_size = len(ensemble)
    for i in replacements:
        if not 0 <= i < e_size:
            raise ValueError(f"replacement index {i} outside ensemble of size {e_size}")
    load = dict(source_load or {})
    readable = set(readable)
    last_resort = set(last_resort)
    if last < first or not replacements:
        return FragmentPlan((), (), dict(replacements))

    # residue -> (targets, candidate source indexes)
    needs: dict[int, tuple[tuple[str, ...], list[int]]] = {}
    for r in range(e_size):
        ws = write_set(r, e_size, write_quorum)
        targets = tuple(sorted({replacements[i] for i in ws if i in replacements}))
        if not targets or count_with_residue(first, last, r, e_size) == 0:
            continue
        # a bookie being written to must not be its own source unless it is an in-place rewrite target
        in_place = {j for j in ws if j in replacements and replacements[j] == ensemble[j]}
        cands = [j for j in ws if ensemble[j] in readable and j not in in_place]
        if not cands:
            cands = [j for j in ws if ensemble[j] in last_resort and j not in in_place]
        needs[r] = (targets, cands)

    assigned_count: dict[int, int] = {}
    choice: dict[int, int | None] = {}
    prev: int | None = None
    for r in sorted(needs):
        _targets, cands = needs[r]
        if not cands:
            choice[r] = None
            prev = None
            continue
        def key(j: int, prev: int | None = prev) -> tuple[int, int, int]:
            return (assigned_count.get(j, 0) + load.get(ensemble[j], 0), 0 if j == prev else 1, j)
        best = min(cands, key=key)
        choice[r] = best
        assigned_count[best] = assigned_count.get(best, 0) + 1
        prev = best

    # merge cyclic runs of residues with the same (source, targets)
    groups: list[list[int]] = []
    for r in sorted(needs):
        if choice[r] is None:
            continue
        if groups and groups[-1][-1] == r - 1 and _same(groups[-1][-1], r, choice, needs):
            groups[-1].append(r)
        else:
            groups.append([r])
    if len(groups) > 1 and groups[0][0] == 0 and groups[-1][-1] == e_size - 1 and _same(groups[-1][-1], 0, choice, needs):
        groups[0] = groups.pop() + groups[0]

    streams: list[StreamSpec] = []
    to_write = to_read = 0
    for g in groups:
        src = choice[g[0]]
        assert src is not None
        targets = needs[g[0]][0]
        n = sum(count_with_residue(first, last, r, e_size) for r in g)
        alts: list[str] = []
        for r in g:
            for j in needs[r][1]:
                b = ensemble[j]
                if j != src and b not in alts:
                    alts.append(b)
        streams.append(StreamSpec(
            source=ensemble[src], source_index=src, first=first, last=last, arc_end=g[-1], arc_len=len(g),
            ensemble_size=e_size, targets=targets, alternates=tuple(alts), entries=n,
        ))
        to_read += n
        to_write += n * len(targets)
    unsourced = [run for r, c in sorted(choice.items()) if c is None
                 if (run := Run(first, last, r, 1, e_size).clip(first, last)) is not None]
    return FragmentPlan(tuple(streams), tuple(unsourced), dict(replacements), to_write, to_read)


def _same(a: int, b: int, choice: Mapping[int, int | None], needs: Mapping[int, tuple]) -> bool:
    return choice[a] == choice[b] and needs[a][0] == needs[b][0]


def choose_replacements(
    *,
    ensemble: tuple[str, ...] | list[str],
    bad_indexes: Iterable[int],
    replace_bookie: ReplaceFn,
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    exclude: Collection[str] = (),
    readonly: Collection[str] = (),
    writable: Collection[str] = (),
    max_attempts: int = 3,
) -> dict[int, str]:
    """Pick a new bookie for every bad index through the placement policy.

    ``replace_bookie(E, WQ, AQ, current_ensemble, bookie_to_replace, exclude)`` is the policy's method
    (returns an object with ``.bookie``). Excludes start as ``exclude`` ∪ every bad bookie ∪ read-only
    bookies and grow with each chosen target; each call sees the ensemble with the earlier choices in it.

    Bad indexes are served in index order, as upstream's ``getReplacementBookiesByIndexes``. When that
    runs out of bookies and some bad index holds a *refillable* bookie (writable, not read-only: it is
    alive and only lacks entries, or came back empty with the same id), the choice is made again with the
    indexes that cannot be refilled (dead, unregistered or read-only bookies) served first and the
    refillable ones after them: a refillable bookie then takes a spare only when one is left, else it is
    refilled in place. Otherwise the live index that happened to come first took the only spare and the
    dead one got none, so nothing was healed. A refill in place leaves that index's member unchanged, so
    the ensemble the policy judged for the other replacements is the one written. The second round calls
    ``replace_bookie`` again (a stateful replacer such as
    :class:`~autorecovery.placement.spread.SpreadReplacer` has counted the first round's picks as in
    flight; they only weigh its later draws).

    Returns:
        ensemble index → new bookie (the bad bookie itself for a refill in place, see module doc).

    Raises:
        NotEnoughBookiesError: naming the index and bookie for which no target exists (in the second
            round's order when there was one).
    """
    bad = sorted(set(bad_indexes))

    def refillable(i: int) -> bool:
        return ensemble[i] in writable and ensemble[i] not in readonly

    args = (ensemble, replace_bookie, ensemble_size, write_quorum, ack_quorum, exclude, readonly, writable,
            max_attempts)
    try:
        return _choose_in_order(bad, *args)
    except NotEnoughBookiesError:
        unrefillable = [i for i in bad if not refillable(i)]
        late = [i for i in bad if refillable(i)]
        if not unrefillable or not late:
            raise  # the order changes nothing: every index is of one kind
    return _choose_in_order(unrefillable + late, *args)


def _choose_in_order(
    order: list[int],
    ensemble: tuple[str, ...] | list[str],
    replace_bookie: ReplaceFn,
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    exclude: Collection[str],
    readonly: Collection[str],
    writable: Collection[str],
    max_attempts: int,
) -> dict[int, str]:
    """:func:`choose_replacements` for the bad indexes in ``order`` (one ``replace_bookie`` round)."""
    current = list(ensemble)
    excl = set(exclude) | {ensemble[i] for i in order} | set(readonly)
    out: dict[int, str] = {}
    for i in order:
        old = ensemble[i]
        chosen: str | None = None
        last_exc: Exception | None = None
        for _ in range(max_attempts):
            try:
                res = replace_bookie(ensemble_size, write_quorum, ack_quorum, list(current), old, frozenset(excl))
            except NotEnoughBookiesError as exc:
                last_exc = exc
                break
            cand = getattr(res, "bookie", None)
            if cand is None or cand in readonly or cand in excl or cand in current:
                if cand is not None:
                    excl.add(cand)
                last_exc = NotEnoughBookiesError(f"policy offered unusable target {cand!r} for {old}")
                continue
            chosen = cand
            break
        if chosen is None:
            if old in writable and old not in readonly:
                chosen = old  # refill in place (a live bookie lacking entries, or back empty: #3905)
            else:
                raise NotEnoughBookiesError(
                    f"no target bookie for ensemble index {i} ({old}): {last_exc}"
                ) from last_exc
        out[i] = chosen
        current[i] = chosen
        excl.add(chosen)
    return dict(sorted(out.items()))
