"""NOTE(one-identity) in kvpool/server/tenant.py, on the real server: a request that
carries the tenant header twice (a client's own copy ahead of the one a proxy appends) is
refused, so a client cannot be another tenant by naming it first: it reads no hit of the
other tenant's prompt, no stored response of it, and draws on no quota of it."""

from __future__ import annotations

import aiohttp
from multidict import CIMultiDict

PROMPT = "the quick brown fox jumps over the lazy dog, " * 3  # several full blocks
H = "X-Tenant-Id"


def twice(first: str, second: str) -> CIMultiDict:
    return CIMultiDict([(H, first), (H, second)])


async def test_a_repeated_tenant_header_is_refused_everywhere(make_server):
    async with make_server(app_options={"tenant_header": H}) as srv, \
            aiohttp.ClientSession() as s:
        body = {"prompt": PROMPT, "max_tokens": 1, "temperature": 0}
        async with s.post(srv.v1 + "/completions", json=body, headers={H: "a"}) as r:
            assert r.status == 200
        async with s.post(srv.v1 + "/responses", json={"input": "a's secret",
                          "max_output_tokens": 1}, headers={H: "a"}) as r:
            rid = (await r.json())["id"]
        asks = [("POST", "/completions", body), ("POST", "/kvpool/lookup", {"prompt": PROMPT}),
                ("GET", f"/responses/{rid}", None),
                ("POST", "/responses", {"input": "x", "previous_response_id": rid})]
        for method, path, sent in asks:
            for headers in (twice("a", "b"), twice("b", "a"), twice("a", "a")):
                async with s.request(method, srv.v1 + path, json=sent, headers=headers) as r:
                    out = await r.json()
                    assert r.status == 400, (path, out)
                    assert out["error"]["param"] == H, out
                    assert set(out["error"]) == {"message", "type", "param", "code"}
        # one copy: each tenant still reaches what is its own, and only that
        async with s.get(srv.v1 + f"/responses/{rid}", headers={H: "a"}) as r:
            assert r.status == 200
        async with s.get(srv.v1 + f"/responses/{rid}", headers={H: "b"}) as r:
            assert r.status == 404
        async with s.post(srv.v1 + "/completions", json=body, headers={H: "b"}) as r:
            assert (await r.json())["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
