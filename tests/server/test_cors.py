"""CORS as vLLM's server answers browser clients (starlette's CORSMiddleware under its
--allowed-origins / --allow-credentials / --allowed-methods / --allowed-headers): preflights
on any path without the API key, the Access-Control-* headers on successes, SSE streams and
every error answer, restricted origins, credentials, hostile Origin values, the flags'
JSON lists, and the router relaying all of it. Real servers on 127.0.0.1, plain aiohttp."""

from __future__ import annotations

import argparse
import asyncio
import json

import aiohttp

from kvpool.server import serve
from kvpool.server.app import start_draining
from kvpool.server.cors import ALL_METHODS, CorsPolicy
from tests.router.helpers import router
from tests.server.test_vllm_flags_served import served

A = "https://a.example"
EVIL = "https://evil.example"
PROMPT = {"prompt": "hello", "max_tokens": 2, "temperature": 0}
ACAO = "Access-Control-Allow-Origin"
ANY = CorsPolicy('["*"]')  # --allowed-origins '["*"]': any page (the default is none)


def preflight_headers(origin: str = A, method: str = "POST",
                      asked: str | None = "authorization, content-type") -> dict[str, str]:
    out = {"Origin": origin, "Access-Control-Request-Method": method}
    if asked is not None:
        out["Access-Control-Request-Headers"] = asked
    return out


async def fetch(url: str, method: str = "GET", **kw) -> tuple[int, dict, bytes]:
    async with aiohttp.ClientSession() as s, s.request(method, url, **kw) as r:
        return r.status, dict(r.headers), await r.read()


async def test_preflight_on_any_path_needs_no_key_and_answers_like_starlette(make_server):
    async with make_server(api_key="sk-test", app_options={"cors": ANY}) as srv:
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/no-such-route",
                     "/health", "/tokenize"):
            status, h, body = await fetch(srv.url + path, "OPTIONS",
                                          headers=preflight_headers())
            assert (status, body) == (200, b"OK"), (path, status, body)
            assert h[ACAO] == "*" and "Vary" not in h, h
            assert h["Access-Control-Allow-Methods"] == ", ".join(ALL_METHODS)
            assert h["Access-Control-Allow-Headers"] == "authorization, content-type"
            assert h["Access-Control-Max-Age"] == "600"
            assert "Access-Control-Allow-Credentials" not in h
        # the real request still needs the key; its 401 carries the CORS header too
        status, h, body = await fetch(srv.v1 + "/completions", "POST", json=PROMPT,
                                      headers={"Origin": A})
        assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
        assert h[ACAO] == "*"
        status, h, _ = await fetch(srv.v1 + "/completions", "POST", json=PROMPT,
                                   headers={"Origin": A, "Authorization": "Bearer sk-test"})
        assert status == 200 and h[ACAO] == "*"
        # no Origin: not a CORS request, nothing added (and OPTIONS is still no route)
        status, h, _ = await fetch(srv.url + "/health")
        assert status == 200 and ACAO not in h and "Vary" not in h
        status, h, _ = await fetch(srv.url + "/health", "OPTIONS")
        assert status == 405 and ACAO not in h


async def test_error_answers_and_sse_streams_carry_the_cors_header(make_server):
    async with make_server(app_options={"cors": ANY}) as srv:
        origin = {"Origin": A}
        cases = [("POST", "/v1/completions", {"json": {**PROMPT, "max_tokens": 0}}, 400),
                 ("POST", "/v1/completions", {"data": b'{"prompt": '}, 400),
                 ("GET", "/v1/nowhere", {}, 404),
                 ("POST", "/v1/completions", {"json": {**PROMPT, "model": "nope"}}, 404),
                 ("GET", "/v1/completions", {}, 405),
                 ("POST", "/v1/completions", {"data": b"x" * (70 * 1024)}, 413)]
        for method, path, kw, want in cases:
            status, h, body = await fetch(srv.url + path, method, headers=origin, **kw)
            assert status == want, (path, status, body)
            assert "error" in json.loads(body) and h[ACAO] == "*", (path, h)
        async with aiohttp.ClientSession() as s, s.post(
                srv.v1 + "/completions", json={**PROMPT, "stream": True},
                headers=origin) as r:
            assert r.status == 200 and r.headers[ACAO] == "*"
            assert r.headers["Content-Type"].startswith("text/event-stream")
            assert (await r.read()).rstrip().endswith(b"data: [DONE]")
        start_draining(srv.app)  # the 5xx of a draining server
        status, h, body = await fetch(srv.v1 + "/completions", "POST", json=PROMPT,
                                      headers=origin)
        assert status == 503 and json.loads(body)["error"]["code"] == "shutting_down"
        assert h[ACAO] == "*"


async def test_kvpool_serve_lets_no_page_read_it_by_default(make_server):
    """cors.py NOTE(no-origin-default): vLLM's default --allowed-origins, none. A page on
    another origin is answered without the header its browser needs to read the answer, and
    its preflight is refused; a client sending no Origin sees no difference. '["*"]' restores
    any origin. `kvpool serve`'s own path, and build_app's default."""
    async with served() as url:
        for method, path, kw in [("POST", "/v1/completions", {"json": PROMPT}),
                                 ("GET", "/v1/models", {}), ("GET", "/v1/nowhere", {})]:
            status, h, _ = await fetch(url + path, method, headers={"Origin": EVIL}, **kw)
            assert status in (200, 404) and ACAO not in h and "Vary" not in h, (path, h)
        status, h, body = await fetch(url + "/v1/completions", "OPTIONS",
                                      headers=preflight_headers(EVIL))
        assert (status, body) == (400, b"Disallowed CORS origin") and ACAO not in h, h
        status, h, body = await fetch(url + "/v1/completions", "POST", json=PROMPT)
        assert status == 200 and json.loads(body)["choices"], body
        assert not any(k.startswith("Access-Control") or k == "Vary" for k in h), h
    async with served("--allowed-origins", '["*"]') as url:
        status, h, _ = await fetch(url + "/v1/models", headers={"Origin": EVIL})
        assert status == 200 and h[ACAO] == "*", h
        status, h, _ = await fetch(url + "/v1/completions", "OPTIONS",
                                   headers=preflight_headers(EVIL))
        assert status == 200 and h[ACAO] == "*", h
    async with make_server() as srv:
        status, h, _ = await fetch(srv.v1 + "/models", headers={"Origin": EVIL})
        assert status == 200 and ACAO not in h, h


async def test_allowed_origins_restrict_and_echo_with_vary(make_server):
    cors = CorsPolicy(f'["{A}"]', methods='["GET", "POST"]', headers='["Authorization"]')
    async with make_server(app_options={"cors": cors}) as srv:
        url = srv.v1 + "/chat/completions"
        status, h, _ = await fetch(url, "OPTIONS", headers=preflight_headers())
        assert status == 200 and h[ACAO] == A and h["Vary"] == "Origin", h
        assert h["Access-Control-Allow-Methods"] == "GET, POST"
        assert h["Access-Control-Allow-Headers"] == (
            "Accept, Accept-Language, Authorization, Content-Language, Content-Type")
        for headers, failed in [(preflight_headers(EVIL), "origin"),
                                (preflight_headers(method="PUT"), "method"),
                                (preflight_headers(asked="authorization, x-debug"), "headers"),
                                (preflight_headers(EVIL, "PUT"), "origin, method")]:
            status, h, body = await fetch(url, "OPTIONS", headers=headers)
            assert (status, body) == (400, b"Disallowed CORS " + failed.encode()), body
            assert (ACAO in h) == (headers["Origin"] == A) and h["Vary"] == "Origin"
        status, h, _ = await fetch(srv.v1 + "/completions", "POST", json=PROMPT,
                                   headers={"Origin": A})
        assert status == 200 and h[ACAO] == A and h["Vary"] == "Origin"
        status, h, _ = await fetch(srv.v1 + "/completions", "POST", json=PROMPT,
                                   headers={"Origin": EVIL})
        assert status == 200 and ACAO not in h  # answered; the browser withholds it
        # cors.py NOTE(vary-origin): the answers without the header vary on Origin too, so a
        # cache never hands one of them to A: another origin, a malformed one, none, an error
        for path, headers in [("/models", {"Origin": EVIL}), ("/models", {"Origin": "x y"}),
                              ("/models", {}), ("/nowhere", {}), ("/nowhere", {"Origin": A})]:
            status, h, _ = await fetch(srv.v1 + path, headers=headers)
            assert status in (200, 404) and h["Vary"] == "Origin", (path, headers, h)
            assert (ACAO in h) == (headers.get("Origin") == A), (path, headers, h)


async def test_a_refused_origins_simple_post_starts_nothing(make_server):
    """cors.py NOTE(simple-post): a page from a refused origin posts text/plain (or a form)
    with no preflight; the server refuses it before any generation, while a JSON body (the
    browser preflights that and withholds the request) is served. The allowed origin and
    clients sending no Origin pass the CORS check with text/plain too, and get vLLM's
    JSON-only 400 (json_body.py NOTE(json-only))."""
    cors = CorsPolicy(f'["{A}"]')
    async with make_server(app_options={"cors": cors}) as srv:
        url, body = srv.v1 + "/completions", json.dumps(PROMPT)
        before = await prompt_tokens(srv.url)
        for ctype in ("text/plain", "text/plain;charset=UTF-8",
                      "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            status, h, raw = await fetch(url, "POST", data=body,
                                         headers={"Origin": EVIL, "Content-Type": ctype})
            err = json.loads(raw)["error"]
            assert (status, err["code"]) == (403, "origin_not_allowed"), (ctype, raw)
            assert "--allowed-origins" in err["message"] and ACAO not in h
        assert await prompt_tokens(srv.url) == before  # no generation started
        for headers in [{"Origin": A, "Content-Type": "text/plain"},
                        {"Content-Type": "text/plain"}]:
            status, _, raw = await fetch(url, "POST", data=body, headers=headers)
            got = (status, json.loads(raw)["error"]["code"])
            assert got == (400, "unsupported_media_type"), (headers, raw)
        for origin in (A, EVIL):
            status, _, raw = await fetch(url, "POST", data=body, headers={
                "Origin": origin, "Content-Type": "application/json"})
            assert status == 200 and json.loads(raw)["choices"], (origin, raw)
        status, _, _ = await fetch(srv.v1 + "/models", headers={"Origin": EVIL})
        assert status == 200  # a read starts nothing: CORS hides its answer


async def prompt_tokens(url: str) -> float:
    """vLLM's prompt token counter on the server's /metrics."""
    _, _, raw = await fetch(url + "/metrics")
    line = next(ln for ln in raw.decode().splitlines()
                if ln.startswith("vllm:prompt_tokens_total{"))
    return float(line.rsplit(" ", 1)[1])


async def test_credentials_echo_the_origin_never_a_star(make_server):
    cors = CorsPolicy('["*"]', credentials=True)
    async with make_server(app_options={"cors": cors}) as srv:
        status, h, _ = await fetch(srv.v1 + "/completions", "OPTIONS",
                                   headers=preflight_headers())
        assert status == 200 and h[ACAO] == A and h["Vary"] == "Origin"
        assert h["Access-Control-Allow-Credentials"] == "true"
        status, h, _ = await fetch(srv.v1 + "/models", headers={"Origin": A, "Cookie": "s=1"})
        assert status == 200 and h[ACAO] == A and h["Vary"] == "Origin"
        assert h["Access-Control-Allow-Credentials"] == "true"
        # cors.py NOTE(echo-credentials): no cookie, a bearer token or none, JSON or a stream,
        # and the 401 below: still the Origin, never "*", which a credentialed fetch refuses
        for path, method, kw in [("/models", "GET", {}),
                                 ("/completions", "POST", {"json": PROMPT}),
                                 ("/completions", "POST", {"json": {**PROMPT, "stream": True}})]:
            for auth in ({"Authorization": "Bearer sk-test"}, {}):
                status, h, _ = await fetch(srv.v1 + path, method,
                                           headers={"Origin": EVIL, **auth}, **kw)
                assert status == 200 and h[ACAO] == EVIL and h["Vary"] == "Origin", h
                assert h["Access-Control-Allow-Credentials"] == "true"
    async with make_server(api_key="sk-test", app_options={"cors": cors}) as srv:
        status, h, _ = await fetch(srv.v1 + "/models", headers={"Origin": A})
        assert status == 401 and h[ACAO] == A and h["Vary"] == "Origin", h
    async with make_server(app_options={"cors": ANY}) as srv:  # no credentials: "*", cookie or not
        status, h, _ = await fetch(srv.v1 + "/models", headers={"Origin": A, "Cookie": "s=1"})
        assert status == 200 and h[ACAO] == "*" and "Vary" not in h, h


async def raw_exchange(url: str, head: bytes) -> tuple[int, bytes]:
    """Send ``head`` (a request without a body) as is; (status, the answer's head)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head)
        await writer.drain()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    finally:
        writer.close()
    return int(answer.split(b" ", 2)[1]), answer


HOSTILE = [b"https://" + b"a" * 6000 + b".example",
           b"https://a.example\x01<script>",
           b"https://a.example, https://b.example",
           b"https://a.example\r\nOrigin: https://b.example",
           b"https://a.example/path?q=1",
           b"javascript:alert(1)"]


async def test_hostile_origins_are_never_reflected(make_server):
    """The echoing mode (credentials): a value that is not one origin is refused, not echoed,
    and the server goes on answering."""
    cors = CorsPolicy('["*"]', credentials=True)
    async with make_server(app_options={"cors": cors}) as srv:
        for origin in HOSTILE:
            for method, extra in ((b"OPTIONS", b"Access-Control-Request-Method: POST\r\n"),
                                  (b"GET", b"")):
                head = (method + b" /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: " + origin
                        + b"\r\n" + extra + b"Connection: close\r\n\r\n")
                status, answer = await raw_exchange(srv.url, head)
                assert b"access-control-allow-origin" not in answer.lower(), answer[:300]
                assert origin not in answer and b"<script>" not in answer
                assert status in ((400,) if method == b"OPTIONS" else (200, 400)), answer
        asked = "x-a, x-b\x01, \x7f"
        status, answer = await raw_exchange(srv.url, (
            "OPTIONS /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: " + A + "\r\n"
            "Access-Control-Request-Method: GET\r\nAccess-Control-Request-Headers: " + asked
            + "\r\nConnection: close\r\n\r\n").encode())
        assert status == 400 and b"access-control-allow-headers" not in answer.lower()
        status, h, _ = await fetch(srv.v1 + "/models", headers={"Origin": A, "Cookie": "c"})
        assert status == 200 and h[ACAO] == A


def test_flags_take_json_lists_and_a_malformed_one_names_its_flag(capsys):
    parser = serve.add_serve_args(argparse.ArgumentParser())
    o = serve.ServeOptions.from_args(parser.parse_args(
        ["--allowed-origins", f'["{A}", "http://localhost:3000"]', "--allow-credentials",
         "--allowed-methods", '["GET", "POST"]']))
    assert o.allowed_origins == (A, "http://localhost:3000") and o.allow_credentials
    assert (o.allowed_methods, o.allowed_headers) == (("GET", "POST"), ("*",))
    assert o.cors.origins == {A, "http://localhost:3000"} and o.cors.methods == ("GET", "POST")
    default = serve.ServeOptions.from_args(parser.parse_args([]))
    assert default.allowed_origins == () and not default.cors.any_origin  # none allowed
    assert default.cors.any_header and not default.allow_credentials
    for flag, value in [("--allowed-origins", A), ("--allowed-origins", f'"{A}"'),
                        ("--allowed-origins", f'["{A}/"]'), ("--allowed-methods", "[1]"),
                        ("--allowed-headers", '["x-a, x-b"]')]:
        assert serve.main([flag, value]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"kvpool serve: {flag}") and err.count("\n") == 1, err


async def test_the_router_relays_preflights_and_cors_headers(make_server):
    """The replica allows any origin; the router (none, by default) keeps its answers'."""
    async with make_server(app_options={"cors": ANY}) as srv, \
            router([srv.url], interval=0.2) as (_, url):
        for base in (srv.url, url):  # the replica's answer, then the same through the router
            status, h, body = await fetch(base + "/v1/chat/completions", "OPTIONS",
                                          headers=preflight_headers())
            assert (status, body) == (200, b"OK"), (base, status, body)
            assert h[ACAO] == "*" and h["Access-Control-Max-Age"] == "600"
            assert h["Access-Control-Allow-Headers"] == "authorization, content-type"
            async with aiohttp.ClientSession() as s, s.post(
                    base + "/v1/completions", json={**PROMPT, "stream": True},
                    headers={"Origin": A}) as r:
                assert r.status == 200 and r.headers[ACAO] == "*", (base, r.headers)
                await r.read()
            status, h, _ = await fetch(base + "/v1/nowhere", headers={"Origin": A})
            assert status == 404 and h[ACAO] == "*"


async def test_the_routers_own_answers_carry_its_cors_and_a_replicas_keep_their_own(
        make_server):
    """proxy.py NOTE(cors-own): a replica that allows only A answers EVIL without CORS, and the
    router (any origin here) adds none to that relayed answer; what the router answers
    itself (413, and 503 with no replica up) carries the router's policy."""
    only_a = CorsPolicy(f'["{A}"]')
    async with make_server(app_options={"cors": only_a}) as srv, \
            router([srv.url], interval=0.2, max_body_bytes=2048, cors=ANY) as (_, url):
        for origin, want in ((A, A), (EVIL, None)):
            status, h, _ = await fetch(url + "/v1/completions", "POST", json=PROMPT,
                                       headers={"Origin": origin})
            assert status == 200 and h.get(ACAO) == want, (origin, h)
        status, h, body = await fetch(url + "/v1/completions", "POST",
                                      data=b'{"prompt": "' + b"x" * 4096 + b'"}',
                                      headers={"Origin": EVIL,
                                               "Content-Type": "application/json"})
        assert status == 413 and h[ACAO] == "*", (status, h, body)  # the router's own
    async with router(["http://127.0.0.1:1"], interval=0.2, cors=only_a) as (_, url):
        for origin, want in ((A, A), (EVIL, None)):
            status, h, body = await fetch(url + "/v1/completions", "POST", json=PROMPT,
                                          headers={"Origin": origin})
            assert status == 503 and json.loads(body)["error"]["code"] == "no_replica"
            assert h.get(ACAO) == want, (origin, h)


def test_the_router_takes_the_cors_flags(capsys):
    from kvpool.router import cli
    assert cli.main(["--replica", "http://127.0.0.1:1", "--allowed-origins", "[1]"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvpool router: --allowed-origins") and err.count("\n") == 1, err
    args = cli.add_arguments(argparse.ArgumentParser()).parse_args(
        ["--replica", "http://127.0.0.1:1", "--allowed-origins", f'["{A}"]',
         "--allow-credentials"])
    r = cli.build_router(args)
    assert r.cors.origins == {A} and r.cors.credentials
