"""The demo's last line (PURE): one verdict made of the checks the demo already ran.

Every row of the demo's table is a check that held (:mod:`autorecovery.cli.demo_checks` prints a
claim only once it is verified); a failed check adds one ``FAILED`` row and stops the demo. The verdict
counts them: ``demo: PASS — 17 of 17 checks held`` or ``demo: FAIL — 4 checks held, then failed:
<step>: <what was found>``; the demo's exit code follows it (0 for PASS, 1 for FAIL).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["FAILED_STEP", "verdict", "verdict_exit_code"]

#: the step name of the row a failed check adds to the table
FAILED_STEP = "FAILED"


def verdict(steps: Sequence[str], failures: Sequence[str] = ()) -> str:
    """The verdict line.

    Args:
        steps: the table's step names, in order (rows named :data:`FAILED_STEP` are not checks that held).
        failures: one line per failed check, ``<step>: <what was found>`` (the demo stops at the first,
            so there is at most one today).

    Returns ``demo: PASS — N of N checks held`` when nothing failed and at least one check ran,
    ``demo: FAIL — no check ran`` when none did, else ``demo: FAIL — K checks held, then failed: …``
    naming every failure (``; ``-separated).
    """
    held = sum(1 for s in steps if s != FAILED_STEP)
    if failures:
        noun = "check" if held == 1 else "checks"
        return f"demo: FAIL — {held} {noun} held, then failed: " + "; ".join(failures)
    if held == 0:
        return "demo: FAIL — no check ran"
    return f"demo: PASS — {held} of {held} checks held"


def verdict_exit_code(line: str) -> int:
    """0 for a PASS verdict, 1 for any other (what ``autorecovery demo`` exits with)."""
    return 0 if line.startswith("demo: PASS") else 1
