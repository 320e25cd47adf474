"""Issue 12 item 3: one big prompt must not freeze every client. A prompt that cannot fit is
refused before the work that grows with its size (tokenizing, the per-id walk), and large bodies
are parsed off the event loop, so /health answers while a long tokenization runs."""

from __future__ import annotations

import asyncio

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.runtime.model.byte_tokenizer import build_byte_tokenizer
from kvpool.server.app import ROUTES_KEY
from tests.server.helpers import health_during_parse

TOK = build_byte_tokenizer()
BIG_BODY = 8 * 1024 * 1024
FOUR_MB = 4 * 1024 * 1024
WORDS = ["the", " scheduler", " block", "Hello", ",", " ", "\n", "é", "🙂", "</s>", "<s>", "x"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(min_size=1, max_size=300),
                 st.lists(st.sampled_from(WORDS), min_size=1, max_size=200).map("".join)))
def test_char_bound_never_refuses_a_text_that_fits(text):
    """``max_chars_per_token`` is an upper bound: a text of C chars needs >= C / bound tokens,
    so refusing texts over ``max_model_len * bound`` chars never refuses one that fits."""
    bound = TOK.max_chars_per_token()
    assert bound is not None
    assert len(text) <= len(TOK.encode(text, add_special_tokens=False)) * bound
    assert TOK.encode_unlocked(text) == TOK.encode(text)


async def _post(url: str, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        return r.status, await r.json()


def _assert_too_long(status: int, body: dict, param: str) -> None:
    assert status == 400, body
    err = body["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == param
    assert err["type"] == "invalid_request_error"


async def test_big_prompts_are_refused_400_before_the_work(make_server):
    async with make_server(max_body_bytes=BIG_BODY) as srv:
        limit = srv.app[ROUTES_KEY].parser.max_prompt_chars
        assert limit == 256 * TOK.max_chars_per_token()
        cases = [
            ({"prompt": "hello world, " * (FOUR_MB // 13)}, "prompt", "characters"),
            ({"prompt": "x" * (limit + 1)}, "prompt", "characters"),
            # refused from the raw body before json.loads (test_body_bound.py)
            ({"prompt": [0] * 2_000_000}, None, "JSON values"),
            ({"prompt": [0] * 256}, "prompt", "256 tokens"),
        ]
        for body, param, what in cases:
            status, out = await _post(srv.v1 + "/completions", {**body, "max_tokens": 1})
            _assert_too_long(status, out, param)
            assert what in out["error"]["message"]
        status, out = await _post(srv.v1 + "/chat/completions", {
            "messages": [{"role": "user", "content": "hi " * (FOUR_MB // 3)}]})
        _assert_too_long(status, out, "messages")
        assert "characters" in out["error"]["message"]
        # a prompt under the bound is tokenized and judged on its real length
        short = "7 " * 300
        assert len(short) <= limit and len(TOK.encode(short)) >= 256
        status, out = await _post(srv.v1 + "/completions", {"prompt": short, "max_tokens": 1})
        _assert_too_long(status, out, "prompt")
        assert "tokens" in out["error"]["message"]
        status, out = await _post(srv.v1 + "/completions", {"prompt": "hi", "max_tokens": 2})
        assert status == 200 and out["usage"]["completion_tokens"] == 2


async def test_health_answers_while_a_big_prompt_is_tokenized(make_server):
    """With a context long enough that a ~3 MB prompt must really be tokenized (seconds of
    work), a /health sent while it runs comes back before the big request does."""
    async with make_server(max_body_bytes=BIG_BODY, max_model_len=600_000) as srv:
        routes = srv.app[ROUTES_KEY]
        text = "hello world, " * (3 * 1024 * 1024 // 13)
        assert len(text) <= 600_000 * TOK.max_chars_per_token()  # no shortcut: it is tokenized
        async with aiohttp.ClientSession() as s:
            async def big() -> tuple[int, dict]:
                async with s.post(srv.v1 + "/completions",
                                  json={"prompt": text, "max_tokens": 1}) as r:
                    return r.status, await r.json()

            task = asyncio.create_task(big())
            # wait (on the loop the server shares) until the tokenization is under way; a
            # server that tokenizes on the loop never lets this check run mid-parse
            while not task.done() and routes.parse_pool.parsing == 0:
                await asyncio.sleep(0.005)
            async with s.get(srv.url + "/health") as r:
                assert r.status == 200
            assert not task.done(), "the big request finished before /health: loop blocked"
            status, out = await task
        _assert_too_long(status, out, "prompt")  # ~2M tokens: tokenized, then refused
        assert "tokens" in out["error"]["message"]


async def test_health_answers_while_tokenize_works_on_a_big_prompt(make_server):
    async with make_server(max_body_bytes=2 * 1024 * 1024, max_model_len=800_000) as srv:
        text = "hello world, " * (1024 * 1024 // 13)
        status, out = await health_during_parse(srv, srv.url + "/tokenize", {"prompt": text})
        assert status == 200 and out["count"] == len(out["tokens"]) > 500_000, out["count"]
