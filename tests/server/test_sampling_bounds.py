"""Numeric sampling fields are bounded to what float32 sampling can honour (NOTE(float32) in
kvpool/runtime/model/sampling.py): through a real server on 127.0.0.1 (real engine, the tiny
model), every out-of-range value is a 400 naming its field, and the bounds themselves are
accepted and sample finite, valid output (json_object included)."""

from __future__ import annotations

import json

import aiohttp
import pytest
import torch

from kvpool.runtime.model import Sampler, SamplingParams, SeqHistory
from kvpool.runtime.model.sampling import (MAX_REPETITION_PENALTY, MAX_TEMPERATURE,
                                           MIN_REPETITION_PENALTY)
from tests.server.helpers import wait_free

HUGE = 10 ** 400  # a JSON integer float() cannot convert
OUT_OF_RANGE = [
    ("temperature", 1e300), ("temperature", HUGE), ("temperature", -1e-9),
    ("temperature", MAX_TEMPERATURE * 1.0001),
    ("repetition_penalty", 1e300), ("repetition_penalty", 1e-300),
    ("repetition_penalty", MIN_REPETITION_PENALTY / 2), ("repetition_penalty", HUGE),
    ("repetition_penalty", 0),
    ("top_p", 1.5), ("top_p", -HUGE), ("top_p", 0), ("top_p", 0.0),  # vLLM's (0, 1]
    ("temperature", 3.0), ("temperature", 2.0001),  # vLLM's [0, 2]
    ("min_p", HUGE), ("min_p", -0.1),
    ("presence_penalty", 2.5), ("presence_penalty", HUGE), ("frequency_penalty", -1e300),
    ("logit_bias", {"5": -HUGE}),  # 1e300 is clamped to 100 (NOTE(bias-clamp))
    ("seed", 1 << 63), ("seed", -HUGE), ("top_k", HUGE), ("top_k", -2),
    ("max_tokens", HUGE), ("n", HUGE), ("n", 0), ("min_tokens", HUGE), ("logprobs", HUGE),
]
EDGES = [
    {"temperature": MAX_TEMPERATURE}, {"temperature": 1e-6},
    {"repetition_penalty": MIN_REPETITION_PENALTY}, {"repetition_penalty": MAX_REPETITION_PENALTY},
    {"repetition_penalty": MAX_REPETITION_PENALTY, "temperature": MAX_TEMPERATURE,
     "presence_penalty": 2, "frequency_penalty": -2, "min_p": 1, "top_p": 1e-9,
     "logit_bias": {"5": 100, "6": -100}, "seed": (1 << 63) - 1},
    {"top_k": 1, "seed": -(1 << 63), "min_p": 0, "top_p": 1},
]


async def post(session, url: str, body: dict) -> tuple[int, dict]:
    async with session.post(url, json=body) as r:
        return r.status, await r.json()


async def test_out_of_range_values_are_400s_naming_the_field(srv):
    free = srv.free()
    async with aiohttp.ClientSession() as s:
        for name, value in OUT_OF_RANGE:
            for route, base in (("/completions", {"prompt": "hi"}),
                                ("/chat/completions",
                                 {"messages": [{"role": "user", "content": "hi"}]})):
                status, body = await post(s, srv.v1 + route,
                                          {**base, "max_tokens": 4, name: value})
                assert status == 400, (name, value, body)
                err = body["error"]
                assert err["param"] == name and err["type"] == "invalid_request_error", err
                assert len(err["message"]) < 200, err  # a 400-digit value is cut short
    await wait_free(srv, free)
    assert srv.free() == free


@pytest.mark.parametrize("edge", EDGES, ids=lambda e: ",".join(e))
async def test_bounds_are_accepted_and_sample_valid_output(srv, edge):
    async with aiohttp.ClientSession() as s:
        status, body = await post(s, srv.v1 + "/completions",
                                  {"prompt": "the numbers", "max_tokens": 8, **edge})
        assert status == 200, body
        assert body["usage"]["completion_tokens"] >= 1
        # json_object: the mask must survive the adjustments (no NaN row sampling token 0)
        status, body = await post(s, srv.v1 + "/chat/completions", {
            "messages": [{"role": "user", "content": "an object"}], "max_tokens": 60,
            "response_format": {"type": "json_object"}, **edge})
        assert status == 200, body
        ch = body["choices"][0]
        text = ch["message"]["content"]
        assert text.startswith("{"), text
        if ch["finish_reason"] == "stop":
            assert isinstance(json.loads(text), dict), text
        else:
            assert ch["finish_reason"] == "length", ch


@pytest.mark.parametrize("edge", EDGES, ids=lambda e: ",".join(e))
def test_bounds_keep_the_sampler_finite(edge):
    """At every bound the sampled rows stay finite: the token drawn is one the logits allow."""
    fields = {k: v for k, v in edge.items() if k != "logit_bias"}
    bias = {int(k): v for k, v in edge.get("logit_bias", {}).items()}
    p = SamplingParams(max_tokens=4, logit_bias=bias, **fields)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 512, generator=gen) * 30
    logits[:, 100:] = float("-inf")  # what a grammar or top-k mask leaves
    hist = [SeqHistory(list(range(50)), [3, 4, 5]) for _ in range(64)]
    tokens = Sampler(gen)(logits, [p] * 64, histories=hist)
    assert ((tokens >= 0) & (tokens < 100)).all(), tokens
