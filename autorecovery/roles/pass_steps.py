"""The I/O steps of one ReplicationWorker pass: read a locked ledger, act on its plan, re-check (EDGE).

Upstream source: ``ReplicationWorker.rereplicate`` (re-check with the LedgerChecker, each bad fragment,
``isLastSegmentOpenAndMissingBookies``), ``BookKeeperAdmin.replicateLedgerFragment`` and BP-54's
``replaceToAdherePlacementPolicy``.

:class:`PassSteps` does the reading and the acting of a pass and nothing else: it never touches the
marker, the lock, the backlog or the failure memory's records, and it ends no pass. What it learns is
returned (:class:`~autorecovery.plan.pass_end.Reading`, :class:`~autorecovery.plan.pass_end.Recheck`)
or written into the pass's :class:`~autorecovery.plan.pass_plan.PassOutcome`; the worker decides with
:mod:`autorecovery.plan.pass_end` and carries the ending out (:mod:`autorecovery.roles.pass_effects`).

Acting on one bad closed fragment (:meth:`PassSteps._fix_data_loss`):

1. a lost bookie is registered again → re-check first, skip the copy when it is fine (#2766);
2. remembered unreadable entries are probed first; nothing is copied if they still fail (#2166);
3. entries no registered replica holds, or no bookie of their write set stores at all (issue 25),
   are data loss: found before asking for targets;
4. targets from the policy's ``replace_bookie`` (never a read-only bookie, never a target that
   failed in the last 60 s, never a stock bookie), then copy and CAS through the
   :class:`~autorecovery.roles.replicator.SegmentReplicator` (the trip's one way to the metadata).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from autorecovery.audit.checker import BadFragment
from autorecovery.errors import BookieError, DigestMismatchError, NotEnoughBookiesError
from autorecovery.ledger.credentials import recovery_digest
from autorecovery.ledger.digest import EntryDigest
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.ledger.striping import write_set
from autorecovery.placement.policy import Adherence
from autorecovery.placement.spread import SpreadReplacer
from autorecovery.plan import entry_runs
from autorecovery.plan import pass_end as pe
from autorecovery.plan import pass_plan as pp
from autorecovery.plan.entry_runs import Gap, Run
from autorecovery.plan.targets import FragmentPlan, choose_replacements, plan_fragment_copy
from autorecovery.roles import replicator as rp
from autorecovery.roles.copy_result import CopyResult
from autorecovery.roles.worker_metrics import WorkerMetrics

log = structlog.get_logger("autorecovery.worker")

#: How long a target that refused a write is not chosen again, s.
BAD_TARGET_S = 60.0

#: How long the members a pass's check read without a failure are taken as good by its re-check, s
#: (a longer pass, e.g. a large copy, reads them again).
RECHECK_TRUST_S = 5.0


class PassSteps:
    """Read, act and re-check for the :class:`~autorecovery.roles.worker.ReplicationWorker`.

    Args:
        store: :class:`~autorecovery.zk.ledgers.LedgerStore` (metadata reads).
        markers: the worker's :class:`~autorecovery.roles.lock_steps.LockSteps` (the marker read).
        checker: :class:`~autorecovery.roles.checker.LedgerChecker`.
        policy: the placement policy (``replace_bookie``, ``is_ensemble_adhering``,
            ``plan_replace_to_adhere``).
        watcher: the :class:`~autorecovery.zk.bookies.BookieWatcher` (registered, writable, read-only,
            foreign bookies).
        bookies: the :class:`~autorecovery.rpc.transport.BookieClient` (probe reads).
        replicator: :class:`~autorecovery.roles.replicator.SegmentReplicator`.
        copier: the replicator's :class:`~autorecovery.roles.copier.FragmentCopier` (data-loss findings).
        memory: the failure memory (read only here: remembered unreadable runs).
        tracker: progress (bytes copied, live).
        metrics: the worker's metrics. settings: :class:`~autorecovery.roles.worker_settings.WorkerSettings`.
        clock: monotonic seconds. abort: the reason to abort copies now (the worker stopping), or None.

    Attributes:
        known: ledger id → ``(metadata, znode version)`` last read or written by the ledger's pass
            (the CAS starts from it: no re-read before the write); dropped by :meth:`forget`.
        swapped: ledger id → ``old bookie → new bookie`` swapped by the pass (for its one INFO line).
        verified: ledger id → (when, ``(segment first entry id, bookie)`` whose reads all passed in the
            pass's check → the share's ``(first, last)`` when all of it was read): within
            :data:`RECHECK_TRUST_S` the re-check does not read them again, and the copy does not ask
            the wholly read ones for their listing.
    """

    def __init__(self, *, store, markers, checker, policy, watcher, bookies, replicator: rp.SegmentReplicator,
                 copier, memory, tracker, metrics: WorkerMetrics, settings, clock: Callable[[], float],
                 abort: Callable[[], str | None]) -> None:
        self.store, self.markers, self.checker = store, markers, checker
        self.policy, self.watcher, self.bookies = policy, watcher, bookies
        self.replicator, self.copier, self.memory, self.tracker = replicator, copier, memory, tracker
        self.m, self.settings, self.clock, self.abort = metrics, settings, clock, abort
        self.bad_targets: dict[str, float] = {}
        self.known: dict[int, tuple[LedgerMetadata, int]] = {}
        self.swapped: dict[int, dict[str, str]] = {}
        self.verified: dict[int, tuple[float, dict[tuple[int, str], tuple[int, int] | None]]] = {}
        #: ledger ids whose ``known`` metadata is what this pass's own CAS wrote (the re-check of a
        #: closed ledger starts from it instead of reading it again)
        self._written: set[int] = set()

    def forget(self, lid: int) -> dict[str, str]:
        """End of ``lid``'s pass: drop what the pass remembered; returns what it swapped."""
        self.known.pop(lid, None)
        self._written.discard(lid)
        self.verified.pop(lid, None)
        return self.swapped.pop(lid, {})

    # -- read --------------------------------------------------------------------------------------
    async def read(self, lid: int) -> pe.Reading:
        """Metadata, then the marker, then (when marked) the checker's bad fragments and the placement
        verdicts. The metadata read with the lock (its version checked by the lock's transaction) is
        used when there is one, else it is read now. Raises ``NoSuchLedgerError`` when the ledger is
        gone."""
        pre = self.markers.metadata_read(lid)
        md, version = self.store.decode(lid, *pre) if pre is not None else await self.store.read(lid)
        self.known[lid] = (md, version)
        marker = await self.markers.marker(lid)
        if marker is None:
            return pe.Reading(md, marked=False)
        seen: dict[tuple[int, str], tuple[int, int] | None] = {}
        self.verified[lid] = (self.clock(), seen)
        data_loss = await self.checker.check(lid, md, verify_all=self.named_live(marker.replicas), verified=seen)
        return pe.Reading(md, True, (marker.version, marker.ctime, list(marker.replicas)), data_loss,
                          self.placement_segments(md) if not data_loss else [], self.memory.unreadable(lid))

    def named_live(self, replicas: list[str] | None) -> frozenset[str]:
        """The registered bookies a marker names: their shares are checked in full (from their entry
        listings), not by the first-and-last sample, since a replicas check (or a bookie that came back)
        may mark entries missing inside a fragment (issue 26: the chaos campaign's one-way loss left
        such a ledger passed as ``nothing-to-do`` and its copies missing)."""
        return frozenset(replicas or ()) & frozenset(self.watcher.available)

    def placement_segments(self, md: LedgerMetadata) -> list[int]:
        """First entry ids of the closed ledger's segments that FAIL the placement policy (BP-54 on), judged
        on where the members are (``placement_adherence``: a down or read-only member keeps its rack)."""
        if not self.settings.repair_placement or not md.is_closed:
            return []
        out = []
        for seg in md.segments:
            if self.policy.placement_adherence(list(seg.ensemble), md.write_quorum, md.ack_quorum) == Adherence.FAIL:
                out.append(seg.first_entry_id)
        return out

    # -- act ---------------------------------------------------------------------------------------
    async def act(self, lid: int, reading: pe.Reading, plan: pp.PassPlan, out: pp.PassOutcome) -> pe.Recheck:
        """Each action of ``plan`` in order (recording what it achieved in ``out``), then the re-check."""
        md = reading.md
        full = self.named_live(reading.marker[2] if reading.marker else None)
        for action in plan.actions:
            if isinstance(action, pp.CopyFragment):
                md = await self._fix_data_loss(lid, md, action.fragment, reading.remembered, out, full)
            else:
                md = await self._fix_placement(lid, md, action.segment_first_entry_id, out)
        return await self._recheck(lid, md, plan, full)

    async def _recheck(self, lid: int, md: LedgerMetadata, plan: pp.PassPlan,
                       full: frozenset[str] = frozenset()) -> pe.Recheck:
        """An open ledger still pending ends the pass as is; otherwise re-check from fresh metadata."""
        if plan.open_fragment or await self.last_segment_open_and_missing(lid, md):
            return pe.Recheck(open_pending=True)
        known = self.known.get(lid)
        if not (md.is_closed and lid in self._written and known is not None and known[0] is md):
            # a closed ledger's metadata changes only under its lock, which this pass holds: after its
            # own CAS the pass knows it exactly (issue 29: one read less per healed ledger)
            md, version = await self.store.read(lid)
            self.known[lid] = (md, version)
        remaining = await self.checker.check(lid, md, verify_all=full, proven=self.trusted(lid))
        self._exclude_unreadable_targets(lid, remaining)
        return pe.Recheck(False, bool(remaining), self.placement_segments(md) if not remaining else [])

    def _exclude_unreadable_targets(self, lid: int, remaining: list) -> None:
        """A member this pass just copied to that fails the re-check's reads acknowledged entries it
        cannot serve: upstream 4.17's entry logger can do that after its ledger disk filled mid-flush
        (it publishes stale entry locations; every read of them fails with EIO). It is excluded as a
        target for :data:`BAD_TARGET_S`, so the retry copies elsewhere instead of onto it again."""
        new = set(self.swapped.get(lid, {}).values())
        for b in sorted(new & {b for f in remaining for b in f.bad_bookies}):
            if b in self.watcher.available:
                self.bad_targets[b] = self.clock() + BAD_TARGET_S
                log.warning("a new member acknowledged its copy but its entries do not read back; excluding it "
                            "as a target for 60 s", ledger_id=lid, bookie_id=b)

    def trusted(self, lid: int) -> set[tuple[int, str]]:
        """What the re-check of ``lid`` need not read again (differs from upstream, which re-reads every
        member; issue 29): the members whose reads all passed in the pass's own check less than
        :data:`RECHECK_TRUST_S` ago. A member lost since is still bad once unregistered (judged
        without a read); one that dies inside the window with its session still alive is the
        auditor's, which marks all its ledgers when it goes. The new members of the pass's own copies
        are read back, as upstream does: a bookie's acknowledgement does not prove the entry reads
        back (a stock bookie whose ledger disk filled mid-flush acknowledges entries it then serves
        as EIO)."""
        return set(self._fresh(lid))

    def _fresh(self, lid: int) -> dict[tuple[int, str], tuple[int, int] | None]:
        """The pass's own check's verified members of ``lid`` while younger than :data:`RECHECK_TRUST_S`."""
        when, seen = self.verified.get(lid, (0.0, {}))
        return seen if seen and self.clock() - when <= RECHECK_TRUST_S else {}

    def listings_from_check(self, lid: int, seg_first: int) -> dict:
        """Listings (:mod:`~autorecovery.roles.holdings` cache format) of the members of the segment at
        ``seg_first`` whose whole share the pass's check just read without a failure: each stores its
        share ``(first, last)`` (the ranges of other ids are joined over, as a listing's would be), so
        neither the data-loss check nor the copy asks them (issue 29: one request less per small
        ledger)."""
        return {b: ([rng], "ENOENTRY") for (seg, b), rng in self._fresh(lid).items() if seg == seg_first and rng}

    async def last_segment_open_and_missing(self, lid: int, md: LedgerMetadata) -> bool:
        """Upstream isLastSegmentOpenAndMissingBookies: open ledger whose last ensemble has a bookie
        that is not writable; also the previous segment when the LAC lags its end (#3917)."""
        if md.is_closed:
            return False
        writable = self.watcher.writable
        if any(b not in writable for b in md.last_ensemble):
            return True
        if len(md.segments) > 1:
            lac = await self.checker.read_lac(lid, md)
            if lac < md.segments[-1].first_entry_id - 1:
                return any(b not in writable for b in md.segments[-2].ensemble)
        return False

    # -- data loss ---------------------------------------------------------------------------------
    async def _fix_data_loss(self, lid: int, md: LedgerMetadata, frag: BadFragment, remembered_runs: list[Gap],
                             p: pp.PassOutcome, full: frozenset[str] = frozenset()) -> LedgerMetadata:
        seg_i = segment_index(md, frag.segment_first_entry_id)
        if seg_i is None:
            p.retriable.append("segment changed during the pass")
            return md
        seg = md.segments[seg_i]
        ensemble = seg.ensemble
        first, last = seg.first_entry_id, md.segment_end(seg_i)
        bad = set(frag.bad_indexes)
        avail = self.watcher.available
        # a bookie that was lost is registered again: check before copying anything (#2766)
        if any(ensemble[i] in avail for i in bad):
            fresh = await self.checker.check(lid, md, verify_all=full)
            again = [f for f in fresh if f.segment_first_entry_id == seg.first_entry_id]
            if not again:
                self.m.copies_cancelled.inc()
                p.cancelled += 1
                log.info("lost bookie is back and holds its entries; copy skipped", ledger_id=lid,
                         bookies=sorted(ensemble[i] for i in bad))
                return md
            bad = set(again[0].bad_indexes)
        bad_bookies = {ensemble[i] for i in bad}
        live = avail & set(ensemble)
        if not md.has_password and live and live <= bad_bookies and last >= first:
            # every live replica failed the check: for a ledger whose metadata stores no password (format
            # v1) that is what digestType/passwd say, not the data. Probe one entry; when no replica
            # verifies, copy nothing and surface it (the record names the keys), instead of hunting for
            # targets to replace every member with
            failed = await self._probe_entries(lid, ensemble, md.write_quorum, [Gap(Run(first, last))],
                                               recovery_digest(md, self.settings.recovery))
            if failed and "DIGEST" in failed[0].why.values():
                _classify_unreadable(failed, p)
                return md
        # entries that could not be read last time are tried first; nothing is written if they still fail
        remembered = pe.remembered_in(remembered_runs, first, last)
        if remembered:
            failed = await self._probe_entries(lid, ensemble, md.write_quorum, remembered,
                                                recovery_digest(md, self.settings.recovery))
            p.readable_again.extend(g for g in remembered if g.run not in {f.run for f in failed})
            if failed:
                _classify_unreadable(failed, p)
                return md
        # entries no registered replica holds: copy nothing of the fragment (no partial copies), and
        # find that out before asking for targets (a missing target must not hide data loss)
        probe = plan_fragment_copy(
            ensemble=ensemble, write_quorum=md.write_quorum, first=first, last=last,
            replacements={i: f"?target-{i}" for i in bad}, readable=avail - bad_bookies,
            last_resort=avail & bad_bookies)
        if probe.unsourced:
            res = CopyResult(unreadable=[Gap(run) for run in probe.unsourced])
            await self.copier.explain(lid, ensemble, md.write_quorum, res, lambda: self.watcher.available,
                                      recovery_digest(md, self.settings.recovery))
            p.unreadable_found.extend(res.unreadable)
            _classify_unreadable(res.unreadable, p)
            return md
        # entries that no bookie of their write set stores at all (a ledger whose metadata claims more
        # than was ever written, issue 25): data loss found from the bookies' listings, before targets
        # what each bookie of the segment stores: asked once for the check and the copy (or known from
        # the pass's check when it read a member's whole share)
        listings: dict = self.listings_from_check(lid, seg.first_entry_id)
        gone = await self.copier.absent(lid, ensemble, md.write_quorum, first, last, lambda: self.watcher.available,
                                        listings)
        if gone:
            p.unreadable_found.extend(gone)
            _classify_unreadable(gone, p)
            return md
        try:
            repl = choose_replacements(
                ensemble=ensemble, bad_indexes=bad,
                replace_bookie=SpreadReplacer(self.policy, self.copier.cluster_slots.targets_in_flight(self.copier.caps.targets)),
                ensemble_size=md.ensemble_size, write_quorum=md.write_quorum, ack_quorum=md.ack_quorum,
                exclude=self.excluded_targets(), readonly=self.watcher.readonly, writable=self.watcher.writable)
        except NotEnoughBookiesError as exc:
            self.m.exception(exc)
            p.retriable.append(f"no eligible target bookie: {exc}")
            log.warning("no target bookie for fragment", ledger_id=lid, first_entry_id=first, error=str(exc))
            return md
        plan = plan_fragment_copy(
            ensemble=ensemble, write_quorum=md.write_quorum, first=first, last=last, replacements=repl,
            readable=avail - bad_bookies, last_resort=avail & bad_bookies, source_load=dict(self.copier.caps.sources))
        if plan.unsourced:  # an in-place target was the only holder: nothing to copy from
            p.retriable.append(f"entries {entry_runs.spans(plan.unsourced)} have no source besides their in-place target")
            return md
        watch_back = {b for b in bad_bookies if b not in avail}
        return await self._copy_and_swap(lid, md, seg.first_entry_id, plan, p, watch_back,
                                         skip_sources=bad_bookies, placement=False, listings=listings)

    def excluded_targets(self) -> set[str]:
        """Bookies not to copy to: targets that failed recently, and bookies that do not advertise our
        gRPC endpoint (a stock BookKeeper bookie cannot take a RECOVERY_ADD over our protocol)."""
        now = self.clock()
        for b, until in list(self.bad_targets.items()):
            if until <= now:
                del self.bad_targets[b]
        return set(self.bad_targets) | set(getattr(self.watcher, "foreign", {}) or {})

    async def _probe_entries(self, lid: int, ensemble, wq: int, remembered: list[Gap],
                             digest: EntryDigest) -> list[Gap]:
        """Read the first entry of each remembered unreadable run (one residue each) from any replica
        (checked with the ledger's ``digest``); returns the runs whose probe no replica served, with
        the reason per replica (the probe's answer stands for its run: O(runs) reads, whatever their
        length)."""
        reg = self.watcher.available
        failed: list[Gap] = []
        for g in remembered:
            e = g.run.bounds()[0]
            if e < 0:
                continue
            why: dict[str, str] = {}
            ok = False
            for j in write_set(e, len(ensemble), wq):
                b = ensemble[j]
                if b not in reg:
                    why[b] = "NOT_REGISTERED"
                    continue
                try:
                    r = await self.bookies.read_entry(b, lid, e)
                    digest.verify(r.body, lid, e, source=b)
                    ok = True
                    break
                except DigestMismatchError:
                    why[b] = "DIGEST"
                except BookieError as exc:
                    why[b] = exc.status
            if not ok:
                failed.append(Gap(g.run, why))
        return failed

    async def _copy_and_swap(self, lid: int, md: LedgerMetadata, seg_first: int, plan: FragmentPlan,
                             p: pp.PassOutcome, watch_back: set[str], *, skip_sources, placement: bool,
                             listings: dict | None = None) -> LedgerMetadata:
        """Run ``plan`` through the :class:`~autorecovery.roles.replicator.SegmentReplicator` and record
        the result in ``p``."""
        def should_abort() -> str | None:
            stop = self.abort()
            if stop:
                return stop
            if watch_back and watch_back <= self.watcher.available:
                return "lost bookies are back: " + ",".join(sorted(watch_back))
            return None

        known = self.known.get(lid)
        r = await self.replicator.replicate(
            lid, md, seg_first, plan, registered=lambda: self.watcher.available, skip_sources=skip_sources,
            should_abort=should_abort, on_bytes=lambda n: self.tracker.copied(lid, n),
            version=known[1] if known is not None and known[0] is md else None, listings=listings)
        if r.version is not None:
            self.known[lid] = (r.metadata, r.version)
            if r.status == rp.SWAPPED:
                self._written.add(lid)
                self.swapped.setdefault(lid, {}).update(r.replaced or {})
        if r.status == rp.TARGET_FAILED:
            assert r.bad_target is not None  # set with TARGET_FAILED (SegmentReplicator)
            self.m.exception(r.cause)
            self.bad_targets[r.bad_target] = self.clock() + BAD_TARGET_S
            p.retriable.append(f"target {r.bad_target} failed: {r.cause}")
            log.warning("target write failed; excluding it for 60 s", ledger_id=lid, bookie_id=r.bad_target,
                        error=str(r.cause))
        elif r.status == rp.ABORTED:
            self.m.copies_cancelled.inc()
            p.retriable.append(r.detail)
        elif r.status == rp.INCOMPLETE:
            assert r.copy is not None  # set with INCOMPLETE (SegmentReplicator)
            p.unreadable_counted.extend(r.copy.unreadable)  # the copier counted them per entry
            _classify_unreadable(r.copy.unreadable, p)
        elif r.status == rp.SEGMENT_CHANGED:
            p.retriable.append(r.detail)
        else:  # swapped, or every member already replaced by someone else: the fragment is fine
            p.copied += 1
            if placement:
                p.copied_placement += 1
        return r.metadata

    # -- BP-54 -------------------------------------------------------------------------------------
    async def _fix_placement(self, lid: int, md: LedgerMetadata, seg_first: int, p: pp.PassOutcome) -> LedgerMetadata:
        seg_i = segment_index(md, seg_first)
        if seg_i is None:
            return md
        seg = md.segments[seg_i]
        # the exact minimum-swap search runs in a worker thread on a snapshot of the policy's state
        # (RepairJob): the event loop keeps serving while it searches
        job = self.policy.plan_replace_to_adhere(md.ensemble_size, md.write_quorum, md.ack_quorum,
                                                 frozenset(self.excluded_targets()), list(seg.ensemble))
        res = await asyncio.to_thread(job.run) if job.needs_search else job.run()
        new_ens = list(res.ensemble)
        changed = [i for i in range(len(seg.ensemble)) if i < len(new_ens) and new_ens[i] != seg.ensemble[i]]
        if res.adherence == Adherence.FAIL or not changed or any(new_ens[i] in self.watcher.readonly for i in changed):
            self.m.no_more_bookie.inc()
            p.placement_impossible.append(seg_first)
            log.warning("no more bookie: placement of segment cannot be repaired", ledger_id=lid,
                        segment_first_entry_id=seg_first, ensemble=list(seg.ensemble))
            return md
        repl = {i: new_ens[i] for i in changed}
        plan = plan_fragment_copy(ensemble=seg.ensemble, write_quorum=md.write_quorum, first=seg.first_entry_id,
                                  last=md.segment_end(seg_i), replacements=repl, readable=self.watcher.available,
                                  source_load=dict(self.copier.caps.sources))
        if plan.unsourced:
            p.retriable.append(f"placement move of segment {seg_first}: entries {entry_runs.spans(plan.unsourced)} unreadable")
            return md
        return await self._copy_and_swap(lid, md, seg_first, plan, p, set(), skip_sources=(), placement=True)


def _classify_unreadable(unreadable: list[Gap], p: pp.PassOutcome) -> None:
    """Record unreadable runs in the pass outcome: data loss, or a reason to retry
    (:func:`~autorecovery.plan.pass_plan.classify_unreadable`)."""
    gone, rest = pp.classify_unreadable(unreadable)
    p.unrecoverable.extend(gone)
    if rest:
        p.retriable.append(f"entries {entry_runs.spans(rest)} could not be read now (replicas unreachable or failing)")


def segment_index(md: LedgerMetadata, first_entry_id: int) -> int | None:
    """Index of the segment starting at ``first_entry_id``, or None when no segment starts there."""
    for i, seg in enumerate(md.segments):
        if seg.first_entry_id == first_entry_id:
            return i
    return None
