"""A progress line on a terminal, nothing otherwise (``autorecovery export`` and ``report``).

When stderr is a TTY, :meth:`Progress.update` rewrites one line (``\\r``, at most every ``interval_s``
except for the last update); when it is not (a pipe, a file, CI), it writes nothing, so the output is only
the result. The project depends on neither rich nor tqdm, and one rewritten line needs neither.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """One rewritten status line on ``stream`` (stderr by default) when it is a terminal."""

    def __init__(self, label: str, stream: TextIO | None = None, interval_s: float = 0.2) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        try:
            self.enabled = bool(self.stream.isatty())
        except (AttributeError, ValueError):
            self.enabled = False
        self.interval_s = interval_s
        self._last = 0.0
        self._width = 0
        self._start = time.monotonic()
        self._open = False

    def update(self, text: str, force: bool = False) -> None:
        """Show ``label: text (elapsed)``; throttled unless ``force``."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        line = f"{self.label}: {text} ({now - self._start:.0f} s)"
        pad = max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self._open = True

    def count(self, done: int, total: int, unit: str) -> None:
        """``done/total unit (pct%)``; the last one (done >= total) always shows."""
        pct = 100.0 * done / total if total else 100.0
        self.update(f"{done}/{total} {unit} ({pct:5.1f}%)", force=done >= total)

    def step(self, name: str) -> None:
        """A named step of a run (always shown)."""
        self.update(name, force=True)

    def close(self) -> None:
        """End the line (so the result starts on its own line)."""
        if self.enabled and self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
