"""NOTE(served-name): the name a model is served under (vLLM's default: --model as given) and
kvpool's old name for a directory (its basename), accepted as an alias of it."""

from __future__ import annotations

import pytest

from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.model_name import name_aliases, served_name
from kvpool.runtime.model import TINY_MODEL_NAME
from kvpool.server.parsed_request import ModelNotFoundError, ServedNames


@pytest.mark.parametrize("given, name, aliases", [
    ({}, TINY_MODEL_NAME, {}),  # the built-in model keeps its name
    ({"model": "/models/llama"}, "/models/llama", {"llama": "/models/llama"}),
    ({"model": "./llama/"}, "./llama/", {"llama": "./llama/"}),  # as given, slash and all
    ({"model": "llama"}, "llama", {}),  # the basename is the name: no alias
    # a hub id read from the cache (serve.py's NOTE(hf-cache)), or a name given: no alias
    ({"model": "/hub/snapshots/abc", "served_model_name": "org/tiny"}, "org/tiny", {}),
    ({"model": "/models/llama", "served_model_name": "x"}, "x", {}),
])
def test_the_served_name_is_model_as_given_and_the_basename_its_alias(given, name, aliases):
    config = EngineConfig(**given)
    assert (served_name(config), name_aliases(config)) == (name, aliases)


def test_an_alias_is_answered_as_its_name_and_never_shadows_or_invents_one():
    names = ServedNames(["/m/llama", "b"], {"llama": "/m/llama", "b": "/m/llama",
                                            "ghost": "/elsewhere"})
    assert names.aliases == {"llama": "/m/llama"}  # "b" is served itself; "/elsewhere" is not
    got = [names.resolve(m) for m in (None, "", "/m/llama", "llama", "b")]
    assert got == ["/m/llama", "/m/llama", "/m/llama", "/m/llama", "b"]
    for unknown in ("ghost", "m", "LLAMA"):
        with pytest.raises(ModelNotFoundError):
            names.resolve(unknown)
