"""Requests real clients send that vLLM 0.33 answers with a 200, on a real server on
127.0.0.1: what kvpool answers to each is checked against what vLLM 0.33's
/v1/completions and /v1/chat/completions code does with it (docs/architecture.md "Token ids
in the answer" and "Bool fields and vLLM's null keys")."""

from __future__ import annotations

import json

import aiohttp

from kvpool.server.field_policy import IGNORED_FIELDS_HEADER

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
