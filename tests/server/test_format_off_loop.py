"""NOTE(format-off-loop) in first_updates.py: a prompt's first-update logprobs (prompt_logprobs,
echo with logprobs) past ``offload_names`` token names are formatted on a worker thread, smaller
ones inline with a loop turn whenever those since the last pass the bound; either way the
answer is the same, byte for byte. NOTE(name-once) in logprob_format.py: an echoed prompt's
tokens are named once for prompt_logprobs and the echo's logprobs, as naming each gave them.
NOTE(echo-events) in first_events.py: a stream's heavy first events are encoded in slices, the
echo's JSON made once for the n choices, the bytes sse_event's."""

from __future__ import annotations

import json
import random

import aiohttp

from kvpool.runtime.model import TokenLogprob
from kvpool.runtime.model.tiny import build_tiny_model
from kvpool.server.app import ROUTES_KEY
from kvpool.server.sse import sse_event
from kvpool.server.first_events import EventEncoder
from kvpool.server.logprob_format import LogprobFormatter, joined_logprobs

EMOJI = [3 + b for b in "\U0001F600".encode()]  # the built-in tokenizer: byte i is 3 + i


def _prompt(n: int, seed: int) -> list[int]:
    """Token ids with split characters in (the names' context re-decode path)."""
    rnd = random.Random(seed)
    out: list[int] = []
    while len(out) < n:
        out += EMOJI if rnd.random() < 0.3 else [rnd.randrange(35, 120)]
    return out[:n]


async def _answer(srv, body: dict) -> bytes:
    """The answer less its id and created (JSON: the body; a stream: its events' data)."""
    async with aiohttp.ClientSession() as s, s.post(srv.url + "/v1/completions",
                                                    json=body) as r:
        assert r.status == 200, await r.text()
        raw = await r.read()
    if not body.get("stream"):
        return json.dumps({k: v for k, v in json.loads(raw).items()
                           if k not in ("id", "created")}).encode()
    events = [e[len(b"data: "):] for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
    return b"\n".join(json.dumps({k: v for k, v in json.loads(e).items()
                                  if k not in ("id", "created")}).encode() for e in events)


async def test_a_large_prompts_logprobs_are_formatted_off_the_loop_the_same(srv):
    """240 prompt tokens x (top 20 + the chosen) names: past OFFLOAD_NAMES (4,096), on the
    pool; the same answer as formatted inline, JSON (prompt_logprobs too) and streamed."""
    firsts = srv.app[ROUTES_KEY].firsts
    base = {"model": srv.engine.model_name, "prompt": _prompt(240, 1), "max_tokens": 2,
            "temperature": 0, "n": 2, "echo": True, "logprobs": 20}
    for body in ({**base, "prompt_logprobs": 20}, {**base, "stream": True}):
        firsts.offload_names = 10 ** 9
        before = firsts.offloaded
        inline = await _answer(srv, body)
        assert firsts.offloaded == before
        firsts.offload_names = 4096
        assert await _answer(srv, body) == inline
        assert firsts.offloaded == before + 1


async def test_several_prompts_first_updates_give_the_loop_turns(srv):
    """Four prompts' first updates under the bound each, over it together: a loop turn after
    every two (before, all four back to back); past it each, four on the pool."""
    firsts = srv.app[ROUTES_KEY].firsts
    body = {"model": srv.engine.model_name, "max_tokens": 1, "temperature": 0, "echo": True,
            "logprobs": 5,
            "prompt": [_prompt(30, seed) for seed in range(4)]}  # 29 x 6 names each
    firsts.offload_names = 200
    offloaded, yields = firsts.offloaded, firsts.yields
    inline = await _answer(srv, body)
    assert (firsts.offloaded, firsts.yields) == (offloaded, yields + 2)
    firsts.offload_names = 100
    assert await _answer(srv, body) == inline
    assert firsts.offloaded == offloaded + 4


def test_echoed_names_once_what_prompt_and_completion_name():
    """``echoed`` (one naming) gives what ``prompt`` and ``completion`` give, split characters
    and alternatives included."""
    rnd = random.Random(0)
    fmt = LogprobFormatter(build_tiny_model(0)[2])
    ids = _prompt(60, 2)
    lps = [None] + [TokenLogprob(t, -rnd.random(), rnd.randrange(1, 9),
                                 tuple((rnd.choice([*EMOJI, rnd.randrange(4, 260)]), -rnd.random())
                                       for _ in range(5))) for t in ids[1:]]
    prompt, echo, end = fmt.echoed(ids, lps)
    assert (prompt, (echo, end)) == (fmt.prompt(lps), fmt.completion(ids, lps, 0))
    assert "" in echo["tokens"] and "\U0001F600" in echo["tokens"]


async def test_a_streamed_echo_is_encoded_once_for_its_choices(srv):
    """n=4: one sliced batch of first events, the echo's lists' JSON made once and reused for
    the other three choices; every choice shows the whole echo."""
    encoder = srv.app[ROUTES_KEY].sse.first_events
    sliced, reused = encoder.sliced, encoder.heads_reused
    events = await _answer(srv, {"model": srv.engine.model_name, "prompt": _prompt(240, 3),
                                 "max_tokens": 1, "n": 4, "echo": True, "logprobs": 20,
                                 "stream": True})
    firsts = [json.loads(e)["choices"][0] for e in events.split(b"\n")[:4]]
    assert encoder.sliced == sliced + 1 and encoder.heads_reused >= reused + 3
    assert sorted(c["index"] for c in firsts) == [0, 1, 2, 3]
    assert all(len(c["logprobs"]["tokens"]) == 241 for c in firsts)
    assert len({json.dumps(c["logprobs"]["top_logprobs"][:240]) for c in firsts}) == 1


async def test_first_events_are_sse_events_byte_for_byte():
    """Joined echo heads (choices with a token), the echo object itself (one without), text
    to escape: the sliced encoding is sse_event's."""
    fmt = LogprobFormatter(build_tiny_model(0)[2])
    rnd = random.Random(1)
    ids = _prompt(800, 4)
    lps = [None] + [TokenLogprob(t, -rnd.random(), 1, tuple((rnd.randrange(4, 260), -0.5)
                                                             for _ in range(5))) for t in ids[1:]]
    echo, end = fmt.completion(ids, lps, 0)
    own, _ = fmt.completion([40], [lps[1]], end, ids)
    chunks = [{"id": "cmpl-1", "choices": [{"index": i, "text": "\U0001F600 \"x\"",
                                            "logprobs": joined_logprobs(echo, own if i else None),
                                            "prompt_token_ids": list(ids)}]} for i in range(3)]
    encoder = EventEncoder()
    assert await encoder.events(chunks) == b"".join(sse_event(c) for c in chunks)
    assert encoder.sliced == 1 and encoder.heads_reused >= 4
