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
    assert got == ["/m/llama"] * 5  # NOTE(first-name): "b" too, as vLLM answers it
    for unknown in ("ghost", "m", "LLAMA"):
        with pytest.raises(ModelNotFoundError):
            names.resolve(unknown)


def test_one_checkpoint_at_two_paths_hashes_alike_and_shares_the_tier(tmp_path):
    """NOTE(served-name): the prefix hashes' and the tier's model id is a directory's basename
    (or the name given), never the path the name now is: /a/tiny and /b/tiny/ share the tier
    (they did not: a path as model id split them), a name given is the id."""
    import shutil
    import types

    from kvpool.runtime.engine.core import EngineCore
    from kvpool.runtime.model import save_tiny_model
    from kvpool.server.remote_setup import namespace
    from tests.configs import engine_config

    a = save_tiny_model(tmp_path / "a" / "tiny")
    b = shutil.copytree(a, tmp_path / "b" / "tiny")
    cores = [EngineCore(engine_config("small", model=m)) for m in (str(a), f"{b}/")]
    cores.append(EngineCore(engine_config("small", model=str(a), served_model_name="x")))
    try:
        ids = [c.manager.hasher.model_id for c in cores]
        spaces = [namespace(types.SimpleNamespace(core=c))[0].ns for c in cores]
    finally:
        for c in cores:
            c.close()
    assert ids == ["tiny", "tiny", "x"]
    assert spaces[0] == spaces[1] != spaces[2]
