"""A recomputed n = 2 request whose sequences diverged, on the tiny model with real tensors:
its second sequence reuses the prompt blocks the first one's prefill writes, and each
sequence's seeded samples, and their logprobs, are those of a run that was never preempted
(wrong or unwritten KV in the shared blocks would change its logits), with and without the
prefix cache (which, when on, serves the prompt blocks to both sequences)."""

from __future__ import annotations

import pytest

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import SamplingParams
from tests.configs import engine_config
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

PROMPT = [(37 * i + 11) % 500 for i in range(32)]  # 4 blocks of 8
OTHER = [(53 * i + 7) % 500 for i in range(8)]


Run = dict[str, list[list[tuple[int, float]]]]  # request -> per sequence (token, logprob)


def run(num_device_blocks: int, caching: bool) -> tuple[Run, EngineCore]:
    core = EngineCore(engine_config("device_only", block_size=8,
                                    num_device_blocks=num_device_blocks, max_model_len=64,
                                    max_num_seqs=4, max_num_batched_tokens=64,
                                    enable_prefix_caching=caching))
    # q (8 + 24 tokens) and r (32 + 16, n=2: 8 blocks) grow a block in the same step of an
    # 8-block pool: r, the newest, is recomputed with 9 diverged tokens per sequence
    reqs = {"q": (OTHER, SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)),
            "r": (PROMPT, SamplingParams(n=2, max_tokens=16, temperature=1.0, seed=11,
                                         ignore_eos=True, logprobs=0))}
    tokens: Run = {}
    errors = []
    try:
        for rid, (p, params) in reqs.items():
            core.validate(p, params)
            core.add_request(rid, p, params)
        for _ in range(500):
            if not core.has_work():
                break
            for o in core.step():
                if o.error:
                    errors.append((o.request_id, o.error))
                got = tokens.setdefault(o.request_id, [[], []])
                for c in o.outputs:
                    got[c.index] += [(t.token_id, t.logprob) for t in c.logprobs or ()] \
                        or [(t, 0.0) for t in c.token_ids]
        st = core.manager.stats()
        assert not core.has_work() and errors == []
        assert st.device.num_used == 0 and st.num_seqs == 0
    finally:
        core.close()
    return tokens, core


@pytest.mark.parametrize("caching", [False, True])
def test_diverged_recompute_samples_exactly_what_an_unpreempted_run_does(caching):
    ref, big = run(64, caching)
    assert big.scheduler.stats().preemptions["recompute"] == 0
    got, small = run(8, caching)
    assert small.scheduler.stats().preemptions["recompute"] >= 1
    a, b = got["r"]
    assert a != b and len(a) == len(b) == 16  # the two sequences diverged
    assert got["q"] == ref["q"]
    for seq, want in zip(got["r"], ref["r"]):
        assert [t for t, _ in seq] == [t for t, _ in want]
        assert [lp for _, lp in seq] == pytest.approx([lp for _, lp in want], abs=1e-4)
