"""Issue 12 item 3: bodies with more JSON values than a fitting request can hold are refused
from their raw bytes, before ``json.loads`` holds the GIL for the whole parse (json_body.py,
NOTE(gil))."""

from __future__ import annotations

import json

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.server.app import ROUTES_KEY
from kvpool.server.json_body import MAX_JSON_BYTES_PER_CHAR
from kvpool.server.json_bound import key_before, longest_string_over, structural_commas

BIG_BODY = 4 * 1024 * 1024 + 65536


def _reference(raw: bytes) -> int:
    """Commas, ``[`` and ``{`` outside strings, one byte at a time (the obvious, slow
    scanner)."""
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
        elif b in b",[{":
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


def test_many_commas_and_brackets_inside_strings_are_not_values():
    raw = json.dumps({"prompt": "f(a, [b], {c}); " * 100_000, "stop": ['\\",[{"']}).encode()
    assert structural_commas(raw, -1) == 1 + 2  # one comma; the object and the stop list
    assert structural_commas(raw, 1000) <= 1000  # the walk stops once under the limit


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
        # the object, max_tokens, the list and its 2M ids
        assert "up to 2000003 JSON values" in err["message"]
        # a 4 MB string full of commas is not values: judged on its characters, as before
        text = json.dumps({"prompt": "a, " * 1_300_000, "max_tokens": 1}).encode()
        status, out = await _post_raw(srv.v1 + "/completions", text)
        assert status == 400 and out["error"]["param"] == "prompt"
        assert "characters" in out["error"]["message"]
        status, out = await _post_raw(srv.v1 + "/completions",
                                      b'{"prompt": "hi", "max_tokens": 2}')
        assert status == 200 and out["usage"]["completion_tokens"] == 2


# ---- NOTE(string-bound): one string longer than a fitting request's is refused unread --------

_strings = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ['"', "\\", "\\\"", "🙂", "\U0010ffff", "\x00", "\u2028"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_strings, min_size=1, max_size=8), st.booleans(), st.integers(0, 60))
def test_string_bound_finds_exactly_the_strings_over_the_limit(texts, ascii_only, limit):
    doc = {"prompt": texts[0], "stop": texts[1:], "user": "u"}
    raw = json.dumps(doc, ensure_ascii=ascii_only).encode()
    lengths = [len(json.dumps(t, ensure_ascii=ascii_only).encode()) - 2
               for t in [*doc] + texts + ["u"]]
    found = longest_string_over(raw, limit)
    if max(lengths) <= limit:
        assert found is None
    else:
        assert found is not None and found[1] > limit and found[1] in lengths


@settings(max_examples=300, deadline=None)
@given(_strings, st.booleans(), st.integers(1, 50))
def test_string_bound_never_refuses_a_text_of_max_prompt_chars(text, ascii_only, reps):
    """A decoded string of C characters is at most C * MAX_JSON_BYTES_PER_CHAR bytes in any
    JSON spelling, so the raw-byte bound never refuses a string the character bound admits."""
    s = text * reps
    raw = json.dumps({"prompt": s}, ensure_ascii=ascii_only).encode()
    # (the key "prompt" is a string too: the server's bound is never under 1 MB)
    assert longest_string_over(raw, max(len(s) * MAX_JSON_BYTES_PER_CHAR, 6)) is None
    assert key_before(raw, raw.index(b'"', 2 + len(b'"prompt"'))) == "prompt"


async def test_a_string_too_long_to_fit_is_refused_before_json_decoding(make_server):
    async with make_server(max_body_bytes=BIG_BODY) as srv:
        parser = srv.app[ROUTES_KEY].parser
        size = parser.max_string_bytes + 1
        assert size > 1 << 20  # the floor: at most ~1 MB strings are never refused unread
        # the body is cut after the string: only a refusal made before json decoding can
        # answer context_length_exceeded (a decode first answers invalid_json)
        for url, head, param in (
                (srv.v1 + "/completions", b'{"max_tokens": 1, "prompt": "', "prompt"),
                (srv.v1 + "/chat/completions",
                 b'{"messages": [{"role": "user", "content": "', "messages"),
                (srv.v1 + "/completions", b'{"prompt": ["', None)):
            status, out = await _post_raw(url, head + b"x" * size + b'", ')
            assert status == 400, out
            err = out["error"]
            assert err["code"] == "context_length_exceeded" and err["param"] == param, err
            assert f"string of {size} bytes" in err["message"]
        # one byte shorter is decoded (and then refused on its characters, as before)
        status, out = await _post_raw(srv.v1 + "/completions",
                                      b'{"prompt": "' + b"x" * (size - 1) + b'", ')
        assert status == 400 and out["error"]["code"] == "invalid_json", out
        status, out = await _post_raw(srv.v1 + "/completions",
                                      b'{"prompt": "hi", "max_tokens": 2}')
        assert status == 200 and out["usage"]["completion_tokens"] == 2
