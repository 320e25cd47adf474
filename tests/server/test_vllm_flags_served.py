"""vLLM's serve flags that kvpool honors, seen in a real server's answers: ``kvpool serve``'s
own path (the command line parsed as kvpool.cli parses it, then serve.serve) on 127.0.0.1,
in this process, stopped through its stop event (kvpool/server/vllm_flags.py)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from kvpool import cli
from kvpool.runtime.model.byte_tokenizer import EOS, build_byte_tokenizer
from kvpool.server import serve
from kvpool.server.serve_options import ServeOptions
from tests.server.helpers import parse_metrics, whole_vocab_names

SMALL = ("--port", "0", "--num-device-blocks", "40", "--num-host-blocks", "0",
         "--max-model-len", "512", "--num-threads", "1", "--no-enable-prefix-caching")


@contextlib.asynccontextmanager
async def served(*argv: str) -> AsyncIterator[str]:
    """A server started from ``kvpool serve SMALL... argv``; yields its base URL."""
    args = cli.build_parser("serve").parse_args(["serve", *SMALL, *argv])
    config, options = serve.config_from_args(args), ServeOptions.from_args(args)
    stop, ready, where = asyncio.Event(), asyncio.Event(), {}

    def on_ready(host: str, port: int) -> None:
        where["url"] = f"http://127.0.0.1:{port}"
        ready.set()

    task = asyncio.create_task(serve.serve(config, options, stop=stop, on_ready=on_ready,
                                           handle_signals=False))
    try:
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiting}, timeout=120, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if task.done():
            task.result()  # raises what stopped it
        yield where["url"]
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)
        gc.unfreeze()  # serve() froze the startup heap (NOTE(gc-freeze))


async def waiting_requests(s: aiohttp.ClientSession, url: str) -> float:
    async with s.get(url + "/metrics") as r:
        return sum(parse_metrics(await r.text())["vllm:num_requests_waiting"].values())


async def finish_order(url: str) -> list[str]:
    """A runs (max-num-seqs 1); B (priority 5) then C (priority -5) arrive while it does:
    the names in the order their answers completed."""
    done: list[str] = []
    body = {"prompt": "Once upon", "ignore_eos": True, "temperature": 0}

    async def call(s: aiohttp.ClientSession, name: str, **extra) -> None:
        async with s.post(url + "/v1/completions", json={**body, **extra}) as r:
            assert r.status == 200, await r.text()
            await r.read()
        done.append(name)

    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/completions",
                          json={**body, "max_tokens": 300, "stream": True}) as a:
            await a.content.readline()  # A's first chunk: A is running
            b = asyncio.create_task(call(s, "B", max_tokens=4, priority=5))
            while await waiting_requests(s, url) < 1:  # B queued behind A
                await asyncio.sleep(0.005)
            c = asyncio.create_task(call(s, "C", max_tokens=4, priority=-5))
            await a.read()
            done.append("A")
        await asyncio.gather(b, c)
    return done


async def test_scheduling_policy_priority_serves_the_smaller_priority_first():
    async with served("--max-num-seqs", "1", "--scheduling-policy", "priority") as url:
        # C preempts A (priority 0 > -5); A then goes before B (5)
        assert await finish_order(url) == ["C", "A", "B"]


async def test_scheduling_policy_fcfs_is_arrival_order_as_without_the_flag():
    for policy in (("--scheduling-policy", "fcfs"), ()):
        async with served("--max-num-seqs", "1", *policy) as url:
            assert await finish_order(url) == ["A", "B", "C"]  # vLLM's default


async def post(s: aiohttp.ClientSession, url: str, path: str, body: dict) -> dict[str, Any]:
    async with s.post(url + path, json=body) as r:
        assert r.status == 200, await r.text()
        return await r.json()


def as_ids(tokens: list[str]) -> bool:
    return bool(tokens) and all(re.fullmatch(r"token_id:\d+", t) for t in tokens)


async def test_return_tokens_as_token_ids_is_the_request_fields_default():
    prompt = {"prompt": "Once upon", "max_tokens": 3, "logprobs": 2}
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "logprobs": True,
            "top_logprobs": 2}
    async with served("--return-tokens-as-token-ids") as url, aiohttp.ClientSession() as s:
        lp = (await post(s, url, "/v1/completions", prompt))["choices"][0]["logprobs"]
        assert as_ids(lp["tokens"]) and all(as_ids(list(top)) for top in lp["top_logprobs"])
        content = (await post(s, url, "/v1/chat/completions", chat))["choices"][0]["logprobs"]
        assert as_ids([c["token"] for c in content["content"]])
        assert as_ids([t["token"] for c in content["content"] for t in c["top_logprobs"]])
        # the request's own false wins, as in vLLM
        lp = (await post(s, url, "/v1/completions", {**prompt, "return_tokens_as_token_ids":
                                                     False}))["choices"][0]["logprobs"]
        assert not any(t.startswith("token_id:") for t in lp["tokens"])


async def test_max_logprobs_minus_one_is_no_cap():
    """vLLM's --max-logprobs -1: the bound is the vocabulary's size, so -1 (every token,
    logprob_fields.py NOTE(whole-vocab)) and k past the default 20 are served; past the
    vocabulary is still a 400 naming the field."""
    tokenizer = build_byte_tokenizer()  # the built-in tiny model's
    vocab = tokenizer.vocab_size
    async with served("--max-logprobs", "-1") as url, aiohttp.ClientSession() as s:
        body = {"prompt": "Once upon", "max_tokens": 2, "temperature": 0, "logprobs": -1}
        lp = (await post(s, url, "/v1/completions", body))["choices"][0]["logprobs"]
        assert len(lp["tokens"]) == 2  # top_logprobs' keys: split bytes collide as ""
        assert all(whole_vocab_names(top, tokenizer) for top in lp["top_logprobs"])
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                "logprobs": True, "top_logprobs": -1}
        content = (await post(s, url, "/v1/chat/completions", chat))["choices"][0]["logprobs"]
        assert [len(c["top_logprobs"]) for c in content["content"]] == [vocab, vocab]
        lp = (await post(s, url, "/v1/completions", {**body, "logprobs": 21}))["choices"][0]
        assert all(len(top) == 21 for top in lp["logprobs"]["top_logprobs"])
        async with s.post(url + "/v1/completions", json={**body, "logprobs": vocab + 1}) as r:
            assert r.status == 400 and (await r.json())["error"]["param"] == "logprobs"


async def test_override_generation_config_sets_the_defaults_and_caps_max_tokens():
    body = {"prompt": "Once upon", "ignore_eos": True}
    async with served("--override-generation-config", '{"max_new_tokens": 3, "temperature": 0}',
                      "--generation-config", "vllm") as url, aiohttp.ClientSession() as s:
        left_out = await post(s, url, "/v1/completions", body)
        assert left_out["usage"]["completion_tokens"] == 3  # not OpenAI's 16
        asked = await post(s, url, "/v1/completions", {**body, "max_tokens": 10})
        assert asked["usage"]["completion_tokens"] == 3  # vLLM's override_max_tokens
        assert asked["choices"][0]["finish_reason"] == "length"
        seeded = {(await post(s, url, "/v1/completions", {**body, "seed": k}))["choices"][0][
            "text"] for k in (1, 2, 3)}
        assert len(seeded) == 1  # temperature 0: greedy, whatever the seed
        hot = {(await post(s, url, "/v1/completions", {**body, "seed": k, "temperature": 1.0}))[
            "choices"][0]["text"] for k in (1, 2, 3)}
        assert len(hot) > 1  # what the request sends wins


async def test_the_files_penalties_and_skip_special_tokens_are_request_defaults(tmp_path):
    """As vLLM's get_diff_sampling_param: presence_penalty, frequency_penalty and
    skip_special_tokens from --generation-config's file; a request's own value wins."""
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"presence_penalty": 0.5, "frequency_penalty": 2.0, "skip_special_tokens": False}))
    greedy = {"prompt": "Once upon", "ignore_eos": True, "max_tokens": 24, "temperature": 0}
    eos = build_byte_tokenizer().eos_token_id
    special = {**greedy, "max_tokens": 3, "logit_bias": {str(eos): 100}}
    async with served("--generation-config", str(tmp_path)) as url, aiohttp.ClientSession() as s:
        async def text(body: dict) -> str:
            return (await post(s, url, "/v1/completions", body))["choices"][0]["text"]

        penalized = await text(greedy)
        assert penalized == await text({**greedy, "presence_penalty": 0.5,
                                        "frequency_penalty": 2.0})
        assert penalized != await text({**greedy, "presence_penalty": 0,
                                        "frequency_penalty": 0})  # the tiny model repeats
        assert await text(special) == EOS * 3
        assert await text({**special, "skip_special_tokens": True}) == ""
        echoed = await post(s, url, "/v1/responses", {"input": "hi", "max_output_tokens": 2})
        assert (echoed["presence_penalty"], echoed["frequency_penalty"]) == (0.5, 2.0)


@pytest.mark.parametrize("argv, lines", [((), 1), (("--disable-uvicorn-access-log",), 0)])
async def test_disable_uvicorn_access_log_drops_the_access_line(argv, lines, caplog):
    caplog.set_level(logging.DEBUG, logger="kvpool.server")  # kvpool's access line: debug only
    async with served(*argv) as url, aiohttp.ClientSession() as s:
        async with s.get(url + "/health") as r:
            assert r.status == 200
    access = [r for r in caplog.records if '"GET /health HTTP/1.1" 200' in r.getMessage()]
    assert len(access) == lines
