"""The request series vLLM dashboards read, on a real server after real requests (openai
client): whole-prompt token counts beside the computed ones, per-request histograms, finish
reasons, all labelled with the model name."""

from __future__ import annotations

from openai import AsyncOpenAI

from kvpool.metrics.request_metrics import REQUEST_METRIC_NAMES
from tests.server.helpers import scrape, wait_until


async def test_request_series_count_what_was_asked_and_done(srv):
    m = srv.engine.model_name
    prompt = "A shared prefix that is long enough to fill one block or more. " * 2
    async with AsyncOpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=60) as c:
        first = await c.completions.create(model=m, prompt=prompt, max_tokens=5, n=2)
        second = await c.completions.create(model=m, prompt=prompt, max_tokens=3,
                                            stop=[first.choices[0].text[:1] or "e"])
    lab = (("model_name", m),)
    want_prompt = first.usage.prompt_tokens + second.usage.prompt_tokens

    async def settled():
        got = await scrape(srv)
        return got.get("kvpool_prompt_tokens_total", {}).get(lab) == want_prompt
    assert await wait_until(settled)
    got = await scrape(srv)
    for name in REQUEST_METRIC_NAMES:
        assert any(k.startswith(name) for k in got), name
    computed = got["kvpool_prompt_tokens_computed_total"][()]
    assert computed < want_prompt  # the second prompt's full blocks came from the cache
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    success = {k: v for k, v in got["kvpool_request_success_total"].items()}
    assert sum(success.values()) == 3
    assert success[(("finished_reason", "length"), ("model_name", m))] >= 2
    assert got["kvpool_request_prompt_tokens_count"][lab] == 2
    assert got["kvpool_request_prompt_tokens_sum"][lab] == want_prompt
    assert got["kvpool_request_generation_tokens_sum"][lab] == \
        first.usage.completion_tokens + second.usage.completion_tokens
    assert got["kvpool_request_params_n_sum"][lab] == 3
    assert got["kvpool_request_params_max_tokens_sum"][lab] == 8
    for phase in ("prefill", "decode", "inference"):
        assert got[f"kvpool_request_{phase}_time_seconds_count"][lab] == 2
    assert got["kvpool_request_inference_time_seconds_sum"][lab] >= \
        got["kvpool_request_decode_time_seconds_sum"][lab]
