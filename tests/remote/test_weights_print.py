"""The remote tier's namespace names the weights by what they are, not where they sit
(kvpool/runtime/model/fingerprint.py NOTE(weights-print)). It named them by the model
directory's path: new weights of the same geometry at the same path (a fine-tune rolled out in
place) read the old weights' blocks from Redis and answered wrong tokens, hits counted."""

from __future__ import annotations

import shutil

from kvpool.runtime.engine.async_engine import AsyncEngine
from kvpool.runtime.model.fingerprint import weights_fingerprint
from kvpool.runtime.model.loader import load_model
from kvpool.server.remote_setup import build_link
from tests.configs import engine_config
from tests.runtime.model.helpers import save_hf_model

UNUSED = "redis://127.0.0.1:1"  # never connected: keys are made without a round trip


def test_the_print_tells_weights_apart_and_ignores_the_path(tmp_path):
    a, b = save_hf_model(tmp_path / "a", "llama", seed=0), save_hf_model(tmp_path / "b",
                                                                         "llama", seed=1)
    copy = shutil.copytree(a, tmp_path / "elsewhere")
    prints = [weights_fingerprint(load_model(d)) for d in (a, b, copy, a)]
    assert prints[0] != prints[1]  # same geometry, other weights
    assert prints[0] == prints[2] == prints[3]  # the same weights from another path: shared


def test_new_weights_at_the_same_path_get_other_keys(tmp_path):
    d = tmp_path / "model"
    keys = []
    for seed in (0, 1, 0):  # v1, v2 rolled out in place, v1 again
        shutil.rmtree(d, ignore_errors=True)
        save_hf_model(d, "llama", seed=seed)
        eng = AsyncEngine(engine_config("remote", model=str(d), max_model_len=512))
        keys.append(build_link(eng, UNUSED).key_at(b"\x01" * 32))
        eng.core.close()
    assert keys[0] != keys[1] and keys[0] == keys[2], keys
