"""/metrics carries the vllm:* series that tools built for vLLM read by name (NOTE(vllm-names)
in kvpool/metrics/vllm_series.py): the endpoint picker's and llm-d's queue, running and KV
usage gauges, vllm:cache_config_info, and the counters and histograms of vLLM's dashboards,
with vLLM's types and labels, moving with the load on a real server."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvpool.metrics.vllm_series import VLLM_HISTOGRAMS, VLLM_ITERATION_TOKENS, VLLM_METRIC_NAMES
from tests.server.helpers import parse_metrics

SETTLE = 20.0  # seconds: a bound for the load to show, never a speed assertion


async def families(srv) -> dict:
    """/metrics parsed by prometheus_client: family name -> family."""
    async with aiohttp.ClientSession() as s, s.get(srv.url + "/metrics") as r:
        assert r.status == 200
        return {f.name: f for f in text_string_to_metric_families(await r.text())}


async def scrape_until(srv, check) -> dict:
    deadline = time.monotonic() + SETTLE
    while True:
        async with aiohttp.ClientSession() as s, s.get(srv.url + "/metrics") as r:
            got = parse_metrics(await r.text())
        if check(got):
            return got
        assert time.monotonic() < deadline, "the vllm:* series never showed the load"
        await asyncio.sleep(0.005)


async def test_vllm_series_have_vllm_names_types_and_labels(srv):
    fams = await families(srv)
    labels = {"model_name": srv.engine.model_name, "engine": "0"}
    histograms = {name for name, _ in VLLM_HISTOGRAMS.values()} | {VLLM_ITERATION_TOKENS[0]}
    for name in VLLM_METRIC_NAMES:
        kind = ("histogram" if name in histograms else
                "counter" if name.endswith("_total") else "gauge")
        fam = fams.get(name.removesuffix("_total") if kind == "counter" else name)
        assert fam is not None, f"{name} is not on /metrics"
        assert fam.type == kind, (name, fam.type)
        for sample in fam.samples:
            if name != "vllm:cache_config_info":
                assert {k: sample.labels[k] for k in labels} == labels, sample
    info = fams["vllm:cache_config_info"].samples[0]
    assert info.value == 1 and info.labels["engine"] == "0"
    assert info.labels["block_size"] == str(srv.engine.config.block_size)
    assert info.labels["num_gpu_blocks"] == str(srv.engine.num_device_blocks)


async def test_vllm_gauges_follow_the_load(make_server):
    """One sequence at a time: of three requests one runs and two wait, and the KV usage is
    the device pool's; afterwards the counters and histograms counted all three."""
    async with make_server(max_num_seqs=1) as srv:
        lab = (("engine", "0"), ("model_name", srv.engine.model_name))
        body = {"prompt": [65 + i for i in range(20)], "max_tokens": 120, "ignore_eos": True,
                "temperature": 0}
        async with aiohttp.ClientSession() as s:
            async def one() -> dict:
                async with s.post(srv.url + "/v1/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    return await r.json()

            tasks = [asyncio.create_task(one()) for _ in range(3)]
            got = await scrape_until(srv, lambda g: g["vllm:num_requests_waiting"][lab] == 2)
            assert got["vllm:num_requests_running"][lab] == 1
            # NOTE(waiting-reasons): the two wait for room (capacity) once the scheduler has
            # them; the reasons always sum to vllm:num_requests_waiting, as vLLM's
            by_reason = "vllm:num_requests_waiting_by_reason"
            got = await scrape_until(srv, lambda g: g[by_reason][(*lab, ("reason",
                                                                         "capacity"))] == 2)
            assert got[by_reason][(*lab, ("reason", "deferred"))] == 0
            assert got["vllm:kv_cache_usage_perc"][lab] > 0
            assert got["vllm:kv_cache_usage_perc"][lab] == \
                got["kvpool_cache_usage_ratio"][(("tier", "device"),)]
            await asyncio.gather(*tasks)
        got = await scrape_until(
            srv, lambda g: g["vllm:e2e_request_latency_seconds_count"][lab] == 3)
        assert got["vllm:num_requests_running"][lab] == got["vllm:num_requests_waiting"][lab] == 0
        assert got["vllm:generation_tokens_total"][lab] == 360
        assert got["vllm:prefix_cache_queries_total"][lab] >= 60
        assert got["vllm:prefix_cache_hits_total"][lab] >= 16  # the same prompt, twice more
        assert got["vllm:time_to_first_token_seconds_count"][lab] == 3
        # NOTE(iteration-tokens): vLLM's counts every generated token, the first ones too
        assert got["vllm:iteration_tokens_total_sum"][lab] == \
            got["kvpool_iteration_tokens_sum"][lab[1:]] + 3
        check_vllm_only_series(got, lab)


async def test_a_recompute_is_not_counted_again_in_iteration_tokens(make_server):
    """NOTE(iteration-tokens): vLLM's stats count a prompt at its first token only, so a
    request recomputed after a preemption adds only the tokens it generates; kvpool counted
    the recomputed prefill again. Four requests of 60 tokens on a 128-slot pool preempt."""
    async with make_server(num_device_blocks=8, num_host_blocks=0,
                           preemption_mode="recompute") as srv:
        lab = (("engine", "0"), ("model_name", srv.engine.model_name))
        async with aiohttp.ClientSession() as s:
            async def one(i: int) -> dict:
                body = {"prompt": [70 + i] * 20, "max_tokens": 40, "ignore_eos": True,
                        "temperature": 0}
                async with s.post(srv.url + "/v1/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    return await r.json()

            answers = await asyncio.gather(*(one(i) for i in range(4)))
        got = await scrape_until(
            srv, lambda g: g["vllm:e2e_request_latency_seconds_count"][lab] == 4)
        assert got["vllm:num_preemptions_total"][lab] > 0
        assert got["vllm:iteration_tokens_total_sum"][lab] == \
            sum(a["usage"]["prompt_tokens"] + a["usage"]["completion_tokens"] for a in answers)


def check_vllm_only_series(got: dict, lab: tuple) -> None:
    """After test_vllm_gauges_follow_the_load's three 20-token prompts, 120 tokens each."""
    assert got["vllm:engine_sleep_state"] == {  # NOTE(sleep-state): never asleep
        (*lab, ("sleep_state", s)): v
        for s, v in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0))}
    # NOTE(tpot) in request_metrics.py: each decode time over its 119 tokens after the first
    assert got["vllm:request_time_per_output_token_seconds_count"][lab] == 3
    assert got["vllm:request_time_per_output_token_seconds_sum"][lab] * 119 == \
        pytest.approx(got["vllm:request_decode_time_seconds_sum"][lab], rel=1e-9)
    # the prompts less their first-admission prefix-cache hits, as vLLM's
    assert got["vllm:request_prefill_kv_computed_tokens_sum"][lab] == \
        60 - got["vllm:prefix_cache_hits_total"][lab]


async def test_vllm_request_series_count_each_request(srv):
    """vLLM dashboards' request series: prompt tokens, finish reasons and the per-request
    histograms, labelled model_name and engine, with the kvpool series' numbers."""
    m = srv.engine.model_name
    lab = (("engine", "0"), ("model_name", m))
    async with aiohttp.ClientSession() as s:
        for n in (1, 2):
            async with s.post(srv.url + "/v1/completions", json={
                    "prompt": [7] * 30, "max_tokens": 5, "n": n, "ignore_eos": True}) as r:
                assert r.status == 200, await r.text()
    # vLLM runs n=2 as two child requests and counts each (NOTE(per-sequence) in
    # kvpool/metrics/request_metrics.py): three in every per-request series, n once per request
    got = await scrape_until(
        srv, lambda g: g.get("vllm:request_inference_time_seconds_count", {}).get(lab) == 3)
    assert got["vllm:prompt_tokens_total"][lab] == 90
    assert got["vllm:request_success_total"][(("engine", "0"), ("finished_reason", "length"),
                                               ("model_name", m))] == 3
    assert got["vllm:request_prompt_tokens_sum"][lab] == 90
    assert got["vllm:request_generation_tokens_count"][lab] == 3
    assert got["vllm:request_params_n_count"][lab] == 2
    assert got["vllm:request_params_n_sum"][lab] == 3
    assert got["vllm:request_params_max_tokens_sum"][lab] == 15
    for phase in ("prefill", "decode"):
        assert got[f"vllm:request_{phase}_time_seconds_count"][lab] == 3
    for series in ("e2e_request_latency", "time_to_first_token", "request_queue_time"):
        assert got[f"vllm:{series}_seconds_count"][lab] == 3, series
    # vLLM's FinishedRequestStats series, one per sequence (NOTE(tpot) in request_metrics.py):
    # 5 tokens each, so TPOT is the decode time over 4; no preemption on an idle server; the
    # n=2 request's sequences each read its prompt less the 16 tokens (one block) it hit
    tpot = "vllm:request_time_per_output_token_seconds"
    assert got[f"{tpot}_count"][lab] == 3
    assert got[f"{tpot}_sum"][lab] * 4 == \
        pytest.approx(got["vllm:request_decode_time_seconds_sum"][lab], rel=1e-9)
    assert got["vllm:request_num_preemptions_count"][lab] == 3
    assert got["vllm:request_num_preemptions_sum"][lab] == 0
    assert got["vllm:request_num_preemptions_bucket"][(lab[0], ("le", "1.0"), lab[1])] == 3
    assert got["vllm:request_prefill_kv_computed_tokens_count"][lab] == 3
    assert got["vllm:request_prefill_kv_computed_tokens_sum"][lab] == 30 + 2 * (30 - 16)


async def test_preemptions_count_sequences_as_vllms_children(make_server):
    """NOTE(preempted-seqs) in kvpool/metrics/vllm_series.py: vLLM preempts each child of an
    n > 1 request, counts each in vllm:num_preemptions_total and observes each finished
    child's count; so once every request finished, the histogram's sum equals the counter
    (before: the counter counted requests, short for n > 1)."""
    async with make_server(num_device_blocks=12, num_host_blocks=0) as srv:
        lab = (("engine", "0"), ("model_name", srv.engine.model_name))
        async with aiohttp.ClientSession() as s:
            async def one(i: int, n: int) -> None:
                async with s.post(srv.url + "/v1/completions", json={
                        "prompt": [20 + i] * 40, "max_tokens": 60, "n": n,
                        "ignore_eos": True, "temperature": 0}) as r:
                    assert r.status == 200, await r.text()

            await asyncio.gather(*(one(i, n) for i, n in enumerate((2, 2, 1))))
        got = await scrape_until(
            srv, lambda g: g["vllm:request_num_preemptions_count"].get(lab) == 5)
        groups = sum(got["kvpool_preemptions_total"].values())
        assert groups > 0, "the test needs preemptions to happen"
        assert got["vllm:num_preemptions_total"][lab] == \
            got["vllm:request_num_preemptions_sum"][lab]
