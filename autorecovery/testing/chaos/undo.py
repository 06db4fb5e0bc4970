"""Undo what a fault's set-up already did when the machine refuses a later step (EDGE helpers' shared
shape: :mod:`~autorecovery.testing.chaos.netfilter`, :mod:`~autorecovery.testing.chaos.netns`,
:mod:`~autorecovery.testing.chaos.daemon_netns`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def undone_on(refusal: type[Exception], undo: Callable[[], object]) -> Iterator[None]:
    """Run the block; when it raises ``refusal``, call ``undo`` and raise that first refusal again.

    A ``refusal`` raised by ``undo`` itself is swallowed (the first refusal is the one to report);
    any other exception, from the block or from ``undo``, passes through unchanged.
    """
    try:
        yield
    except refusal:
        with contextlib.suppress(refusal):
            undo()
        raise
