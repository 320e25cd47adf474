"""Four sampling fields read as vLLM 0.33 reads them (found by an outside probe): ``seed: -1``
is no seed (sampling.py NOTE(seed-unset)); a bad word is stripped of its leading whitespace
before both spellings are banned (sampling_fields.py NOTE(bad-word-strip)); logit_bias keys
are read by int() and biases clamped to [-100, 100] (NOTE(bias-clamp)); under ignore_eos an
eos listed in stop_token_ids stops with its id as stop_reason (sched/sequence.py
NOTE(ignore-eos-stop)). The request parser on the real byte tokenizer, then a real server on
127.0.0.1 end to end."""

from __future__ import annotations

import aiohttp
import pytest

from kvpool.errors import RequestError
from tests.server.parsers import P, TOK

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
PARSERS = [(P.parse_completion, {"prompt": "hi"}), (P.parse_chat, CHAT)]
A = TOK.encode("a", add_special_tokens=False)[0]  # 100 in the byte tokenizer
SPACE_A = TOK.encode(" a", add_special_tokens=False)[0]  # one merged token


@pytest.mark.parametrize("parse, base", PARSERS)
def test_seed_minus_one_is_no_seed(parse, base):
    p = parse({**base, "seed": -1, "n": 2}).params
    assert p.seed is None and p.make_generator() is None
    assert parse({**base, "seed": -2}).params.seed == -2  # only -1 means "unseeded"


@pytest.mark.parametrize("parse, base", PARSERS)
def test_bad_word_with_leading_whitespace_bans_the_bare_word(parse, base):
    for words in ([" a"], ["  a"], ["\ta"], ["a"], ["a", " a"]):
        ids = parse({**base, "bad_words": words}).params.bad_words_ids
        assert sorted(ids) == [(A,), (SPACE_A,)], words
    with pytest.raises(RequestError) as info:  # nothing once stripped: vLLM's 400 too
        parse({**base, "bad_words": ["  "]})
    assert info.value.param == "bad_words"


@pytest.mark.parametrize("parse, base", PARSERS)
def test_logit_bias_keys_read_by_int_and_biases_clamped(parse, base):
    bias = {"100": -1000, "7": 1e9, " 5": 5, "+6": 1.5, "8": "-inf", "9": 101, "10": -100}
    p = parse({**base, "logit_bias": bias}).params
    assert p.logit_bias == ((5, 5.0), (6, 1.5), (7, 100.0), (8, -100.0), (9, 100.0),
                            (10, -100.0), (100, -100.0))
    for bad, code in (({"x": 1}, None), ({"5.0": 1}, None), ({"9" * 5000: 1}, None),
                      ({"-1": 1}, "invalid_token_id"), ({"512": 1}, "invalid_token_id"),
                      ({"5": "ten"}, None), ({"5": 10 ** 400}, None)):
        with pytest.raises(RequestError) as info:
            parse({**base, "logit_bias": bad})
        assert info.value.param == "logit_bias" and len(str(info.value)) < 200, bad
        assert code is None or info.value.code == code, (bad, info.value.code)


async def post(s: aiohttp.ClientSession, url: str, body: dict) -> dict:
    async with s.post(url, json={"max_tokens": 4, **body}) as r:
        out = await r.json()
        assert r.status == 200, out
        return out["choices"][0]


async def test_seed_bad_words_and_logit_bias_end_to_end(srv):
    comp = srv.v1 + "/completions"
    plain = {"prompt": "hello world", "max_tokens": 8}
    async with aiohttp.ClientSession() as s:
        texts = {(await post(s, comp, {**plain, "seed": -1}))["text"] for _ in range(3)}
        assert len(texts) > 1, texts  # -1 seeds nothing: each request samples anew
        ch = await post(s, comp, {"prompt": "x", "temperature": 0, "return_token_ids": True,
                                  "logit_bias": {str(A): 100}, "bad_words": [" a"]})
        assert A not in ch["token_ids"], ch
        ch = await post(s, comp, {"prompt": "x", "temperature": 0, "return_token_ids": True,
                                  "logit_bias": {f" {A}": 100, "+2": -1000}})
        assert ch["token_ids"] == [A] * 4, ch


async def test_ignore_eos_with_eos_as_a_stop_token_reports_its_id(srv):
    eos = srv.engine.tokenizer.eos_token_id
    comp, chat = srv.v1 + "/completions", srv.v1 + "/chat/completions"
    forced_eos = {"logit_bias": {str(eos): 100}, "stop_token_ids": [eos]}
    async with aiohttp.ClientSession() as s:
        for url, base in ((comp, {"prompt": "x"}), (chat, CHAT)):
            ch = await post(s, url, {**base, **forced_eos, "ignore_eos": True})
            assert (ch["finish_reason"], ch["stop_reason"]) == ("stop", eos), ch
            ch = await post(s, url, {**base, **forced_eos})  # the model's own end: null
            assert (ch["finish_reason"], ch["stop_reason"]) == ("stop", None), ch
