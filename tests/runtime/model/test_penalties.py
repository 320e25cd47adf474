"""Sampling controls (logit_bias, min_tokens, repetition/frequency/presence penalties, min_p)
against a plain per-row reference, and through the real engine on the tiny model."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import Sampler, SamplingParams, SamplingParamsError, SeqHistory
from kvpool.runtime.model.penalties import apply_logit_adjustments, apply_min_p
from tests.configs import engine_config

VOCAB = 40
EOS = 1


def reference_row(logits: list[float], p: SamplingParams, h: SeqHistory) -> list[float]:
    """One row, the way the formulas read (OpenAI / vLLM docs), element by element."""
    x = list(logits)
    for tok, bias in p.logit_bias:
        if tok < len(x):
            x[tok] += bias
    if len(h.output_ids) < p.min_tokens:
        for tok in set(p.stop_token_ids) | (set() if p.ignore_eos else {EOS}):
            x[tok] = -math.inf
    counts = Counter(h.output_ids)
    seen = set(h.prompt_ids) | set(h.output_ids)
    for tok in range(len(x)):
        if tok in seen:
            x[tok] = x[tok] / p.repetition_penalty if x[tok] > 0 else x[tok] * p.repetition_penalty
        x[tok] -= p.frequency_penalty * counts[tok] + p.presence_penalty * (counts[tok] > 0)
    return x


def reference_min_p(x: list[float], min_p: float) -> list[float]:
    top = max(x)
    probs = [math.exp(v - top) for v in x]
    total = sum(probs)
    probs = [q / total for q in probs]
    return [v if q >= min_p * max(probs) else -math.inf for v, q in zip(x, probs)]


ids = st.integers(0, VOCAB - 1)
params_st = st.builds(
    SamplingParams,
    max_tokens=st.just(64),
    presence_penalty=st.one_of(st.just(0.0), st.floats(-2, 2)),
    frequency_penalty=st.one_of(st.just(0.0), st.floats(-2, 2)),
    repetition_penalty=st.one_of(st.just(1.0), st.floats(0.1, 3)),
    logit_bias=st.one_of(st.just({}), st.dictionaries(st.integers(0, VOCAB + 5),
                                                     st.floats(-100, 100), max_size=5)),
    min_tokens=st.one_of(st.just(0), st.integers(0, 6)),
    stop_token_ids=st.lists(ids, max_size=3),
    ignore_eos=st.booleans(),
    min_p=st.one_of(st.just(0.0), st.floats(0, 1)))
history_st = st.builds(SeqHistory, st.lists(ids, min_size=1, max_size=10),
                       st.lists(ids, max_size=10))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(params_st, history_st), min_size=1, max_size=6),
       seed=st.integers(0, 2**16))
def test_adjustments_equal_the_per_row_reference(rows, seed):
    logits = torch.randn(len(rows), VOCAB, generator=torch.Generator().manual_seed(seed)) * 4
    params = [p for p, _ in rows]
    hist = [h for _, h in rows]
    got = apply_logit_adjustments(logits.clone(), params, hist, (EOS,))
    want = torch.tensor([reference_row(logits[i].tolist(), p, h)
                         for i, (p, h) in enumerate(rows)])
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    fin = torch.isfinite(want)
    assert torch.allclose(got[fin], want[fin], atol=1e-4, rtol=1e-5)


@settings(max_examples=100, deadline=None)
@given(min_p=st.lists(st.floats(0, 1), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_min_p_equals_the_reference(min_p, seed):
    x = torch.randn(len(min_p), VOCAB, generator=torch.Generator().manual_seed(seed)) * 3
    got = apply_min_p(x, min_p)
    want = torch.tensor([reference_min_p(x[i].tolist(), m) for i, m in enumerate(min_p)])
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    assert torch.allclose(got[torch.isfinite(want)], want[torch.isfinite(want)])


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(params_st, history_st, st.sampled_from([0.0, 0.7, 1.5])),
                     min_size=1, max_size=6), seed=st.integers(0, 2**16))
def test_sampler_picks_from_the_reference_distribution(rows, seed):
    """Greedy rows take the argmax of the reference-adjusted logits; sampled rows never pick a
    token the reference (adjust, temperature, min_p) gives zero probability."""
    logits = torch.randn(len(rows), VOCAB, generator=torch.Generator().manual_seed(seed)) * 4
    params = [SamplingParams(**{f: getattr(p, f) for f in SamplingParams.__slots__
                                if f != "temperature"}, temperature=t) for p, _, t in rows]
    hist = [h for _, h, _ in rows]
    gens = [torch.Generator().manual_seed(seed + i) for i in range(len(rows))]
    got = Sampler(eos_token_ids=(EOS,))(logits, params, gens, hist).tolist()
    for i, (p, h, t) in enumerate(rows):
        ref = reference_row(logits[i].tolist(), p, h)
        if t == 0.0:
            assert ref[got[i]] == max(ref)
        else:
            allowed = reference_min_p([v / t for v in ref], p.min_p)
            assert allowed[got[i]] > -math.inf


def test_rows_without_features_are_untouched():
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(5))
    plain = SamplingParams(temperature=0.0)
    biased = SamplingParams(temperature=0.0, logit_bias={7: 100}, presence_penalty=1.0)
    h = SeqHistory([3], [4])
    out = Sampler()(logits, [plain, biased, plain], None, [h, h, h]).tolist()
    assert out[1] == 7
    assert [out[0], out[2]] == logits[[0, 2]].argmax(-1).tolist()
    assert torch.equal(logits, torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(5)))


def test_history_is_required_only_when_used():
    logits = torch.zeros(1, VOCAB)
    assert Sampler()(logits, [SamplingParams(logit_bias={3: 5}, temperature=0.0)]).item() == 3
    with pytest.raises(ValueError, match="history"):
        Sampler()(logits, [SamplingParams(frequency_penalty=1.0)])


@pytest.mark.parametrize("kwargs,param", [
    ({"presence_penalty": 2.5}, "presence_penalty"), ({"presence_penalty": "1"},
                                                      "presence_penalty"),
    ({"frequency_penalty": -2.01}, "frequency_penalty"),
    ({"frequency_penalty": math.nan}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"repetition_penalty": math.inf}, "repetition_penalty"),
    ({"min_p": 1.1}, "min_p"), ({"min_p": -0.1}, "min_p"),
    ({"min_tokens": -1}, "min_tokens"), ({"min_tokens": 1.0}, "min_tokens"),
    ({"min_tokens": 17, "max_tokens": 16}, "min_tokens"),
    ({"logit_bias": {3: 101}}, "logit_bias"), ({"logit_bias": {-1: 1}}, "logit_bias"),
    ({"logit_bias": {"3": 1}}, "logit_bias"), ({"logit_bias": {3: math.nan}}, "logit_bias"),
])
def test_invalid_adjustments_are_named(kwargs, param):
    with pytest.raises(SamplingParamsError) as err:
        SamplingParams(**kwargs)
    assert err.value.param == param


# ---- through the engine: the step thread hands the sampler each sequence's real history ----
@pytest.fixture(scope="module")
def core():
    c = EngineCore(engine_config("device_only", seed=1))
    yield c
    c.close()


def generate(core: EngineCore, rid: str, prompt: list[int], params: SamplingParams):
    core.add_request(rid, prompt, params)
    ids, reason = [], None
    while core.has_work():
        for out in core.step():
            for c in out.outputs:
                ids += c.token_ids
                reason = c.finish_reason or reason
    assert core.manager.stats().device.num_used == 0
    return ids, reason


def test_engine_min_tokens_masks_eos(core):
    eos = core.tokenizer.eos_token_id
    prompt = core.tokenizer.encode("The cache")
    hot = {eos: 100.0}  # eos wins every step it is allowed
    ids, reason = generate(core, "a", prompt, SamplingParams(max_tokens=20, temperature=0.0,
                                                             logit_bias=hot))
    assert ids == [eos] and reason == "stop"
    ids, reason = generate(core, "b", prompt, SamplingParams(
        max_tokens=20, temperature=0.0, logit_bias=hot, min_tokens=5))
    assert len(ids) == 6 and eos not in ids[:5] and ids[5] == eos and reason == "stop"


def test_engine_repetition_penalty_reads_prompt_and_output(core):
    tok_a, tok_b = 300, 301
    prompt = core.tokenizer.encode("The cache") + [tok_a]
    bias = {tok_a: 100.0, tok_b: 90.0}
    ids, _ = generate(core, "c", prompt, SamplingParams(max_tokens=3, temperature=0.0,
                                                        logit_bias=bias, ignore_eos=True))
    assert ids[:2] == [tok_a, tok_a]  # no penalty: the biased token every step
    ids, _ = generate(core, "d", prompt, SamplingParams(
        max_tokens=3, temperature=0.0, logit_bias=bias, repetition_penalty=2.0,
        ignore_eos=True))
    # a is in the prompt (100 -> ~50) so b (90) comes first; then b (~45) is below a (~50)
    assert ids[:2] == [tok_b, tok_a]
    ids, _ = generate(core, "e", prompt, SamplingParams(
        max_tokens=3, temperature=0.0, logit_bias={tok_a: 100.0, tok_b: 99.0},
        frequency_penalty=2.0, presence_penalty=0.0, ignore_eos=True))
    # output-only: a first (the prompt does not count), then b (99 > 100 - 2)
    assert ids[:2] == [tok_a, tok_b]
