"""Value limits as vLLM 0.33's request models set them, on a real in-process server: what
vLLM refuses is a 400 here (cache_salt's rule, seed's 64 bits, include's values, output_config
format's type, at most 4 stop strings), what it takes is served (priority and seed up to
int64); body_fields.py NOTE(salt-rule)."""

from __future__ import annotations

import aiohttp

INT64 = 1 << 63  # vLLM's seed and priority: -INT64 <= value < INT64
SALT_WORDS = ("Parameter 'cache_salt' must be at most 128 characters and must not contain "
              "'@', '/', '\\\\', or NUL.")
HI = [{"role": "user", "content": "hi"}]


async def answer(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json()


async def test_vllms_value_limits_on_each_route(srv):
    m = srv.engine.model_name
    routes = {"/v1/responses": {"model": m, "input": "hi", "max_output_tokens": 1},
              "/v1/chat/completions": {"model": m, "messages": HI, "max_tokens": 1},
              "/v1/messages": {"model": m, "messages": HI, "max_tokens": 1}}
    async with aiohttp.ClientSession() as s:
        for path, body in routes.items():
            for salt in ("a/b", "a@b", "a\\b", "x" * 129):
                status, out = await answer(s, srv.url + path, {**body, "cache_salt": salt})
                assert status == 400 and out["error"]["message"] == SALT_WORDS, (path, out)
            status, _ = await answer(s, srv.url + path, {**body, "cache_salt": "x" * 128})
            assert status == 200, path
        responses, chat = routes["/v1/responses"], routes["/v1/chat/completions"]
        for path, body in (("/v1/responses", responses), ("/v1/chat/completions", chat)):
            for field, value, want in (("seed", INT64, 400), ("seed", INT64 - 1, 200),
                                       ("priority", 1 << 31, 200), ("priority", INT64, 400),
                                       ("stop", list("abcde"), 400), ("stop", list("abcd"), 200)):
                status, out = await answer(s, srv.url + path, {**body, field: value})
                assert status == want and (want == 200 or out["error"]["param"] == field), (
                    path, field, out)
        status, out = await answer(s, srv.url + "/v1/responses",
                                   {**responses, "include": ["reasoning.encrypted_content",
                                                             "bogus"]})
        assert status == 400 and out["error"]["param"] == "include[1]", out
        messages = routes["/v1/messages"]
        status, out = await answer(s, srv.url + "/v1/messages",
                                   {**messages, "stop_sequences": list("abcde")})
        assert status == 400 and "stop_sequences" in out["error"]["message"], out
        xml = {"output_config": {"format": {"type": "xml", "schema": {"type": "object"}}}}
        for path, body in (("/v1/messages", messages),
                           ("/v1/messages/count_tokens", {"model": m, "messages": HI})):
            status, out = await answer(s, srv.url + path, {**body, **xml})
            assert status == 400 and "output_config.format.type" in out["error"]["message"]
