"""Structured output through the real engine (built-in tiny model, random weights, real KV
tensors): with temperature 1.0 sampling every json_schema output parses and validates, requests
end with finish_reason "stop" when the grammar completes, unconstrained rows in the same batch are
untouched, and no block or matcher outlives its request."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import jsonschema
import pytest
import torch

from kvpool.errors import RequestError
from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import SamplingParams
from kvpool.runtime.model.grammar import GrammarSpec
from tests.configs import engine_config

# Bounded schemas (strings with maxLength, arrays with maxItems, no extra properties), so the
# grammar can complete well within max_tokens whatever a random model samples.
SCHEMAS = {
    "person": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": False},
    "enum": {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
             "required": ["color"], "additionalProperties": False},
    "numbers": {"type": "object", "properties": {
        "xs": {"type": "array", "items": {"type": "number"}, "maxItems": 4}},
        "required": ["xs"], "additionalProperties": False},
    "nested": {"type": "object", "properties": {
        "id": {"type": "integer"},
        "owner": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 6},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "bb"]},
                     "maxItems": 3}},
            "required": ["name", "tags"], "additionalProperties": False}},
        "required": ["id", "owner"], "additionalProperties": False},
}


@pytest.fixture(scope="module")
def core():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    c = EngineCore(engine_config("medium", max_num_seqs=16, max_num_batched_tokens=512))
    yield c
    c.close()
    torch.set_num_threads(before)


@dataclass
class Seq:
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None


def compiled(core: EngineCore, params: SamplingParams) -> SamplingParams:
    """What AsyncEngine.compile_grammar does on its worker thread, here on the test's."""
    spec = params.response_format
    return params if spec is None else dataclasses.replace(
        params, response_format=core.grammars.compiler.compile(spec))


def run(core: EngineCore, requests: dict[str, tuple[str, SamplingParams]]
        ) -> dict[str, list[Seq]]:
    """Every request to completion; the streamed deltas joined per sequence."""
    tok = core.tokenizer
    for rid, (prompt, params) in requests.items():
        ids = tok.encode(prompt)
        core.validate(ids, params)
        params = compiled(core, params)
        core.add_request(rid, ids, params)
    seqs = {rid: [Seq() for _ in range(p.n)] for rid, (_, p) in requests.items()}
    done = set()
    for _ in range(2000):
        for o in core.step():
            assert o.error is None
            for c in o.outputs:
                s = seqs[o.request_id][c.index]
                s.token_ids += c.token_ids
                s.text += c.text
                s.finish_reason = c.finish_reason
            if o.finished:
                done.add(o.request_id)
        if not core.has_work():
            break
    assert done == set(requests)
    assert core.manager.stats().device.num_used == 0 and len(core.grammars) == 0
    return seqs


def test_json_schema_outputs_always_validate(core):
    reqs = {}
    for name, schema in SCHEMAS.items():
        spec = GrammarSpec.json_schema(schema, name)
        for i in range(6):
            reqs[f"{name}-{i}"] = (f"give me {name} number {i}",
                                   SamplingParams(max_tokens=200, temperature=1.0, seed=i,
                                                  response_format=spec))
    done = run(core, reqs)
    for rid, out in done.items():
        schema = SCHEMAS[rid.rsplit("-", 1)[0]]
        c = out[0]
        assert c.finish_reason == "stop", (rid, c.text)
        jsonschema.validate(json.loads(c.text), schema)
        assert core.tokenizer.decode(c.token_ids) == c.text


def test_n_sequences_and_unconstrained_rows_share_a_batch(core):
    spec = GrammarSpec.json_schema(SCHEMAS["person"], "person")
    free = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    alone = run(core, {"free": ("The quick brown fox", free)})["free"][0]
    done = run(core, {
        "free": ("The quick brown fox", free),
        "json": ("a person", SamplingParams(n=3, max_tokens=200, temperature=1.0, seed=7,
                                            response_format=spec))})
    # the grammar rows never change what an unconstrained row in the same batch samples
    assert done["free"][0].token_ids == alone.token_ids
    outs = done["json"]
    assert len(outs) == 3
    for c in outs:
        assert c.finish_reason == "stop"
        jsonschema.validate(json.loads(c.text), SCHEMAS["person"])


def test_json_object_and_greedy(core):
    obj = SamplingParams(max_tokens=300, temperature=0.0,
                         response_format=GrammarSpec.json_schema(SCHEMAS["enum"]))
    done = run(core, {"g": ("pick a color", obj)})
    assert json.loads(done["g"][0].text)["color"] in ("red", "green", "blue")
    # json_object: whatever is emitted is a prefix of some JSON object (random weights may not
    # close it before max_tokens); a complete one parses as an object
    jo = SamplingParams(max_tokens=40, temperature=1.0, seed=3,
                        response_format=GrammarSpec.json_object())
    c = run(core, {"o": ("an object", jo)})["o"][0]
    assert c.text.startswith("{")
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.text), dict)
    else:
        assert c.finish_reason == "length" and len(c.token_ids) == 40


def test_min_tokens_never_overrides_the_grammar(core):
    # the enum object completes in a handful of tokens; min_tokens (masking EOS) must neither
    # stretch it nor break it
    spec = GrammarSpec.json_schema(SCHEMAS["enum"])
    p = SamplingParams(max_tokens=50, min_tokens=40, temperature=1.0, seed=1,
                       response_format=spec)
    c = run(core, {"m": ("color", p)})["m"][0]
    assert c.finish_reason == "stop" and json.loads(c.text)["color"] in ("red", "green", "blue")


def test_invalid_schema_is_a_request_error_naming_response_format():
    for bad in ({"type": "foo"}, {"type": "string", "pattern": "("},
                {"properties": {"a": {"$ref": "#/nowhere"}}}, [1, 2]):
        with pytest.raises(RequestError) as e:
            GrammarSpec.json_schema(bad)
        assert e.value.param == "response_format"
