"""Every bit of a request's 64-bit seed counts, on the engine path with real tensors
(sampling.py NOTE(seed-fold)).

torch's CPU generator keeps a seed's low 32 bits, so seeds 2**32 apart sampled the same
tokens. Now the high half is folded into the low one: such seeds differ, a seed is still
deterministic, a seed below 2**32 still gives the stream torch's own seeding gives, and n > 1
still samples its k-th sequence as seed + k would."""

from __future__ import annotations

import torch

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import SamplingParams, make_generator
from tests.configs import engine_config
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

PROMPT = [(37 * i + 11) % 500 for i in range(8)]
TOKENS = 12
HIGH = 3 << 32  # a high half that torch's CPU seeding dropped


def sample(runs: dict[str, tuple[int, int]]) -> dict[str, list[list[int]]]:
    """request id -> (seed, n), all in one engine; id -> each sequence's sampled tokens."""
    core = EngineCore(engine_config("device_only", block_size=8, max_model_len=64,
                                    max_num_seqs=16, max_num_batched_tokens=256))
    tokens: dict[str, list[list[int]]] = {}
    try:
        for rid, (seed, n) in runs.items():
            params = SamplingParams(n=n, max_tokens=TOKENS, temperature=1.0, seed=seed,
                                    ignore_eos=True)
            core.validate(PROMPT, params)
            core.add_request(rid, PROMPT, params)
            tokens[rid] = [[] for _ in range(n)]
        for _ in range(200):
            if not core.has_work():
                break
            for o in core.step():
                assert not o.error, (o.request_id, o.error)
                for c in o.outputs:
                    tokens[o.request_id][c.index] += list(c.token_ids)
        assert not core.has_work()
    finally:
        core.close()
    return tokens


def test_seeds_2_to_the_32_apart_sample_apart_and_each_seed_stays_deterministic():
    got = sample({"low": (5, 1), "high": (5 + HIGH, 1), "high again": (5 + HIGH, 1),
                  "wrapped": (-2, 1), "unsigned": ((1 << 64) - 2, 1),
                  "n2": (7 + HIGH, 2), "k0": (7 + HIGH, 1), "k1": (8 + HIGH, 1)})
    assert all(len(seq) == TOKENS for seqs in got.values() for seq in seqs), got
    assert got["low"] != got["high"]  # the same stream before the fold
    assert got["high"] == got["high again"]
    assert got["wrapped"] == got["unsigned"]  # int64 -2 is uint64 2**64 - 2 (vLLM's seeds)
    assert got["n2"] == got["k0"] + got["k1"]  # sequence k samples as seed + k
    assert got["k0"] != got["k1"]


def test_a_seed_below_2_to_the_32_keeps_the_stream_torch_gives_it():
    for seed in (0, 5, (1 << 32) - 1):
        want = torch.rand(64, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(torch.rand(64, generator=make_generator(seed)), want), seed
    high = torch.rand(64, generator=make_generator(5 + HIGH))
    assert not torch.equal(high, torch.rand(64, generator=make_generator(5)))
