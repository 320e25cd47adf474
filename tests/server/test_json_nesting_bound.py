"""The value bound counts arrays and objects, not only commas (json_body.py NOTE(gil)): a body
of 16,000 arrays nested 120 deep has 16,001 commas but 1.9M values, and ``json.loads`` held the
GIL ~0.65 s building them (the field was then ignored: a 200). Such bodies are refused from the
raw bytes, as many token ids are; a fitting request's large bodies still parse."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.errors import RequestError
from kvpool.router.relayed import CHECKED_VALUES, check_body
from kvpool.runtime.model.grammar import MAX_SCHEMA_CHARS
from kvpool.server.json_body import SCHEMA_VALUES
from kvpool.server.json_bound import depth_floor, structural_commas
from tests.router.helpers import router
from tests.server.parsers import parser

LONG_CONTEXT = 131072  # a 128k model: a body under 4 MiB may hold ~1M values


def _nested(arrays: int, depth: int) -> bytes:
    """A small request with an ignored field of ``arrays`` arrays, each ``depth`` deep."""
    nest = b"[" * depth + b"]" * depth
    return b'{"prompt": "hi", "max_tokens": 2, "x": [' + b",".join([nest] * arrays) + b"]}"


def _refused(raw: bytes, max_model_len: int) -> RequestError:
    with pytest.raises(RequestError) as info:
        parser(max_model_len).decode_body(raw)
    err = info.value
    assert err.code == "context_length_exceeded" and err.param is None, str(err)
    assert "JSON values (each array and object counted)" in str(err)
    return err


def test_the_probes_nested_body_is_refused_before_parsing():
    raw = _nested(16_000, 120)  # 3.9 MB, 16,001 commas
    assert raw.count(b",") < parser(LONG_CONTEXT).max_body_commas < raw.count(b"[")
    _refused(raw, LONG_CONTEXT)
    # cut short: only a refusal made before json.loads can say context length (a parse
    # first answers invalid_json)
    _refused(raw[:-2], LONG_CONTEXT)


def test_a_nesting_bomb_past_the_value_bound_is_refused_for_its_depth_not_the_context():
    """json_body.py NOTE(nesting-bomb): 100,000 arrays and no comma can only nest 100,000
    deep (json_bound.py NOTE(depth-floor)); before, the 400 named the context length."""
    arrays = b"[" * 100_000
    objects = b'{"prompt": "hi", "x": ' + b'{"a": [' * 30_000 + b"1" + b"]}" * 30_000 + b"}"
    for raw, counts in ((arrays + b"]" * 100_000, "100000 arrays and objects and 0 commas "
                         "nests at least 100000 levels"), (arrays, None),  # cut short too
                        (objects, "60001 arrays and objects and 1 commas nests at least "
                         "30001 levels")):
        with pytest.raises(RequestError) as info:
            parser(64).decode_body(raw)
        err = info.value
        assert (err.code, err.param) == ("invalid_json", None), str(err)
        assert str(err).startswith("request body is nested deeper than 128: JSON with "), err
        assert counts is None or counts in str(err), str(err)
    # brackets inside strings are no structure: the value bound's 400, as before
    raw = json.dumps({"prompt": [0] * 30_000, "stop": ["[{" * 50_000]}).encode()
    _refused(raw, 64)


def _chat(messages: int) -> dict[str, Any]:
    parts = [{"type": "text", "text": "hi, [look] {here}"}]
    return {"messages": [{"role": "user", "content": parts}] * messages, "max_tokens": 1}


def _schema(properties: int) -> dict[str, Any]:
    item = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                                             "b": {"enum": ["x", "y", [1, 2]]}}}
    return {"type": "json_schema", "json_schema": {"name": "big", "schema": {
        "type": "object", "properties": {f"p{i}": item for i in range(properties)}}}}


@pytest.mark.parametrize("body", [
    {"prompt": "f(a, [b], {c}); " * 250_000, "max_tokens": 1},  # 4 MB of code-like text
    {"prompt": list(range(100_000)), "max_tokens": 1},
    _chat(5000),
    {"messages": [{"role": "user", "content": "hi"}], "response_format": _schema(3000)},
], ids=["4MB-string", "100k-ids", "5000-messages", "big-schema"])
def test_large_bodies_of_a_fitting_request_still_parse(body):
    raw = json.dumps(body).encode()
    assert parser(LONG_CONTEXT).decode_body(raw) == body


def _values(doc: Any) -> int:
    """The values ``json.loads`` builds for ``doc`` (object keys aside)."""
    if isinstance(doc, dict):
        return 1 + sum(_values(v) for v in doc.values())
    if isinstance(doc, list):
        return 1 + sum(_values(v) for v in doc)
    return 1


_json = st.recursive(
    st.none() | st.integers() | st.text(alphabet=',"\\[]{}a '),
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(alphabet=',[{a"'), kids,
                                                               max_size=4),
    max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_the_count_bounds_the_values_built(doc):
    raw = json.dumps(doc).encode()
    assert _values(json.loads(raw)) <= structural_commas(raw, -1) + 1
    # json_bound.py NOTE(depth-floor): the nesting the counts claim, at most the real one
    floor = depth_floor(raw, structural_commas(raw, -1), 0)
    assert floor is None or floor[2] <= _depth(doc)


def _depth(doc: Any) -> int:
    """Arrays and objects within one another on the deepest path (0 for a scalar)."""
    kids = doc.values() if isinstance(doc, dict) else doc if isinstance(doc, list) else None
    return 0 if kids is None else 1 + max(map(_depth, kids), default=0)


async def test_a_nested_body_is_a_400_over_http(make_server):
    async with make_server() as srv, aiohttp.ClientSession() as s:
        raw = _nested(200, 120)  # 201 commas, 24,000 arrays: over a 256-token context's bound
        headers = {"Content-Type": "application/json"}
        async with s.post(srv.v1 + "/completions", data=raw, headers=headers) as r:
            out = await r.json()
            assert r.status == 400, out
        assert out["error"]["code"] == "context_length_exceeded", out
        assert out["error"]["param"] is None
        async with s.post(srv.v1 + "/completions", data=_nested(2, 120), headers=headers) as r:
            assert r.status == 200, await r.text()  # a few nested arrays: parsed, ignored


async def test_a_nesting_bomb_is_a_400_naming_the_nesting_direct_and_through_the_router(
        make_server):
    """The outside probe's 200,000 nested arrays (``[[[...]]]``) got the context length's 400.
    Past the value bounds (the replica's, and the router's: it leaves the body to the replica)
    and within them (a parse hitting Python's recursion limit, the router's own too), the 400
    names the nesting bound (json_body.py NOTE(nesting-bomb))."""
    bomb, small = b"[" * (CHECKED_VALUES + 1000), b"[" * 5000 + b"]" * 5000
    headers = {"Content-Type": "application/json"}
    async with make_server(max_body_bytes=1 << 20) as srv, \
            router([srv.url], interval=3600) as (_, url), aiohttp.ClientSession() as s:
        for base in (srv.url, url):
            for raw, said in ((bomb, f": JSON with {len(bomb)} arrays"), (small, "")):
                async with s.post(base + "/v1/completions", data=raw, headers=headers) as r:
                    out = await r.json()
                    assert r.status == 400, out
                err = out["error"]
                assert (err["code"], err["param"]) == ("invalid_json", None), err
                said = f"request body is nested deeper than 128{said}"
                assert err["message"].startswith(said), err


def test_the_router_leaves_a_nested_body_to_the_replica():
    """relayed.py: past CHECKED_VALUES the router does not decode a body (the replica, which
    knows its context length, answers it); arrays count as values there too."""
    arrays = CHECKED_VALUES // 120 + 1
    assert check_body(_nested(arrays, 120)) is None
    assert check_body(_nested(2, 120))["x"] == [json.loads(b"[" * 120 + b"]" * 120)] * 2


# ---- NOTE(schema-values): a schema within its cap is not refused for the prompt's bound ------

def _examples_schema(n: int) -> dict[str, Any]:
    """The outside probe's body: a schema whose ``examples`` (an annotation) hold ``n``
    numbers, under a short prompt."""
    schema = {"type": "object", "properties": {"n": {"type": "integer",
                                                     "examples": list(range(n))}}}
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "x", "schema": schema}}}


def test_a_schema_within_its_cap_parses_beside_a_short_context():
    body = _examples_schema(90_000)  # 619 KB, under the 1 MiB cap; 90k values
    raw = json.dumps(body).encode()
    assert len(raw) < MAX_SCHEMA_CHARS < 3 * SCHEMA_VALUES // 2
    assert parser(2048).decode_body(raw) == body


def test_past_the_schemas_share_the_400_names_both_limits_not_the_context():
    raw = json.dumps(_examples_schema(SCHEMA_VALUES + 50_000)).encode()
    with pytest.raises(RequestError) as info:
        parser(64).decode_body(raw)
    assert info.value.code == "too_many_values" and "1 MiB cap" in str(info.value)
    # no schema: the prompt's bound and its context-length 400, as before
    with pytest.raises(RequestError) as info:
        parser(64).decode_body(json.dumps({"prompt": [0] * 90_000}).encode())
    assert info.value.code == "context_length_exceeded"
