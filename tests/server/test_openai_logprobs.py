"""The official ``openai`` client against a real server on 127.0.0.1 for logprobs, echo,
prompt_logprobs, several prompts in one request, stop_reason, cached_tokens, /tokenize,
/detokenize and /version. Logprob values are checked against transformers' log_softmax on the
same tiny float32 checkpoint (within 1e-4)."""

from __future__ import annotations

import aiohttp
import openai
import pytest

from kvpool import __version__
from tests.runtime.model.helpers import SENTENCES, hf_greedy, ref_logprobs
from tests.server.helpers import openai_client as client

transformers = pytest.importorskip("transformers")
TOL = 1e-4


async def post(srv, path: str, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(srv.url + path, json=body) as r:
        return r.status, await r.json()


async def test_completion_logprobs_and_echo_match_transformers(make_server, hf_dir):
    d, hf = hf_dir
    async with make_server(model=str(d)) as srv, client(srv) as c:
        tok = srv.engine.tokenizer
        prompt = SENTENCES[0]
        ids = tok.encode(prompt)
        r = await c.completions.create(model=srv.engine.model_name, prompt=prompt, max_tokens=4,
                                       temperature=0, logprobs=3, echo=True)
        ch = r.choices[0]
        lp = ch.logprobs
        n_p = len(ids)
        assert len(lp.tokens) == n_p + 4 == len(lp.token_logprobs) == len(lp.text_offset)
        assert ch.text.startswith(prompt) and r.usage.completion_tokens == 4
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        gen = hf_greedy(hf, [ids], 4)[0]  # greedy: the same tokens as the server's
        assert ch.text[len(prompt):] == tok.decode(gen)
        ref = ref_logprobs(hf, ids + gen)
        full = ids + gen
        for p in range(1, len(full)):
            assert abs(lp.token_logprobs[p] - float(ref[p - 1, full[p]])) < TOL
            # top 3 + the chosen token, keyed by text (ids decoding alike share one key)
            assert 1 <= len(lp.top_logprobs[p]) <= 4
            allowed = ref[p - 1].topk(3).values.tolist() + [float(ref[p - 1, full[p]])]
            assert all(min(abs(v - a) for a in allowed) < TOL
                       for v in lp.top_logprobs[p].values())
            plain = tok.decode([full[p]])  # a split character's bytes: NOTE(logprob-names)
            assert lp.tokens[p] == plain or (plain.endswith("\ufffd")
                                             and "\ufffd" not in lp.tokens[p])
        assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0

        # vLLM's prompt_logprobs (an extra field): one entry per prompt token, first null
        r2 = await c.completions.create(model=srv.engine.model_name, prompt=ids, max_tokens=1,
                                        temperature=0, extra_body={"prompt_logprobs": 1})
        pl = r2.choices[0].model_extra["prompt_logprobs"]
        assert len(pl) == n_p and pl[0] is None
        for p in range(1, n_p):
            entry = pl[p][str(ids[p])]
            assert abs(entry["logprob"] - float(ref[p - 1, ids[p]])) < TOL
            assert entry["rank"] == int((ref[p - 1] > ref[p - 1, ids[p]]).sum()) + 1


async def test_chat_logprobs(make_server, hf_dir):
    d, hf = hf_dir
    async with make_server(model=str(d)) as srv, client(srv) as c:
        msgs = [{"role": "user", "content": "Hello there"}]
        r = await c.chat.completions.create(model=srv.engine.model_name, messages=msgs,
                                            max_completion_tokens=5, temperature=0,
                                            logprobs=True, top_logprobs=2)
        content = r.choices[0].logprobs.content
        assert len(content) == r.usage.completion_tokens == 5
        for e in content:
            assert len(e.top_logprobs) == 2
            assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
            assert abs(e.logprob - e.top_logprobs[0].logprob) < 1e-6  # greedy: the argmax
            assert e.bytes == list(e.token.encode())
        status, tk = await post(srv, "/tokenize", {"messages": msgs})
        assert status == 200 and tk["count"] == r.usage.prompt_tokens == len(tk["tokens"])
        ref = ref_logprobs(hf, tk["tokens"])
        assert abs(content[0].logprob - float(ref[-1].max())) < TOL
        # streamed: the same entries, chunk by chunk
        stream = await c.chat.completions.create(model=srv.engine.model_name, messages=msgs,
                                                 max_completion_tokens=5, temperature=0,
                                                 logprobs=True, top_logprobs=2, stream=True)
        got = [e async for ch in stream for c0 in ch.choices if c0.logprobs
               for e in c0.logprobs.content]
        assert [e.token for e in got] == [e.token for e in content]
        assert all(abs(a.logprob - b.logprob) < 1e-6 for a, b in zip(got, content))


async def test_several_prompts_in_one_request(srv):
    prompts = ["The quick brown fox", "Hello, world!", "The quick brown fox jumps"]
    async with client(srv) as c:
        model = srv.engine.model_name
        singles = [await c.completions.create(model=model, prompt=p, max_tokens=5,
                                              temperature=0) for p in prompts]
        r = await c.completions.create(model=model, prompt=prompts, max_tokens=5, n=2,
                                       temperature=0)
        assert [ch.index for ch in r.choices] == list(range(6))
        for ch in r.choices:  # prompt i, sequence j -> index i * n + j
            assert ch.text == singles[ch.index // 2].choices[0].text
        assert r.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
        assert r.usage.completion_tokens == 6 * 5
        tok = srv.engine.tokenizer
        by_ids = await c.completions.create(model=model, prompt=[tok.encode(p) for p in prompts],
                                            max_tokens=5, temperature=0, logprobs=1)
        assert [ch.text for ch in by_ids.choices] == [s.choices[0].text for s in singles]
        assert all(len(ch.logprobs.tokens) == 5 for ch in by_ids.choices)
        stream = await c.completions.create(model=model, prompt=prompts, max_tokens=5,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
        texts: dict[int, str] = {}
        usage = None
        async for chunk in stream:
            for ch in chunk.choices:
                texts[ch.index] = texts.get(ch.index, "") + ch.text
            usage = chunk.usage or usage
        assert texts == {i: s.choices[0].text for i, s in enumerate(singles)}
        assert usage.completion_tokens == 15
        # one bad prompt: 400 for the whole request, nothing runs (the fixture checks blocks)
        with pytest.raises(openai.BadRequestError) as e:
            await c.completions.create(model=model, prompt=["fine", [7] * 300], max_tokens=2)
        assert e.value.param == "prompt"


async def special_tokens_are_kept(srv, ids: list[int]) -> None:
    """/detokenize and the echo of token ids (its text and its tokens) keep the special
    tokens, as vLLM decodes them (they read "")."""
    status, dt = await post(srv, "/detokenize", {"tokens": ids})
    tok = srv.engine.tokenizer
    assert status == 200 and dt == {"prompt": tok.decode(ids, skip_special_tokens=False)}
    bos = tok.decode(ids[:1], skip_special_tokens=False)
    assert dt["prompt"].startswith(bos) and bos and tok.decode(ids[:1]) == ""  # skipped: ""
    status, out = await post(srv, "/v1/completions", {"prompt": ids, "max_tokens": 1,
                                                       "echo": True, "logprobs": 0})
    assert status == 200 and out["choices"][0]["text"].startswith(dt["prompt"]), out
    assert out["choices"][0]["logprobs"]["tokens"][0] == bos


async def test_stop_reason_cached_tokens_tokenize_version(srv):
    async with client(srv) as c:
        model = srv.engine.model_name
        prompt = "The quick brown fox jumps over the lazy dog, " * 2
        first = await c.completions.create(model=model, prompt=prompt, max_tokens=8,
                                           temperature=0)
        assert first.choices[0].model_extra["stop_reason"] is None  # length, no stop string
        text = first.choices[0].text
        stop = text[2:4]
        r = await c.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0,
                                       stop=[stop])
        assert r.choices[0].finish_reason == "stop"
        assert r.choices[0].model_extra["stop_reason"] == stop
        assert r.usage.prompt_tokens_details.cached_tokens >= 16  # the first request's blocks
    status, tk = await post(srv, "/tokenize", {"prompt": prompt})
    ids = srv.engine.tokenizer.encode(prompt)
    assert status == 200 and tk == {"count": len(ids), "max_model_len": 256, "tokens": ids}
    status, tk2 = await post(srv, "/tokenize", {"prompt": prompt, "add_special_tokens": False})
    assert tk2["tokens"] == srv.engine.tokenizer.encode(prompt, add_special_tokens=False)
    await special_tokens_are_kept(srv, ids)
    for path, body, param in (("/tokenize", {}, "prompt"),
                              ("/tokenize", {"prompt": "a", "messages": []}, "prompt"),
                              ("/tokenize", {"prompt": 5}, "prompt"),
                              ("/detokenize", {"tokens": [10**9]}, "tokens"),
                              ("/detokenize", {"tokens": "ab"}, "tokens")):
        status, err = await post(srv, path, body)
        assert status == 400 and err["error"]["param"] == param, (path, body, err)
    status, _ = await post(srv, "/detokenize", {"tokens": [1], "x": 1})  # ignored, as vLLM does
    assert status == 200
    async with aiohttp.ClientSession() as s, s.get(srv.url + "/version") as resp:
        assert resp.status == 200 and await resp.json() == {"version": __version__}


async def test_max_logprobs_bounds_k(make_server):
    async with make_server(max_logprobs=2) as srv, client(srv) as c:
        model = srv.engine.model_name
        r = await c.completions.create(model=model, prompt="hi", max_tokens=2, logprobs=2)
        assert all(len(t) <= 3 for t in r.choices[0].logprobs.top_logprobs)
        with pytest.raises(openai.BadRequestError) as e:
            await c.completions.create(model=model, prompt="hi", max_tokens=2, logprobs=3)
        assert e.value.param == "logprobs"
        with pytest.raises(openai.BadRequestError) as e:
            await c.chat.completions.create(model=model, max_completion_tokens=2,
                                            messages=[{"role": "user", "content": "x"}],
                                            logprobs=True, top_logprobs=3)
        assert e.value.param == "top_logprobs"


async def test_logprob_token_ids_match_transformers(make_server, hf_dir):
    """vLLM's logprob_token_ids (runtime/model/logprobs.py NOTE(picks)): at each generated
    position the chosen token, then the asked ids once each, valued as transformers values
    them; chat and completions, streamed or not; vLLM's rules refuse the rest."""
    d, hf = hf_dir
    async with make_server(model=str(d)) as srv, client(srv) as c:
        tok, m = srv.engine.tokenizer, srv.engine.model_name
        ids = tok.encode(SENTENCES[1])
        asked = [5, 40, 5, 77]  # a repeat: listed once
        gen = hf_greedy(hf, [ids], 3)[0]
        ref = ref_logprobs(hf, ids + gen)
        r = await c.completions.create(model=m, prompt=ids, max_tokens=3, temperature=0,
                                       logprobs=0, extra_body={"logprob_token_ids": asked})
        for p, top in enumerate(r.choices[0].logprobs.top_logprobs):
            row = ref[len(ids) - 1 + p]
            want = {tok.decode([t]): float(row[t]) for t in dict.fromkeys([gen[p], *asked])}
            assert list(top) == list(want)
            assert all(abs(top[k] - v) < TOL for k, v in want.items())
        msgs = [{"role": "user", "content": "Hello there"}]
        kw = dict(model=m, messages=msgs, max_tokens=3, temperature=0, logprobs=True,
                  top_logprobs=1, extra_body={"logprob_token_ids": asked[:2]})
        whole = await c.chat.completions.create(**kw)
        chunks = [ch async for ch in await c.chat.completions.create(stream=True, **kw)]
        streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs
                    for e in ch.choices[0].logprobs.content]
        for got in (whole.choices[0].logprobs.content, streamed):
            assert len(got) == 3
            for e in got:
                assert [t.token for t in e.top_logprobs][0] == e.token
                assert [t.token for t in e.top_logprobs][-2:] == [tok.decode([5]),
                                                                  tok.decode([40])]


@pytest.mark.parametrize("route, body", [
    ("/v1/completions", {"prompt": "x", "logprobs": 0, "logprob_token_ids": [1] * 129}),
    ("/v1/completions", {"prompt": "x", "logprobs": 0, "logprob_token_ids": [10**6]}),
    ("/v1/completions", {"prompt": "x", "logprobs": 0, "logprob_token_ids": ["x"]}),
    ("/v1/completions", {"prompt": "x", "logprob_token_ids": [5]}),  # logprobs must be set
    ("/v1/completions", {"prompt": "x", "logprobs": 0, "echo": True, "max_tokens": 0,
                         "logprob_token_ids": [5]}),  # no output token to read them at
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "logprob_token_ids": [5]})])  # ... chat's true
async def test_logprob_token_ids_refused_as_vllm_refuses_them(srv, route, body):
    status, err = await post(srv, route, {"model": srv.engine.model_name, "max_tokens": 1,
                                          **body})
    assert status == 400 and err["error"]["param"] == "logprob_token_ids"


async def test_split_character_tokens_are_named_as_vllm_names_them(srv):
    """NOTE(logprob-names): a token ending inside a UTF-8 character reads "" and the one that
    completes it the whole character (vLLM 0.33's _verify_tokens), also across stream chunks,
    in top_logprobs, for echoed prompt tokens and prompt_logprobs; text_offset follows the
    text and chat bytes are the character's."""
    emoji = [3 + b for b in "\U0001F600".encode()]  # the built-in tokenizer: byte i is 3 + i
    body = {"model": srv.engine.model_name, "max_tokens": 8, "temperature": 0,
            "structured_outputs": {"regex": "\U0001F600\U0001F600"},
            "logit_bias": {str(t): 100 for t in emoji}}
    names = ["", "", "", "\U0001F600"] * 2
    status, out = await post(srv, "/v1/completions", {**body, "prompt": "x", "logprobs": 2})
    lp = out["choices"][0]["logprobs"]
    assert status == 200 and out["choices"][0]["text"] == "\U0001F600" * 2, out
    assert lp["tokens"] == names and lp["text_offset"] == [0] * 4 + [1] * 4
    assert all(lp["tokens"][i] in lp["top_logprobs"][i] for i in range(8))
    assert "\ufffd" not in str(lp["top_logprobs"])
    status, out = await post(srv, "/v1/chat/completions", {
        **body, "messages": [{"role": "user", "content": "x"}], "logprobs": True,
        "top_logprobs": 1, "stream": False})
    content = out["choices"][0]["logprobs"]["content"]
    assert [(e["token"], e["bytes"]) for e in content] == \
        [(n, list(n.encode())) for n in names], content
    async with client(srv) as c:  # streamed: one token per chunk, the context carried over
        chunks = await c.completions.create(**{k: v for k, v in body.items()
                                               if k not in ("structured_outputs", "logit_bias")},
                                            prompt="x", logprobs=0, stream=True,
                                            extra_body={k: body[k] for k in
                                                        ("structured_outputs", "logit_bias")})
        streamed = [t async for ch in chunks for t in (ch.choices[0].logprobs.tokens
                                                       if ch.choices[0].logprobs else [])]
    assert streamed == names
    status, out = await post(srv, "/v1/completions", {
        "model": srv.engine.model_name, "prompt": "\u00e9\u20ac", "max_tokens": 1,
        "echo": True, "logprobs": 1, "prompt_logprobs": 1})
    ch = out["choices"][0]
    assert ch["logprobs"]["tokens"][:6] == ["<s>", "", "\u00e9", "", "", "\u20ac"], ch
    assert [p and p[str(t)]["decoded_token"] for p, t in zip(
        ch["prompt_logprobs"], srv.engine.tokenizer.encode("\u00e9\u20ac"))] == \
        [None, "", "\u00e9", "", "", "\u20ac"]


async def test_n_choices_share_one_formatting_of_the_echo(srv, monkeypatch):
    """NOTE(echo-once): the echoed prompt's logprobs are formatted once for the n choices (on
    the event loop, per choice they held it for seconds on long prompts), its tokens named once
    for the echo and prompt_logprobs both (NOTE(name-once)), and every choice still shows them
    whole, followed by its own tokens' entries."""
    from kvpool.server.logprob_format import LogprobFormatter
    lengths = []
    names = LogprobFormatter._names

    def counted(self, ids, lps, context=()):
        lengths.append(len(ids))
        return names(self, ids, lps, context)

    monkeypatch.setattr(LogprobFormatter, "_names", counted)
    prompt = "Once upon a time there was a block pool"
    status, out = await post(srv, "/v1/completions", {
        "model": srv.engine.model_name, "prompt": prompt, "max_tokens": 3, "n": 4,
        "temperature": 1.0, "seed": 7, "echo": True, "logprobs": 2})
    assert status == 200, out
    n_prompt = out["usage"]["prompt_tokens"]
    assert lengths.count(n_prompt) == 1  # the echo once; the rest are generated tokens
    heads = [c["logprobs"]["tokens"][:n_prompt] for c in out["choices"]]
    assert len(out["choices"]) == 4 and all(h == heads[0] for h in heads)
    assert all(len(c["logprobs"]["tokens"]) == n_prompt + 3 for c in out["choices"])
