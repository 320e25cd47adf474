"""The stress report: a live progress line, the final JSON, a PNG over time, and the verdict.

Both modes fill one :class:`StressReport`::

    report.figures        flat dict of numbers and small dicts (the JSON body)
    report.must_be_zero   names of figures that must read 0 (leaks, violations, mismatches...)
    report.series         time series for the plot: name -> [(t_seconds, value), ...]
    report.latencies      [(t_done, seconds)] of successful requests / operations (plot only)

``failures()`` lists every must-be-zero figure that is not 0; the CLI exits 1 when it is not
empty. The plot uses matplotlib's Agg backend (no display), imported only when asked for.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from kvpool.outfile import out_path, write_text
from kvpool.replay.report import import_pyplot

__all__ = ["Progress", "StressReport", "percentile"]


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]) or None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    k = max(0, min(len(xs) - 1, math.ceil(q / 100.0 * len(xs)) - 1))
    return xs[k]


class Progress:
    """One stderr line rewritten in place with ``\\r`` (at most ``hz`` times a second)."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True,
                 hz: float = 4.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.min_gap = 1.0 / hz
        self._last = 0.0
        self._width = 0

    def update(self, text: str, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self.min_gap:
            return
        self._last = now
        pad = max(0, self._width - len(text))
        self._width = len(text)
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0


class StressReport:
    """Figures, must-be-zero checks and time series of one stress run."""

    def __init__(self, mode: str, config: dict[str, Any]) -> None:
        self.mode = mode
        self.config = dict(config)
        self.figures: dict[str, Any] = {}
        self.must_be_zero: list[str] = []
        self.must_be_true: list[str] = []
        self.series: dict[str, list[tuple[float, float]]] = {}
        self.latencies: list[tuple[float, float]] = []
        self.notes: list[str] = []
        self.started = time.time()

    # ---------------------------------------------------------------- filling
    def set(self, name: str, value: Any, *, must_be_zero: bool = False,
            must_be_true: bool = False) -> None:
        self.figures[name] = value
        if must_be_zero and name not in self.must_be_zero:
            self.must_be_zero.append(name)
        if must_be_true and name not in self.must_be_true:
            self.must_be_true.append(name)

    def sample(self, name: str, t: float, value: float) -> None:
        self.series.setdefault(name, []).append((round(t, 3), value))

    def note(self, text: str) -> None:
        self.notes.append(text)

    # ---------------------------------------------------------------- verdict
    def failures(self) -> list[str]:
        bad = []
        for name in self.must_be_zero:
            v = self.figures.get(name)
            if v is None or (isinstance(v, dict) and any(v.values())) or (
                    not isinstance(v, dict) and v != 0):
                bad.append(f"{name} = {v!r} (must be 0)")
        for name in self.must_be_true:
            if self.figures.get(name) is not True:
                bad.append(f"{name} = {self.figures.get(name)!r} (must be true)")
        return bad

    @property
    def ok(self) -> bool:
        return not self.failures()

    # ---------------------------------------------------------------- output
    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "ok": self.ok, "failures": self.failures(),
                "config": self.config, "figures": self.figures,
                "must_be_zero": self.must_be_zero, "must_be_true": self.must_be_true,
                "notes": self.notes,
                "series": {k: v for k, v in self.series.items()}}

    def write_json(self, path: str | Path) -> None:
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False, default=str)
        if str(path) == "-":
            sys.stdout.write(text + "\n")
        else:
            write_text(path, text + "\n")

    def summary(self) -> str:
        """Human-readable lines: every figure, then the verdict."""
        lines = [f"kvpool stress {self.mode}: {'OK' if self.ok else 'FAILED'}"]
        width = max((len(k) for k in self.figures), default=10)
        for k, v in self.figures.items():
            flag = "  <- must be 0" if k in self.must_be_zero else ""
            if isinstance(v, float):
                v = f"{v:.4g}"
            elif isinstance(v, dict):
                v = json.dumps(v, sort_keys=True, default=str)
            lines.append(f"  {k:<{width}}  {v}{flag}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        for f in self.failures():
            lines.append(f"  FAILED: {f}")
        return "\n".join(lines)

    def plot(self, path: str | Path) -> None:
        """Two panels over time: request/op latency (top), pool usage (bottom)."""
        plt = import_pyplot()
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
        if self.latencies:
            ts, ls = zip(*self.latencies)
            ax1.scatter(ts, [x * 1000 for x in ls], s=3, alpha=0.35, label="latency")
            p99 = _rolling(self.latencies, window=2.0, q=99)
            if p99:
                ax1.plot(*zip(*[(t, v * 1000) for t, v in p99]), color="tab:red",
                         label="rolling p99 (2 s)")
            ax1.set_yscale("log")
            ax1.legend(loc="upper left")
            ax1.set_ylabel("latency (ms)")
        else:  # pool mode: no per-request latency, only the operation rate (right axis)
            ax1.set_yticks([])
        for name, pts in self.series.items():
            if name.startswith("rate:"):
                ax = ax1.twinx()
                ax.plot(*zip(*pts), color="tab:green", label=name[5:])
                ax.set_ylabel(name[5:])
                ax.legend(loc="upper right")
        ax1.set_title(f"kvpool stress {self.mode}")
        for name, pts in self.series.items():
            if name.startswith("usage:") and pts:
                ax2.plot(*zip(*pts), label=name[6:])
        ax2.set_ylim(-0.02, 1.02)
        ax2.set_ylabel("pool usage (fraction of blocks)")
        ax2.set_xlabel("seconds since start")
        ax2.legend(loc="upper left")
        for name, pts in self.series.items():
            if name.startswith("count:") and pts:
                ax3 = ax2.twinx()
                ax3.plot(*zip(*pts), color="tab:gray", alpha=0.6, label=name[6:])
                ax3.set_ylabel(name[6:])
                ax3.legend(loc="upper right")
                break
        fig.tight_layout()
        fig.savefig(out_path(path), dpi=100)
        plt.close(fig)


def _rolling(points: list[tuple[float, float]], window: float,
             q: float) -> list[tuple[float, float]]:
    """Percentile of the values in each ``window``-second bucket, at the bucket's end."""
    if not points:
        return []
    buckets: dict[int, list[float]] = {}
    for t, v in points:
        buckets.setdefault(int(t // window), []).append(v)
    return [((k + 0.5) * window, percentile(vs, q)) for k, vs in sorted(buckets.items())]
