"""Partial rotary embeddings (Phi-3's ``partial_rotary_factor``, Phi-4-mini's 0.75): a tiny
seeded Phi-3 checkpoint, its config.json written in the transformers 4.x layout (top-level key)
and the 5.x one (inside ``rope_parameters``), served by kvpool with the greedy tokens and the
prompt logprobs of transformers' own forward."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from kvpool.runtime.model import load_model, load_tokenizer
from tests.runtime.model.helpers import (SENTENCES, PagedGreedyRunner,
                                         assert_prompt_logprobs_match, hf_greedy, save_hf_model)

NEW_TOKENS = 6
# factor -> (config overrides, the rotary_dim transformers derives): 0.5 of head_dim 16, and
# 0.75 of head_dim 22 = 16.5, truncated to 16 by int() as transformers and vLLM do
CASES = {0.5: ({}, 8), 0.75: ({"hidden_size": 88}, 16)}


def _relayout(src, dst, layout: str):
    """A copy of checkpoint ``src`` whose config.json keeps the factor in one layout only."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    rope = config.pop("rope_parameters")
    partial = config.pop("partial_rotary_factor", None) or rope["partial_rotary_factor"]
    if layout == "v4":  # 4.x: top-level rope_theta and partial_rotary_factor, no rope object
        config.update(rope_theta=rope["rope_theta"], partial_rotary_factor=partial)
    else:  # 5.x: only inside rope_parameters
        config["rope_parameters"] = dict(rope, partial_rotary_factor=partial)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """(factor, layout) -> (dir, transformers model, prompts, transformers' greedy tokens)."""
    transformers = pytest.importorskip("transformers")
    out = {}
    for factor, (overrides, _) in CASES.items():
        root = tmp_path_factory.mktemp(f"phi3_partial_{factor}")
        src = save_hf_model(root / "saved", "phi3", seed=7, partial_rotary_factor=factor,
                            **overrides)
        tok = load_tokenizer(src)
        prompts = [tok.encode(" ".join(SENTENCES[i:i + 1 + i % 3]))[:4 + 9 * i]
                   for i in range(4)]
        for layout in ("v4", "v5"):
            d = _relayout(src, root / layout, layout)
            hf = transformers.AutoModelForCausalLM.from_pretrained(
                d, dtype=torch.float32).eval()
            out[factor, layout] = (d, hf, prompts, hf_greedy(hf, prompts, NEW_TOKENS))
    return out


@pytest.mark.parametrize("layout", ["v4", "v5"])
@pytest.mark.parametrize("factor", sorted(CASES))
def test_greedy_matches_transformers(checkpoints, factor, layout):
    d, hf, prompts, ref = checkpoints[factor, layout]
    model = load_model(d)
    assert model.config.partial_rotary_factor == factor
    assert model.config.rotary_dim == CASES[factor][1] < model.config.head_dim
    # transformers read the same width from this layout (its table is rotary_dim / 2 long)
    assert hf.model.rotary_emb.inv_freq.shape[0] * 2 == model.config.rotary_dim
    runner = PagedGreedyRunner(model, block_size=4, num_blocks=200)
    # chunked prefill mixes prefill chunks that start past 0 with decodes in one step
    assert runner.generate(prompts, NEW_TOKENS, chunk_size=5) == ref


@pytest.mark.parametrize("layout", ["v4", "v5"])
@pytest.mark.parametrize("factor", sorted(CASES))
def test_prompt_logprobs_match_transformers(checkpoints, factor, layout):
    d, hf, prompts, ref = checkpoints[factor, layout]
    model = load_model(d)
    ids = list(prompts[-1]) + ref[-1]
    assert_prompt_logprobs_match(model, hf, ids)


def test_full_rotary_keeps_the_unsliced_rope(checkpoints):
    """A factor of 1.0 rotates through the plain ``apply``: no slicing or concatenation added
    to every layer of a full-rotary model's step; a partial one through ``apply_partial``."""
    from kvpool.runtime.model import build_tiny_model
    from kvpool.runtime.model.attention import RotaryEmbedding

    _, full, _ = build_tiny_model()
    assert all(layer.self_attn.rotate is RotaryEmbedding.apply for layer in full.layers)
    partial = load_model(checkpoints[0.5, "v5"][0])
    assert all(layer.self_attn.rotate is RotaryEmbedding.apply_partial
               for layer in partial.layers)
