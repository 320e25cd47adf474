"""Dynamic NTK RoPE (``rope_scaling {"type": "dynamic"}``): vLLM's one table per model
(rope_config.py NOTE(dynamic-ntk)), checked against the formula written out here and, up to
max_position_embeddings, against transformers' own dynamic rope function."""

from __future__ import annotations

import pytest
import torch

from kvpool.runtime.model import ModelConfig
from kvpool.runtime.model.attention import RotaryEmbedding

BASE = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 300, "max_position_embeddings": 64, "rope_theta": 10000.0}


def _config(**rope) -> ModelConfig:
    return ModelConfig.from_hf_dict({**BASE, "rope_scaling": {"type": "dynamic", **rope}})


def _expected(theta: float, dim: int, factor: float, max_pos: int, trained: int) -> torch.Tensor:
    """vLLM's DynamicNTKScalingRotaryEmbedding base, in float64 from the ints up."""
    base = theta * (factor * max_pos / trained - (factor - 1)) ** (dim / (dim - 2))
    return 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)


@pytest.mark.parametrize("trained", [None, 32, 48])
def test_table_and_cos_sin_are_the_formula(trained):
    extra = {} if trained is None else {"max_trained_positions": trained}
    c = _config(factor=4.0, **extra)
    assert c.context_length == 256  # max_position_embeddings * factor, vLLM's derived length
    rope = RotaryEmbedding.from_config(c)
    want = _expected(10000.0, 16, 4.0, 64, trained or 64)
    torch.testing.assert_close(rope.table.double(), want, rtol=1e-6, atol=0)
    if trained is None:  # theta unchanged: the table of plain RoPE
        assert torch.equal(rope.table, RotaryEmbedding.from_config(
            ModelConfig.from_hf_dict(BASE)).table)
    else:
        assert not torch.allclose(rope.table.double(), _expected(1e4, 16, 1.0, 64, 64))
    positions = torch.tensor([0, 1, 63, 200])
    cos, sin = rope.cos_sin(positions, torch.float32)
    angles = positions.double()[:, None] * torch.cat((want, want))[None, :]
    torch.testing.assert_close(cos[:, 0].double(), angles.cos(), rtol=0, atol=1e-5)
    torch.testing.assert_close(sin[:, 0].double(), angles.sin(), rtol=0, atol=1e-5)


def test_partial_rotary_uses_the_rotated_width():
    """Phi-3 rotates int(head_dim * factor) dims; the exponent is over those, as vLLM's."""
    c = ModelConfig.from_hf_dict({**BASE, "model_type": "phi3", "partial_rotary_factor": 0.5,
                                  "rope_scaling": {"type": "dynamic", "factor": 2.0,
                                                   "max_trained_positions": 32}})
    table = RotaryEmbedding.from_config(c).table
    torch.testing.assert_close(table.double(), _expected(1e4, 8, 2.0, 64, 32), rtol=1e-6, atol=0)


def test_matches_transformers_up_to_max_position_embeddings():
    """transformers' dynamic function at init (any length up to max_position_embeddings)
    gives the same table, bit for bit, for the config.json transformers itself writes."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf = transformers.LlamaConfig(**{k: v for k, v in BASE.items() if k != "model_type"},
                                  rope_scaling={"rope_type": "dynamic", "factor": 4.0})
    ours = ModelConfig.from_hf_dict(hf.to_dict())
    assert ours.rope_scaling == _config(factor=4.0).rope_scaling and ours.context_length == 256
    for seq_len in (None, 64):
        inv_freq, attention = ROPE_INIT_FUNCTIONS["dynamic"](hf, "cpu", seq_len)
        assert attention == 1.0
        assert torch.equal(RotaryEmbedding.from_config(ours).table, inv_freq)
