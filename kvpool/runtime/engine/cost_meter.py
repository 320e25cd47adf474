"""CostMeter: the measured rates the scheduler's preemption cost model runs on.

Swap or recompute is a cost comparison (docs/architecture.md, preemption): copy bandwidth
against prefill speed. Both are measured while serving, an EMA of prefill-dominated steps and
the copy engine's own bandwidth, and fed to the scheduler every few steps.
"""

from __future__ import annotations

from typing import Any

from kvpool.runtime.ema import ema

__all__ = ["CostMeter"]

MIN_PREFILL_TOKENS = 32  # a step with fewer prompt tokens says little about prefill speed
UPDATE_EVERY = 32  # steps between cost-model updates


class CostMeter:
    """Prefill tokens/s (EMA) beside the copy engine's bandwidth, fed to the scheduler."""

    def __init__(self, copies: Any, scheduler: Any) -> None:
        self._copies = copies
        self._scheduler = scheduler
        self.prefill_rate = 0.0  # measured prompt tokens/s (0.0 before a prefill-heavy step)

    def measure(self, tokens: int, seconds: float, step: int) -> None:
        """One forward of ``tokens`` prompt tokens took ``seconds``; every UPDATE_EVERY-th
        ``step`` the scheduler gets the rates measured so far."""
        if tokens >= MIN_PREFILL_TOKENS and seconds > 0:
            self.prefill_rate = ema(self.prefill_rate, tokens / seconds)
        if step % UPDATE_EVERY:
            return
        kw = {}
        bw = self._copies.bandwidth()
        if bw > 0:
            kw["copy_bytes_per_s"] = bw
        if self.prefill_rate:
            kw["prefill_tokens_per_s"] = self.prefill_rate
        if kw:
            self._scheduler.update_cost_model(**kw)
