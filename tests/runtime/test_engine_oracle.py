"""Oracle: the AsyncEngine's greedy outputs are token-identical to transformers ``generate``
on a tiny float32 Llama checkpoint built in the test, also when the engine is forced to
preempt by swap or by recompute, to hit the prefix cache, to fork (n = 4), to defragment in
the middle of decoding, with block sizes 1 and 64, and while one request's copy fails."""

from __future__ import annotations

import asyncio

import pytest
import torch

from kvpool.runtime.engine.async_engine import AsyncEngine, collect
from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.model import SamplingParams, load_tokenizer
from stress.faults import InjectedFaults
from tests.configs import engine_config
from tests.runtime.model.helpers import SENTENCES, hf_greedy, save_hf_model

transformers = pytest.importorskip("transformers")
NEW = 24  # tokens generated per request


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    torch.set_num_threads(1)
    d = save_hf_model(tmp_path_factory.mktemp("llama"), "llama")
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    tok = load_tokenizer(d)
    texts = [" ".join(SENTENCES[i % 8:i % 8 + 1 + i % 4]) for i in range(22)]
    prompts = [tok.encode(t)[:3 + 6 * i] for i, t in enumerate(texts)]  # 3 .. ~130 tokens
    system = tok.encode(" ".join(SENTENCES[:3]))[:40]
    shared = [system + tok.encode(s)[:5 + i] for i, s in enumerate(SENTENCES[3:8])]
    ref = hf_greedy(hf, prompts + shared, NEW)
    return d, prompts, ref[:len(prompts)], shared, ref[len(prompts):]


def greedy(n: int = 1) -> SamplingParams:
    return SamplingParams(n=n, max_tokens=NEW, temperature=0.0, ignore_eos=True)


async def run(config: EngineConfig, prompts, *, n=1, fault=None, stagger=0.0,
              max_tokens=None):
    eng = AsyncEngine(config, faults=fault)
    eng.invariant_check_interval = 1
    await eng.start()
    try:
        async def one(i, p):
            await asyncio.sleep(stagger * i)
            params = greedy(n)
            if max_tokens is not None:
                params = SamplingParams(n=n, max_tokens=max_tokens[i], temperature=0.0,
                                        ignore_eos=True)
            return await collect(eng.generate(f"r{i}", p, params))
        outs = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        snap = eng.snapshot()
    finally:
        await eng.shutdown()
    st = eng.core.manager.stats()
    assert st.device.num_used == 0 and st.host.num_used == 0 and st.num_seqs == 0
    assert eng.core.invariant_violations == 0
    return outs, snap, eng


def base(d, **kw) -> EngineConfig:
    return engine_config("device_only", **{**dict(
        model=str(d), num_device_blocks=512, max_model_len=256, max_num_seqs=32,
        max_num_batched_tokens=512), **kw})


def tokens(out):
    return list(out.outputs[0].token_ids)


async def test_batched_greedy_matches_transformers(oracle):
    d, prompts, ref, _, _ = oracle
    outs, _, _ = await run(base(d), prompts)
    assert [tokens(o) for o in outs] == ref
    assert all(o.outputs[0].finish_reason == "length" for o in outs)


@pytest.mark.parametrize("bs", [1, 64])
async def test_block_sizes_1_and_64(oracle, bs):
    d, prompts, ref, _, _ = oracle
    outs, _, _ = await run(base(d, block_size=bs, num_device_blocks=8192 // bs + 64,
                                max_num_batched_tokens=256), prompts[:12])
    assert [tokens(o) for o in outs] == ref[:12]


@pytest.mark.parametrize("mode", ["swap", "recompute"])
async def test_preemption_keeps_outputs_identical(oracle, mode):
    d, prompts, ref, _, _ = oracle
    # 13 blocks of 16 tokens: the longest request (~130 + 24 tokens) fits alone, several
    # together do not, so decoding must preempt
    cfg = base(d, num_device_blocks=13, num_host_blocks=64, preemption_mode=mode,
               max_num_seqs=8, max_num_batched_tokens=256)
    outs, snap, eng = await run(cfg, prompts)
    assert [tokens(o) for o in outs] == ref
    assert snap.preemptions[mode] > 0
    if mode == "swap":
        assert snap.manager.swap_out_blocks > 0 and snap.manager.swap_in_blocks > 0


async def test_prefix_cache_hits_on_a_shared_system_prompt(oracle):
    d, _, _, shared, shared_ref = oracle
    outs, snap, _ = await run(base(d, block_size=8), shared, stagger=0.3)
    assert [tokens(o) for o in outs] == shared_ref
    assert snap.manager.prefix_hit_tokens > 0
    assert any(o.num_cached_tokens >= 32 for o in outs[1:])


async def test_n4_forks_each_match(oracle):
    d, prompts, ref, _, _ = oracle
    outs, snap, _ = await run(base(d), prompts[:6], n=4)
    for o, r in zip(outs, ref[:6]):
        assert len(o.outputs) == 4
        assert all(list(c.token_ids) == r for c in o.outputs)
    assert snap.manager.cow_copies > 0


async def test_defrag_in_the_middle_of_decoding(oracle):
    d, prompts, ref, _, _ = oracle
    # NOTE(deterministic): no sleeps. Every request fits at once (192 blocks, 32 sequences),
    # so all are admitted within the first prefill steps; the even ones stop after 4 tokens
    # while the odd ones decode 20 steps more. The finished requests' freed blocks are holes
    # interleaved with the blocks still decoding, which defrag (threshold 0) must fill
    # mid-decode without changing a token.
    short = 4
    mt = [short if i % 2 == 0 else NEW for i in range(len(prompts))]
    cfg = base(d, num_device_blocks=192, defrag_threshold=0.0, max_num_seqs=32)
    outs, snap, eng = await run(cfg, prompts, max_tokens=mt)
    assert [tokens(o) for o in outs] == [r[:m] for r, m in zip(ref, mt)]
    assert eng.core.scheduler.stats().defrag_moves > 0


async def test_a_failed_copy_fails_only_its_request(oracle):
    d, prompts, ref, _, _ = oracle
    fault = InjectedFaults()
    fault.add(kind="swap_in", fail=True, times=1)
    cfg = base(d, num_device_blocks=13, num_host_blocks=64, preemption_mode="swap",
               max_num_seqs=8, max_num_batched_tokens=256)
    outs, snap, _ = await run(cfg, prompts, fault=fault)
    failed = [i for i, o in enumerate(outs) if o.error]
    assert len(failed) == 1 and outs[failed[0]].outputs[0].finish_reason == "error"
    assert all(tokens(o) == r for i, (o, r) in enumerate(zip(outs, ref)) if i not in failed)
