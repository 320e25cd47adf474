"""The official ``openai`` client against a real server (real engine, built-in tiny model)."""

from __future__ import annotations

import asyncio

import openai
import pytest
from openai import AsyncOpenAI

from tests.server.helpers import wait_until

def client(srv, **kw) -> AsyncOpenAI:
    kw.setdefault("api_key", "unused")
    return AsyncOpenAI(base_url=srv.v1, max_retries=0, timeout=30, **kw)


async def model_of(c: AsyncOpenAI) -> str:
    models = await c.models.list()
    assert len(models.data) >= 1 and models.data[0].object == "model"
    return models.data[0].id


async def test_completion_and_chat(srv):
    async with client(srv) as c:
        model = await model_of(c)
        r = await c.completions.create(model=model, prompt="The quick brown fox", max_tokens=8,
                                       temperature=0)
        assert r.id.startswith("cmpl-") and r.object == "text_completion" and r.created > 0
        assert r.model == model and len(r.choices) == 1
        ch = r.choices[0]
        assert ch.index == 0 and ch.finish_reason == "length" and ch.text
        u = r.usage
        assert u.completion_tokens == 8 and u.total_tokens == u.prompt_tokens + 8
        assert u.prompt_tokens_details.cached_tokens >= 0

        chat = await c.chat.completions.create(
            model=model, max_completion_tokens=6, temperature=0,
            messages=[{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "Hello, world!"}])
        assert chat.id.startswith("chatcmpl-") and chat.object == "chat.completion"
        msg = chat.choices[0].message
        assert msg.role == "assistant" and msg.content
        assert chat.choices[0].finish_reason == "length" and chat.usage.completion_tokens == 6


async def test_token_id_prompt_matches_text_prompt(srv):
    tok = srv.engine.tokenizer
    async with client(srv) as c:
        model = await model_of(c)
        by_text = await c.completions.create(model=model, prompt="Hello, world!", max_tokens=6,
                                             temperature=0)
        by_ids = await c.completions.create(model=model, prompt=tok.encode("Hello, world!"),
                                            max_tokens=6, temperature=0)
        assert by_text.choices[0].text == by_ids.choices[0].text
        assert by_text.usage.prompt_tokens == by_ids.usage.prompt_tokens


async def test_streaming_with_usage(srv):
    async with client(srv) as c:
        model = await model_of(c)
        full = await c.completions.create(model=model, prompt="Hello", max_tokens=12,
                                          temperature=0)
        stream = await c.completions.create(model=model, prompt="Hello", max_tokens=12,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
        texts, finish, usage = [], None, None
        async for chunk in stream:
            if chunk.usage is not None:
                assert chunk.choices == []
                usage = chunk.usage
                continue
            assert chunk.object == "text_completion" and chunk.id.startswith("cmpl-")
            texts.append(chunk.choices[0].text)
            finish = chunk.choices[0].finish_reason or finish
        assert "".join(texts) == full.choices[0].text and finish == "length"
        assert usage.completion_tokens == 12 and usage.prompt_tokens == full.usage.prompt_tokens

        chat = await c.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=5,
            temperature=0, stream=True, stream_options={"include_usage": True})
        roles, content, usage = [], [], None
        async for chunk in chat:
            assert chunk.object == "chat.completion.chunk"
            if chunk.usage is not None:
                usage = chunk.usage
            for ch in chunk.choices:
                roles += [ch.delta.role] if ch.delta.role else []
                content += [ch.delta.content] if ch.delta.content else []
        assert roles == ["assistant"] and "".join(content) and usage.completion_tokens == 5


async def test_n_and_seed_reproducibility(srv):
    async with client(srv) as c:
        model = await model_of(c)
        kw = dict(model=model, prompt="Numbers: 0 1 2", max_tokens=10, temperature=1.0,
                  top_p=0.95, extra_body={"top_k": 50})
        a = await c.completions.create(n=3, seed=1234, **kw)
        b = await c.completions.create(n=3, seed=1234, **kw)
        other = await c.completions.create(n=3, seed=99, **kw)
        assert sorted(ch.index for ch in a.choices) == [0, 1, 2]
        assert [ch.text for ch in a.choices] == [ch.text for ch in b.choices]
        assert [ch.text for ch in a.choices] != [ch.text for ch in other.choices]
        assert a.usage.completion_tokens == b.usage.completion_tokens <= 30
        if all(ch.finish_reason == "length" for ch in a.choices):
            assert a.usage.completion_tokens == 30


async def test_stop_strings(srv):
    async with client(srv) as c:
        model = await model_of(c)
        base = await c.completions.create(model=model, prompt="A paged key value cache",
                                          max_tokens=24, temperature=0)
        text = base.choices[0].text
        assert len(text) >= 8, text
        stop = text[4:6]
        cut = await c.completions.create(model=model, prompt="A paged key value cache",
                                         max_tokens=24, temperature=0, stop=[stop, "\x00never"])
        assert cut.choices[0].text == text[:text.index(stop)]
        assert cut.choices[0].finish_reason == "stop"


async def test_prefix_cache_hits_and_salt_isolation(srv):
    prompt = "Prefix caching lets requests that share a prompt prefix share the same blocks. " * 2
    async with client(srv) as c:
        model = await model_of(c)
        kw = dict(model=model, prompt=prompt, max_tokens=2, temperature=0)
        first = await c.completions.create(**kw, extra_body={"cache_salt": "tenant-a"})
        again = await c.completions.create(**kw, extra_body={"cache_salt": "tenant-a"})
        other = await c.completions.create(**kw, extra_body={"cache_salt": "tenant-b"})
        assert first.usage.prompt_tokens >= 2 * 16
        assert again.usage.prompt_tokens_details.cached_tokens >= 16
        assert other.usage.prompt_tokens_details.cached_tokens == 0


async def test_errors_map_to_openai_exceptions(srv):
    async with client(srv) as c:
        model = await model_of(c)
        with pytest.raises(openai.BadRequestError) as e:
            await c.completions.create(model=model, prompt="hi", max_tokens=0)
        assert e.value.status_code == 400 and e.value.param == "max_tokens"
        with pytest.raises(openai.NotFoundError) as e:  # 404, as OpenAI and vLLM answer
            await c.completions.create(model="no-such-model", prompt="hi", max_tokens=1)
        assert e.value.status_code == 404
        assert e.value.param == "model" and e.value.code == "model_not_found"
        with pytest.raises(openai.BadRequestError) as e:
            await c.completions.create(model=model, prompt=[7] * 300, max_tokens=1)
        assert e.value.param == "prompt" and e.value.code == "context_length_exceeded"
        with pytest.raises(openai.BadRequestError) as e:
            await c.chat.completions.create(model=model, messages=[], max_tokens=1)
        assert e.value.param == "messages"
        with pytest.raises(openai.BadRequestError) as e:
            await c.completions.create(model=model, prompt="hi", n=5, max_tokens=1)
        assert e.value.param == "n"
        with pytest.raises(openai.NotFoundError):
            await c.models.retrieve("no-such-model")


async def test_auth(make_server):
    async with make_server(api_key="s3cret") as srv:
        async with client(srv, api_key="wrong") as bad:
            with pytest.raises(openai.AuthenticationError) as e:
                await bad.models.list()
            assert e.value.status_code == 401 and e.value.code == "invalid_api_key"
            with pytest.raises(openai.AuthenticationError):
                await bad.completions.create(model="x", prompt="hi", max_tokens=1)
        async with client(srv, api_key="s3cret") as good:
            model = await model_of(good)
            r = await good.completions.create(model=model, prompt="hi", max_tokens=2)
            assert r.usage.completion_tokens == 2


async def test_concurrent_clients(srv):
    async with client(srv) as c:
        model = await model_of(c)
        rs = await asyncio.gather(*(
            c.completions.create(model=model, prompt=f"request {i}", max_tokens=4, seed=i)
            for i in range(12)))
        assert all(r.usage.completion_tokens == 4 for r in rs)
        assert len({r.id for r in rs}) == 12


async def test_busy_server_is_503_for_the_client(make_server):
    # max_queue bounds the requests in flight: while one long request runs, the next is 503
    async with make_server(max_num_seqs=1, max_queue=1) as srv:
        baseline = srv.free()
        async with client(srv) as c:
            model = await model_of(c)
            long = asyncio.create_task(c.completions.create(
                model=model, prompt="hi", max_tokens=150, temperature=0,
                extra_body={"ignore_eos": True}))
            assert await wait_until(lambda: srv.free() < baseline)  # it is running
            with pytest.raises(openai.InternalServerError) as e:
                await c.completions.create(model=model, prompt="hi", max_tokens=1)
            assert e.value.status_code == 503 and e.value.code == "queue_full"
            assert e.value.response.headers["Retry-After"] == "1"
            assert (await long).usage.completion_tokens == 150


async def test_sampling_controls_through_the_client(srv):
    """presence/frequency penalties, logit_bias (as the client sends it), and vLLM's
    repetition_penalty / min_tokens / min_p through ``extra_body``: a real forward samples."""
    tok = srv.engine.tokenizer
    hot = tok.encode(" cache", add_special_tokens=False)[0]
    async with client(srv) as c:
        model = await model_of(c)
        r = await c.completions.create(model=model, prompt="The quick brown fox", max_tokens=4,
                                       temperature=0, logit_bias={str(hot): 100})
        assert r.choices[0].text == tok.decode([hot] * 4)
        r = await c.completions.create(
            model=model, prompt="The quick brown fox", max_tokens=4, temperature=0,
            logit_bias={str(hot): 100}, frequency_penalty=2, presence_penalty=2,
            extra_body={"repetition_penalty": 1.5, "min_tokens": 2, "min_p": 0.1})
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 4
        chat = await c.chat.completions.create(
            model=model, max_completion_tokens=3, temperature=0, logit_bias={str(hot): 100},
            messages=[{"role": "user", "content": "Hello"}])
        assert chat.choices[0].message.content == tok.decode([hot] * 3)
        with pytest.raises(openai.BadRequestError) as err:
            await c.completions.create(model=model, prompt="x", max_tokens=4,
                                       presence_penalty=3)
        assert err.value.status_code == 400
        assert err.value.body["param"] == "presence_penalty"
