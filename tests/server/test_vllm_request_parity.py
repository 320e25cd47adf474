"""Requests real clients send that vLLM 0.33 answers with a 200, on a real server on
127.0.0.1: what kvpool answers to each is checked against what vLLM 0.33's
/v1/completions and /v1/chat/completions code does with it (docs/architecture.md "Token ids
in the answer" and "Bool fields and vLLM's null keys")."""

from __future__ import annotations

import json

import aiohttp

from kvpool.server.field_policy import IGNORED_FIELDS_HEADER
from tests.server.helpers import whole_vocab_names

P = "Once upon a time"
COMPLETION = {"prompt": P, "max_tokens": 3, "temperature": 0}
CHAT = {"messages": [{"role": "user", "content": P}], "max_tokens": 3, "temperature": 0}


async def answer(srv, path: str, body: dict) -> tuple[int, list[dict], list[str]]:
    """(status, [the JSON body] or the stream's chunks before [DONE], ignored fields)."""
    async with aiohttp.ClientSession() as s, s.post(srv.url + path, json=body) as r:
        raw = await r.text()
        ignored = [n for n in r.headers.get(IGNORED_FIELDS_HEADER, "").split(",") if n]
        if not r.headers["Content-Type"].startswith("text/event-stream"):
            return r.status, [json.loads(raw)], ignored
    events = [e.removeprefix("data: ") for e in raw.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    return r.status, [json.loads(e) for e in events[:-1]], ignored


async def test_best_of_is_never_refused_as_vllm_033_has_no_such_field(srv):
    """NOTE(best-of): acted on only for n < best_of <= --max-n, not streamed; anything else
    runs n sequences, as vLLM 0.33 does, and is listed as ignored (it was a 400)."""
    for extra in ({"n": 2, "best_of": 1}, {"best_of": 99}, {"best_of": 2.5},
                  {"best_of": "two"}, {"best_of": 3, "stream": True}):
        status, got, ignored = await answer(srv, "/v1/completions", {**COMPLETION, **extra})
        assert status == 200, (extra, got)
        choices = [c for chunk in got for c in chunk["choices"]]
        assert {c["index"] for c in choices} == set(range(extra.get("n", 1))), extra
        assert ignored == ["best_of"], extra
    status, got, ignored = await answer(srv, "/v1/completions",
                                        {**COMPLETION, "n": 1, "best_of": 3})
    assert status == 200 and len(got[0]["choices"]) == 1 and ignored == []
    assert got[0]["usage"]["completion_tokens"] == 3  # the returned choice's own


async def test_best_of_past_max_num_seqs_runs_n(make_server):
    """NOTE(best-of): under --max-num-seqs 4, best_of 8 (<= 16 and --max-n) runs n and is
    listed (it was the admission gate's 400 n_too_large_for_batch); best_of 4 is acted on."""
    async with make_server(max_num_seqs=4, max_n=16) as srv:
        for best_of, listed in ((8, ["best_of"]), (4, [])):
            status, got, ignored = await answer(srv, "/v1/completions",
                                                {**COMPLETION, "best_of": best_of})
            assert status == 200 and len(got[0]["choices"]) == 1, got
            assert ignored == listed, best_of


async def test_logprob_counts_take_minus_one_and_vllms_zeros(make_server):
    """NOTE(whole-vocab): -1 is every token's logprob where --max-logprobs allows it (a 400
    naming the field where not); chat's top_logprobs 0 needs no logprobs: true, and
    prompt_logprobs 0 goes with stream (both were 400s, as -1 was everywhere)."""
    async with make_server() as srv:
        vocab = srv.engine.tokenizer.vocab_size
        for path, body, field in (("/v1/completions", COMPLETION, "logprobs"),
                                  ("/v1/completions", COMPLETION, "prompt_logprobs"),
                                  ("/v1/chat/completions", {**CHAT, "logprobs": True},
                                   "top_logprobs")):
            status, got, _ = await answer(srv, path, {**body, field: -1})
            assert status == 400 and got[0]["error"]["param"] == field, got
            assert "--max-logprobs" in got[0]["error"]["message"]
            status, got, _ = await answer(srv, path, {**body, field: -2})
            assert status == 400 and got[0]["error"]["param"] == field, got
        status, got, _ = await answer(srv, "/v1/chat/completions", {**CHAT, "top_logprobs": 0})
        assert status == 200 and got[0]["choices"][0]["logprobs"] is None, got
        status, got, _ = await answer(srv, "/v1/chat/completions",
                                      {**CHAT, "top_logprobs": -1})
        assert status == 400 and got[0]["error"]["param"] == "top_logprobs", got
        for path, body in (("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT)):
            status, got, _ = await answer(srv, path, {**body, "prompt_logprobs": 0,
                                                      "stream": True})
            assert status == 200 and got[-1]["choices"][0]["finish_reason"], got
            assert all("prompt_logprobs" not in c for c in got)
    async with make_server(max_logprobs=vocab) as srv:
        status, got, _ = await answer(srv, "/v1/completions",
                                      {**COMPLETION, "logprobs": -1, "prompt_logprobs": -1})
        assert status == 200, got
        assert all(whole_vocab_names(top, srv.engine.tokenizer)  # as vLLM names them
                   for top in got[0]["choices"][0]["logprobs"]["top_logprobs"])
        prompt = got[0]["choices"][0]["prompt_logprobs"]
        assert prompt[0] is None and all(len(p) == vocab for p in prompt[1:])
        status, got, _ = await answer(srv, "/v1/chat/completions",
                                      {**CHAT, "logprobs": True, "top_logprobs": -1})
        assert status == 200, got
        content = got[0]["choices"][0]["logprobs"]["content"]
        assert len(content) == 3 and all(len(e["top_logprobs"]) == vocab for e in content)


def per_choice(chunks: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for chunk in chunks:
        for c in chunk["choices"]:
            out.setdefault(c["index"], []).append(c)
    return out


async def test_a_streamed_echo_comes_with_each_choices_first_tokens(srv):
    """NOTE(echo-chunk): vLLM 0.33 sends no chunk of its own for the echo: a choice's first
    chunk holds the prompt and its first tokens (text, logprobs), and the prompt's ids; with
    max_tokens 0 that one chunk also ends the choice (it was an echo chunk, then the tokens')."""
    base = {**COMPLETION, "echo": True, "logprobs": 1, "n": 2, "max_tokens": 2}
    _, body, _ = await answer(srv, "/v1/completions", {**base, "return_token_ids": True})
    ids = body[0]["choices"][0]["prompt_token_ids"]
    for extra in ({}, {"return_token_ids": True}):
        status, got, _ = await answer(srv, "/v1/completions", {**base, **extra, "stream": True})
        assert status == 200, got
        for index, (first, *rest) in per_choice(got).items():
            whole = body[0]["choices"][index]
            assert len(rest) == 1 and rest[-1]["finish_reason"] == "length"
            assert first["prompt_token_ids"] == ids and rest[0]["prompt_token_ids"] is None
            lps = [first["logprobs"], rest[0]["logprobs"]]
            assert sum((lp["tokens"] for lp in lps), []) == whole["logprobs"]["tokens"]
            assert len(first["logprobs"]["tokens"]) == len(ids) + 1
            if extra:  # the ids stand for the prompt's text (returned_ids.py)
                assert first["text"] + rest[0]["text"] == whole["text"]
                assert first["token_ids"] == whole["token_ids"][:1]
            else:
                assert first["text"].startswith(P) and len(first["text"]) > len(P)
                assert first["text"] + rest[0]["text"] == P + whole["text"]
    status, got, _ = await answer(srv, "/v1/completions", {**base, "max_tokens": 0,
                                                           "stream": True})
    assert status == 200, got
    _, only, _ = await answer(srv, "/v1/completions", {**base, "max_tokens": 0})
    for index, chunks in per_choice(got).items():
        assert len(chunks) == 1, chunks
        (chunk,) = chunks
        assert chunk["text"] == P and chunk["finish_reason"] == "length"
        assert chunk["prompt_token_ids"] == ids
        assert chunk["logprobs"] == only[0]["choices"][index]["logprobs"]


async def test_echo_with_logprobs_shows_the_prompt_logprobs_vllm_computed(srv):
    """vLLM 0.33 asks its engine for prompt logprobs when echo comes with logprobs, and each
    choice of the body shows them (``prompt_logprobs``, as if asked for); it was null."""
    base = {**COMPLETION, "echo": True, "n": 2}
    _, want, _ = await answer(srv, "/v1/completions", {**COMPLETION, "prompt_logprobs": 1})
    _, got, _ = await answer(srv, "/v1/completions", {**base, "logprobs": 1})
    for choice in got[0]["choices"]:
        assert choice["prompt_logprobs"] == want[0]["choices"][0]["prompt_logprobs"]
        assert choice["prompt_logprobs"][0] is None and len(choice["prompt_logprobs"]) > 1
    _, got, _ = await answer(srv, "/v1/completions", base)  # no logprobs: none computed
    assert all(c["prompt_logprobs"] is None for c in got[0]["choices"])


async def test_chat_return_prompt_text_gives_the_rendered_prompt(srv):
    """vLLM 0.33's return_prompt_text: the chat template's text in the body's prompt_text and
    in each role chunk's (it was ignored: null, and listed in X-Kvpool-Ignored-Fields)."""
    body = {**CHAT, "return_prompt_text": True, "return_token_ids": True, "n": 2}
    status, got, ignored = await answer(srv, "/v1/chat/completions", body)
    assert status == 200 and ignored == [], (got, ignored)
    text = got[0]["prompt_text"]
    assert isinstance(text, str) and P in text
    async with aiohttp.ClientSession() as s, s.post(srv.url + "/tokenize", json={
            "prompt": text}) as r:
        assert (await r.json())["tokens"] == got[0]["prompt_token_ids"]
    status, chunks, _ = await answer(srv, "/v1/chat/completions", {**body, "stream": True})
    roles = [c for c in chunks if "role" in c["choices"][0]["delta"]]
    assert len(roles) == 2 and all(c["prompt_text"] == text for c in roles)
    assert all("prompt_text" not in c for c in chunks if c not in roles)
    for extra in ({}, {"return_prompt_text": "no"}):
        _, got, _ = await answer(srv, "/v1/chat/completions", {**CHAT, **extra})
        assert got[0]["prompt_text"] is None


async def test_chat_echo_shows_the_prompt_logprobs_vllm_computes_for_it(srv):
    """vLLM 0.33's chat asks its engine for prompt logprobs (top_logprobs of them, 0 by
    default) whenever echo is true and prompt_logprobs is not given, and the body shows them;
    they were null. A stream shows none, and is no 400."""
    continued = {**CHAT, "add_generation_prompt": False, "echo": True,
                 "messages": [*CHAT["messages"], {"role": "assistant", "content": "The"}]}
    for body, k in ((continued, 0), ({**CHAT, "echo": True}, 0),
                    ({**CHAT, "echo": True, "logprobs": True, "top_logprobs": 2}, 2)):
        status, got, _ = await answer(srv, "/v1/chat/completions", body)
        assert status == 200, got
        plps = got[0]["prompt_logprobs"]
        assert plps is not None and plps[0] is None, got
        assert len(plps) == got[0]["usage"]["prompt_tokens"]
        assert all(1 <= len(p) <= k + 1 for p in plps[1:])
    assert got[0]["choices"][0]["message"]["content"]
    status, got, _ = await answer(srv, "/v1/chat/completions", {**continued, "stream": True})
    assert status == 200 and got[0]["choices"][0]["delta"]["role"] == "assistant"
    _, got, _ = await answer(srv, "/v1/chat/completions", CHAT)
    assert got[0]["prompt_logprobs"] is None
