"""Weighted random selection (upstream TestWeightedRandomSelection) and the median cap (design §1.2 option 2)."""

from __future__ import annotations

import random

import pytest

from autorecovery.placement import WeightedRandomSelection, effective_weights


def _frequencies(sel: WeightedRandomSelection, draws: int) -> dict:
    counts: dict = dict.fromkeys(sel.effective, 0)
    for _ in range(draws):
        counts[sel.select()] += 1
    return {k: v / draws for k, v in counts.items()}


def _assert_within(sel: WeightedRandomSelection, draws: int = 1_000_000, pct: float = 5.0) -> None:
    expected = sel.probabilities()
    observed = _frequencies(sel, draws)
    for k, p in expected.items():
        assert abs(observed[k] - p) / p * 100 < pct, (k, observed[k], p)


def test_effective_weight_cap_is_relative_to_median():
    eff = effective_weights({"a": 50, "b": 100, "c": 100, "d": 200, "e": 500}, 4)
    assert eff == {"a": 50, "b": 100, "c": 100, "d": 200, "e": 400}
    # design doc example, option 2 (2 * median): 0.227 stays, 0.4545 is capped at 0.272
    eff = effective_weights({"b1": 200, "b2": 200, "b3": 300, "b4": 500, "b5": 1000}, 2)
    assert eff["b4"] == 500 and eff["b5"] == 600


def test_zero_weight_gets_min_nonzero_and_all_zero_is_uniform():
    assert effective_weights({"a": 0, "b": 100, "c": 300}, -1) == {"a": 100, "b": 100, "c": 300}
    assert effective_weights({"a": 0, "b": 0}, 3) == {"a": 1.0, "b": 1.0}


def test_selection_with_equal_weights_upstream_testSelectionWithEqualWeights():
    _assert_within(WeightedRandomSelection({str(i): 100 for i in range(50)}, 3, random.Random(1)))


def test_selection_with_all_zero_weights_upstream_testSelectionWithAllZeroWeights():
    _assert_within(WeightedRandomSelection({str(i): 0 for i in range(50)}, 3, random.Random(2)))


def test_selection_with_some_zero_weights_upstream_testSelectionWithSomeZeroWeights():
    w = {str(i): (0 if i < 16 else 100 if i < 32 else 200) for i in range(50)}
    sel = WeightedRandomSelection(w, 3, random.Random(3))
    assert sel.effective["0"] == 100
    _assert_within(sel)


def test_selection_with_unequal_weights_upstream_testSelectionWithUnequalWeights():
    w = {str(i): (100 if i < 16 else 200 if i < 32 else 1000) for i in range(50)}
    sel = WeightedRandomSelection(w, 4, random.Random(4))
    assert sel.effective["49"] == 800  # capped at 4 x median (200)
    _assert_within(sel)


def test_selection_with_hot_node_upstream_testSelectionWithHotNodeWithLimit():
    w = {str(i): 100 for i in range(49)}
    w["49"] = 10 * 49 * 100
    sel = WeightedRandomSelection(w, 3, random.Random(5))
    assert sel.effective["49"] == 300
    _assert_within(sel)


def test_hot_node_without_cap():
    w = {str(i): 100 for i in range(9)}
    w["9"] = 900
    sel = WeightedRandomSelection(w, -1, random.Random(6))
    assert sel.probabilities()["9"] == pytest.approx(0.5)


def test_selection_from_selected_nodes_upstream_testSelectionFromSelectedNodesWithEqualWeights():
    sel = WeightedRandomSelection({str(i): 100 for i in range(50)}, 3, random.Random(7))
    subset = {str(i) for i in range(25)}
    for _ in range(1000):
        assert sel.select(subset) in subset
    with pytest.raises(ValueError):
        sel.select(["not-there"])
    with pytest.raises(ValueError):
        WeightedRandomSelection({}, 3).select()
