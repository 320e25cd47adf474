"""Scheduler configuration and the preemption cost model.

``SchedulerConfig`` is frozen and validated like ``kvpool.config`` (every error names the field
and the fix). The cost parameters in it are the starting values of a mutable ``CostModel`` that
the runtime refreshes with measured figures through ``Scheduler.update_cost_model``.

Preemption cost (per victim, both in seconds)::

    swap      = 2 * distinct_blocks * kv_bytes_per_block / copy_bytes_per_s     (out and back)
    recompute = (tokens - tokens_still_cached) / prefill_tokens_per_s

    tokens              prompt + generated tokens of every live sequence (recompute prompt)
    tokens_still_cached leading prompt blocks that stay in the prefix cache once the victim's
                        own references are dropped (shared with other running requests)
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from kvpool.errors import require

POLICIES = ("fcfs", "priority")


class PreemptionMode(enum.Enum):
    """How a preempted request gives its blocks back."""

    SWAP = "swap"  # copy its blocks to the host pool; resumes by swapping them back in
    RECOMPUTE = "recompute"  # drop its blocks; back to WAITING, its tokens are recomputed


def _positive_number(name: str, value: object) -> None:
    require(isinstance(value, (int, float)) and not isinstance(value, bool)
             and math.isfinite(value) and value > 0,
             f"{name}={value!r} is invalid: use a finite number > 0")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Budgets and policies of one Scheduler.

    Invariant (validated): ``max_num_batched_tokens >= max_num_seqs`` so every running sequence
    can decode each step, and without chunked prefill ``max_num_batched_tokens >=
    max_model_len`` so every admissible prompt fits one step.
    """

    max_num_seqs: int = 256  # live sequences in RUNNING requests, at most
    max_num_batched_tokens: int = 2048  # tokens computed per step (prefill chunks + decodes)
    max_model_len: int = 8192  # prompt + output tokens of one sequence, at most
    enable_chunked_prefill: bool = True  # split long prompts over several steps
    policy: str = "fcfs"  # queue order: "fcfs" (arrival) or "priority" (smaller value first)
    preemption_mode: str | None = None  # "swap" / "recompute" forces a mode; None = by cost
    eos_token_id: int | None = None  # the model's end-of-sequence token (None: no eos stop)
    other_eos_ids: tuple[int, ...] = ()  # its other EOS ids (sequence.py NOTE(eos-ids))
    kv_bytes_per_block: int = 2 * 1024 * 1024  # KV bytes of one block over all layers
    copy_bytes_per_s: float = 16e9  # device<->host copy bandwidth (start value)
    prefill_tokens_per_s: float = 10_000.0  # prefill throughput (start value)
    defrag_threshold: float | None = None  # plan defrag when external fragmentation > this
    defrag_max_moves: int = 64  # block moves per defrag plan, at most
    tenant_max_running_seqs: int | None = None  # live running sequences per tenant, at most

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len",
                     "kv_bytes_per_block", "defrag_max_moves"):
            v = getattr(self, name)
            require(isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                     f"{name}={v!r} is invalid: use an int >= 1")
        require(self.max_num_batched_tokens >= self.max_num_seqs,
                 f"max_num_batched_tokens={self.max_num_batched_tokens} < max_num_seqs="
                 f"{self.max_num_seqs}: every running sequence needs one token of budget per "
                 "decode step; raise max_num_batched_tokens or lower max_num_seqs")
        if not self.enable_chunked_prefill:
            require(self.max_num_batched_tokens >= self.max_model_len,
                     f"max_num_batched_tokens={self.max_num_batched_tokens} < max_model_len="
                     f"{self.max_model_len} without chunked prefill: a long prompt could never "
                     "be scheduled; enable_chunked_prefill=True or raise the budget")
        require(self.policy in POLICIES,
                 f"policy={self.policy!r} is unknown: use one of {', '.join(POLICIES)}")
        require(self.preemption_mode in (None, "swap", "recompute"),
                 f"preemption_mode={self.preemption_mode!r} is unknown: use 'swap', "
                 "'recompute' or None (choose per victim by cost)")
        require(self.eos_token_id is None or (isinstance(self.eos_token_id, int)
                                                and self.eos_token_id >= 0),
                 f"eos_token_id={self.eos_token_id!r} is invalid: use a token id >= 0 or None")
        require(self.tenant_max_running_seqs is None
                 or (isinstance(self.tenant_max_running_seqs, int)
                     and not isinstance(self.tenant_max_running_seqs, bool)
                     and self.tenant_max_running_seqs >= 1),
                 f"tenant_max_running_seqs={self.tenant_max_running_seqs!r} is invalid: use an "
                 "int >= 1, or None for no per-tenant cap")
        _positive_number("copy_bytes_per_s", self.copy_bytes_per_s)
        _positive_number("prefill_tokens_per_s", self.prefill_tokens_per_s)
        require(self.defrag_threshold is None
                 or (isinstance(self.defrag_threshold, (int, float))
                     and 0.0 <= self.defrag_threshold < 1.0),
                 f"defrag_threshold={self.defrag_threshold!r} is invalid: use a fraction in "
                 "[0, 1) of external fragmentation, or None to disable defragmentation")

    @property
    def forced_mode(self) -> PreemptionMode | None:
        return None if self.preemption_mode is None else PreemptionMode(self.preemption_mode)


@dataclass(slots=True)
class CostModel:
    """Measured costs the preemption choice weighs. Invariant: every field is > 0."""

    kv_bytes_per_block: int  # KV bytes per block over all layers (runtime knows the shape)
    copy_bytes_per_s: float  # device<->host copy bandwidth, measured by the copy engine
    prefill_tokens_per_s: float  # prefill throughput, measured by the model runner

    @classmethod
    def from_config(cls, config: SchedulerConfig) -> CostModel:
        return cls(config.kv_bytes_per_block, float(config.copy_bytes_per_s),
                   float(config.prefill_tokens_per_s))

    def update(self, *, copy_bytes_per_s: float | None = None,
               prefill_tokens_per_s: float | None = None,
               kv_bytes_per_block: int | None = None) -> None:
        """Replace the given figures (None keeps the current one)."""
        if copy_bytes_per_s is not None:
            _positive_number("copy_bytes_per_s", copy_bytes_per_s)
            self.copy_bytes_per_s = float(copy_bytes_per_s)
        if prefill_tokens_per_s is not None:
            _positive_number("prefill_tokens_per_s", prefill_tokens_per_s)
            self.prefill_tokens_per_s = float(prefill_tokens_per_s)
        if kv_bytes_per_block is not None:
            require(isinstance(kv_bytes_per_block, int) and kv_bytes_per_block >= 1,
                     f"kv_bytes_per_block={kv_bytes_per_block!r} is invalid: use an int >= 1")
            self.kv_bytes_per_block = kv_bytes_per_block

    def swap_seconds(self, num_blocks: int) -> float:
        """Copy time of ``num_blocks`` out to the host and back in again."""
        return 2.0 * num_blocks * self.kv_bytes_per_block / self.copy_bytes_per_s

    def recompute_seconds(self, num_tokens: int) -> float:
        return max(0, num_tokens) / self.prefill_tokens_per_s
