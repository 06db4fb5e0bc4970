"""The fused pass's adherence memo (``jobs._adhering``: answers kept per policy token and the members'
labels, rack-aware ensembles by their rack pattern) against the policy asked about every ensemble
itself: the same verdict for every ensemble, whatever was asked before (PURE)."""

from __future__ import annotations

import random

import pytest

from autorecovery.reports import jobs

#: 30 bookies in 6 racks of 2 regions / zones; one in the default rack; two read-only, one gone
_BOOKIES = [f"b{i}:3181" for i in range(30)]


def _locations(kind: str) -> dict[str, str]:
    out = {}
    for i, b in enumerate(_BOOKIES):
        if kind == "zoneaware":
            out[b] = f"/zone{i % 3}/ud{i % 4}"
        else:
            out[b] = f"/region{i % 2}/rack{i % 6}"
    out[_BOOKIES[7]] = "/default-zone/default-upgradedomain" if kind == "zoneaware" else "/default-region/default-rack"
    return out


_CASES = [
    ("rackaware", {"minNumRacksPerWriteQuorum": "2"}),
    ("rackaware", {"minNumRacksPerWriteQuorum": "3", "enforceMinNumRacksPerWriteQuorum": "true"}),
    ("regionaware", {"minNumRacksPerWriteQuorum": "2"}),
    ("zoneaware", {"minNumZonesPerWriteQuorum": "2", "desiredNumZonesPerWriteQuorum": "3"}),
]


@pytest.mark.parametrize(("name", "conf"), _CASES)
def test_memo_gives_the_policys_own_verdict_for_every_ensemble(name, conf):
    locations = _locations(name)
    members = ([b for b in _BOOKIES if b not in (_BOOKIES[3], _BOOKIES[4], _BOOKIES[5])], [_BOOKIES[3], _BOOKIES[4]])
    placement = {"ensemblePlacementPolicy": name, **conf}
    policy = jobs._policy(placement, locations, members)
    assert jobs._labelled(policy)
    token = jobs._token(placement, locations, members)
    jobs._LABEL_MEMOS.pop(token, None)
    rng = random.Random(7)
    verdicts = set()
    for _ in range(3000):
        e = rng.randint(1, 6)
        wq = rng.randint(1, e)
        aq = rng.randint(1, wq)
        ens = tuple(rng.sample(_BOOKIES, e))
        want = int(policy.is_ensemble_adhering(list(ens), wq, aq))
        assert jobs._adhering(policy, token, {}, ens, wq, aq) == want, (ens, wq, aq)
        verdicts.add(want)
    assert len(jobs._LABEL_MEMOS[token].answers) < 3000  # ensembles shared answers
    assert 0 in verdicts and 2 in verdicts


def test_rack_pattern_renumbers_racks_by_first_appearance():
    assert jobs._rack_pattern([5, 9, 5, -1, -2, 3]) == (0, 1, 0, -1, -2, 2)


def test_a_policy_rebuilt_for_the_same_token_keeps_the_memos_rack_numbers():
    """The worker's policy cache may rebuild a token's policy (``_POLICIES`` is bounded) while the token's
    memo lives on: the rack codes belong to the memo, so a bookie met only by the new policy cannot take a
    code an older bookie of another rack already has (it did when the codes lived on the policy object)."""
    locations = _locations("rackaware")
    members = (list(_BOOKIES), [])
    placement = {"ensemblePlacementPolicy": "rackaware", "minNumRacksPerWriteQuorum": "2"}
    token = jobs._token(placement, locations, members)
    jobs._LABEL_MEMOS.pop(token, None)
    first = jobs._policy(placement, locations, members)
    a, b, c = _BOOKIES[0], _BOOKIES[1], _BOOKIES[2]  # rack0, rack1, rack2
    assert jobs._adhering(first, token, {}, (a, b), 2, 2) == 2
    again = jobs._policy(placement, locations, members)  # same token, a new object
    want = int(again.is_ensemble_adhering([c, a], 2, 2))
    assert want == 2
    assert jobs._adhering(again, token, {}, (c, a), 2, 2) == want
    # two bookies of rack0: one rack for the write quorum, FAIL (not the answer stored for (c, a))
    same = (a, _BOOKIES[6])
    assert int(again.is_ensemble_adhering(list(same), 2, 2)) == 0
    assert jobs._adhering(again, token, {}, same, 2, 2) == 0
