"""LongRoPE (Phi-3-128k, Phi-3.5, Phi-4-mini): tiny seeded Phi-3 checkpoints pretrained on 32
positions and stretched to 128, whole and partially rotated. One factor set per served context,
as vLLM picks it (NOTE(longrope-regime) in attention.py): the long set when max_model_len is past
the pretraining length, where transformers agrees on prompts longer than it, the short set
otherwise, where transformers agrees on sequences that stay below it."""

from __future__ import annotations

import math

import pytest
import torch

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import ModelConfig, ModelConfigError, load_model, load_tokenizer
from kvpool.runtime.model.fingerprint import weights_fingerprint
from tests.configs import engine_config
from tests.runtime.model.helpers import (SENTENCES, PagedGreedyRunner,
                                         assert_prompt_logprobs_match, hf_greedy, ref_logprobs,
                                         save_hf_model)

ORIGINAL, MAX_POS, NEW_TOKENS = 32, 128, 8
PROMPTS = {"short": 10, "long": 40, "crossing": 28}  # prompt lengths
# head_dim 16: partial_rotary_factor -> rotated frequencies, one short/long factor each
FREQS = {1.0: 8, 0.5: 4}


def _rope(n: int) -> dict:
    return {"rope_type": "longrope", "rope_theta": 10000.0,
            "short_factor": [1.0 + 0.05 * i for i in range(n)],
            "long_factor": [1.0 + 1.5 * i for i in range(n)]}  # far apart: regimes differ


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """partial factor -> (dir, transformers model, prompts by name, generate's tokens)."""
    transformers = pytest.importorskip("transformers")
    out = {}
    for partial, freqs in FREQS.items():
        d = save_hf_model(tmp_path_factory.mktemp(f"phi3_longrope_{partial}"), "phi3", seed=3,
                          max_position_embeddings=MAX_POS,
                          original_max_position_embeddings=ORIGINAL,
                          partial_rotary_factor=partial, rope_parameters=_rope(freqs))
        ids = load_tokenizer(d).encode(" ".join(SENTENCES))
        prompts = {name: ids[:n] for name, n in PROMPTS.items()}
        hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        out[partial] = (d, hf, prompts, dict(zip(prompts, hf_greedy(hf, prompts.values(),
                                                                    NEW_TOKENS))))
    return out


def _model(d, context: int | None = None):
    model = load_model(d)
    if context is not None:
        model.rope.fit_context(context)
    return model


@pytest.mark.parametrize("partial", sorted(FREQS))
def test_long_context_matches_transformers_on_long_prompts(checkpoints, partial):
    """The model's own context (128) takes the long set: a prompt past the pretraining length
    is transformers' whole or chunked, and a short prompt beside it changes nothing."""
    d, hf, prompts, ref = checkpoints[partial]
    model = _model(d)
    assert model.config.rope_scaling.rope_type == "longrope" and model.rope.long_context
    assert model.config.rotary_dim == 2 * FREQS[partial]
    runner = PagedGreedyRunner(model, block_size=4, num_blocks=200)
    assert runner.generate([prompts["long"]], NEW_TOKENS, chunk_size=3) == [ref["long"]]
    alone = runner.generate([prompts["short"]], NEW_TOKENS)
    assert runner.generate([prompts["short"], prompts["long"]], NEW_TOKENS) == [
        alone[0], ref["long"]]


@pytest.mark.parametrize("partial", sorted(FREQS))
def test_short_context_matches_transformers_on_short_prompts(checkpoints, partial):
    d, hf, prompts, ref = checkpoints[partial]
    model = _model(d, ORIGINAL)
    assert not model.rope.long_context
    runner = PagedGreedyRunner(model, block_size=4, num_blocks=200)
    assert runner.generate([prompts["short"]], NEW_TOKENS) == [ref["short"]]
    assert runner.generate([prompts["short"]], NEW_TOKENS, chunk_size=3) == [ref["short"]]


@pytest.mark.parametrize("which,context", [("short", ORIGINAL), ("long", None)])
@pytest.mark.parametrize("partial", sorted(FREQS))
def test_prompt_logprobs_match_transformers(checkpoints, partial, which, context):
    d, hf, prompts, ref = checkpoints[partial]
    model = _model(d, context)
    ids = list(prompts[which]) + ref[which]
    assert_prompt_logprobs_match(model, hf, ids)


@pytest.mark.parametrize("partial", sorted(FREQS))
def test_crossing_keeps_one_set(checkpoints, partial):
    """A sequence crossing the pretraining length while decoding: every key rotated with the
    long set, so each generated token is the argmax of transformers' one forward (long) over
    the whole sequence, and chunking or a cached prefix changes nothing."""
    d, hf, prompts, _ = checkpoints[partial]
    prompt = prompts["crossing"]
    runner = PagedGreedyRunner(_model(d), block_size=4, num_blocks=200)
    got = runner.generate([prompt], NEW_TOKENS)[0]
    assert len(prompt) + NEW_TOKENS > ORIGINAL
    argmax = ref_logprobs(hf, prompt + got).argmax(dim=-1).tolist()
    assert argmax[len(prompt) - 1:-1] == got
    assert runner.generate([prompt], NEW_TOKENS, chunk_size=5) == [got]


def test_engine_picks_the_set_and_the_tier_tells_them_apart(checkpoints):
    """The engine fits the set to its max_model_len; the weights' fingerprint (the shared
    tier's namespace) names the set, so replicas on different contexts share no KV."""
    d = checkpoints[1.0][0]
    cores = [EngineCore(engine_config("small", model=str(d), max_model_len=n))
             for n in (ORIGINAL, ORIGINAL + 1)]
    assert [c.model.rope.long_context for c in cores] == [False, True]
    prints = {weights_fingerprint(c.model) for c in cores}
    assert len(prints) == 2


def _phi3(rope: dict, **top) -> dict:
    return {"model_type": "phi3", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 300,
            "max_position_embeddings": 4096 * 4, "rope_scaling": rope, **top}


def test_phi3_su_and_yarn_read_as_longrope():
    """Phi-3's legacy names (transformers' Phi3Config: NOTE(phi3-yarn)); the pretraining length
    defaults to Phi3Config's 4096 and the attention factor to transformers' formula."""
    for legacy in ("su", "yarn"):
        rope = {k: v for k, v in _rope(8).items() if k != "rope_type"}
        c = ModelConfig.from_hf_dict(_phi3(dict(rope, type=legacy)))
        s = c.rope_scaling
        assert (s.rope_type, s.original_max_position_embeddings, s.factor) == (
            "longrope", 4096, 4.0)
        assert s.attention_factor == math.sqrt(1 + math.log(4.0) / math.log(4096))
        assert s.long_factor == tuple(_rope(8)["long_factor"])
        assert ModelConfig.from_hf_dict(c.to_hf_dict()) == c
    given = ModelConfig.from_hf_dict(_phi3(dict(_rope(8), attention_factor=1.5, factor=2)))
    assert (given.rope_scaling.attention_factor, given.rope_scaling.factor) == (1.5, 2)


@pytest.mark.parametrize("rope,top,key", [
    (dict(_rope(8), short_factor=[1.0] * 7), {}, "rope_scaling.short_factor"),
    (dict(_rope(8), long_factor=[1.0] * 7 + [0]), {}, "rope_scaling.long_factor"),
    (dict(_rope(8), long_factor=None), {}, "rope_scaling.long_factor"),
    (_rope(8), {"partial_rotary_factor": 0.5}, "rope_scaling.short_factor"),  # 4 wanted
    (dict(_rope(8), original_max_position_embeddings=32), {},  # Phi3Config reads 4096
     "rope_scaling.original_max_position_embeddings"),
    (dict(_rope(8), attention_factor=-1), {}, "rope_scaling.attention_factor"),
])
def test_longrope_errors_name_the_key(rope, top, key):
    with pytest.raises(ModelConfigError) as err:
        ModelConfig.from_hf_dict(_phi3(rope, **top))
    assert err.value.key == key and key in str(err.value)
