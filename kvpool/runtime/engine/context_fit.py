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

NOTE(long-context): a --max-model-len above the model's own context (max_position_embeddings,
stretched by a linear or dynamic RoPE factor; llama3, yarn and longrope configs write the scaled
length there: ModelConfig.context_length, NOTE(rope-context)) is refused at start,
as vLLM refuses it, unless ``$VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is 1 or true (vLLM's variable;
then one WARNING). Positions past the trained context give a RoPE model garbage, silently;
it was accepted without a word.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kvpool.errors import ConfigError

__all__ = ["LONG_CONTEXT_ENV", "fit_max_model_len", "require_context_fits",
           "require_within_model"]

LONG_CONTEXT_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"

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


def require_within_model(max_model_len: int, context: int, environ: Mapping[str, str]) -> None:
    """NOTE(long-context): raise ConfigError when ``max_model_len`` is above the model's
    ``context``, unless the environment allows it (then say so once)."""
    if max_model_len <= context:
        return
    if environ.get(LONG_CONTEXT_ENV, "0").strip().lower() in ("1", "true"):
        log.warning("--max-model-len %d is more than the model's context (%d tokens), allowed "
                    "by $%s: positions past it were never trained", max_model_len, context,
                    LONG_CONTEXT_ENV)
        return
    raise ConfigError(
        f"--max-model-len {max_model_len} is more than the model's context ({context} tokens: "
        "max_position_embeddings in its config.json, times a linear or dynamic RoPE factor; "
        "llama3, yarn and longrope configs write the scaled length there, as vLLM reads them); "
        "positions past it were never trained, and a RoPE model gives garbage there: lower "
        f"--max-model-len to {context} or less, or set {LONG_CONTEXT_ENV}=1 to allow it, as "
        "vLLM does")
