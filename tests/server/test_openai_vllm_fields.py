"""vLLM's extra request fields through the openai client on a real server: each one changes
what comes back the way vLLM's does."""

from __future__ import annotations

import json
import re

import aiohttp
import openai
import pytest

from tests.server.helpers import openai_client as client, parse_metrics

CHAT = [{"role": "user", "content": "Tell me a story"}]


async def tokenize(srv, body):
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.url + "/tokenize", json=body) as r:
            return r.status, await r.json()


async def test_add_special_tokens_drops_the_bos(srv):
    m = srv.engine.model_name
    async with client(srv) as c:
        on = await c.completions.create(model=m, prompt="Hello there", max_tokens=1)
        off = await c.completions.create(model=m, prompt="Hello there", max_tokens=1,
                                         extra_body={"add_special_tokens": False})
        assert off.usage.prompt_tokens == on.usage.prompt_tokens - 1
        chat_on = await c.chat.completions.create(model=m, messages=CHAT, max_tokens=1)
        chat_off = await c.chat.completions.create(model=m, messages=CHAT, max_tokens=1,
                                                   extra_body={"add_special_tokens": False})
        assert chat_off.usage.prompt_tokens == chat_on.usage.prompt_tokens - 1


async def test_truncate_prompt_tokens_keeps_the_last_ones(srv):
    m = srv.engine.model_name
    text = "one two three four five six seven eight nine ten"
    ids = srv.engine.tokenizer.encode(text)
    async with client(srv) as c:
        cut = await c.completions.create(model=m, prompt=text, max_tokens=6, temperature=0,
                                         extra_body={"truncate_prompt_tokens": 5})
        tail = await c.completions.create(model=m, prompt=ids[-5:], max_tokens=6, temperature=0)
        assert cut.usage.prompt_tokens == 5 and cut.choices[0].text == tail.choices[0].text
        chat = await c.chat.completions.create(model=m, messages=CHAT, max_tokens=1,
                                               extra_body={"truncate_prompt_tokens": 4})
        assert chat.usage.prompt_tokens == 4
        with pytest.raises(openai.BadRequestError) as info:
            await c.completions.create(model=m, prompt=text, max_tokens=1,
                                       extra_body={"truncate_prompt_tokens": 0})
        assert info.value.body["param"] == "truncate_prompt_tokens"


async def test_tokenize_return_token_strs(srv):
    status, body = await tokenize(srv, {"prompt": "hi", "return_token_strs": True})
    tok = srv.engine.tokenizer
    assert status == 200 and body["token_strs"] == [tok.id_to_token(t) for t in body["tokens"]]
    status, body = await tokenize(srv, {"prompt": "hi"})
    assert status == 200 and "token_strs" not in body
    status, body = await tokenize(srv, {"prompt": "hi", "return_token_strs": "maybe"})
    assert status == 400 and body["error"]["param"] == "return_token_strs"


async def test_continuous_usage_stats_put_usage_in_every_chunk(srv):
    async with client(srv) as c:
        stream = await c.chat.completions.create(
            model=srv.engine.model_name, messages=CHAT, max_tokens=6, stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True})
        chunks = [ch async for ch in stream]
    assert all(ch.usage is not None for ch in chunks)
    done = [ch.usage.completion_tokens for ch in chunks]
    assert done == sorted(done) and done[0] == 0 and done[-1] == 6
    assert len(set(ch.usage.prompt_tokens for ch in chunks)) == 1
    assert all(ch.usage.total_tokens == ch.usage.prompt_tokens + ch.usage.completion_tokens
               for ch in chunks)


@pytest.mark.parametrize("extra, check", [
    ({"guided_regex": "[0-9]{3}-[a-c]{2}"},
     lambda t: re.fullmatch("[0-9]{3}-[a-c]{2}", t)),
    ({"guided_choice": ["yes", "no", "maybe \"so\""]},
     lambda t: t in ("yes", "no", "maybe \"so\"")),
    ({"guided_json": {"type": "object", "properties": {"n": {"type": "integer"}},
                      "required": ["n"], "additionalProperties": False}},
     lambda t: isinstance(json.loads(t)["n"], int)),
    ({"guided_json": json.dumps({"type": "array", "items": {"type": "boolean"},
                                 "minItems": 1, "maxItems": 3})},
     lambda t: all(isinstance(x, bool) for x in json.loads(t))),
    ({"guided_grammar": 'start: "(" num ("+" num)* ")"\nnum: /[1-9]/'},
     lambda t: re.fullmatch(r"\([1-9](\+[1-9])*\)", t)),
    ({"structured_outputs": {"regex": "ab+c"}}, lambda t: re.fullmatch("ab+c", t)),
    ({"structured_outputs": {"choice": ["left", "right"]}}, lambda t: t in ("left", "right")),
    # NOTE(choice-cap): as vLLM, an empty string and past 1024 entries
    ({"guided_choice": ["", "yes"]}, lambda t: t in ("", "yes")),
    ({"structured_outputs": {"choice": [f"c{i}" for i in range(1999)]}},
     lambda t: re.fullmatch("c[0-9]+", t) and int(t[1:]) < 1999),
])
async def test_guided_spellings_constrain_the_output(srv, extra, check):
    async with client(srv) as c:
        for seed in (1, 2):
            r = await c.completions.create(model=srv.engine.model_name, prompt="x",
                                           max_tokens=64, temperature=1.0, seed=seed,
                                           extra_body=extra)
            ch = r.choices[0]
            assert ch.finish_reason == "stop" and check(ch.text), ch.text
        chat = await c.chat.completions.create(model=srv.engine.model_name, messages=CHAT,
                                               max_tokens=64, extra_body=extra)
        assert check(chat.choices[0].message.content), chat.choices[0].message.content


@pytest.mark.parametrize("extra, param", [
    ({"guided_regex": "("}, "guided_regex"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_choice": [""] * 13108}, "guided_choice"),  # past the 64 KiB grammar cap
    ({"guided_choice": [f"c{i}" for i in range(2000)]}, "guided_choice"),  # the Earley row
    ({"guided_grammar": "start: undefined_rule"}, "guided_grammar"),
    ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_regex"),
    ({"guided_regex": "a", "response_format": {"type": "json_object"}}, "response_format"),
    # JSON text nested past Python's recursion limit, or past the body's depth bound
    ({"guided_json": "[" * 5000}, "guided_json"),
    ({"structured_outputs": {"json": "[" * 40 + "]" * 40}}, "structured_outputs.json"),
])
async def test_guided_mistakes_are_400s_naming_the_field(srv, extra, param):
    async with client(srv) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.completions.create(model=srv.engine.model_name, prompt="x", max_tokens=4,
                                       extra_body=extra)
        assert info.value.body["param"] == param, info.value.body


async def test_per_request_chat_template_and_its_kwargs(make_server):
    tpl = "{% for m in messages %}{{ greeting }}{{ m.content }}|{% endfor %}"
    extra = {"chat_template": tpl, "chat_template_kwargs": {"greeting": "Dear "}}
    async with make_server(app_options={"trust_request_chat_template": True}) as srv:
        want = srv.engine.tokenizer.encode("Dear Tell me a story|", add_special_tokens=False)
        status, body = await tokenize(srv, {"messages": CHAT, **extra})
        assert status == 200 and body["tokens"] == want
        await _template_round_trip(srv, extra, want)


# nested loops: seconds of CPU on the event loop (and `'x' * 300000000` takes 300 MB) if run
HOSTILE = "{% for i in range(20000) %}{% for j in range(5000) %}{% endfor %}{% endfor %}"


async def test_a_request_template_is_refused_unless_trusted(srv):
    """NOTE(untrusted-template): the default server runs no template a request brings, on any
    route that renders one, and its own template still serves the same request."""
    bad = {"messages": CHAT, "chat_template": HOSTILE}
    async with aiohttp.ClientSession() as s:
        for url, extra in ((srv.url + "/tokenize", {}),
                           (srv.v1 + "/chat/completions", {"max_tokens": 1}),
                           (srv.v1 + "/kvpool/lookup", {})):
            model = {"model": srv.engine.model_name} if "/chat" in url else {}
            async with s.post(url, json={**bad, **extra, **model}) as r:
                err = (await r.json())["error"]
                assert r.status == 400 and err["param"] == "chat_template", (url, err)
                assert err["code"] == "untrusted_chat_template"
                assert "--trust-request-chat-template" in err["message"]
    status, body = await tokenize(srv, {"messages": CHAT})
    assert status == 200 and body["tokens"]


async def _template_round_trip(srv, extra, want):
    async with client(srv) as c:
        r = await c.chat.completions.create(model=srv.engine.model_name, messages=CHAT,
                                            max_tokens=2, extra_body=extra)
        assert r.usage.prompt_tokens == len(want)
        for bad, param in (({"chat_template": "{% for %}"}, "chat_template"),
                           ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs")):
            with pytest.raises(openai.BadRequestError) as info:
                await c.chat.completions.create(model=srv.engine.model_name, messages=CHAT,
                                                max_tokens=2, extra_body=bad)
            assert info.value.body["param"] == param


async def test_chat_echo_returns_the_final_assistant_message(srv):
    msgs = CHAT + [{"role": "assistant", "content": "Once upon a time"}]
    extra = {"echo": True, "continue_final_message": True, "add_generation_prompt": False}
    async with client(srv) as c:
        r = await c.chat.completions.create(model=srv.engine.model_name, messages=msgs,
                                            max_tokens=4, temperature=0, extra_body=extra)
        plain = await c.chat.completions.create(
            model=srv.engine.model_name, messages=msgs, max_tokens=4, temperature=0,
            extra_body={k: v for k, v in extra.items() if k != "echo"})
        text = r.choices[0].message.content
        assert text == "Once upon a time" + plain.choices[0].message.content
        stream = await c.chat.completions.create(model=srv.engine.model_name, messages=msgs,
                                                 max_tokens=4, temperature=0, stream=True,
                                                 extra_body=extra)
        parts = [ch.choices[0].delta.content or "" async for ch in stream if ch.choices]
        assert "".join(parts) == text
        user_last = await c.chat.completions.create(model=srv.engine.model_name, messages=CHAT,
                                                    max_tokens=4, temperature=0,
                                                    extra_body={"echo": True})
        assert not user_last.choices[0].message.content.startswith("Tell me")


async def test_return_tokens_as_token_ids(srv):
    async with client(srv) as c:
        chat = await c.chat.completions.create(
            model=srv.engine.model_name, messages=CHAT, max_tokens=4, logprobs=True,
            top_logprobs=2, extra_body={"return_tokens_as_token_ids": True})
        content = chat.choices[0].logprobs.content
        assert len(content) == 4
        assert all(re.fullmatch(r"token_id:\d+", e.token) for e in content)
        assert all(re.fullmatch(r"token_id:\d+", t.token) for e in content
                   for t in e.top_logprobs)
        r = await c.completions.create(model=srv.engine.model_name, prompt="hi", max_tokens=3,
                                       logprobs=1,
                                       extra_body={"return_tokens_as_token_ids": True})
        assert all(t.startswith("token_id:") for t in r.choices[0].logprobs.tokens)
        assert r.choices[0].text and not r.choices[0].text.startswith("token_id:")


async def test_include_stop_str_in_output_keeps_the_stop_string(srv):
    m = srv.engine.model_name
    async with client(srv) as c:
        base = await c.completions.create(model=m, prompt="A paged cache", max_tokens=24,
                                          temperature=0)
        text = base.choices[0].text
        stop = text[5:7]
        cut = text[:text.index(stop)]
        for stream in (False, True):
            kw = dict(model=m, prompt="A paged cache", max_tokens=24, temperature=0,
                      stop=[stop], extra_body={"include_stop_str_in_output": True})
            if stream:
                got = "".join([ch.choices[0].text async for ch in
                               await c.completions.create(stream=True, **kw) if ch.choices])
            else:
                got = (await c.completions.create(**kw)).choices[0].text
            assert got == cut + stop
        plain = await c.completions.create(model=m, prompt="A paged cache", max_tokens=24,
                                           temperature=0, stop=[stop])
        assert plain.choices[0].text == cut


async def test_the_token_that_stops_a_sequence_adds_no_text(srv):
    """NOTE(stop-token-text): the stop_token_ids token (or the eos, shown with
    skip_special_tokens false) that ends a sequence is not in its text, as in vLLM, unless
    include_stop_str_in_output; streamed deltas join to the same text."""
    m, tok = srv.engine.model_name, srv.engine.tokenizer
    kw = dict(model=m, prompt="A paged cache", max_tokens=8, temperature=0)
    async with client(srv) as c:
        base = await c.completions.create(logprobs=1, **kw,
                                          extra_body={"return_tokens_as_token_ids": True})
        ids = [int(t.split(":")[1]) for t in base.choices[0].logprobs.tokens]
        k = next(i for i in range(1, len(ids)) if ids[i] not in ids[:i])
        for keep in (False, True):
            extra = {"stop_token_ids": [ids[k]], "include_stop_str_in_output": keep}
            got = (await c.completions.create(**kw, extra_body=extra)).choices[0]
            assert got.finish_reason == "stop" and got.text == tok.decode(ids[:k + keep])
            parts = [ch.choices[0].text async for ch in await c.completions.create(
                stream=True, **kw, extra_body=extra) if ch.choices]
            assert "".join(parts) == got.text
        eos = tok.eos_token_id
        for keep in (False, True):
            got = (await c.completions.create(
                **{**kw, "max_tokens": 3}, logit_bias={str(eos): 100},
                extra_body={"skip_special_tokens": False,
                            "include_stop_str_in_output": keep})).choices[0]
            assert got.finish_reason == "stop"
            assert got.text == (tok.id_to_token(eos) if keep else ""), got.text


async def test_skip_special_tokens_false_shows_them(srv):
    eos = srv.engine.tokenizer.eos_token_id
    kw = dict(model=srv.engine.model_name, prompt="hi", max_tokens=3, temperature=0,
              logit_bias={str(eos): 100})
    async with client(srv) as c:
        shown = await c.completions.create(extra_body={"skip_special_tokens": False,
                                                       "ignore_eos": True}, **kw)
        hidden = await c.completions.create(extra_body={"ignore_eos": True}, **kw)
    special = srv.engine.tokenizer.id_to_token(eos)
    assert shown.choices[0].text == special * 3 and hidden.choices[0].text == ""


async def test_allowed_token_ids_and_bad_words(srv):
    tok = srv.engine.tokenizer
    allowed = tok.encode("xyz", add_special_tokens=False)
    async with client(srv) as c:
        r = await c.completions.create(model=srv.engine.model_name, prompt="hello", n=3,
                                       max_tokens=8, temperature=1.0, seed=5,
                                       extra_body={"allowed_token_ids": allowed})
        for ch in r.choices:
            assert set(ch.text) <= set("xyz") and ch.text, ch.text
        base = await c.completions.create(model=srv.engine.model_name, prompt="hello",
                                          max_tokens=12, temperature=0)
        word = base.choices[0].text[2:4]
        banned = await c.completions.create(model=srv.engine.model_name, prompt="hello",
                                            max_tokens=12, temperature=0,
                                            extra_body={"bad_words": [word]})
        assert word not in banned.choices[0].text and banned.choices[0].text
        with pytest.raises(openai.BadRequestError) as info:
            await c.completions.create(model=srv.engine.model_name, prompt="x", max_tokens=2,
                                       extra_body={"allowed_token_ids": [10**9]})
        assert info.value.body["param"] == "allowed_token_ids"


async def test_best_of_returns_the_n_most_likely(srv):
    m = srv.engine.model_name
    kw = dict(model=m, prompt="Count: 1 2", max_tokens=6, temperature=1.0, seed=11)
    async with client(srv) as c:
        every = await c.completions.create(n=4, logprobs=0, **kw)
        best = await c.completions.create(n=2, extra_body={"best_of": 4}, **kw)
    score = {ch.text: sum(ch.logprobs.token_logprobs) for ch in every.choices}
    want = sorted(score, key=lambda t: -score[t])[:2]
    assert [ch.text for ch in best.choices] == want
    assert [ch.index for ch in best.choices] == [0, 1]
    assert all(ch.logprobs is None for ch in best.choices)
    assert best.usage.completion_tokens == sum(
        len(ch.logprobs.tokens) for ch in every.choices if ch.text in want)
    # streamed, best_of runs n (NOTE(best-of)): test_vllm_request_parity.py


async def test_repetition_detection_ends_a_loop_early(srv):
    """vLLM's early stop (kvpool/runtime/model/repetition.py): a token forced by logit_bias
    loops; with repetition_detection the choice ends at its third copy, finish_reason
    "repetition" and stop_reason "repetition_detected", streamed or not, chat or not."""
    m, loop = srv.engine.model_name, srv.engine.tokenizer.encode("x", add_special_tokens=False)
    kw = dict(model=m, max_tokens=12, temperature=0, logit_bias={str(loop[0]): 100})
    rep = {"repetition_detection": {"max_pattern_size": "2", "min_count": 3}}  # NOTE(lax-int)
    async with client(srv) as c:
        raw = await c.completions.with_raw_response.create(prompt="hi", extra_body=rep, **kw)
        assert "X-Kvpool-Ignored-Fields" not in raw.headers  # acted on, not ignored
        r = raw.parse()
        assert (r.choices[0].text, r.choices[0].finish_reason) == ("xxx", "repetition")
        assert r.choices[0].model_extra["stop_reason"] == "repetition_detected"
        assert r.usage.completion_tokens == 3
        plain = await c.completions.create(prompt="hi", **kw)
        assert (plain.choices[0].text, plain.choices[0].finish_reason) == ("x" * 12, "length")
        later = await c.completions.create(prompt="hi", extra_body={**rep, "min_tokens": 5},
                                           **kw)
        assert later.choices[0].text == "xxxxx"
        chunks = [ch async for ch in await c.chat.completions.create(
            messages=CHAT, stream=True, extra_body=rep, **kw)]
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) \
            == "xxx"
        assert chunks[-1].choices[0].finish_reason == "repetition"
        with pytest.raises(openai.BadRequestError) as info:
            await c.completions.create(prompt="hi", extra_body={"repetition_detection": {
                "max_pattern_size": 2, "min_count": 1}}, **kw)
        assert info.value.body["param"] == "repetition_detection"
    async with aiohttp.ClientSession() as s, s.get(srv.url + "/metrics") as r:
        m = parse_metrics(await r.text())  # counted under its own reason, as vLLM counts it
    assert m["kvpool_request_success_total"][(("finished_reason", "repetition"),
                                              ("model_name", srv.engine.model_name))] == 3


async def test_stream_interval_batches_the_chunks(make_server):
    """vLLM's stream_interval (output_processor.py NOTE(interval)): the first token at once,
    then chunks of the interval; the server's --stream-interval is a floor a request raises."""
    async with make_server(stream_interval=2) as srv:
        m, x = srv.engine.model_name, srv.engine.tokenizer.encode("x", add_special_tokens=False)
        kw = dict(model=m, prompt="hi", max_tokens=10, temperature=0, stream=True,
                  logit_bias={str(x[0]): 100})
        async with client(srv) as c:
            async def sizes(**extra) -> list[int]:
                chunks = [ch async for ch in await c.completions.create(extra_body=extra, **kw)]
                return [len(ch.choices[0].text) for ch in chunks if ch.choices]
            assert await sizes(stream_interval=3) == [1, 3, 3, 3]
            assert await sizes() == [1, 2, 2, 2, 2, 1]  # the server's 2
            assert await sizes(stream_interval="1") == [1, 2, 2, 2, 2, 1]  # raised, not lowered
            with pytest.raises(openai.BadRequestError) as info:
                await c.completions.create(extra_body={"stream_interval": 0}, **kw)
            assert info.value.body["param"] == "stream_interval"
