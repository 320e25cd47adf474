"""The plain snapshot the metrics layer reads at scrape time.

The engine builds one from lock-free reads (``BlockSpaceManager.stats()`` and
``fragmentation()`` are seqlock reads) and plain counters; ``snapshot_families`` turns it
into plain metric families, which the collector hands to Prometheus. Nothing here holds a
reference into live engine state.
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
    # state -> live sequences (an n > 1 request's n): vLLM's request gauges count these
    # (NOTE(child-requests) in kvpool/metrics/vllm_series.py)
    sequences: Mapping[str, int] = field(default_factory=dict)
    # the sequences those preemptions held (vllm:num_preemptions_total: NOTE(preempted-seqs)
    # in kvpool/metrics/vllm_series.py); None: not counted, the preempted requests stand in
    preempted_seqs: int | None = None


# (name, type, help, label names, [(label values, value)]); counter names end in _total
Family = tuple[str, str, str, tuple[str, ...], list[tuple[tuple[str, ...], float]]]


def snapshot_families(s: MetricsSnapshot) -> list[Family]:
    """The snapshot's metric families: the pools' state, then the traffic counters."""
    return _pool_families(s) + _traffic_families(s)


def _pool_families(s: MetricsSnapshot) -> list[Family]:
    """What the pools hold now: usage, free / total / cached blocks, fragmentation."""
    dev, host = s.manager.device, s.manager.host
    tiers, g = ("tier",), "gauge"
    frag = s.fragmentation
    return [
        ("kvpool_cache_usage_ratio", g, "Fraction of KV blocks in use.", tiers,
         [(("device",), dev.usage), (("host",), host.usage)]),
        ("kvpool_free_blocks", g, "Blocks with no content (never filled, or evicted).",
         tiers, [(("device",), dev.num_free), (("host",), host.num_free)]),
        # NOTE(allocatable): what an allocation can take now is free + evictable (cached,
        # no reference), vLLM's free block queue: an idle pool full of cached prefixes had
        # kvpool_free_blocks near 0 while its usage read 0
        ("kvpool_allocatable_blocks", g, "Blocks ready to allocate: free plus evictable "
         "(cached, no reference).", tiers,
         [(("device",), dev.num_allocatable), (("host",), host.num_allocatable)]),
        ("kvpool_blocks", g, "Blocks in the pool.", tiers,
         [(("device",), dev.num_blocks), (("host",), host.num_blocks)]),
        ("kvpool_cached_blocks", g, "Blocks holding prefix-cached content (in use or "
         "evictable).", tiers, [(("device",), dev.num_cached), (("host",), host.num_cached)]),
        ("kvpool_fragmentation_ratio", g, "Internal: unused slots of used blocks; external: "
         "1 - largest free run / free blocks.", ("tier", "kind"),
         [(("device", "internal"), frag.internal), (("device", "external"), frag.external)]),
    ]


def _traffic_families(s: MetricsSnapshot) -> list[Family]:
    """What moved so far (counters) and the requests by state."""
    m = s.manager
    reasons = dict(s.evictions) or {"capacity": m.device.evictions}
    g, c = "gauge", "counter"
    return [
        ("kvpool_swap_blocks_total", c, "Blocks swapped.", ("direction",),
         [(("out",), m.swap_out_blocks), (("in",), m.swap_in_blocks)]),
        ("kvpool_swap_bytes_total", c, "Bytes swapped.", ("direction",),
         [((d,), s.swap_bytes.get(d, 0)) for d in ("in", "out")]),
        ("kvpool_copy_blocks_total", c, "Block copies inside the device pool.", ("reason",),
         [(("cow",), s.copy_blocks.get("cow", m.cow_copies)),
          (("defrag",), s.copy_blocks.get("defrag", m.defrag_moves))]),
        ("kvpool_preemptions_total", c, "Preempted requests.", ("mode",),
         [((mode,), s.preemptions.get(mode, 0)) for mode in ("swap", "recompute")]),
        # NOTE(preempted-queries) (kvpool/core/block_table.py): as vLLM's, re-admissions apart
        # NOTE(child-lookups) (kvpool/core/prompt_alloc.py): per sequence, as vLLM's children
        ("kvpool_prefix_cache_queries_total", c, "Prompt tokens looked up in the prefix "
         "cache at a request's first admission, once per sequence (not re-admissions after "
         "a preemption).", (), [((), m.prefix_query_tokens)]),
        ("kvpool_prefix_cache_hits_total", c, "Prompt tokens served by the prefix cache at a "
         "request's first admission, per sequence (not re-admissions after a preemption).",
         (), [((), m.prefix_hit_tokens)]),
        ("kvpool_evictions_total", c, "Cached blocks evicted.", ("reason",),
         [((r,), n) for r, n in sorted(reasons.items())]),
        ("kvpool_requests", g, "Requests by scheduler state.", ("state",),
         [((st,), s.requests.get(st, 0)) for st in ("running", "waiting", "swapped")]),
        ("kvpool_requests_in_flight", g, "Requests counted against --max-queue (admitted, "
         "not yet finished by the engine).", (), [((), s.requests_in_flight)]),
        ("kvpool_prompt_tokens_computed_total", c, "Prompt tokens the engine computed "
         "(prefix-cache hits excluded; kvpool_prompt_tokens_total counts whole prompts).",
         (), [((), s.prompt_tokens)]),
        ("kvpool_generation_tokens_total", c, "Tokens generated.", (),
         [((), s.generation_tokens)]),
        ("kvpool_invariant_violations_total", c, "Invariant checks that failed at run time.",
         (), [((), s.invariant_violations)]),
    ]
