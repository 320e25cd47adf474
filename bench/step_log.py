"""bench/step_log.py: one replay of the product per cell, recorded step by step for
bench.rule_lab (a diagnostic, not a policy).

Every miniature of the tuner (kvpool/core/eviction/admit_tuner.py) runs its configuration
from the first request, whatever the tuner chooses: the hits a step reads do not depend on
any choice. So one replay of the product records everything a choice rule ever reads, and
bench.rule_lab replays any rule on the record instead of on the trace. Per tuning step the
record keeps the configuration the tuner was on, each miniature's hits and whether
NOTE(cold) in adaptive.py held the pool on its cold-start duel; beside the steps, each time
the policy set the tuner's choice from outside (``start_at``: NOTE(cold)'s start and end).
"""

from __future__ import annotations

from collections.abc import Callable

from bench.cells import cell_trace
from bench.cold_start import rates
from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.adaptive import COLD_ON
from kvpool.core.eviction.admit_tuner import AdmitTuner
from kvpool.replay.loop import simulate


class StepTuner(AdmitTuner):
    """Invariant: AdmitTuner's; ``steps_log`` has one entry per step taken, ``starts`` one per
    ``start_at``. The product's tuner, recording what each step reads."""

    def __init__(self, *args, **kw) -> None:
        self.steps_log: list[tuple[int, list[int], bool]] = []  # (current, hits, held)
        self.starts: list[tuple[int, int]] = []  # (steps recorded before it, grid index)
        self.cold_held: Callable[[], bool] = lambda: False  # NOTE(cold) holds the pool (set below)
        super().__init__(*args, **kw)

    def start_at(self, choice) -> None:
        super().start_at(choice)
        self.starts.append((len(self.steps_log), self.current))

    def _step(self) -> bool:
        self.steps_log.append((self.current, [s.hits for s in self.shadows], self.cold_held()))
        return super()._step()


class Logged(AdaptivePolicy):
    """Invariant: AdaptivePolicy's. The product with a StepTuner that knows when NOTE(cold)
    holds the pool on the duel."""

    name = "logged"
    TUNER = StepTuner

    def __init__(self, capacity: int = 0) -> None:
        super().__init__(capacity)
        self._tuner.cold_held = self._held

    def _held(self) -> bool:
        return self._cold == COLD_ON

    @property
    def record(self) -> dict:
        """The steps, the starts and the period (sampled accesses per step)."""
        t = self._tuner
        return {"steps": t.steps_log, "starts": t.starts, "period": t.period}


def logged(reqs: list[list[int]], cap: int) -> dict:
    """The product's replay of ``reqs`` at ``cap`` blocks, recorded: its hit rate, its steps
    and starts, the period and the capacity."""
    policy = Logged(cap)
    hit, blocks = simulate(reqs, policy, cap)
    return {"cap": cap, "rate": hit / max(blocks, 1), **policy.record}


def record(key: str, scale: float = 1.0, with_classics: bool = False) -> dict:
    """Cell ``key``'s record (``logged``), and with ``with_classics`` the classics'
    rates."""
    reqs, cap = cell_trace(key, scale)
    out = {"cell": key, **logged(reqs, cap)}
    if with_classics:
        out["classics"] = rates(reqs, cap, classics=True, arms=())  # LRU and the classics
    return out
