"""The built-in tiny model: the server's default when ``--model`` is unset.

A 4-layer Llama (hidden 128, 4 query heads / 2 KV heads of 32, vocab 512) with weights drawn from a
seeded ``torch.Generator`` and the built-in byte-level tokenizer: no file, no download, and the
same outputs on every run for a given seed.

Its output head has all-zero rows for the special tokens and for bytes that are not printable
ASCII (control bytes other than ``\\t``/``\\n``, and 0x80-0xFF), so greedy decoding always produces
printable ASCII text and never EOS (their logit is exactly 0 while the best of ~350 others is
well above). Sampling can still pick them. Use ``stop_token_ids``/``max_tokens`` to end
generations in tests.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from .byte_tokenizer import BOS, EOS, PAD, SPECIALS, VOCAB_SIZE, build_byte_tokenizer
from .config import ModelConfig
from .llama import LlamaModel
from .tokenizer import Tokenizer

__all__ = ["TINY_MODEL_NAME", "build_tiny_model", "save_tiny_model", "tiny_config",
           "tiny_tokenizer_config"]

TINY_MODEL_NAME = "kvpool-tiny"


def tiny_config() -> ModelConfig:
    return ModelConfig(
        model_type="llama", hidden_size=128, intermediate_size=384, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=VOCAB_SIZE,
        rms_norm_eps=1e-6, max_position_embeddings=8192, tie_word_embeddings=False,
        rope_theta=10000.0, bos_token_id=0, eos_token_ids=(1,))


def _silent_token_ids(tokenizer: Tokenizer) -> list[int]:
    """Specials and non-printable byte tokens: their output-head rows are zeroed."""
    silent = [tokenizer.token_to_id(s) for s in SPECIALS]
    first_byte = len(SPECIALS)  # byte b has id first_byte + b (see byte_tokenizer)
    for b in range(256):
        if not (32 <= b < 127 or b in (9, 10)):
            silent.append(first_byte + b)
    return silent


@torch.no_grad()
def _init_weights(model: LlamaModel, seed: int, silent: list[int]) -> None:
    """Seeded init, in parameter registration order, drawn on the CPU in float32.

    Linear weights ~ N(0, 1/fan_in) keep activations O(1); embeddings ~ N(0, 1); norms = 1;
    the output head is scaled so logits have a standard deviation of about 1.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            values = torch.ones(param.shape)
        elif name == "embed_tokens.weight":
            values = torch.randn(param.shape, generator=gen)
        elif name.endswith("bias"):
            values = torch.randn(param.shape, generator=gen) * 0.02
        else:
            values = torch.randn(param.shape, generator=gen) / math.sqrt(param.shape[1])
        param.copy_(values.to(param.dtype))
    if model.lm_head is not None:
        model.lm_head.weight[silent] = 0


def build_tiny_model(
        seed: int = 0, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
) -> tuple[ModelConfig, LlamaModel, Tokenizer]:
    """``(config, model, tokenizer)`` of the built-in tiny model, deterministic in ``seed``."""
    config = tiny_config()
    tokenizer = build_byte_tokenizer()
    assert tokenizer.vocab_size <= config.vocab_size
    model = LlamaModel(config, torch.float32)
    _init_weights(model, seed, _silent_token_ids(tokenizer))
    model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    model.dtype = dtype
    return config, model, tokenizer


def tiny_tokenizer_config() -> dict[str, Any]:
    """The built-in tokenizer's tokenizer_config.json: ``save_tiny_model`` writes it, and a
    server on the built-in model answers it at GET /tokenizer_info (tokenizer_info.py)."""
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
            "pad_token": PAD, "model_max_length": tiny_config().max_position_embeddings}


def save_tiny_model(directory: str | Path, seed: int = 0) -> Path:
    """Write the tiny model as a Hugging Face directory loadable by ``load_model`` and by
    transformers' ``LlamaForCausalLM.from_pretrained`` (float32 weights)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    config, model, tokenizer = build_tiny_model(seed)
    (out / "config.json").write_text(json.dumps(config.to_hf_dict(), indent=2) + "\n")
    save_file(dict(model.hf_state_dict()), str(out / "model.safetensors"),
              metadata={"format": "pt"})
    tokenizer.save(out / "tokenizer.json")
    (out / "tokenizer_config.json").write_text(json.dumps(tiny_tokenizer_config(), indent=2)
                                               + "\n")
    (out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_ids[0],
        "pad_token_id": tokenizer.token_to_id(PAD),
    }, indent=2) + "\n")
    return out
