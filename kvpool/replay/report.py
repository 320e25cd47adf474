"""Replay reporting: percentiles, timelines and the PNG plot.

Nothing here feeds back into the replay, so reports stay deterministic: progress
(kvpool/progress.py) and wall-clock time go to stderr / stdout only, never into the JSON report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvpool.errors import ConfigError
from kvpool.outfile import out_path


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default method); None for no values."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def dist(values: list[float]) -> dict:
    """p50 / p99 / mean / max of ``values`` (rounded for stable JSON)."""
    if not values:
        return {"p50": None, "p99": None, "mean": None, "max": None}
    return {"p50": round(percentile(values, 50), 6), "p99": round(percentile(values, 99), 6),
            "mean": round(sum(values) / len(values), 6), "max": round(max(values), 6)}


# NOTE(bounded-timeline): the timeline keeps every ``every``-th point added, at most ``cap`` of
# them: when full, every other point is dropped and ``every`` doubles, so what stays is still
# evenly spaced, and the latest point is kept apart (a report ends on the last step). The timed
# replay adds a point per simulated step: kept whole, a week of simulated time (~150 M steps)
# was ~20 GB of timeline for a report of 500 points. Likewise it keeps of a finished request
# only what the report counts (timed.py Outcomes), not its output token ids.
TIMELINE_CAP = 8192  # points kept while running: 16x the report's 500, so it still gets 450-500


@dataclass(slots=True)
class Timeline:
    """Per-sample series for the plot, downsampled as they come (NOTE(bounded-timeline)).

    Invariant: every list has the same length, at most ``cap``, and holds the points added
    at indices 0, every, 2 every, ... (in order); ``last`` is the latest point added.
    """

    x: list[float] = field(default_factory=list)  # simulated seconds (or request index)
    hit_rate: list[float] = field(default_factory=list)  # cumulative prefix hit rate
    usage: list[float] = field(default_factory=list)  # device pool usage (used / total)
    waiting: list[int] = field(default_factory=list)  # requests waiting
    running: list[int] = field(default_factory=list)  # requests running
    swapped: list[int] = field(default_factory=list)  # requests swapped
    cap: int = TIMELINE_CAP  # the most points stored (even, >= 2)
    every: int = 1  # points added per point stored
    added: int = 0  # points added so far
    last: tuple | None = None  # the latest point added (x, hit_rate, usage, queues...)

    def add(self, x: float, hit_rate: float, usage: float, waiting: int = 0, running: int = 0,
            swapped: int = 0) -> None:
        self.last = (x, hit_rate, usage, waiting, running, swapped)
        self.added += 1
        if (self.added - 1) % self.every:
            return
        for series, v in zip(self._series(), self.last):
            series.append(v)
        if len(self.x) >= self.cap:  # keep points 0, 2, 4...: those at multiples of 2 every
            for series in self._series():
                del series[1::2]
            self.every *= 2

    def _series(self) -> tuple[list, ...]:
        return (self.x, self.hit_rate, self.usage, self.waiting, self.running, self.swapped)

    def downsample(self, max_points: int = 500) -> dict:
        """Evenly spaced samples (always keeping the last point added) as a JSON-able dict."""
        n = len(self.x)
        step = max(1, math.ceil(n / max_points))
        points = [p for i, p in enumerate(zip(*self._series())) if i % step == 0]
        if self.added and (len(points) - 1) * step * self.every != self.added - 1:
            points.append(self.last)  # the latest point was not sampled (or was dropped)
        cols = list(zip(*points)) or [()] * 6
        r = lambda xs: [round(v, 6) for v in xs]  # noqa: E731
        return {"x": r(cols[0]), "hit_rate": r(cols[1]), "usage": r(cols[2]),
                "waiting": list(cols[3]), "running": list(cols[4]), "swapped": list(cols[5])}


def import_pyplot():
    """matplotlib's pyplot on the Agg backend (no display). matplotlib is the optional ``plot``
    extra: without it, a clear error naming the install command."""
    try:
        import matplotlib
    except ImportError as e:
        raise ConfigError("plots need matplotlib: pip install 'kvpool[plot]'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot(timeline: dict, path: str, title: str, xlabel: str) -> None:
    """Hit rate, pool usage and queue lengths over time, one panel each (PNG, Agg)."""
    plt = import_pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    x = timeline["x"]
    axes[0].plot(x, timeline["hit_rate"], color="tab:green")
    axes[0].set_ylabel("prefix hit rate\n(cumulative)")
    axes[0].set_ylim(0, 1)
    axes[1].plot(x, timeline["usage"], color="tab:blue")
    axes[1].set_ylabel("device pool usage")
    axes[1].set_ylim(0, 1.05)
    axes[2].plot(x, timeline["waiting"], label="waiting")
    axes[2].plot(x, timeline["running"], label="running")
    axes[2].plot(x, timeline["swapped"], label="swapped")
    axes[2].set_ylabel("requests")
    axes[2].legend(loc="upper right")
    axes[2].set_xlabel(xlabel)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_path(path), dpi=100)
    plt.close(fig)
