"""bench/cells.py: the eviction benchmarks' cells, their traces and the issue's bar.

A cell is a trace, a seed and a pool size, keyed ``shape@seed@capacity`` (the conversation
trace, which has no seed: ``conversation@capacity``). A shape of bench.heldout is a held-out
trace (``heldout``); the rest are bench.policies' (``policies``: the conversation trace and
bench.policy_traces' generated ones, which have no scale). The target of a cell is the best
hit rate of LRU and the classic baselines (bench/baselines.py) minus bench.heldout's SLACK:
the bar docs/benchmarks.md scores every policy against.
"""

from __future__ import annotations

from bench.baselines import BASELINES
from bench.common import TRACE
from bench.heldout import SHAPES, SLACK
from bench.policies import load_trace
from bench.policy_traces import GENERATED

Trace = list[list[int]]


def parse_cell(key: str) -> tuple[str, str, int, int]:
    """``shape@seed@capacity`` (``conversation@capacity``) -> (set, name, seed, capacity)."""
    name, *seed, cap = key.split("@")
    return ("heldout" if name in SHAPES else "policies", name, int(seed[0]) if seed else 0,
            int(cap))


def trace_of(set_name: str, name: str, seed: int, scale: float = 1.0) -> Trace:
    """The trace ``name`` of ``set_name`` (``heldout`` or ``policies``) at ``seed``; ``scale``
    scales a held-out shape only."""
    if set_name == "heldout":
        return SHAPES[name](seed, scale)
    return load_trace(TRACE) if name == "conversation" else GENERATED[name](seed=seed)


def cell_trace(key: str, scale: float = 1.0) -> tuple[Trace, int]:
    """The trace and the capacity of cell ``key``."""
    set_name, name, seed, cap = parse_cell(key)
    return trace_of(set_name, name, seed, scale), cap


def target(rates: dict[str, float]) -> float:
    """The issue's bar for a cell: the best hit rate of LRU and the classic baselines - SLACK
    (LRU is one of them: where it leads, the bar is LRU's)."""
    return max(rates[b] for b in ("lru", *BASELINES)) - SLACK
