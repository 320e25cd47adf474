"""NOTE(scale-out) in kvpool/server/scale_out_routes.py: vLLM 0.33's scale-out paths answer as
``vllm serve`` answers them without ``--enable-scale-out``: a POST is a 403 whose error JSON
says the endpoints are disabled and kvpool does not implement them; and the flags that would
turn them on in vLLM are refused at start rather than taken and ignored. Real server on
127.0.0.1, raw aiohttp client."""

from __future__ import annotations

import aiohttp
import pytest

from kvpool import cli
from kvpool.server.scale_out_routes import SCALE_OUT_PATHS

# a body each route would take in vLLM with the flag: the 403 never reads it
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "prompt": "hi",
        "token_ids": [1, 2], "request_ids": ["r"]}


def said_403(path: str, out: dict) -> str:
    """The message of a 403: OpenAI's error JSON on every path, /v1/messages/render too, as
    vLLM answers there (anthropic_errors.py NOTE(render-errors))."""
    assert "type" not in out, (path, out)
    assert out["error"]["type"] == "invalid_request_error", out
    assert (out["error"]["code"], out["error"]["param"]) == ("scale_out_disabled", None), out
    return out["error"]["message"]


async def test_each_scale_out_path_is_vllms_403_not_a_404(srv):
    async with aiohttp.ClientSession() as s:
        for path in SCALE_OUT_PATHS:
            for send in ({"json": BODY}, {"data": b"not json"}, {}):
                async with s.post(srv.url + path, **send) as r:
                    assert r.status == 403, (path, send, await r.text())
                    assert r.content_type == "application/json"
                    message = said_403(path, await r.json())
                assert message.startswith("Scale-out endpoints are disabled"), message
                assert path in message and "--enable-scale-out" in message, message
                assert "kvpool does not implement" in message, message
        # only POST, as vLLM registers them: another method is the router's 405
        async with s.get(srv.url + "/inference/v1/generate") as r:
            assert r.status == 405 and r.headers["Allow"] == "POST"
        # the routes beside them still serve
        async with s.post(srv.url + "/v1/completions", json={"prompt": "hi",
                                                             "max_tokens": 2}) as r:
            assert r.status == 200


@pytest.mark.parametrize("flag", ["--enable-scale-out", "--tokens-only"])
def test_the_flags_that_turn_them_on_in_vllm_are_refused_at_start(flag, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["serve", "--port", "0", flag])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"kvpool serve: error: argument {flag}" in err, err
    assert f"{flag}: kvpool does not implement vLLM's scale-out endpoints" in err, err
