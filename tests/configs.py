"""The engine configurations the tests run: one factory, named pool sizes.

A size is the pool's geometry and nothing else; whatever else a test depends on (a scheduler
limit, a preemption mode, the request limits of an HTTP test) it passes as an override, so it
shows at the call::

    engine_config("scarce", preemption_mode="swap")     # 12 device blocks: requests preempt
    engine_config("serve", **SERVE_LIMITS)              # the HTTP fixtures' pool and limits
"""

from __future__ import annotations

from typing import Any

from kvpool.runtime.engine.config import EngineConfig

# name: block size (tokens), device blocks, host blocks, context length (tokens)
SIZES: dict[str, dict[str, Any]] = {
    # 24 device tokens: a prompt of 4 blocks takes 4 of the 6
    "tiny": dict(block_size=4, num_device_blocks=6, num_host_blocks=6, max_model_len=64),
    # 12 x 16 = 192 device tokens, 64 host blocks: a few concurrent requests must preempt
    "scarce": dict(block_size=16, num_device_blocks=12, num_host_blocks=64, max_model_len=256),
    # 64 x 16 = 1,024 device tokens, no host pool, the model's context
    "device_only": dict(block_size=16, num_device_blocks=64, num_host_blocks=0,
                        max_model_len=None),
    # 24 x 16 = 384 device tokens beside 16 host blocks: a handful of requests fit
    "small": dict(block_size=16, num_device_blocks=24, num_host_blocks=16, max_model_len=256),
    # 48 x 16 = 768 device tokens, 32 host blocks: the HTTP tests' server (tests/server)
    "serve": dict(block_size=16, num_device_blocks=48, num_host_blocks=32, max_model_len=256),
    # 64 x 16 = 1,024 device tokens, 64 host blocks: the stress tests' server
    "stress": dict(block_size=16, num_device_blocks=64, num_host_blocks=64, max_model_len=256),
    # 96 x 16 = 1,536 device tokens, 16 host blocks, 512-token context
    "medium": dict(block_size=16, num_device_blocks=96, num_host_blocks=16, max_model_len=512),
    # 96 device and 96 host blocks, 1,024-token context: a 40-block prompt fetched remotely
    "remote": dict(block_size=16, num_device_blocks=96, num_host_blocks=96, max_model_len=1024),
    # 160 device and 160 host blocks, 2,304-token context: a 2k-token prompt (128 blocks)
    "long": dict(block_size=16, num_device_blocks=160, num_host_blocks=160, max_model_len=2304),
}

# the request limits the HTTP fixtures serve with (small, so a test can reach each bound)
SERVE_LIMITS: dict[str, Any] = dict(max_num_seqs=16, max_queue=256, max_n=4, max_stop=4)


def engine_config(size: str = "small", **overrides: Any) -> EngineConfig:
    """An EngineConfig of the named pool size (seed 0, on the CPU: NOTE(auto-device) would
    take a GPU where one is seen), with ``overrides`` on top."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; one of {sorted(SIZES)}")
    return EngineConfig(**{**SIZES[size], "seed": 0, "device": "cpu", **overrides})
