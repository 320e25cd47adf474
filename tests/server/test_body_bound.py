"""Issue 12 item 3: bodies with more JSON values than a fitting request can hold are refused
from their raw bytes, before ``json.loads`` holds the GIL for the whole parse (body_bound.py,
NOTE(gil))."""

from __future__ import annotations

import json

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.server.body_bound import structural_commas

BIG_BODY = 4 * 1024 * 1024 + 65536


def _reference(raw: bytes) -> int:
    """Commas outside strings, one byte at a time (the obvious, slow scanner)."""
    n = 0
    in_string = escaped = False
    for b in raw:
        if in_string:
            if escaped:
                escaped = False
            elif b == 0x5C:
                escaped = True
            elif b == 0x22:
                in_string = False
        elif b == 0x22:
            in_string = True
        elif b == 0x2C:
            n += 1
    return n


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=',"\\\u00e9ab{}[] \n'),
    lambda kids: st.lists(kids, max_size=6)
    | st.dictionaries(st.text(alphabet=',"\\a}'), kids, max_size=4),
    max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(_json, st.booleans())
def test_structural_commas_equals_a_bytewise_scan(doc, ascii_only):
    raw = json.dumps(doc, ensure_ascii=ascii_only).encode()
    exact = structural_commas(raw, -1)  # limit below any count: always the exact walk
    assert exact == _reference(raw)
    assert structural_commas(raw, 10**9) >= exact  # under the limit: the total, a bound


@given(st.binary(max_size=200))
def test_any_bytes_are_counted_without_error(raw):
    assert structural_commas(raw, -1) == _reference(raw)


def test_many_commas_inside_strings_are_not_values():
    raw = json.dumps({"prompt": "a, " * 100_000, "stop": ['\\",,"']}).encode()
    assert structural_commas(raw, 1000) == 1


async def _post_raw(url: str, data: bytes) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as s, s.post(url, data=data, headers=headers) as r:
        return r.status, await r.json()


async def test_2m_token_ids_are_refused_from_the_raw_body_before_parsing(make_server):
    async with make_server(max_body_bytes=BIG_BODY) as srv:
        # truncated JSON: only a refusal made before json.loads can say context length
        # (a parse first answers invalid_json)
        body = b'{"max_tokens": 1, "prompt": [' + b"0," * 1_999_999 + b"0"
        status, out = await _post_raw(srv.v1 + "/completions", body)
        assert status == 400, out
        err = out["error"]
        assert err["code"] == "context_length_exceeded" and err["param"] is None
        assert "2000001 or more JSON values" in err["message"]  # max_tokens is one
        # a 4 MB string full of commas is not values: judged on its characters, as before
        text = json.dumps({"prompt": "a, " * 1_300_000, "max_tokens": 1}).encode()
        status, out = await _post_raw(srv.v1 + "/completions", text)
        assert status == 400 and out["error"]["param"] == "prompt"
        assert "characters" in out["error"]["message"]
        status, out = await _post_raw(srv.v1 + "/completions",
                                      b'{"prompt": "hi", "max_tokens": 2}')
        assert status == 200 and out["usage"]["completion_tokens"] == 2
