"""/metrics counts what the server refused and what its pool can allocate (real server on
127.0.0.1, real engine): kvpool_admission_rejections_total{reason} and vLLM's
vllm:admission_rejections_total (kvpool/metrics/admission.py NOTE(refusals)),
kvpool_allocatable_blocks (snapshot.py NOTE(allocatable)) and
vllm:request_max_num_generation_tokens (request_metrics.py NOTE(max-generation))."""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp

from tests.server.helpers import post_ok, scrape


async def _post(url: str, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        return r.status, await r.json()


def _refused(metrics: dict, reason: str) -> float:
    return metrics["kvpool_admission_rejections_total"][(("reason", reason),)]


async def test_queue_full_refusals_are_counted_by_reason(make_server):
    # one running sequence, one waiting slot: a burst of slow requests overflows the queue
    async with make_server(max_num_seqs=1, max_queue=1) as srv:
        before = await scrape(srv)
        assert _refused(before, "queue_full") == 0
        body = {"prompt": "hi", "max_tokens": 120, "ignore_eos": True, "temperature": 0}
        answers = await asyncio.gather(*(_post(srv.v1 + "/completions", body)
                                         for _ in range(8)))
        statuses = Counter(status for status, _ in answers)
        assert statuses[503] and statuses[200], statuses
        after = await scrape(srv)
        assert _refused(after, "queue_full") == statuses[503]
        model = srv.engine.model_name
        assert after["vllm:admission_rejections_total"] == {
            (("model_name", model), ("reason", "max_num_queued_reqs")): statuses[503]}
        for reason in ("shutting_down", "tenant_quota", "over_tenant_quota", "over_queue"):
            assert _refused(after, reason) == 0


async def test_more_children_than_the_queue_are_counted_as_vllm_counts_them(make_server):
    """n past --max-queue as child requests (NOTE(apart)) is a 400 here, vLLM's
    max_num_queued_reqs refusal (a 503 there): counted under both names; it moved none."""
    async with make_server(max_num_seqs=2, max_queue=3, max_n=8) as srv:
        status, out = await _post(srv.v1 + "/completions", {"prompt": "hi", "n": 8,
                                                             "max_tokens": 2})  # 4 children
        assert (status, out["error"]["code"]) == (400, "n_too_large_for_queue"), out
        after = await scrape(srv)
        assert _refused(after, "over_queue") == 1 and _refused(after, "queue_full") == 0
        assert after["vllm:admission_rejections_total"] == {
            (("model_name", srv.engine.model_name), ("reason", "max_num_queued_reqs")): 1}


async def test_quota_refusals_are_counted(make_server):
    # 4 sequences of 33 prompt tokens + 16 new need 6 blocks: over a quota of 5 (a 400)
    async with make_server(app_options={"tenant_block_quota": 5}) as srv:
        status, out = await _post(srv.v1 + "/completions", {
            "prompt": list(range(5, 38)), "max_tokens": 16, "n": 4, "ignore_eos": True})
        assert status == 400 and out["error"]["code"] == "tenant_quota_exceeded", out
        metrics = await scrape(srv)
        assert _refused(metrics, "over_tenant_quota") == 1
        assert _refused(metrics, "queue_full") == 0


async def test_an_idle_pool_of_cached_blocks_is_ready_to_allocate(make_server):
    async with make_server() as srv:
        for i in range(4):  # distinct prompts: each leaves its blocks cached, unreferenced
            await post_ok(srv.v1 + "/completions", {
                "prompt": list(range(7 * i + 5, 7 * i + 60)), "max_tokens": 8,
                "ignore_eos": True, "temperature": 0})
        metrics = await scrape(srv)
        device = (("tier", "device"),)
        total = metrics["kvpool_blocks"][device]
        assert metrics["kvpool_free_blocks"][device] < total  # cached content in them
        assert metrics["kvpool_cache_usage_ratio"][device] == 0
        assert metrics["kvpool_allocatable_blocks"][device] == total


async def test_max_generation_tokens_is_observed_once_per_request(make_server):
    async with make_server() as srv:
        out = await post_ok(srv.v1 + "/completions", {
            "prompt": "hello", "n": 2, "max_tokens": 7, "ignore_eos": True})
        assert [c["finish_reason"] for c in out["choices"]] == ["length", "length"]
        metrics = await scrape(srv)
        labels = (("engine", "0"), ("model_name", srv.engine.model_name))
        assert metrics["vllm:request_max_num_generation_tokens_count"] == {labels: 1}
        assert metrics["vllm:request_max_num_generation_tokens_sum"] == {labels: 7}
        hist = metrics["kvpool_request_max_generation_tokens_bucket"]
        assert {dict(k)["le"]: v for k, v in hist.items()}["5.0"] == 0
