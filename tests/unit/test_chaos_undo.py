"""The chaos helpers' undo on refusal (:func:`autorecovery.testing.chaos.undo.undone_on`)."""

from __future__ import annotations

import pytest

from autorecovery.testing.chaos.undo import undone_on


class Refused(RuntimeError):
    pass


def test_a_refusal_is_undone_and_raised_again():
    undone: list[str] = []
    with pytest.raises(Refused, match="first"), undone_on(Refused, lambda: undone.append("undo")):
        raise Refused("first")
    assert undone == ["undo"]


def test_a_refusal_of_the_undo_itself_leaves_the_first_one_reported():
    def undo() -> None:
        raise Refused("second")

    with pytest.raises(Refused, match="first"), undone_on(Refused, undo):
        raise Refused("first")


def test_success_and_other_errors_are_not_undone():
    undone: list[str] = []
    with undone_on(Refused, lambda: undone.append("undo")):
        pass
    with pytest.raises(ValueError), undone_on(Refused, lambda: undone.append("undo")):
        raise ValueError("not a refusal")
    assert undone == []
