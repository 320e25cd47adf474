"""A recomputed n = 2 request whose sequences diverged, on the tiny model with real tensors:
its second sequence reuses the prompt blocks the first one's prefill writes, and each
sequence's seeded samples are exactly those of a run that was never preempted (wrong or
unwritten KV in the shared blocks would change its logits)."""

from __future__ import annotations

from kvpool.runtime.engine_config import EngineConfig
from kvpool.runtime.engine_core import EngineCore
from kvpool.runtime.model import SamplingParams
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

PROMPT = [(37 * i + 11) % 500 for i in range(32)]  # 4 blocks of 8
OTHER = [(53 * i + 7) % 500 for i in range(8)]


def run(num_device_blocks: int) -> tuple[dict[str, list[list[int]]], EngineCore]:
    core = EngineCore(EngineConfig(block_size=8, num_device_blocks=num_device_blocks,
                                   num_host_blocks=0, max_model_len=64, max_num_seqs=4,
                                   max_num_batched_tokens=64, seed=0))
    # q (8 + 24 tokens) and r (32 + 16, n=2: 8 blocks) grow a block in the same step of an
    # 8-block pool: r, the newest, is recomputed with 9 diverged tokens per sequence
    reqs = {"q": (OTHER, SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)),
            "r": (PROMPT, SamplingParams(n=2, max_tokens=16, temperature=1.0, seed=11,
                                         ignore_eos=True))}
    tokens: dict[str, list[list[int]]] = {}
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
                got = tokens.setdefault(o.request_id, [[] for _ in range(reqs[o.request_id][1].n)])
                for c in o.outputs:
                    got[c.index] += list(c.token_ids)
        st = core.manager.stats()
        assert not core.has_work() and errors == []
        assert st.device.num_used == 0 and st.num_seqs == 0
    finally:
        core.close()
    return tokens, core


def test_diverged_recompute_samples_exactly_what_an_unpreempted_run_does():
    ref, big = run(64)
    assert big.scheduler.preemptions["recompute"] == 0
    got, small = run(8)
    assert small.scheduler.preemptions["recompute"] >= 1
    a, b = got["r"]
    assert a != b and len(a) == len(b) == 16  # the two sequences diverged
    assert got == ref
