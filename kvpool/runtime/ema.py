"""One exponentially weighted moving average rule for the runtime's measured rates.

The cost models (the scheduler's preemption choice, the remote read path's fetch-or-recompute)
read rates the runtime measures as it runs: prefill tokens/s, copy and remote bandwidths,
round trips, fixed costs. Each is smoothed the same way, and 0.0 means "not measured yet", so
the first sample is taken as it is rather than averaged with nothing.
"""

from __future__ import annotations

__all__ = ["ema"]


def ema(prev: float, sample: float, alpha: float = 0.2) -> float:
    """``sample`` when ``prev`` is 0.0 (nothing measured yet), else ``alpha`` of it blended
    into ``prev``."""
    return sample if not prev else alpha * sample + (1 - alpha) * prev
