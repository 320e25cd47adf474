"""Progress of a long run on stderr: done/total, rate and an estimate of the time left.

    kvpool replay: 1014/12031 requests (8.4%), 48.2 requests/s, eta 3m49s  t=   428.6s

One line every ``interval`` seconds (and one when the work is done), so a log keeps a readable
record. On by default only when stderr is a terminal: a run whose stderr goes to a file or a
pipe stays quiet unless ``--progress`` asks; ``--quiet`` (``--no-progress``) silences it.
The rate is the average since the start, which on a replay whose requests differ in cost is
the estimate least thrown by one slow stretch.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["DEFAULT_INTERVAL", "Progress", "add_progress_args", "eta_text"]

DEFAULT_INTERVAL = 3.0  # seconds between two progress lines


def add_progress_args(parser: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--quiet`` (alias ``--no-progress``) into ``args.progress``:
    True, False, or None (on when stderr is a terminal)."""
    parser.add_argument("--progress", dest="progress", action="store_true", default=None,
                        help="progress and an estimate of the time left on stderr, even "
                             "when it is not a terminal")
    parser.add_argument("--quiet", "--no-progress", dest="progress", action="store_false",
                        default=None, help="no progress on stderr (default: on when stderr "
                                           "is a terminal)")


def eta_text(seconds: float | None) -> str:
    """``"1h02m"``, ``"3m05s"``, ``"12s"``; ``"?"`` while nothing is known."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class Progress:
    """Reports ``update(done)`` calls of a run of ``total`` units as lines on ``stream``.

    ``enabled``: True / False, or None for "when ``stream`` is a terminal". ``clock``: seconds,
    monotonic (a test passes its own)."""

    def __init__(self, total: int, label: str = "requests", *, prefix: str = "",
                 stream: TextIO | None = None, enabled: bool | None = None,
                 interval: float = DEFAULT_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = max(int(total), 1)
        self.label = label
        self.prefix = prefix  # e.g. "kvpool replay: "
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.interval = interval
        self.clock = clock
        self.done = 0
        self.start = self.last = clock()
        self.written_done = False  # the line for done == total is out

    def update(self, done: int, extra: str = "") -> None:
        self.done = min(max(done, 0), self.total)
        if not self.enabled:
            return
        now = self.clock()
        if self.done < self.total and now - self.last < self.interval:
            return
        self.last = now
        self.write(now, extra)

    def advance(self, by: int = 1, extra: str = "") -> None:
        self.update(self.done + by, extra)

    def line(self, now: float, extra: str = "") -> str:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else None
        tail = f"  {extra.strip()}" if extra.strip() else ""
        return (f"{self.prefix}{self.done}/{self.total} {self.label} "
                f"({100 * self.done / self.total:.1f}%), {rate:.1f} {self.label}/s, "
                f"eta {eta_text(eta)}{tail}\n")

    def write(self, now: float, extra: str = "") -> None:
        if self.written_done:
            return
        self.written_done = self.done >= self.total
        self.stream.write(self.line(now, extra))
        self.stream.flush()

    def close(self) -> None:
        """The last line (where the run ended), unless the all-done line is out already."""
        if self.enabled:
            self.write(self.clock())
