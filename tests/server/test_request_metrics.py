"""The request series vLLM dashboards read, on a real server after real requests (openai
client): whole-prompt token counts beside the computed ones, per-request histograms, finish
reasons, all labelled with the model name."""

from __future__ import annotations

import asyncio
import time

from openai import AsyncOpenAI

from kvpool.metrics.collector import REQUEST_METRIC_NAMES
from tests.server.helpers import scrape

SETTLE = 10.0  # seconds the server may take to observe a finished request


async def scrape_when(srv, check) -> dict:
    """/metrics once ``check(scraped)`` holds (the handler observes after the answer went)."""
    deadline = time.monotonic() + SETTLE
    while not check(got := await scrape(srv)):
        assert time.monotonic() < deadline, "the request metrics never settled"
        await asyncio.sleep(0.01)
    return got


async def test_request_series_count_what_was_asked_and_done(srv):
    m = srv.engine.model_name
    prompt = "A shared prefix that is long enough to fill one block or more. " * 2
    async with AsyncOpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=60) as c:
        first = await c.completions.create(model=m, prompt=prompt, max_tokens=5, n=2)
        second = await c.completions.create(model=m, prompt=prompt, max_tokens=3,
                                            stop=[first.choices[0].text[:1] or "e"])
    lab = (("model_name", m),)
    # NOTE(per-sequence) in kvpool/metrics/collector.py: n=2 counts as two of vLLM's children
    want_prompt = 2 * first.usage.prompt_tokens + second.usage.prompt_tokens

    got = await scrape_when(
        srv, lambda g: g.get("kvpool_prompt_tokens_total", {}).get(lab) == want_prompt)
    for name in REQUEST_METRIC_NAMES:
        assert any(k.startswith(name) for k in got), name
    computed = got["kvpool_prompt_tokens_computed_total"][()]
    assert computed < want_prompt  # the second prompt's full blocks came from the cache
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    success = {k: v for k, v in got["kvpool_request_success_total"].items()}
    assert sum(success.values()) == 3
    assert success[(("finished_reason", "length"), ("model_name", m))] >= 2
    assert got["kvpool_request_prompt_tokens_count"][lab] == 3
    assert got["kvpool_request_prompt_tokens_sum"][lab] == want_prompt
    assert got["kvpool_request_generation_tokens_count"][lab] == 3
    assert got["kvpool_request_generation_tokens_sum"][lab] == \
        first.usage.completion_tokens + second.usage.completion_tokens
    assert got["kvpool_request_params_n_count"][lab] == 2  # once per request, as vLLM's
    assert got["kvpool_request_params_n_sum"][lab] == 3
    assert got["kvpool_request_params_max_tokens_sum"][lab] == 13
    for phase in ("prefill", "decode", "inference"):
        assert got[f"kvpool_request_{phase}_time_seconds_count"][lab] == 3
    for series in ("e2e_request_latency", "time_to_first_token", "request_queue_time"):
        assert got[f"kvpool_{series}_seconds_count"][lab] == 3, series
    assert got["kvpool_request_inference_time_seconds_sum"][lab] >= \
        got["kvpool_request_decode_time_seconds_sum"][lab]


async def test_engine_series_carry_the_model_name_and_count_step_tokens(srv):
    """vLLM labels its latency histograms with model_name; vllm:iteration_tokens_total is a
    histogram of the tokens each engine step computed: here the whole prompt (no prefix cache
    hit) and every decode."""
    m = srv.engine.model_name
    async with AsyncOpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=60) as c:
        r = await c.completions.create(model=m, prompt=[7] * 37, max_tokens=6,
                                       temperature=0, extra_body={"ignore_eos": True})
    lab = (("model_name", m),)

    got = await scrape_when(
        srv, lambda g: g.get("kvpool_e2e_request_latency_seconds_count", {}).get(lab))
    for name in ("time_to_first_token", "inter_token_latency", "e2e_request_latency",
                 "request_queue_time", "step"):
        assert got[f"kvpool_{name}_seconds_count"][lab] >= 1, name
        assert () not in got[f"kvpool_{name}_seconds_count"]
    # 37 prompt tokens in the first step(s), then one token per decode step: 5 more
    assert got["kvpool_iteration_tokens_sum"][lab] == 37 + r.usage.completion_tokens - 1
    assert got["kvpool_iteration_tokens_count"][lab] == srv.engine.core.steps
    assert got["kvpool_iteration_tokens_bucket"][(("le", "1.0"),) + lab] == 5  # the decodes
