"""EngineConfig: everything ``kvpool serve`` (and tests, benches, the stress harness) needs to
build an AsyncEngine. Flag names follow vLLM's spelling where one exists."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from kvpool.errors import require

log = logging.getLogger(__name__)

PREEMPTION_MODES = (None, "swap", "recompute")
AUTO_DEVICE = "auto"
DEFAULT_MAX_NUM_SEQS = 64  # --max-num-seqs when neither batch limit is given
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048  # vLLM's API server's on CPUs and smaller GPUs
# the int limits that may be None (unset): derived at construction, or no cap
UNSET_DERIVED = ("max_tokens_limit", "max_num_seqs", "max_num_batched_tokens",
                 "max_queue")


def resolve_device(requested: str) -> tuple[str, str]:
    """(device, why) for --device: ``auto`` is CUDA where torch sees a CUDA device, else the
    CPU; any other value is kept as given.

    NOTE(auto-device): vLLM has no --device flag and detects its platform, so a manifest
    written for it never names one; with kvpool's former default (cpu) the same command line
    served a GPU node from the CPU, saying nothing (docs/architecture.md "vLLM's serve
    flags")."""
    if requested != AUTO_DEVICE:
        return requested, f"--device {requested}"
    import torch  # only where the device is detected: the config is read without torch

    if torch.cuda.is_available():
        return "cuda", (f"--device auto: torch sees {torch.cuda.device_count()} CUDA "
                        f"device(s), the first is {torch.cuda.get_device_name(0)}")
    return "cpu", ("--device auto: torch sees no CUDA device (torch.cuda.is_available() is "
                   "False); pass --device cuda to require one")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Validated engine settings (errors name the flag and the fix)."""

    model: str | None = None  # --model: local HF directory; None = the built-in tiny model
    served_model_name: str | None = None  # --served-model-name (default: --model as given)
    tokenizer: str | None = None  # --tokenizer: a local directory (default: the model's)
    dtype: str = "auto"  # --dtype: auto (checkpoint dtype, float32 where bf16 is slow) | ...
    device: str = AUTO_DEVICE  # --device: auto | cpu | cuda[:N]; auto resolved at construction
    block_size: int = 16  # --block-size
    kv_cache_memory: int | str = "256MiB"  # --kv-cache-memory: KV budget on CPU
    gpu_memory_utilization: float = 0.9  # --gpu-memory-utilization: KV budget on CUDA
    swap_space: float | str = 0.25  # --swap-space: host swap pool, GiB (0 = no swapping)
    num_device_blocks: int | None = None  # --num-device-blocks: override the budget (tests)
    num_host_blocks: int | None = None  # --num-host-blocks: override --swap-space (tests)
    enable_prefix_caching: bool = True  # --enable-prefix-caching / --no-enable-prefix-caching
    eviction_policy: str = "lru"  # --eviction-policy
    # --max-num-seqs and --max-num-batched-tokens; None: derived from the other one
    # (NOTE(batch-limits) in _derive_batch_limits), an int once constructed
    max_num_seqs: int | None = None
    tenant_max_running_seqs: int | None = None  # --tenant-max-running-seqs (None: no cap)
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None  # --max-model-len (default: the model's context)
    preemption_mode: str | None = None  # --preemption-mode swap|recompute (default: by cost)
    # vLLM's --scheduling-policy: fcfs (arrival order) | priority (the request's priority field,
    # smaller first, arrival on ties; a waiting request preempts lower-priority running ones)
    scheduling_policy: str = "fcfs"
    defrag_threshold: float | None = None  # --defrag-threshold (external fragmentation)
    seed: int = 0  # --seed: the tiny model's weights and the shared sampling RNG
    # --max-queue (vLLM's --max-num-queued-reqs): requests in flight (running + waiting) before
    # 503. NOTE(queue-bound): vLLM's default is no bound; kvpool's stays bounded, so a flood is
    # answered 503 + Retry-After instead of growing the server until it fails every request
    # (tests/stress/test_security.py); None (embedders only): no bound
    max_queue: int | None = 1024
    # --max-n: completions per request, at most. NOTE(max-n): vLLM's VLLM_MAX_N_SEQUENCES
    # (16384). 16 was a first guess, never a measured bound: a request's n sequences run as
    # forks, or as child requests in turns where forks do not fit (NOTE(apart) in
    # request_checker.py); the answers they build bound them (docs/architecture.md "Token ids in
    # the answer"). best_of is acted on up to min(16, --max-n, --max-num-seqs) only (best_of.py
    # NOTE(best-of)): past --max-num-seqs it would be a 400 where vLLM 0.33 ignores best_of
    max_n: int = 16384
    # --max-tokens-limit: max_tokens per request, at most; None: the context length (vLLM's
    # bound: a prompt plus its max_tokens fit max_model_len, so the context bounds the work)
    max_tokens_limit: int | None = None
    # --max-stop: stop strings per request, at most; vLLM's VLLM_MAX_STOP_STRINGS (4), so a
    # list vLLM refuses is refused here too (a lone string is never counted)
    max_stop: int = 4
    # --max-logprobs: k of logprobs / top_logprobs, at most (vLLM's); -1: no cap, the
    # vocabulary's size (server/logprob_fields.py NOTE(whole-vocab))
    max_logprobs: int = 20
    # vLLM's --stream-interval: a stream's updates carry at least this many new tokens each
    # (its first and last aside); a request's stream_interval may raise it (NOTE(interval))
    stream_interval: int = 1
    # --num-threads: torch intra-op threads, set by the `kvpool serve` entry point (process-wide
    # state, never by library classes); None: leave the process setting as it is
    num_threads: int | None = None

    def __post_init__(self) -> None:
        self._check_device()
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens", "max_queue",
                     "max_n", "max_tokens_limit", "max_stop", "stream_interval"):
            v = getattr(self, name)
            if v is None and name in UNSET_DERIVED:
                continue
            require(isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                     f"--{name.replace('_', '-')}={v!r} is invalid: use an int >= 1")
        self._derive_batch_limits()
        require(self.dtype in ("auto", "float32", "bfloat16", "float16"),
                f"--dtype={self.dtype!r} is invalid: use auto, float32, bfloat16 or float16")
        require(self.num_threads is None or (isinstance(self.num_threads, int)
                                             and self.num_threads >= 1),
                "--num-threads must be an int >= 1")
        require(isinstance(self.gpu_memory_utilization, (int, float))
                 and 0 < self.gpu_memory_utilization <= 1,
                 "--gpu-memory-utilization must be in (0, 1]")
        require(self.preemption_mode in PREEMPTION_MODES,
                 f"--preemption-mode={self.preemption_mode!r} is invalid: use swap or recompute "
                 "(or leave it unset to choose by cost)")
        if self.max_model_len is not None:
            require(isinstance(self.max_model_len, int) and self.max_model_len >= 1,
                     "--max-model-len must be an int >= 1")
        require(type(self.max_logprobs) is int and self.max_logprobs >= -1,  # not a bool
                 f"--max-logprobs {self.max_logprobs!r}: use an int >= 0, or -1 (no cap)")
        require(self.tokenizer is None or self.model is not None,
                 "--tokenizer needs a model directory (the built-in tiny model carries its own "
                 "tokenizer)")
        if self.defrag_threshold is not None:
            require(isinstance(self.defrag_threshold, (int, float))
                     and math.isfinite(self.defrag_threshold)
                     and 0 <= self.defrag_threshold < 1,
                     "--defrag-threshold must be in [0, 1)")
        for name in ("num_device_blocks", "num_host_blocks"):
            v = getattr(self, name)
            require(v is None or (isinstance(v, int) and v >= 0),
                     f"--{name.replace('_', '-')} must be an int >= 0")
        require(self.num_device_blocks is None or self.num_device_blocks >= 1,
                 "--num-device-blocks must be >= 1")

    def _derive_batch_limits(self) -> None:
        """Each step decodes every running sequence, one token each, so the token budget must
        cover --max-num-seqs.

        NOTE(batch-limits): vLLM 0.33 refuses a budget below max_num_seqs at startup (its
        SchedulerConfig.verify_max_model_len), and so does this: raising the budget instead
        would let a step compute more tokens (and activation memory) than the operator set.
        A limit left unset is derived, as vLLM's EngineArgs does: max_num_seqs from a given
        budget is min(default, budget). The budget from a given max_num_seqs is
        max(default, max_num_seqs), where vLLM keeps its platform's default (2048 on CPU,
        8192 on an H100) and refuses past it: a --max-num-seqs that vLLM serves on a GPU is
        not refused for kvpool's single, lower default (docs/architecture.md "vLLM's serve
        flags")."""
        seqs, budget = self.max_num_seqs, self.max_num_batched_tokens
        if seqs is not None and budget is not None:
            require(budget >= seqs,
                    f"--max-num-batched-tokens {budget} is below --max-num-seqs {seqs}: every "
                    "running sequence needs one token of the step's budget to decode; raise "
                    f"--max-num-batched-tokens to at least {seqs} or lower --max-num-seqs")
            return
        if seqs is None:
            seqs = min(DEFAULT_MAX_NUM_SEQS, budget or DEFAULT_MAX_NUM_BATCHED_TOKENS)
            if seqs != DEFAULT_MAX_NUM_SEQS:
                log.info("--max-num-seqs %d: the default lowered to --max-num-batched-tokens",
                         seqs)
        if budget is None:
            budget = max(DEFAULT_MAX_NUM_BATCHED_TOKENS, seqs)
            if budget != DEFAULT_MAX_NUM_BATCHED_TOKENS:
                log.info("--max-num-batched-tokens %d: the default raised to --max-num-seqs",
                         budget)
        object.__setattr__(self, "max_num_seqs", seqs)
        object.__setattr__(self, "max_num_batched_tokens", budget)

    def _check_device(self) -> None:
        """--device auto resolved once, here (NOTE(auto-device)); then cpu or cuda[:N]."""
        if self.device == AUTO_DEVICE:
            object.__setattr__(self, "device", resolve_device(AUTO_DEVICE)[0])
        require(self.device == "cpu" or self.device.startswith("cuda"),
                f"--device={self.device!r} is invalid: use auto, cpu or cuda[:N]")
