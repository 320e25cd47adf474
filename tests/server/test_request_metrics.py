"""The request series vLLM dashboards read, on a real server after real requests (openai
client): whole-prompt token counts beside the computed ones, per-request histograms, finish
reasons, all labelled with the model name."""

from __future__ import annotations

import asyncio
import math
import time

import aiohttp
import pytest
from openai import AsyncOpenAI

from kvpool.metrics.request_metrics import REQUEST_METRIC_NAMES
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
    # NOTE(per-sequence) in kvpool/metrics/request_metrics.py: n=2 counts as two of vLLM's children
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
    # NOTE(iteration-tokens) in kvpool/metrics/collector.py: vLLM's series counts the computed
    # prompt and every generated token, the first one too (before: one short per prefill)
    vlab = (("engine", "0"),) + lab
    assert got["vllm:iteration_tokens_total_sum"][vlab] == 37 + r.usage.completion_tokens
    assert got["vllm:iteration_tokens_total_count"][vlab] == r.usage.completion_tokens

    # NOTE(tpot) in kvpool/metrics/request_metrics.py: a one-token request's TPOT is 0, and
    # observed, as vLLM's; the six-token one's is its decode time over 5
    tpot = "vllm:request_time_per_output_token_seconds"
    assert got[f"{tpot}_sum"][vlab] * 5 == \
        pytest.approx(got["vllm:request_decode_time_seconds_sum"][vlab], rel=1e-9)
    async with AsyncOpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=60) as c:
        await c.completions.create(model=m, prompt=[7] * 37, max_tokens=1)
    le = (vlab[0], ("le", "0.01"), vlab[1])  # labels in name order, as parse_metrics keys them
    after = await scrape_when(srv, lambda g: g[f"{tpot}_count"][vlab] == 2)
    assert after[f"{tpot}_sum"][vlab] == got[f"{tpot}_sum"][vlab]
    assert after[f"{tpot}_bucket"][le] == \
        got[f"{tpot}_bucket"][le] + 1


async def test_a_prompt_counts_at_its_first_token_and_a_left_request_is_not_timed(srv):
    """NOTE(prefill-count) in kvpool/metrics/request_metrics.py: a streamed request's prompt
    counts while it generates, and still after its client left; the aborted request is in the
    TTFT histogram (its first token happened) but not in e2e or queue time, as in vLLM.
    Before, the prompt counted only when the server saw the answer end: 0 mid-stream, and
    never for a client that left, while e2e and queue counted the aborted request."""
    m, lab = srv.engine.model_name, (("model_name", srv.engine.model_name),)
    before = await scrape(srv)
    c0 = {k: before.get(k, {}).get(lab, 0) for k in (
        "kvpool_prompt_tokens_total", "kvpool_e2e_request_latency_seconds_count",
        "kvpool_request_queue_time_seconds_count", "kvpool_time_to_first_token_seconds_count")}
    body = {"model": m, "prompt": [11] * 40, "max_tokens": 400, "stream": True,
            "ignore_eos": True}
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/completions", json=body) as r:
            for _ in range(3):
                assert (await r.content.readline()).startswith((b"data:", b"\n"))
            mid = await scrape(srv)
            assert mid["kvpool_prompt_tokens_total"][lab] == c0["kvpool_prompt_tokens_total"] + 40
            assert sum(mid["vllm:prompt_tokens_total"].values()) == \
                mid["kvpool_prompt_tokens_total"][lab]
    got = await scrape_when(srv, lambda g: g["kvpool_requests"][(("state", "running"),)] == 0
                            and g["kvpool_requests_in_flight"][()] == 0)
    assert got["kvpool_prompt_tokens_total"][lab] == c0["kvpool_prompt_tokens_total"] + 40
    assert got["kvpool_time_to_first_token_seconds_count"][lab] == \
        c0["kvpool_time_to_first_token_seconds_count"] + 1
    for k in ("kvpool_e2e_request_latency_seconds_count",
              "kvpool_request_queue_time_seconds_count"):
        assert got[k][lab] == c0[k], k  # the left request is not timed


# vLLM 0.33's bounds, written out from vllm/v1/metrics/buckets.py and loggers.py
VLLM_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
VLLM_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0]
VLLM_REQUEST = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
VLLM_TOKENS_256 = [1, 2, 5, 10, 20, 50, 100, 200]  # the 1-2-5 series up to max_model_len 256
VLLM_BOUNDS = {
    "vllm:time_to_first_token_seconds": VLLM_TTFT,
    "vllm:inter_token_latency_seconds": VLLM_ITL,
    "vllm:request_time_per_output_token_seconds": VLLM_ITL,
    **{f"vllm:{name}_seconds": VLLM_REQUEST for name in (
        "e2e_request_latency", "request_queue_time", "request_prefill_time",
        "request_decode_time", "request_inference_time")},
    "vllm:iteration_tokens_total": [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                    16384],
    "vllm:request_params_n": [1, 2, 5, 10, 20],
    "vllm:request_num_preemptions": [1, 2, 3, 4, 5, 10, 20],
    **{f"vllm:{name}": VLLM_TOKENS_256 for name in (
        "request_prompt_tokens", "request_generation_tokens",
        "request_max_num_generation_tokens", "request_params_max_tokens",
        "request_prefill_kv_computed_tokens")},
}


async def test_every_vllm_histogram_has_vllms_bucket_bounds(srv):
    """NOTE(vllm-buckets) in kvpool/metrics/vllm_series.py: an alert on a bound picked from
    vLLM's list (le="20", le="0.2") finds the series (before: kvpool's own bounds); the
    request latencies reach 7680 s and TTFT 2560 s (NOTE(long-latency) in collector.py)."""
    assert srv.engine.max_model_len == 256
    got = await scrape(srv)
    served = {name.removesuffix("_bucket") for name in got if name.startswith("vllm:")
              and name.endswith("_bucket")}
    assert served == set(VLLM_BOUNDS)
    for name, bounds in VLLM_BOUNDS.items():
        les = sorted(float(dict(k)["le"]) for k in got[f"{name}_bucket"])
        assert les == [float(b) for b in bounds] + [math.inf], name
