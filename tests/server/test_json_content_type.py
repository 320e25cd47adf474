"""NOTE(json-only) in json_body.py: vLLM's JSON routes take a body only when it is sent as
``application/json``; the same JSON bytes under another Content-Type (or none, as curl's
``-d`` without ``-H`` sends them) are a 400 error JSON before anything runs, as vLLM's
``validate_json_request`` answers. Real server, raw aiohttp client."""

from __future__ import annotations

import json

import aiohttp
import pytest

BODIES = {
    "/v1/completions": {"prompt": "hi", "max_tokens": 2},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/responses": {"input": "hi", "max_output_tokens": 2},
    "/invocations": {"prompt": "hi", "max_tokens": 2},
    "/v1/chat/completions/batch": {"messages": [[{"role": "user", "content": "hi"}]],
                                   "max_tokens": 2},
    "/tokenize": {"prompt": "hi"},
    "/detokenize": {"tokens": [1, 2]},
}
REFUSED = ["text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
           "application/octet-stream", "application/json-patch+json", None]
TAKEN = ["application/json", "application/json; charset=utf-8", "Application/JSON"]


async def post(s: aiohttp.ClientSession, url: str, body: dict, content_type: str | None):
    """POST the JSON bytes of ``body`` under ``content_type`` (None: no header at all)."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    skip = ["Content-Type"] if content_type is None else []
    async with s.post(url, data=json.dumps(body).encode(), headers=headers,
                      skip_auto_headers=skip) as r:
        return r.status, await r.json(content_type=None)


@pytest.mark.parametrize("path", list(BODIES))
async def test_a_json_body_sent_as_another_type_is_a_400(srv, path):
    async with aiohttp.ClientSession() as s:
        for content_type in REFUSED:
            status, out = await post(s, srv.url + path, BODIES[path], content_type)
            assert status == 400, (content_type, out)
            err = out["error"]
            assert err["type"] == "invalid_request_error" and err["param"] is None
            assert err["code"] == "unsupported_media_type"
            assert "Only 'application/json' is allowed" in err["message"]
        for content_type in TAKEN:  # the media type decides: parameters and case do not
            status, out = await post(s, srv.url + path, BODIES[path], content_type)
            assert status == 200, (content_type, out)


async def test_the_lookup_route_stays_lenient(srv):
    """The router fans the client's request out to /v1/kvpool/lookup as it came; the
    generation route it relays is the one that refuses a body of another type."""
    async with aiohttp.ClientSession() as s:
        status, out = await post(s, srv.v1 + "/kvpool/lookup", {"prompt": "hi"}, "text/plain")
    assert status == 200 and "device_hit_tokens" in out, out
