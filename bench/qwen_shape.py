"""bench/qwen_shape.py: write a model directory with Qwen2-0.5B's geometry and random weights.

    python -m bench.qwen_shape DIR [--seed 0]

Nothing is downloaded: transformers builds ``Qwen2ForCausalLM`` from a config (hidden 896,
24 layers, 14 query heads / 2 KV heads of 64, intermediate 4864, vocab 151936, tied embeddings,
q/k/v biases) with its own random init, and ``save_pretrained`` writes bf16 safetensors, the
dtype the real checkpoint ships in. The tokenizer is kvpool's byte-level one (its ids are a
subset of the vocabulary); benchmarks feed token ids, so its size does not matter.

Serving figures on this model hold for a real 0.5B model of the same shape: the compute per
token (matmuls, attention over 2 KV heads) and the KV bytes per token are the same; only the
token choices differ. Tests pass a much smaller geometry through ``overrides``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from kvpool.runtime.model.byte_tokenizer import BOS, EOS, PAD, build_byte_tokenizer

QWEN2_05B = {
    "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
    "tie_word_embeddings": True, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6, "hidden_act": "silu", "use_sliding_window": False,
    "sliding_window": None, "max_window_layers": 24,
}


def write_qwen2_shaped(directory: str | Path, seed: int = 0, **overrides) -> Path:
    """Write config.json, model.safetensors (bf16), tokenizer.json and generation_config.json
    of a randomly initialised Qwen2 model (Qwen2-0.5B's geometry unless ``overrides``)."""
    import transformers

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_byte_tokenizer()
    geometry = {**QWEN2_05B, **overrides}
    cfg = transformers.Qwen2Config(**geometry, bos_token_id=tok.token_to_id(BOS),
                                   eos_token_id=tok.token_to_id(EOS))
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval()
    model.save_pretrained(out, safe_serialization=True)
    tok.save(out / "tokenizer.json")
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
        "pad_token": PAD}, indent=2) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("directory")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"wrote {write_qwen2_shaped(args.directory, args.seed)}")


if __name__ == "__main__":
    main()
