"""Shared fixtures: in-test transformers checkpoints (built once per session, never downloaded)."""

from __future__ import annotations

import pytest
import torch

from tests.runtime.model.helpers import SENTENCES, hf_greedy, save_hf_model

# Variants of the oracle checkpoint; each is a (kind, config overrides) pair.
VARIANTS = {
    "llama": ("llama", {}),
    # Qwen2: bias on q/k/v, tied embeddings.
    "qwen2": ("qwen2", {"tie_word_embeddings": True}),
    # Qwen3: per-head q/k norms, no bias, a head_dim that is not hidden/heads, tied embeddings.
    "qwen3": ("qwen3", {"head_dim": 32, "tie_word_embeddings": True}),
    # transformers 5.x rope_parameters with llama3 scaling, attention/MLP biases, and a head_dim
    # that is not hidden/heads.
    "llama3": ("llama", {
        "head_dim": 32, "attention_bias": True, "mlp_bias": True, "num_key_value_heads": 1,
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64}}),
    # Granite 3: the four multipliers, attention and MLP biases.
    "granite": ("granite", {"embedding_multiplier": 12.0, "residual_multiplier": 0.22,
                            "attention_multiplier": 0.04, "logits_scaling": 8.0,
                            "attention_bias": True, "mlp_bias": True}),
    # Qwen2 with YaRN: a pretraining length shorter than the longer prompts, so the ramp and
    # the attention factor both matter; Llama with linear scaling.
    "qwen2_yarn": ("qwen2", {"rope_parameters": {
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 32}}),
    "llama_linear": ("llama", {"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0,
                                                   "factor": 2.0}}),
    # Phi-3: q/k/v and gate/up stored fused, a sliding window short enough to matter.
    "phi3": ("phi3", {"sliding_window": 12, "pad_token_id": 2}),
    # Mistral with a sliding window short enough to matter for the longer prompts.
    "mistral": ("mistral", {"sliding_window": 12, "head_dim": None}),
}


@pytest.fixture(autouse=True, scope="module")
def _single_thread():
    """Tiny matmuls: OpenMP fork/join costs more than it saves, and on a shared 2-core box a
    busy neighbour makes every parallel region wait (10x slower measured). Restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def hf_dir_factory(tmp_path_factory):
    cache: dict[str, object] = {}

    def make(name: str):
        pytest.importorskip("transformers")
        if name not in cache:
            kind, overrides = VARIANTS[name]
            cache[name] = save_hf_model(tmp_path_factory.mktemp(name), kind, **overrides)
        return cache[name]

    return make


@pytest.fixture(scope="session")
def hf_reference(hf_dir_factory):
    """name -> (dir, hf_model, prompts, greedy outputs), computed once per session."""
    transformers = pytest.importorskip("transformers")

    from kvpool.runtime.model import load_tokenizer

    cache: dict[tuple[str, int, int], tuple] = {}

    def get(name: str, num_prompts: int, max_new_tokens: int):
        key = (name, num_prompts, max_new_tokens)
        if key not in cache:
            d = hf_dir_factory(name)
            hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
            tok = load_tokenizer(d)
            texts = [" ".join(SENTENCES[i % 8:i % 8 + 1 + i % 4]) for i in range(num_prompts)]
            # Mixed lengths: 3 .. ~140 tokens.
            prompts = [tok.encode(t)[:3 + 7 * i] for i, t in enumerate(texts)]
            cache[key] = (d, hf, prompts, hf_greedy(hf, prompts, max_new_tokens))
        return cache[key]

    return get
