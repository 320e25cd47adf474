"""vLLM's ``use_beam_search`` on a real server: beam search is not supported (README), so a
request asking for it is a 400 naming the field, where it was ignored and answered with
sampled text; false (as vLLM reads a bool: "no", 0) runs as before, the field not listed
as ignored."""

from __future__ import annotations

import aiohttp
import pytest

from kvpool.server.field_policy import IGNORED_FIELDS_HEADER

BODIES = (("/v1/completions", {"prompt": "hi"}),
          ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}))


async def post(srv, path: str, body: dict) -> tuple[int, dict, str | None]:
    async with aiohttp.ClientSession() as s, s.post(srv.url + path, json=body) as r:
        return r.status, await r.json(), r.headers.get(IGNORED_FIELDS_HEADER)


@pytest.mark.parametrize("value", [True, "yes", 1])
async def test_beam_search_is_a_400_naming_the_field(srv, value):
    for path, body in BODIES:
        status, r, _ = await post(srv, path, {**body, "model": srv.engine.model_name,
                                              "max_tokens": 2, "use_beam_search": value})
        assert status == 400 and set(r) == {"error"}, r
        assert r["error"]["param"] == "use_beam_search"
        assert r["error"]["code"] == "unsupported_parameter"


@pytest.mark.parametrize("value", [False, "no", 0, None])
async def test_no_beam_search_runs(srv, value):
    for path, body in BODIES:
        status, r, ignored = await post(srv, path, {**body, "model": srv.engine.model_name,
                                                    "max_tokens": 2, "use_beam_search": value})
        assert status == 200 and r["usage"]["completion_tokens"] == 2, r
        assert ignored is None
