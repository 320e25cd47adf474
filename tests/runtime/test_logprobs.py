"""Logprobs from the engine's own forward equal transformers' log_softmax on the same tiny
float32 checkpoint (within 1e-4): generated tokens (greedy and sampled with penalties: the
values are the raw model distribution's), top-k alternatives, and prompt logprobs also when the
prompt is chunked and when another request already cached the same prompt."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kvpool.runtime.engine.async_engine import AsyncEngine, collect
from kvpool.runtime.model import SamplingParams, TokenLogprob, compute_logprobs, load_tokenizer
from tests.configs import engine_config
from tests.runtime.model.helpers import SENTENCES, save_hf_model

transformers = pytest.importorskip("transformers")
TOL = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.set_num_threads(1)
    d = save_hf_model(tmp_path_factory.mktemp("llama_lp"), "llama")
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    return d, hf, load_tokenizer(d)


def hf_logprobs(hf, ids: list[int]) -> torch.Tensor:
    """[len(ids), vocab]: row p is log P(next | ids[:p + 1]) under transformers."""
    with torch.no_grad():
        logits = hf(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


def check(lp: TokenLogprob, ref_row: torch.Tensor, k: int) -> None:
    assert abs(lp.logprob - float(ref_row[lp.token_id])) < TOL
    assert lp.rank == int((ref_row > ref_row[lp.token_id]).sum()) + 1
    assert len(lp.top) == k
    ref_v, ref_i = ref_row.topk(k)
    for (tid, v), rv in zip(lp.top, ref_v.tolist()):
        assert abs(v - rv) < TOL and abs(float(ref_row[tid]) - v) < TOL
    assert [v for _, v in lp.top] == sorted((v for _, v in lp.top), reverse=True)


async def run(d, reqs, **cfg):
    config = engine_config("device_only", **{**dict(
        model=str(d), num_device_blocks=128, max_model_len=256, max_num_seqs=8, block_size=4),
        **cfg})
    eng = AsyncEngine(config)
    await eng.start()
    try:
        outs = [await collect(eng.generate(f"r{i}", p, sp)) for i, (p, sp) in enumerate(reqs)]
    finally:
        await eng.shutdown()
    st = eng.core.manager.stats()
    assert st.device.num_used == 0 and st.num_seqs == 0
    return outs


async def test_generated_logprobs_match_transformers(tiny):
    d, hf, tok = tiny
    prompt = tok.encode(SENTENCES[0])
    greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True, logprobs=5)
    # sampled with a penalty and a bias: logprobs are still the raw model distribution's
    sampled = SamplingParams(max_tokens=6, temperature=0.9, seed=3, ignore_eos=True,
                             logprobs=3, presence_penalty=1.5, logit_bias={5: 50.0})
    outs = await run(d, [(prompt, greedy), (prompt, sampled)])
    for out, k in zip(outs, (5, 3)):
        c = out.outputs[0]
        assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids) == 6
        ref = hf_logprobs(hf, prompt + list(c.token_ids))
        for j, lp in enumerate(c.logprobs):
            assert lp.token_id == c.token_ids[j]
            check(lp, ref[len(prompt) - 1 + j], k)
        assert out.prompt_logprobs is None
    assert all(lp.rank == 1 for lp in outs[0].outputs[0].logprobs)  # greedy picks the argmax


@pytest.mark.parametrize("chunked", [False, True])
async def test_prompt_logprobs_match_transformers(tiny, chunked):
    d, hf, tok = tiny
    prompt = tok.encode(SENTENCES[1] + " " + SENTENCES[2])
    assert len(prompt) > 20
    params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True, prompt_logprobs=2)
    plain = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    cfg = dict(max_num_batched_tokens=8) if chunked else {}  # chunks of <= 8 tokens
    # the first request caches the prompt's blocks; the second must still get every logit
    outs = await run(d, [(prompt, plain), (prompt, params), (prompt, params)], **cfg)
    ref = hf_logprobs(hf, prompt)
    for out in outs[1:]:
        pl = out.prompt_logprobs
        assert pl is not None and len(pl) == len(prompt) and pl[0] is None
        for p in range(1, len(prompt)):
            assert pl[p].token_id == prompt[p]
            check(pl[p], ref[p - 1], 2)
        assert out.outputs[0].token_ids == outs[0].outputs[0].token_ids
    assert outs[0].prompt_logprobs is None


def test_compute_logprobs_rows_and_ks():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50, generator=g)
    ids = [3, 0, 49, 7]
    out = compute_logprobs(logits, ids, [0, 1, 5, 50])
    ref = torch.log_softmax(logits, dim=-1)
    for r, lp in enumerate(out):
        assert lp.token_id == ids[r] and abs(lp.logprob - float(ref[r, ids[r]])) < 1e-6
        assert [t for t, _ in lp.top] == ref[r].topk(len(lp.top)).indices.tolist()
    assert [len(lp.top) for lp in out] == [0, 1, 5, 50]
    with pytest.raises(ValueError):
        compute_logprobs(logits, ids[:3], [0, 0, 0, 0])


@given(st.integers(0, 2**31), st.lists(st.lists(st.integers(0, 49), max_size=6), min_size=1,
                                       max_size=5))
def test_picked_rows_keep_the_chosen_then_each_asked_token_once(seed, picks):
    """NOTE(picks): a row with logprob_token_ids keeps those instead of its top k."""
    logits = torch.randn(len(picks), 50, generator=torch.Generator().manual_seed(seed))
    ids = [int(t) for t in logits.argmax(dim=-1)]
    out = compute_logprobs(logits, ids, [2] * len(picks), picks)
    ref = torch.log_softmax(logits, dim=-1)
    for r, lp in enumerate(out):
        order = list(dict.fromkeys([ids[r], *picks[r]])) if picks[r] else \
            ref[r].topk(2).indices.tolist()
        assert [t for t, _ in lp.top] == order
        assert all(abs(v - float(ref[r, t])) < 1e-6 for t, v in lp.top)
