"""POST /v1/kvpool/lookup on the real server: its counts match what the next request reports as
cached_tokens, for text, token-id and chat prompts; the salt keeps tenants apart; bad bodies
get OpenAI error JSON; bodies are bounded like the generation routes' and a large one is parsed
off the event loop."""

import aiohttp

from tests.server.helpers import health_during_parse

PROMPT = "the quick brown fox jumps over the lazy dog, " * 3  # ~135 byte tokens: 8 blocks


async def post(url, body):
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        return r.status, await r.json()


async def lookup(srv, body):
    status, out = await post(srv.v1 + "/kvpool/lookup", body)
    assert status == 200, out
    return out


async def cached(srv, path, body):
    status, out = await post(srv.v1 + path, {**body, "max_tokens": 1, "temperature": 0})
    assert status == 200, out
    return out["usage"]["prompt_tokens_details"]["cached_tokens"]


async def test_lookup_predicts_cached_tokens_for_text_prompts(srv):
    body = {"prompt": PROMPT}
    first = await lookup(srv, body)
    assert first["device_hit_tokens"] == 0 and first["block_size"] == 16
    assert first["num_running"] == 0 and first["num_waiting"] == 0
    assert first["free_device_blocks"] == srv.free()
    assert await cached(srv, "/completions", body) == 0
    again = await lookup(srv, body)
    assert again["device_hit_tokens"] > 0 and again["host_hit_tokens"] == 0
    assert await cached(srv, "/completions", body) == again["device_hit_tokens"]
    # another tenant's salt hashes differently: nothing to hit
    salted = await lookup(srv, {**body, "cache_salt": "tenant-b"})
    assert salted["device_hit_tokens"] == 0
    assert await cached(srv, "/completions", {**body, "cache_salt": "tenant-b"}) == 0


async def test_lookup_of_token_ids_and_chat_matches(srv):
    ids = list(range(3, 3 + 70))
    assert (await lookup(srv, {"prompt_token_ids": ids}))["device_hit_tokens"] == 0
    assert await cached(srv, "/completions", {"prompt": ids}) == 0
    hit = (await lookup(srv, {"prompt_token_ids": ids}))["device_hit_tokens"]
    assert hit == 64  # 70 tokens: 4 full blocks, all cached, the 5th is partial
    assert await cached(srv, "/completions", {"prompt": ids}) == hit
    chat = {"messages": [{"role": "user", "content": PROMPT}]}
    await cached(srv, "/chat/completions", chat)
    hit = (await lookup(srv, chat))["device_hit_tokens"]
    assert hit > 0 and await cached(srv, "/chat/completions", chat) == hit



async def test_lookup_reports_no_hit_for_requests_that_read_no_cache(srv):
    """prompt_logprobs (and completions echo + logprobs) never read the cache
    (NOTE(prompt-logprobs)): the lookup says 0, as the request's own cached_tokens does."""
    ids = list(range(5, 5 + 70))
    await cached(srv, "/completions", {"prompt": ids})
    assert (await lookup(srv, {"prompt_token_ids": ids}))["device_hit_tokens"] == 64
    for extra in ({"prompt_logprobs": 1}, {"echo": True, "logprobs": 1}):
        out = await lookup(srv, {"prompt_token_ids": ids, **extra})
        assert out["device_hit_tokens"] == 0 and out["host_hit_tokens"] == 0, extra
        assert await cached(srv, "/completions", {"prompt": ids, **extra}) == 0
    chat = {"messages": [{"role": "user", "content": PROMPT}]}
    await cached(srv, "/chat/completions", chat)
    assert (await lookup(srv, chat))["device_hit_tokens"] > 0
    assert (await lookup(srv, {**chat, "prompt_logprobs": 2}))["device_hit_tokens"] == 0

async def test_lookup_leaves_the_pool_as_it_was(srv):
    await cached(srv, "/completions", {"prompt": PROMPT})
    before = srv.engine.snapshot().manager.device
    for _ in range(3):
        await lookup(srv, {"prompt": PROMPT})
    after = srv.engine.snapshot().manager.device
    assert (after.num_free, after.num_cached) == (before.num_free, before.num_cached)


async def test_lookup_bad_bodies_are_openai_errors(srv):
    for body, param in (({"prompt": 5}, "prompt"), ({"messages": "hi"}, "messages"),
                        ({"prompt": "x", "cache_salt": ""}, "cache_salt")):
        status, out = await post(srv.v1 + "/kvpool/lookup", body)
        assert status == 400, out
        assert set(out["error"]) == {"message", "type", "param", "code"}
        assert out["error"]["param"] == param


async def _post_raw(url: str, data: bytes) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as s, s.post(url, data=data, headers=headers) as r:
        return r.status, await r.json()


async def test_lookup_bodies_are_bounded_like_the_generation_routes(make_server):
    async with make_server(max_body_bytes=1024 * 1024) as srv:
        status, out = await _post_raw(srv.v1 + "/kvpool/lookup",
                                      b'{"prompt": "' + b"x" * (1024 * 1024) + b'"}')
        assert status == 413, out
        assert set(out["error"]) == {"message", "type", "param", "code"}
        assert out["error"]["code"] == "request_too_large"
        # more values than a fitting request holds: refused from the raw bytes, unparsed
        status, out = await _post_raw(srv.v1 + "/kvpool/lookup",
                                      b'{"prompt": [' + b"0," * 200_000 + b"0")
        assert status == 400 and out["error"]["code"] == "context_length_exceeded", out


async def test_health_answers_while_a_large_lookup_body_is_tokenized(make_server):
    """A ~1 MB prompt a long context must really tokenize (seconds of work): /health, sent
    while the lookup's parse runs, answers before the lookup does, and soon."""
    async with make_server(max_body_bytes=2 * 1024 * 1024, max_model_len=800_000) as srv:
        text = "hello world, " * (1024 * 1024 // 13)
        status, out = await health_during_parse(srv, srv.v1 + "/kvpool/lookup",
                                                {"prompt": text})
        assert status == 200 and out["device_hit_tokens"] == 0, out
