"""The built-in tiny model: deterministic, self-contained, saveable as a HF directory."""

from __future__ import annotations

import json

import torch

from kvpool.runtime.model import (PagedBatch, SeqChunk, allocate_kv_cache, build_tiny_model,
                                  load_model, load_tokenizer, save_tiny_model)


def greedy(model, tok, text, n=12, block_size=8):
    kv = allocate_kv_cache(64, model.config, block_size, model.dtype, "cpu")
    ids = tok.encode(text)
    table = list(range(63, -1, -1))  # descending ids: tables are not ranges
    start, out, chunk = 0, [], ids
    for _ in range(n):
        logits = model(PagedBatch([SeqChunk(chunk, start, table)]), kv)
        start += len(chunk)
        chunk = [int(logits[0].argmax())]
        out.append(chunk[0])
    return out


def test_shape():
    cfg, model, tok = build_tiny_model()
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (4, 2)
    assert cfg.vocab_size == 512 and 2 <= cfg.num_hidden_layers <= 4
    assert 64 <= cfg.hidden_size <= 128 and cfg.model_type == "llama"
    assert tok.vocab_size <= cfg.vocab_size and tok.eos_token_ids == cfg.eos_token_ids


def test_deterministic_across_builds():
    _, a, tok = build_tiny_model(seed=0)
    _, b, _ = build_tiny_model(seed=0)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb and torch.equal(pa, pb)
    _, c, _ = build_tiny_model(seed=1)
    assert not torch.equal(a.embed_tokens.weight, c.embed_tokens.weight)
    assert greedy(a, tok, "hello") == greedy(b, tok, "hello")


def test_greedy_text_is_printable_ascii():
    _, model, tok = build_tiny_model()
    for prompt in ["Hello", "The quick brown fox", "🎉", ""]:
        out = greedy(model, tok, prompt, n=16)
        assert not set(out) & set(tok.eos_token_ids)
        text = tok.decode(out)
        assert text.isascii() and all(ch.isprintable() or ch in "\t\n" for ch in text), text


def test_save_and_load_back(tmp_path):
    d = save_tiny_model(tmp_path / "tiny", seed=0)
    assert {p.name for p in d.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert json.loads((d / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    loaded, tok = load_model(d), load_tokenizer(d)
    cfg, model, tok0 = build_tiny_model(seed=0)
    assert loaded.config == cfg
    assert tok.eos_token_ids == (1,) and tok.bos_token_id == 0
    for (_, pa), (_, pb) in zip(loaded.named_parameters(), model.named_parameters()):
        assert torch.equal(pa, pb)
    assert greedy(loaded, tok, "paged") == greedy(model, tok0, "paged")


def test_bfloat16_build():
    _, model, tok = build_tiny_model(dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16
    assert len(greedy(model, tok, "hi", n=4)) == 4
