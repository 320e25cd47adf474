"""SamplingParams validation and the batched Sampler."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.errors import RequestError
from kvpool.runtime.model import Sampler, SamplingParams, SamplingParamsError, make_generator

VOCAB = 64


def rand_logits(rows, seed=0):
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


@pytest.mark.parametrize("kwargs,param", [
    ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 1.5}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"temperature": -0.1}, "temperature"), ({"temperature": math.inf}, "temperature"),
    ({"temperature": math.nan}, "temperature"), ({"temperature": "1"}, "temperature"),
    ({"top_p": 1.5}, "top_p"), ({"top_p": -0.1}, "top_p"), ({"top_p": math.nan}, "top_p"),
    ({"top_k": -2}, "top_k"), ({"top_k": 2.0}, "top_k"),
    ({"n": 0}, "n"), ({"n": None}, "n"),
    ({"seed": 1.0}, "seed"), ({"seed": 1 << 64}, "seed"), ({"seed": True}, "seed"),
    ({"stop": [""]}, "stop"), ({"stop": ["ok", 3]}, "stop"), ({"stop": 5}, "stop"),
    ({"stop_token_ids": [-1]}, "stop_token_ids"), ({"stop_token_ids": "12"}, "stop_token_ids"),
    ({"ignore_eos": 1}, "ignore_eos"),
])
def test_invalid_fields_are_named(kwargs, param):
    with pytest.raises(SamplingParamsError) as err:
        SamplingParams(**kwargs)
    assert err.value.param == param and str(err.value).startswith(param)
    assert isinstance(err.value, ValueError) and isinstance(err.value, RequestError)


def test_valid_params_normalized():
    p = SamplingParams(stop="###", stop_token_ids=[3, 4], temperature=0, top_k=0, max_tokens=None)
    assert p.stop == ("###",) and p.stop_token_ids == (3, 4) and p.greedy
    assert SamplingParams(stop=None).stop == () and not SamplingParams().greedy
    assert SamplingParams(seed=-2).make_generator() is not None  # -1: none, NOTE(seed-unset)
    assert SamplingParams().make_generator() is None
    with pytest.raises(AttributeError):
        p.temperature = 1.0  # type: ignore[misc]


def test_greedy_is_argmax():
    logits = rand_logits(8)
    out = Sampler()(logits, [SamplingParams(temperature=0)] * 8)
    assert torch.equal(out, logits.argmax(-1))


@pytest.mark.parametrize("params", [SamplingParams(top_k=1, temperature=1.5),
                                    SamplingParams(top_p=1e-6, temperature=2.0),
                                    SamplingParams(top_p=1e-9, temperature=1.0)])
def test_degenerate_filters_are_greedy(params):
    logits = rand_logits(16, seed=1)
    for seed in range(5):
        gens = [make_generator(seed * 100 + i) for i in range(16)]
        assert torch.equal(Sampler()(logits, [params] * 16, gens), logits.argmax(-1))
    assert torch.equal(Sampler()(logits, [params] * 16), logits.argmax(-1))


def run_steps(rows, target, steps=20):
    """Sample `steps` times; row `target` keeps its generator across steps. Others vary."""
    gen = make_generator(1234)
    out = []
    for step in range(steps):
        logits = rand_logits(len(rows), seed=step)
        logits[target] = rand_logits(1, seed=1000 + step)[0]  # the target's own logits
        params = [p for p, _ in rows]
        gens = [gen if i == target else (None if s is None else make_generator(s + step))
                for i, (_, s) in enumerate(rows)]
        out.append(int(Sampler()(logits, params, gens)[target]))
    return out


def test_seeded_sampling_reproducible_and_batch_independent():
    p = SamplingParams(temperature=1.0, seed=1234)
    alone = run_steps([(p, 0)], 0)
    assert alone == run_steps([(p, 0)], 0)
    mixes = [
        [(SamplingParams(temperature=0.7), None), (p, 0), (SamplingParams(temperature=0), None)],
        [(SamplingParams(top_k=5), 7), (SamplingParams(top_p=0.3), 9), (p, 0)],
        [(p, 0)] + [(SamplingParams(temperature=1.3), None)] * 6,
    ]
    for rows in mixes:
        target = next(i for i, (q, s) in enumerate(rows) if q is p)
        assert run_steps(rows, target) == alone
    assert len(set(alone)) > 3  # it really samples


def test_different_seeds_differ():
    logits = torch.zeros(1, VOCAB)
    outs = {tuple(int(Sampler()(logits, [SamplingParams()], [g])[0]) for _ in range(10))
            for g in (make_generator(s) for s in range(4))}
    assert len(outs) == 4


def frequencies(logits_row, params, n=4000, seed=0):
    gen = make_generator(seed)
    logits = logits_row.expand(n, -1).contiguous()
    # One generator shared by n rows: each row draws its own noise in turn.
    got = Sampler()(logits, [params] * n, [gen] * n)
    return torch.bincount(got, minlength=logits.shape[1]).float() / n


def test_distribution_and_filters():
    row = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    f = frequencies(row, SamplingParams())
    assert torch.allclose(f, torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=0.03)
    f = frequencies(row, SamplingParams(top_k=2))
    assert f[2:].sum() == 0 and abs(f[0] - 0.625) < 0.03
    f = frequencies(row, SamplingParams(top_p=0.6))  # keeps {0, 1}: mass before 1 is 0.5 < 0.6
    assert f[2:].sum() == 0 and f[1] > 0.3
    f = frequencies(row, SamplingParams(top_p=0.85, top_k=3))
    assert f[3] == 0 and f[2] > 0.1
    f = frequencies(row, SamplingParams(temperature=0.25))  # sharper
    assert f[0] > 0.85


def test_unseeded_rows_use_sampler_generator():
    logits = torch.zeros(4, VOCAB)
    a = Sampler(torch.Generator().manual_seed(5))(logits, [SamplingParams()] * 4)
    b = Sampler(torch.Generator().manual_seed(5))(logits, [SamplingParams()] * 4)
    assert torch.equal(a, b)


def test_row_count_mismatch():
    with pytest.raises(ValueError):
        Sampler()(torch.zeros(2, VOCAB), [SamplingParams()])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, VOCAB), st.floats(0.01, 1.0), st.floats(0.05, 2.0), st.integers(0, 2**32))
def test_sample_respects_top_k_top_p(k, p, t, seed):
    logits = rand_logits(1, seed=seed % 1000)
    tok = int(Sampler()(logits, [SamplingParams(top_k=k, top_p=p, temperature=t)],
                        [make_generator(seed)])[0])
    order = logits[0].argsort(descending=True).tolist()
    assert order.index(tok) < k
    probs = torch.softmax(logits[0] / t, -1)[order]
    probs[k:] = 0
    probs /= probs.sum()
    assert probs[:order.index(tok)].sum() < p + 1e-6


def test_sampler_accepts_model_logits():
    """Model logits are inference tensors; the sampler must not edit them in place."""
    from kvpool.runtime.model import PagedBatch, SeqChunk, allocate_kv_cache, build_tiny_model

    cfg, model, _ = build_tiny_model()
    kv = allocate_kv_cache(4, cfg, 16)
    logits = model(PagedBatch([SeqChunk([5, 6, 7], 0, [0]), SeqChunk([8], 0, [1])]), kv)
    before = logits.clone()
    params = [SamplingParams(temperature=0), SamplingParams(top_k=5, top_p=0.9, seed=3)]
    out = Sampler()(logits, params, [None, make_generator(3)])
    assert out.shape == (2,) and int(out[0]) == int(logits[0].argmax())
    assert torch.equal(logits, before)


def test_enormous_top_k_means_off_instead_of_overflowing():
    import torch

    from kvpool.runtime.model import Sampler, SamplingParams
    logits = torch.randn(3, 50)
    params = [SamplingParams(temperature=0.7, top_k=10**40, top_p=0.5, seed=1)] * 3
    out = Sampler()(logits, params)
    assert out.shape == (3,) and int(out.max()) < 50
