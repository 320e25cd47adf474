"""A Responses API answer from a replica that compresses what its client accepts
(kvpool/router/relayed.py NOTE(identity-encoding)). The router asks for it uncompressed, so it
learns the response id, and a follow-up naming the id goes to its replica without a search.
Two real aiohttp servers on 127.0.0.1 play the replicas; the client is aiohttp, which sends
``Accept-Encoding: gzip, deflate`` (and br where it can) by default."""

from __future__ import annotations

import contextlib

import aiohttp
from aiohttp import web

from tests.router.helpers import apps_served, router


@contextlib.asynccontextmanager
async def compressing(names: list[str], seen: list[tuple[str, str | None, object]]):
    """Replicas that compress their answers when the request accepts it; ``seen`` gets
    (replica, Accept-Encoding, previous_response_id) per POST /v1/responses."""
    def app_of(name: str) -> web.Application:
        async def create(request):
            body = await request.json()
            seen.append((name, request.headers.get("Accept-Encoding"),
                         body.get("previous_response_id")))
            out = web.json_response({"id": f"resp_{name}_{len(seen)}", "object": "response",
                                     "status": "completed", "output": ["x" * 4096]})
            out.enable_compression()  # by the request's Accept-Encoding; none for identity
            return out

        async def health(_):
            return web.json_response({"status": "ok"})

        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_post("/v1/responses", create)
        return app

    async with apps_served(*map(app_of, names)) as urls:
        yield urls


async def test_a_compressing_replica_still_teaches_the_response_id():
    seen: list[tuple[str, str | None, object]] = []
    async with compressing(["a", "b"], seen) as urls, router(urls) as (r, url), \
            aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/responses", json={"input": "x"}) as resp:
            first = await resp.json()  # readable whatever the encoding
            assert resp.status == 200, first
        owner = seen[0][0]
        assert r.affinity.learnt["answer"] == 1  # before the fix: 0, the body was gzip
        for _ in range(4):  # by load alone these would alternate between a and b
            async with s.post(url + "/v1/responses",
                              json={"input": "y", "previous_response_id": first["id"]}) as resp:
                assert resp.status == 200, await resp.text()
        assert [name for name, _, prev in seen if prev] == [owner] * 4
        assert r.affinity.searches == 0
        assert {enc for _, enc, _ in seen} == {"identity"}  # not the client's gzip, deflate
