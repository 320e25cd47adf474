"""Every failure is OpenAI's error JSON with the right status (raw aiohttp client, real server)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from kvpool.server.api_key import auth_middleware
from kvpool.server.cors import CorsPolicy
from kvpool.server.middleware import error_middleware
from kvpool.server.tenant import tenant_of_headers

CHAT = [{"role": "user", "content": "hi"}]


async def call(srv, method: str, path: str, *, json=None, data=None, headers=None):
    async with aiohttp.ClientSession() as s:
        async with s.request(method, srv.url + path, json=json, data=data,
                             headers=headers) as r:
            return r.status, dict(r.headers), await r.json(content_type=None)


def assert_error(status, body, want_status, param="any", code="any"):
    assert status == want_status, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["type"] == ("server_error" if want_status >= 500 else "invalid_request_error")
    if param != "any":
        assert err["param"] == param, err
    if code != "any":
        assert err["code"] == code, err
    return err


MALFORMED = [
    (b'{"prompt": "hi", ', "invalid_json"),
    (b'{"prompt": "\xff\xfe"}', "invalid_encoding"),
    (b'["prompt"]', "invalid_json"),
    (b'{"prompt": "hi", "temperature": NaN}', "invalid_json"),
    (b'{"prompt": "\\ud800"}', "invalid_encoding"),
    (b'{"x":' * 129 + b"1" + b"}" * 129, "invalid_json"),  # json_body.py NOTE(json-depth)
]


async def test_malformed_bodies(srv):
    for data, code in MALFORMED:  # one server for all cases (startup dominates)
        status, headers, body = await call(srv, "POST", "/v1/completions", data=data,
                                           headers={"Content-Type": "application/json"})
        assert_error(status, body, 400, None, code)
        assert headers["Content-Type"].startswith("application/json")


BAD_FIELDS = [
    ("/v1/completions", {"max_tokens": "8.5"}, "max_tokens"),
    ("/v1/completions", {"temperature": "warm"}, "temperature"),
    ("/v1/completions", {"n": 1.5}, "n"),
    ("/v1/completions", {"stream": "maybe"}, "stream"),
    ("/v1/completions", {"stop": 7}, "stop"),
    ("/v1/completions", {"seed": "x"}, "seed"),
    ("/v1/completions", {"prompt": {"a": 1}}, "prompt"),
    ("/v1/completions", {"prompt": ["a", [1]]}, "prompt"),
    ("/v1/completions", {"prompt": ["a", ""]}, "prompt"),
    ("/v1/completions", {"prompt": [1, 100000]}, "prompt"),
    ("/v1/completions", {"max_tokens": 0}, "max_tokens"),
    ("/v1/completions", {"max_tokens": -5}, "max_tokens"),
    ("/v1/completions", {"max_tokens": 10_000}, "max_tokens"),
    ("/v1/completions", {"n": 99}, "n"),
    ("/v1/completions", {"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ("/v1/completions", {"echo": 2}, "echo"),
    ("/v1/completions", {"logprobs": 21}, "logprobs"),
    ("/v1/completions", {"logprobs": -1}, "logprobs"),
    ("/v1/completions", {"prompt_logprobs": 21}, "prompt_logprobs"),
    ("/v1/completions", {"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": 3}, "logprobs"),
    ("/v1/completions", {"stream_options": {"include_usage": True}}, "stream_options"),
    ("/v1/chat/completions", {"messages": "hi"}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": 7, "content": "x"}]},
     "messages[0].role"),
    ("/v1/chat/completions", {"max_completion_tokens": 0}, "max_completion_tokens"),
    ("/v1/chat/completions", {"model": 3}, "model"),
]


async def test_bad_fields_name_the_param(srv):
    for path, extra, param in BAD_FIELDS:
        body = {"prompt": "hi"} if path == "/v1/completions" else {"messages": CHAT}
        body.update(extra)
        status, _, resp = await call(srv, "POST", path, json=body)
        assert_error(status, resp, 400, param)


async def test_unknown_fields_are_rejected_when_asked(make_server):
    async with make_server(app_options={"reject_unknown_fields": True}) as srv:
        status, _, resp = await call(srv, "POST", "/v1/completions", json={
            "prompt": "hi", "max_tokens": 2, "frobnicate": [1, {"a": None}], "logprobs": None})
        assert_error(status, resp, 400, "frobnicate", "unknown_parameter")


async def test_prompt_too_long_for_the_model(srv):
    status, _, resp = await call(srv, "POST", "/v1/completions",
                                 json={"prompt": [65] * 300, "max_tokens": 1})
    assert_error(status, resp, 400, "prompt", "context_length_exceeded")
    status, _, resp = await call(srv, "POST", "/v1/completions",
                                 json={"prompt": [65] * 256, "max_tokens": 1})
    assert_error(status, resp, 400, "prompt", "context_length_exceeded")  # no room for one
    # past the context with room left: served, max_tokens lowered to it (NOTE(clamp))
    status, _, resp = await call(srv, "POST", "/v1/completions",
                                 json={"prompt": [65] * 200, "max_tokens": 100,
                                       "ignore_eos": True})
    assert status == 200 and resp["usage"]["completion_tokens"] == 56, resp
    assert resp["choices"][0]["finish_reason"] == "length"


async def test_prompt_that_can_never_fit_the_pool(make_server):
    # 8 blocks x 16 tokens = 128 slots < a 200-token prompt, though the 256 context allows it
    async with make_server(num_device_blocks=8, num_host_blocks=8) as small:
        status, _, resp = await call(small, "POST", "/v1/completions",
                                     json={"prompt": [65] * 200, "max_tokens": 4})
        assert_error(status, resp, 400, "prompt")
        status, _, resp = await call(small, "POST", "/v1/completions",
                                     json={"prompt": [65] * 20, "max_tokens": 4})
        assert status == 200, resp  # the pool still serves what fits


async def test_api_key(make_server):
    """Every path under vLLM's guarded prefixes asks for the key before routing
    (api_key.py NOTE(guarded-prefixes)): a scale-out 403 and a 404 there are 401s unkeyed."""
    async with make_server(api_key="k3y") as srv:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "k3y"},
                        {"Authorization": "Bearer k3y2"}, {"Authorization": "Basic k3y"}):
            for path in ("/v1/models", "/v1/completions", "/v1/no-such-route",
                         "/inference/v1/generate", "/inference/v1/unknown", "/v2/rerank",
                         "/cohere/v2/chat"):
                method = "GET" if path == "/v1/models" else "POST"
                status, h, resp = await call(srv, method, path, headers=headers,
                                             json={"prompt": "hi"})
                assert_error(status, resp, 401, None, "invalid_api_key")
                assert h.get("WWW-Authenticate") == "Bearer"
        ok = {"Authorization": "Bearer k3y"}
        status, _, resp = await call(srv, "POST", "/v1/completions", headers=ok,
                                     json={"prompt": "hi", "max_tokens": 1})
        assert status == 200, resp
        status, _, resp = await call(srv, "POST", "/inference/v1/generate", headers=ok,
                                     json={"token_ids": [1]})
        assert_error(status, resp, 403, None, "scale_out_disabled")
        status, _, resp = await call(srv, "POST", "/inference/v1/unknown", headers=ok, json={})
        assert_error(status, resp, 404, None, "not_found")
        status, _, resp = await call(srv, "GET", "/health")  # open without the key
        assert status == 200 and resp["status"] == "ok"
        async with aiohttp.ClientSession() as s, s.get(srv.url + "/metrics") as r:
            assert r.status == 200 and b"kvpool_free_blocks" in await r.read()


async def test_keyless_options_is_answered_as_vllm_answers_it(make_server):
    """vLLM's key check lets every OPTIONS through and none of its routes takes OPTIONS, so
    under the guarded prefixes an unkeyed OPTIONS is its router's 405 (with Allow) or 404,
    CORS configured or not; none reaches a handler (options_key.py NOTE(options-key))."""
    for cors, acao in ((None, None), (CorsPolicy('["*"]'), "*")):
        async with make_server(api_key="k3y", app_options={"cors": cors} if cors else {}) as srv:
            for headers in ({}, {"Authorization": "Bearer nope"}, {"Origin": "https://a.b"},
                            {"Access-Control-Request-Method": "POST"}):
                for path, allow in (("/v1/completions", "POST"), ("/invocations", "POST"),
                                    ("/inference/v1/generate", "POST"), ("/v1/models", "GET,HEAD")):
                    status, h, resp = await call(srv, "OPTIONS", path, headers=headers)
                    assert_error(status, resp, 405, None, "method_not_allowed")
                    assert h["Allow"] == allow and "WWW-Authenticate" not in h, h
                    assert h.get("Access-Control-Allow-Origin") == (
                        acao if "Origin" in headers else None), h
                for path in ("/v1/no-such-route", "/cohere/v2/chat"):
                    status, _, resp = await call(srv, "OPTIONS", path, headers=headers)
                    assert_error(status, resp, 404, None, "not_found")
            # the key still opens nothing more on OPTIONS, and other methods still need it
            status, h, resp = await call(srv, "OPTIONS", "/v1/completions",
                                         headers={"Authorization": "Bearer k3y"})
            assert_error(status, resp, 405, None, "method_not_allowed")
            status, _, resp = await call(srv, "GET", "/v1/models")
            assert_error(status, resp, 401, None, "invalid_api_key")


async def test_keyless_options_never_runs_a_handler_that_takes_options():
    """A route that takes any method, OPTIONS included, still asks for the key: letting every
    OPTIONS through, as vLLM does, would run its handler for anyone (NOTE(options-key))."""
    ran: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        ran.append(request.headers.get("Authorization", ""))
        return web.json_response({"ok": True})

    app = web.Application(middlewares=[error_middleware, auth_middleware(("k3y",))])
    app.router.add_route("*", "/v1/anything", handler)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        srv = SimpleNamespace(url=f"http://127.0.0.1:{server.port}")
        status, _, resp = await call(srv, "OPTIONS", "/v1/anything")
        assert_error(status, resp, 401, None, "invalid_api_key")
        status, _, resp = await call(srv, "OPTIONS", "/v1/anything",
                                     headers={"Authorization": "Bearer k3y"})
        assert (status, resp, ran) == (200, {"ok": True}, ["Bearer k3y"])
    finally:
        await server.close()


async def test_several_api_keys_and_any_case_of_the_scheme(make_server):
    """vLLM's --api-key takes several keys, any of which will do, and reads the scheme in
    any case (RFC 7235): ``bearer KEY`` was a 401 here. Each key is its own tenant."""
    async with make_server(api_key=("k1", "k2")) as srv:
        for header in ("Bearer k1", "bearer k2", "BEARER k1", "BeArEr k2"):
            status, _, resp = await call(srv, "POST", "/v1/completions", json={
                "prompt": "hi", "max_tokens": 1}, headers={"Authorization": header})
            assert status == 200, (header, resp)
        for header in ("Bearer k3", "Bearer  k1", "Bearer k1k2", "Bearer ", "bearer"):
            status, _, resp = await call(srv, "GET", "/v1/models",
                                         headers={"Authorization": header})
            assert_error(status, resp, 401, None, "invalid_api_key")
    one, two, lower = ({"Authorization": h} for h in ("Bearer k1", "Bearer k2", "bearer k1"))
    assert tenant_of_headers(one, None, keyed=True) == tenant_of_headers(lower, None,
                                                                         keyed=True)
    assert tenant_of_headers(one, None, keyed=True) != tenant_of_headers(two, None, keyed=True)


async def test_body_too_large(srv):
    big = {"prompt": "x" * (70 * 1024), "max_tokens": 1}  # the fixture allows 64 KiB
    status, _, resp = await call(srv, "POST", "/v1/completions", json=big)
    assert_error(status, resp, 413, None, "request_too_large")


async def test_routes_and_methods(srv):
    status, _, resp = await call(srv, "GET", "/v1/nothing-here")
    assert_error(status, resp, 404, None, "not_found")
    status, _, resp = await call(srv, "POST", "/nope", json={})
    assert_error(status, resp, 404)
    status, headers, resp = await call(srv, "GET", "/v1/completions")
    assert_error(status, resp, 405, None, "method_not_allowed")
    assert headers["Allow"] == "POST"
    status, headers, resp = await call(srv, "POST", "/health", json={})
    assert_error(status, resp, 405)
    status, _, resp = await call(srv, "DELETE", "/v1/chat/completions")
    assert_error(status, resp, 405)


async def test_queue_full_is_503_with_retry_after(make_server):
    # one running sequence, one waiting slot: a burst of slow requests overflows the queue
    async with make_server(max_num_seqs=1, max_queue=1) as srv:
        body = {"prompt": "hi", "max_tokens": 120, "ignore_eos": True, "temperature": 0}
        results = await asyncio.gather(*(call(srv, "POST", "/v1/completions", json=body)
                                         for _ in range(8)))
        full = [(h, r) for status, h, r in results if status == 503]
        ok = [r for status, _, r in results if status == 200]
        assert full and ok, [s for s, _, _ in results]
        assert all(s in (200, 503) for s, _, _ in results)
        for headers, resp in full:
            err = assert_error(503, resp, 503, None, "queue_full")
            assert err["message"].count("retry later") == 1, err["message"]  # said once
            assert int(headers["Retry-After"]) >= 1
        assert all(r["usage"]["completion_tokens"] == 120 for r in ok)


async def test_health_and_models(srv):
    status, _, resp = await call(srv, "GET", "/health")
    assert status == 200 and resp == {"status": "ok", "num_running": 0, "num_waiting": 0}
    status, _, resp = await call(srv, "GET", "/v1/models")
    assert status == 200 and resp["object"] == "list"
    card = resp["data"][0]
    assert card["object"] == "model" and card["max_model_len"] == 256
    status, _, resp = await call(srv, "GET", f"/v1/models/{card['id']}")
    assert status == 200 and resp["id"] == card["id"]
    status, _, resp = await call(srv, "GET", "/v1/models/unknown")
    assert_error(status, resp, 404, "model", "model_not_found")


async def test_request_that_would_outgrow_the_pool_is_refused_up_front(make_server):
    # an admitted request is never dropped for capacity (NOTE(alone)): 40 prompt tokens +
    # max_tokens 200 need more than the 8-block pool (128 slots), so it is a 400 naming
    # max_tokens before anything runs (it used to be admitted and fail mid-stream with
    # generation_error); the largest max_tokens that fits runs alone to the end
    async with make_server(num_device_blocks=8, num_host_blocks=0,
                           preemption_mode="recompute") as small:
        body = {"prompt": [65] * 40, "max_tokens": 200, "ignore_eos": True, "temperature": 0}
        for stream in (False, True):
            status, _, resp = await call(small, "POST", "/v1/completions",
                                         json={**body, "stream": stream})
            assert_error(status, resp, 400, "max_tokens", "context_length_exceeded")
            assert "max_tokens <= 89" in resp["error"]["message"]
        status, _, resp = await call(small, "POST", "/v1/completions",
                                     json={**body, "max_tokens": 89})
        assert status == 200, resp
        assert resp["choices"][0]["finish_reason"] == "length"
        assert resp["usage"]["completion_tokens"] == 89


async def test_unknown_model_is_404_on_every_route(srv):
    for path, body in (("/v1/completions", {"prompt": "hi", "model": "gpt-4o"}),
                       ("/v1/chat/completions", {"messages": CHAT, "model": "gpt-4o"}),
                       ("/tokenize", {"prompt": "hi", "model": "gpt-4o"}),
                       ("/detokenize", {"tokens": [5], "model": "gpt-4o"})):
        status, _, resp = await call(srv, "POST", path, json=body)
        assert_error(status, resp, 404, "model", "model_not_found")


async def test_an_empty_model_is_the_served_one_on_every_route(srv):
    """vLLM serves ``"model": ""`` with its base model (load generators and gateways with no
    model configured send it); it was a 404 here."""
    for path, body in (("/v1/completions", {"prompt": "hi", "max_tokens": 1}),
                       ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 1}),
                       ("/v1/responses", {"input": "hi", "max_output_tokens": 1}),
                       ("/tokenize", {"prompt": "hi"}), ("/detokenize", {"tokens": [5]})):
        status, _, resp = await call(srv, "POST", path, json={**body, "model": ""})
        assert status == 200, (path, resp)
        if "model" in resp:
            assert resp["model"] == srv.engine.model_name, (path, resp)


async def test_a_leading_utf8_bom_is_ignored_as_vllm_ignores_it(srv):
    """vLLM (starlette's json.loads on the body's bytes) skips one UTF-8 byte order mark."""
    bom, headers = b"\xef\xbb\xbf", {"Content-Type": "application/json"}
    for path, body in (("/v1/completions", b'{"prompt": "hi", "max_tokens": 1}'),
                       ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": '
                                                b'"hi"}], "max_tokens": 1}'),
                       ("/tokenize", b'{"prompt": "hi"}')):
        status, _, plain = await call(srv, "POST", path, data=body, headers=headers)
        assert status == 200, plain
        status, _, out = await call(srv, "POST", path, data=bom + body, headers=headers)
        assert status == 200, out
        if path == "/tokenize":
            assert out == plain
    # only one, only in front: a second mark is not JSON
    status, _, out = await call(srv, "POST", "/tokenize", data=bom * 2 + b'{"prompt": "hi"}',
                                headers=headers)
    assert_error(status, out, 400, None, "invalid_json")
