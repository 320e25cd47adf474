"""NOTE(schema-nesting) in kvpool/runtime/model/grammar.py: a JSON schema whose objects and
arrays nest past 64 levels is the 400 vLLM 0.33 answers (MAX_STRUCTURED_OUTPUT_JSON_NESTING);
it was served here. The bound counts containers, whichever keywords hold them."""

from __future__ import annotations

import pytest

from kvpool.errors import RequestError
from kvpool.runtime.model.grammar import MAX_SCHEMA_NESTING, GrammarSpec


def nested(levels: int) -> dict:
    """Objects within ``properties`` ``levels`` times: 2 * levels + 1 containers deep."""
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"k": schema}, "required": ["k"]}
    return schema


def test_64_levels_compile_and_65_are_refused():
    GrammarSpec.json_schema(nested(31))  # 63 levels of containers below the root: served
    with pytest.raises(RequestError, match="nested too deeply: objects and arrays may nest "
                                           f"at most {MAX_SCHEMA_NESTING} levels"):
        GrammarSpec.json_schema(nested(32))


def test_arrays_and_enums_count_as_containers():
    deep: object = {"type": "integer"}
    for _ in range(63):
        deep = {"type": "array", "items": deep}  # the last item 63 levels below the root
    GrammarSpec.json_schema(deep)
    with pytest.raises(RequestError, match="nested too deeply"):
        GrammarSpec.json_schema({"type": "array", "items": deep})
    value: list = []
    for _ in range(62):
        value = [value]
    with pytest.raises(RequestError, match="nested too deeply"):  # a value 64 levels down
        GrammarSpec.json_schema({"enum": [value]})
