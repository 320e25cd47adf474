"""The remote tier's namespace names the weights by what they are, not where they sit
(kvpool/runtime/model/fingerprint.py NOTE(weights-print)). It named them by the model
directory's path: new weights of the same geometry at the same path (a fine-tune rolled out in
place) read the old weights' blocks from Redis and answered wrong tokens, hits counted."""

from __future__ import annotations

import json
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


def _edited(src, dst, **fields):
    """A copy of the model directory ``src`` whose config.json sets ``fields``."""
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**cfg, **fields}))
    return dst


def test_the_same_weights_under_another_config_get_another_print(tmp_path):
    """NOTE(weights-print): config.json edited beside the same weights (rope_theta, which
    the RoPE table showed, and rms_norm_eps, which nothing did) must not share the tier's
    KV; the served name stays, so only the print tells them apart."""
    a = save_hf_model(tmp_path / "a", "llama", seed=0)
    theta = _edited(a, tmp_path / "theta", rope_parameters={"rope_theta": 1e6,
                                                            "rope_type": "default"})
    eps = _edited(a, tmp_path / "eps", rms_norm_eps=1e-5)
    prints = [weights_fingerprint(load_model(d)) for d in (a, theta, eps, a)]
    assert len(set(prints[:3])) == 3 and prints[0] == prints[3], prints
    keys = []
    for d in (a, eps):  # through the server's namespace, as kvpool serve builds it
        eng = AsyncEngine(engine_config("remote", model=str(d), max_model_len=512))
        keys.append(build_link(eng, UNUSED).key_at(b"\x01" * 32))
        eng.core.close()
    assert keys[0] != keys[1]
