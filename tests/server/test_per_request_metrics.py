"""vLLM's --enable-per-request-metrics (request_timing.py NOTE(per-request-metrics)): the
"metrics" object `vllm bench serve` reads (queue_time_ms, time_to_first_token_ms) in a
completions / chat body and a stream's usage chunk; absent without the flag, with n > 1 or
several prompts."""

from __future__ import annotations

import argparse
import time

import pytest

from kvpool.errors import ConfigError
from kvpool.server.serve import add_serve_args
from kvpool.server.serve_options import ServeOptions
from tests.server.helpers import post_ok, sse_chunks

KEYS = {"time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms",
        "tokens_per_second"}
TOKENS = 6


def consistent(m: dict, wall_ms: float) -> None:
    """The values vLLM's build_per_request_timing_metrics gives, for TOKENS tokens, within the
    time the client waited."""
    assert KEYS <= set(m) and all(m[k] >= 0 for k in KEYS), m
    assert m["queue_time_ms"] + m["time_to_first_token_ms"] + m["generation_time_ms"] <= wall_ms
    assert m["mean_itl_ms"] == pytest.approx(m["generation_time_ms"] / (TOKENS - 1))
    inference_s = (m["time_to_first_token_ms"] + m["generation_time_ms"]) / 1000
    assert m["tokens_per_second"] == pytest.approx(TOKENS / inference_s, rel=1e-6)


async def test_metrics_in_body_and_usage_chunk_only_with_the_flag(make_server):
    body = {"max_tokens": TOKENS, "ignore_eos": True, "temperature": 0}
    async with make_server(app_options={"per_request_metrics": True}) as srv:
        url = srv.url + "/v1/completions"
        t0 = time.perf_counter()
        done = await post_ok(url, {**body, "prompt": "hello"})
        consistent(done["metrics"], (time.perf_counter() - t0) * 1000)
        assert done["metrics"]["speculative_decoding"] is None  # vLLM's body has the key
        t0 = time.perf_counter()
        chunks = await sse_chunks(srv.url + "/v1/chat/completions", {
            **body, "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "stream_options": {"include_usage": True}})
        last = chunks[-1]
        assert last["choices"] == [] and last["usage"]["completion_tokens"] == TOKENS
        consistent(last["metrics"], (time.perf_counter() - t0) * 1000)
        assert set(last["metrics"]) == KEYS  # the stream's chunk leaves null keys out
        assert all("metrics" not in c for c in chunks[:-1])
        # no usage chunk, n > 1, several prompts: none (vLLM's rule)
        plain = await sse_chunks(url, {**body, "prompt": "hello", "stream": True})
        assert all("metrics" not in c for c in plain)
        assert (await post_ok(url, {**body, "prompt": "hello", "n": 2}))["metrics"] is None
        assert (await post_ok(url, {**body, "prompt": ["a", "b"]}))["metrics"] is None
    async with make_server() as srv:  # the default: off, as vLLM's
        done = await post_ok(srv.url + "/v1/completions", {**body, "prompt": "hello"})
        assert done["metrics"] is None
        chunks = await sse_chunks(srv.url + "/v1/completions", {
            **body, "prompt": "hello", "stream": True, "stream_options": {"include_usage": True}})
        assert all("metrics" not in c for c in chunks)


def test_the_flag_is_vllms_and_off_by_default():
    parser = add_serve_args(argparse.ArgumentParser())
    on = ServeOptions.from_args(parser.parse_args(["--enable-per-request-metrics"]))
    assert on.request_defaults["per_request_metrics"] is True
    off = ServeOptions.from_args(parser.parse_args([]))
    assert off.request_defaults["per_request_metrics"] is False
    # vLLM refuses it with --disable-log-stats (its engine would have no timestamps)
    with pytest.raises(ConfigError, match="--disable-log-stats"):
        ServeOptions.from_args(parser.parse_args(["--enable-per-request-metrics",
                                                  "--disable-log-stats"]))


async def test_a_responses_object_carries_them_when_it_ends(make_server):
    """vLLM 0.33 writes ``metrics`` into the Responses object too (left out without the flag)."""
    body = {"input": "hi", "max_output_tokens": TOKENS, "temperature": 0}
    async with make_server(app_options={"per_request_metrics": True}) as srv:
        t0 = time.perf_counter()
        done = await post_ok(srv.url + "/v1/responses", body)
        assert done["status"] in ("completed", "incomplete"), done["status"]
        m = done["metrics"]
        assert KEYS <= set(m) and m["queue_time_ms"] + m["time_to_first_token_ms"] + \
            m["generation_time_ms"] <= (time.perf_counter() - t0) * 1000, m
    async with make_server() as srv:
        assert "metrics" not in await post_ok(srv.url + "/v1/responses", body)
