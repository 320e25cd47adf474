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


@dataclass(slots=True)
class Timeline:
    """Per-sample series for the plot. Invariant: every list has the same length."""

    x: list[float] = field(default_factory=list)  # simulated seconds (or request index)
    hit_rate: list[float] = field(default_factory=list)  # cumulative prefix hit rate
    usage: list[float] = field(default_factory=list)  # device pool usage (used / total)
    waiting: list[int] = field(default_factory=list)  # requests waiting
    running: list[int] = field(default_factory=list)  # requests running
    swapped: list[int] = field(default_factory=list)  # requests swapped

    def add(self, x: float, hit_rate: float, usage: float, waiting: int = 0, running: int = 0,
            swapped: int = 0) -> None:
        self.x.append(x)
        self.hit_rate.append(hit_rate)
        self.usage.append(usage)
        self.waiting.append(waiting)
        self.running.append(running)
        self.swapped.append(swapped)

    def downsample(self, max_points: int = 500) -> dict:
        """Evenly spaced samples (always keeping the last) as a JSON-able dict."""
        n = len(self.x)
        step = max(1, math.ceil(n / max_points))
        idx = list(range(0, n, step))
        if n and idx[-1] != n - 1:
            idx.append(n - 1)
        r = lambda xs, nd=6: [round(xs[i], nd) for i in idx]  # noqa: E731
        return {"x": r(self.x), "hit_rate": r(self.hit_rate), "usage": r(self.usage),
                "waiting": [self.waiting[i] for i in idx],
                "running": [self.running[i] for i in idx],
                "swapped": [self.swapped[i] for i in idx]}


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
