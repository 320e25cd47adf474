"""ModelConfig parsing (transformers 4.x and 5.x layouts), validation errors, KV pool geometry."""

from __future__ import annotations

import json
import math

import pytest
import torch

from kvpool.errors import ConfigError
from kvpool.runtime.model import (KVCacheLayout, ModelConfig, ModelConfigError, ModelLoadError,
                                  allocate_kv_cache, kv_bytes_per_block)

BASE = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 300}


def cfg(**over):
    d = dict(BASE)
    d.update(over)
    return {k: v for k, v in d.items() if v is not ...}


def test_defaults_and_derived_head_dim():
    c = ModelConfig.from_hf_dict(cfg())
    assert c.head_dim == 16 and c.rope_theta == 10000.0 and c.rope_scaling.rope_type == "default"
    assert c.architecture == "LlamaForCausalLM" and not c.tie_word_embeddings
    assert c.q_size == 64 and c.kv_size == 32 and c.eos_token_ids == ()


def test_rope_theta_from_both_layouts():
    v4 = ModelConfig.from_hf_dict(cfg(rope_theta=500000.0))
    v5 = ModelConfig.from_hf_dict(cfg(rope_parameters={"rope_type": "default",
                                                       "rope_theta": 500000.0}))
    assert v4.rope_theta == v5.rope_theta == 500000.0
    llama3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    old = ModelConfig.from_hf_dict(cfg(rope_theta=5e5,
                                       rope_scaling={"rope_type": "llama3", **llama3}))
    old_type = ModelConfig.from_hf_dict(cfg(rope_theta=5e5,
                                            rope_scaling={"type": "llama3", **llama3}))
    new = ModelConfig.from_hf_dict(cfg(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5,
                                                        **llama3}))
    assert old == old_type == new and new.rope_scaling.factor == 8.0


def test_round_trip_through_hf_dict():
    c = ModelConfig.from_hf_dict(cfg(eos_token_id=[1, 7], bos_token_id=0, attention_bias=True,
                                     rope_parameters={"rope_type": "llama3", "rope_theta": 5e5,
                                                      "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 64}))
    assert ModelConfig.from_hf_dict(c.to_hf_dict()) == c
    assert c.eos_token_ids == (1, 7) and c.qkv_bias and c.o_bias


def test_linear_and_yarn_rope_read_as_transformers_reads_them():
    """YaRN's defaults are transformers': the pretraining length is max_position_embeddings,
    the factor their ratio, the attention factor 0.1 ln(factor) + 1 (DeepSeek's mscale ratio
    when both are given), the betas 32 and 1."""
    y = ModelConfig.from_hf_dict(cfg(rope_scaling={"type": "yarn", "factor": 4.0,
                                                   "original_max_position_embeddings": 32768},
                                     max_position_embeddings=131072)).rope_scaling
    assert (y.rope_type, y.factor, y.original_max_position_embeddings, y.beta_fast,
            y.beta_slow, y.truncate) == ("yarn", 4.0, 32768, 32, 1, True)
    assert y.attention_factor == pytest.approx(0.1 * math.log(4.0) + 1)
    ratio = ModelConfig.from_hf_dict(cfg(
        rope_parameters={"rope_type": "yarn", "rope_theta": 1e4,
                         "original_max_position_embeddings": 256},
        max_position_embeddings=1024)).rope_scaling
    assert ratio.factor == 4.0 and ratio.original_max_position_embeddings == 256
    ds = ModelConfig.from_hf_dict(cfg(rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0, "mscale": 1.0,
        "mscale_all_dim": 1.0, "original_max_position_embeddings": 64})).rope_scaling
    assert ds.attention_factor == 1.0  # the two terms cancel
    lin = ModelConfig.from_hf_dict(cfg(rope_scaling={"rope_type": "linear", "factor": 2.0}))
    assert lin.rope_scaling.rope_type == "linear" and lin.rope_scaling.factor == 2.0
    assert ModelConfig.from_hf_dict(lin.to_hf_dict()) == lin
    assert lin.context_length == 2 * lin.max_position_embeddings  # vLLM's derived length
    assert ModelConfig.from_hf_dict(cfg(rope_scaling={"type": "yarn", "factor": 4.0},
                                        max_position_embeddings=512)).context_length == 512


@pytest.mark.parametrize("model_type,max_pos", [("qwen3", 40), ("qwen2", 32)])
def test_yarn_context_is_max_position_embeddings_as_vllm_033_reads_it(model_type, max_pos):
    """NOTE(rope-context): Qwen3's layout (max_position_embeddings 40 past an original 32) and
    Qwen2.5's recipe (both 32, rope_scaling added) keep max_position_embeddings, factor 4 or
    not; linear and dynamic multiply it."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    c = ModelConfig.from_hf_dict(cfg(model_type=model_type, max_position_embeddings=max_pos,
                                     rope_scaling=yarn))
    assert (c.context_length, c.rope_scaling.original_max_position_embeddings) == (max_pos, 32)
    for spelling in ("type", "rope_type"):
        dyn = ModelConfig.from_hf_dict(cfg(model_type=model_type, max_position_embeddings=max_pos,
                                           rope_scaling={spelling: "dynamic", "factor": 4.0}))
        assert dyn.rope_scaling.rope_type == "dynamic" and dyn.context_length == 4 * max_pos
        assert ModelConfig.from_hf_dict(dyn.to_hf_dict()) == dyn


def test_families():
    q = ModelConfig.from_hf_dict(cfg(model_type="qwen2"))
    assert q.qkv_bias and not q.o_bias
    m = ModelConfig.from_hf_dict(cfg(model_type="mistral", sliding_window=4096))
    assert m.sliding_window == 4096 and not m.qkv_bias
    inferred = ModelConfig.from_hf_dict(cfg(model_type=..., architectures=["Qwen2ForCausalLM"]))
    assert inferred.model_type == "qwen2"
    q3 = ModelConfig.from_hf_dict(cfg(model_type="qwen3", head_dim=128, attention_bias=True))
    assert q3.qk_norm and q3.head_dim == 128 and q3.qkv_bias and q3.o_bias and not q3.mlp_bias
    assert ModelConfig.from_hf_dict(q3.to_hf_dict()) == q3
    assert not ModelConfig.from_hf_dict(cfg(model_type="qwen3")).qkv_bias
    assert not q.qk_norm and not m.qk_norm
    g = ModelConfig.from_hf_dict(cfg(model_type="granite", embedding_multiplier=12,
                                     residual_multiplier=0.22, logits_scaling=8.0))
    assert (g.embedding_multiplier, g.residual_multiplier, g.attention_multiplier,
            g.logits_scaling) == (12, 0.22, 1.0, 8.0)  # transformers' default attention 1.0
    assert ModelConfig.from_hf_dict(g.to_hf_dict()) == g
    assert q3.attention_multiplier is None and q3.logits_scaling == 1.0


@pytest.mark.parametrize("over,key", [
    ({"model_type": "gpt2"}, "model_type"),
    ({"model_type": ..., "architectures": ["GPT2LMHeadModel"]}, "architectures"),
    # NOTE(architectures-first): the class is refused before the family's other keys are read
    ({"model_type": "gemma", "architectures": ["GemmaForCausalLM"],
      "hidden_act": "gelu_pytorch_tanh"}, "architectures"),
    ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "hidden_size": ...},
     "architectures"),
    ({"architectures": ["LlamaForSequenceClassification"]}, "architectures"),
    ({"architectures": "LlamaForCausalLM"}, "architectures"),
    ({"model_type": "gemma", "hidden_act": "gelu_pytorch_tanh"}, "model_type"),
    ({"hidden_size": ...}, "hidden_size"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"num_key_value_heads": 3}, "num_key_value_heads"),
    ({"hidden_size": 66}, "head_dim"),
    ({"head_dim": 15}, "head_dim"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"rms_norm_eps": 0}, "rms_norm_eps"),
    ({"rope_parameters": {"rope_type": "longrope", "factor": 4.0}},
     "rope_parameters.short_factor"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": -4.0}}, "rope_parameters.factor"),
    ({"rope_scaling": {"type": "linear"}}, "rope_scaling.factor"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 0}},
     "rope_parameters.attention_factor"),
    # the unsupported type is named by the spelling the file used
    ({"rope_scaling": {"type": "mrope", "factor": 2.0}}, "rope_scaling.type"),
    ({"rope_scaling": {"rope_type": "ntk-made-up", "factor": 2.0}}, "rope_scaling.rope_type"),
    ({"rope_parameters": {"type": "mrope", "rope_theta": 1e4}}, "rope_parameters.type"),
    ({"rope_scaling": {"type": "dynamic"}}, "rope_scaling.factor"),
    ({"rope_scaling": {"type": "dynamic", "alpha": 1000.0}}, "rope_scaling.alpha"),
    ({"rope_scaling": {"type": "dynamic", "factor": 4.0, "max_trained_positions": 4096}},
     "rope_scaling.max_trained_positions"),  # 4 * 2048 / 4096 - 3 < 0: a negative base
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4}}, "rope_parameters.factor"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": -1.0}}, "rope_theta"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ({"model_type": "mistral", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                   "partial_rotary_factor": 0.5}},
     "rope_parameters.partial_rotary_factor"),
    ({"model_type": "phi3", "rope_scaling": {"type": "yarn", "factor": 4.0}},  # longrope
     "rope_scaling.short_factor"),  # to transformers' Phi3Config: NOTE(phi3-yarn)
    ({"model_type": "phi3", "rope_parameters": {"rope_type": "su", "rope_theta": 1e4}},
     "rope_parameters.short_factor"),
    ({"model_type": "qwen2", "use_sliding_window": True}, "use_sliding_window"),
    ({"model_type": "qwen3", "use_sliding_window": True}, "use_sliding_window"),
    ({"model_type": "granite", "logits_scaling": 0}, "logits_scaling"),
    ({"model_type": "granite", "residual_multiplier": float("nan")}, "residual_multiplier"),
    ({"model_type": "mistral", "sliding_window": 0}, "sliding_window"),
    ({"eos_token_id": -1}, "eos_token_id"),
    # both spellings, disagreeing: was served as plain RoPE (rope_type null won), vLLM refuses
    ({"rope_scaling": {"rope_type": None, "type": "dynamic", "factor": 2.0}},
     "rope_scaling.rope_type"),
    ({"rope_scaling": {"rope_type": "linear", "type": "dynamic", "factor": 2.0}},
     "rope_scaling.rope_type"),
])
def test_errors_name_the_key(over, key):
    with pytest.raises(ModelConfigError) as err:
        ModelConfig.from_hf_dict(cfg(**over))
    assert err.value.key == key
    assert key in str(err.value)
    assert isinstance(err.value, ConfigError) and isinstance(err.value, ValueError)


def test_from_pretrained_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="config.json"):
        ModelConfig.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON") as err:
        ModelConfig.from_pretrained(tmp_path)
    assert "config.json: config.json" not in str(err.value)
    with pytest.raises(ModelConfigError, match="^config.json: top level: must be a JSON"):
        ModelConfig.from_hf_dict([1])
    (tmp_path / "config.json").write_text(json.dumps(cfg()))
    assert ModelConfig.from_pretrained(tmp_path).hidden_size == 64


def test_unsupported_architecture_is_one_line_listing_the_supported():
    with pytest.raises(ModelConfigError) as err:
        ModelConfig.from_hf_dict(cfg(model_type="gemma", architectures=["GemmaForCausalLM"],
                                     hidden_act="gelu_pytorch_tanh"))
    message = str(err.value)
    assert "\n" not in message and "GemmaForCausalLM" in message
    assert "LlamaForCausalLM" in message and "Qwen3ForCausalLM" in message
    # a supported class among others is served as that class; v5's full rotary is accepted
    c = ModelConfig.from_hf_dict(cfg(model_type=..., architectures=["X", "MistralForCausalLM"],
                                     rope_parameters={"rope_type": "default",
                                                      "rope_theta": 1e4,
                                                      "partial_rotary_factor": 1.0}))
    assert c.model_type == "mistral"


def test_frozen():
    c = ModelConfig.from_hf_dict(cfg())
    with pytest.raises(AttributeError):
        c.hidden_size = 1  # type: ignore[misc]


def test_kv_cache_layout_and_bytes():
    c = ModelConfig.from_hf_dict(cfg())
    kv = allocate_kv_cache(10, c, 16, torch.bfloat16, "cpu")
    assert kv.shape == (10, 2, 2, 16, 2, 16) and kv.dtype == torch.bfloat16
    assert not kv.any()  # zero-filled
    per_block = kv_bytes_per_block(c, 16, torch.bfloat16)
    assert per_block == 2 * 2 * 16 * 2 * 16 * 2
    # Block-major: one block is one contiguous chunk of per_block bytes.
    assert kv[3].is_contiguous() and kv[3].numel() * kv.element_size() == per_block
    assert kv[4].data_ptr() - kv[3].data_ptr() == per_block
    layout = KVCacheLayout.of(kv)
    assert layout == KVCacheLayout.for_model(c, 16, torch.bfloat16)
    assert layout.num_blocks_for_bytes(per_block * 7 + 1) == 7


def test_kv_cache_is_not_an_inference_tensor():
    c = ModelConfig.from_hf_dict(cfg())
    with torch.inference_mode():
        kv = allocate_kv_cache(2, c, 4, torch.float32, "cpu")
    kv[1].copy_(kv[0])  # a copy engine works outside inference mode


@pytest.mark.parametrize("bad", [{"num_blocks": 0}, {"block_size": 0}, {"dtype": torch.int32}])
def test_kv_cache_rejects_bad_geometry(bad):
    c = ModelConfig.from_hf_dict(cfg())
    args = {"num_blocks": 4, "block_size": 16, "dtype": torch.float32}
    args.update(bad)
    with pytest.raises(ValueError):
        allocate_kv_cache(args["num_blocks"], c, args["block_size"], args["dtype"], "cpu")


PHI3 = {"model_type": "phi3"}


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "granite", "mistral"])
@pytest.mark.parametrize("over,key", [
    ({"partial_rotary_factor": 0.75}, "partial_rotary_factor"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0, "partial_rotary_factor": 0.75}},
     "rope_scaling.partial_rotary_factor"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                          "partial_rotary_factor": 0.75}}, "rope_parameters.partial_rotary_factor"),
])
def test_partial_rotary_refused_where_transformers_ignores_it(family, over, key):
    """transformers' modeling code of these families rotates the whole head (vLLM would not):
    refused in every layout, with the key and the fix named."""
    with pytest.raises(ModelConfigError) as err:
        ModelConfig.from_hf_dict(cfg(model_type=family, **over))
    assert err.value.key == key and "set it to 1.0" in str(err.value)
    with pytest.raises(ModelConfigError, match="partial_rotary_factor"):  # built directly too
        ModelConfig(model_type=family, hidden_size=64, intermediate_size=128,
                    num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
                    head_dim=16, vocab_size=300, partial_rotary_factor=0.75)


@pytest.mark.parametrize("over,key", [
    ({"partial_rotary_factor": 0}, "partial_rotary_factor"),
    ({"partial_rotary_factor": 1.5}, "partial_rotary_factor"),
    ({"partial_rotary_factor": True}, "partial_rotary_factor"),
    ({"rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": "0.5"}},
     "rope_parameters.partial_rotary_factor"),
    ({"partial_rotary_factor": 0.3125}, "partial_rotary_factor"),  # int(16 * 0.3125) = 5: odd
    ({"partial_rotary_factor": 0.05}, "partial_rotary_factor"),  # int(16 * 0.05) = 0
])
def test_partial_rotary_bad_values(over, key):
    with pytest.raises(ModelConfigError) as err:
        ModelConfig.from_hf_dict(cfg(**PHI3, **over))
    assert err.value.key == key


def test_partial_rotary_read_from_every_layout():
    """Phi-3 (Phi-4-mini's family): the factor top-level (4.x), inside rope_scaling or inside
    rope_parameters (5.x); the rope object's value wins, as transformers merges them."""
    top = ModelConfig.from_hf_dict(cfg(**PHI3, partial_rotary_factor=0.75, hidden_size=88))
    assert (top.head_dim, top.rotary_dim, top.partial_rotary_factor) == (22, 16, 0.75)
    v5 = ModelConfig.from_hf_dict(cfg(**PHI3, hidden_size=88, partial_rotary_factor=0.25,
                                      rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                       "partial_rotary_factor": 0.75}))
    assert v5 == top and ModelConfig.from_hf_dict(v5.to_hf_dict()) == v5
    v4 = ModelConfig.from_hf_dict(cfg(**PHI3, rope_scaling={"rope_type": "default",
                                                            "partial_rotary_factor": 0.5}))
    assert v4.rotary_dim == 8 and v4.rope_scaling.rope_type == "default"
    assert ModelConfig.from_hf_dict(cfg(**PHI3)).rotary_dim == 16  # absent: the whole head
