"""max_model_len against the device KV pool: what one sequence may hold at most.

A request without ``max_tokens`` gets ``max_model_len - prompt`` tokens by default (capped by
--max-tokens-limit). When the pool holds fewer tokens than max_model_len that default cannot
fit, and the request is refused with a 400 naming a ``max_tokens`` the client never sent. vLLM
avoids that at startup; so does kvpool, in two ways:

    --max-model-len not given (the model's context)  -> capped to the pool's tokens, one log
                                                        line (fit_max_model_len)
    --max-model-len given, more than the pool holds  -> ``kvpool serve`` refuses to start,
                                                        naming both numbers and the fix
                                                        (require_context_fits)

The pool's tokens are ``num_device_blocks * block_size``: one sequence alone may take every
block (sched/admission_gate.py NOTE(alone)), and a sequence of max_model_len tokens stores at most
max_model_len - 1 of them (the last sampled token is never written), so it always fits.

An embedded engine (tests, benches) may still ask for more than its pool on purpose: only the
server refuses; the engine's per-request check refuses each too-large request instead.
"""

from __future__ import annotations

import logging

from kvpool.errors import ConfigError

__all__ = ["fit_max_model_len", "require_context_fits"]

log = logging.getLogger(__name__)


def fit_max_model_len(given: int | None, derived: int, num_blocks: int,
                      block_size: int) -> int:
    """The engine's max_model_len: ``given`` as it is (the operator chose it), else the model's
    context ``derived``, capped to what ``num_blocks`` blocks of ``block_size`` tokens hold."""
    if given is not None:
        return given
    capacity = num_blocks * block_size
    if derived <= capacity:
        return derived
    log.warning("max_model_len capped to %d tokens (the model's context is %d): the KV cache "
                "holds %d blocks of %d tokens; give it more memory (--kv-cache-memory, "
                "--gpu-memory-utilization or --num-device-blocks) for the full context",
                capacity, derived, num_blocks, block_size)
    return capacity


def require_context_fits(max_model_len: int, num_blocks: int, block_size: int) -> None:
    """Raise ConfigError when one sequence of ``max_model_len`` tokens cannot fit the pool."""
    capacity = num_blocks * block_size
    if max_model_len > capacity:
        raise ConfigError(
            f"--max-model-len {max_model_len} is more than the KV cache can hold "
            f"({num_blocks} device blocks of {block_size} tokens = {capacity} tokens): lower "
            f"--max-model-len to {capacity} or less, or give the cache more memory "
            "(--kv-cache-memory on CPU, --gpu-memory-utilization on CUDA, or "
            "--num-device-blocks)")
