"""The plain snapshot the metrics layer reads at scrape time.

The engine builds one from lock-free reads (``BlockSpaceManager.stats()`` and
``fragmentation()`` are seqlock reads) and plain counters; the collector turns it into
Prometheus families. Nothing here holds a reference into live engine state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvpool.core.stats import FragmentationStats, ManagerStats


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Everything ``/metrics`` exports except the latency histograms (observed directly)."""

    manager: ManagerStats  # pools, prefix-cache, swap and copy counters
    fragmentation: FragmentationStats  # device pool, internal and external
    requests: Mapping[str, int] = field(default_factory=dict)  # state -> count
    preemptions: Mapping[str, int] = field(default_factory=dict)  # mode -> total
    evictions: Mapping[str, int] = field(default_factory=dict)  # reason -> total (blocks)
    swap_bytes: Mapping[str, int] = field(default_factory=dict)  # direction -> total bytes
    copy_blocks: Mapping[str, int] = field(default_factory=dict)  # reason -> total blocks
    prompt_tokens: int = 0  # prompt tokens admitted (total)
    generation_tokens: int = 0  # tokens generated (total)
    invariant_violations: int = 0  # check_invariants failures seen at run time (total)
    requests_in_flight: int = 0  # AsyncEngine: what --max-queue counts (admitted, unfinished)
