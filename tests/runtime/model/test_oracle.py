"""Correctness oracle: greedy paged generation is token-identical to transformers ``generate``.

The checkpoints are tiny float32 transformers models built and saved inside the test session
(conftest.py); our loader reads them back. Prompts are run as one batch, so every forward mixes
sequences of different lengths, prefill chunks and decodes.
"""

from __future__ import annotations

import pytest
import torch

from kvpool.runtime.model import (PagedBatch, SeqChunk, allocate_kv_cache, build_tiny_model,
                                  load_model, load_tokenizer, save_tiny_model)
from tests.runtime.model.helpers import PagedGreedyRunner

NUM_PROMPTS = 20
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def llama(hf_reference):
    """(model loaded by our loader, prompts, transformers' greedy continuations)."""
    d, hf, prompts, ref = hf_reference("llama", NUM_PROMPTS, NEW_TOKENS)
    return load_model(d, torch.float32), prompts, ref


@pytest.mark.parametrize("block_size", [1, 16, 64])
def test_llama_batched_greedy_matches_transformers(llama, block_size):
    model, prompts, ref = llama
    runner = PagedGreedyRunner(model, block_size=block_size,
                               num_blocks=2400 if block_size == 1 else 160)
    assert runner.generate(prompts, NEW_TOKENS) == ref


@pytest.mark.parametrize("block_size,chunk", [(16, 5), (4, 16), (64, 33)])
def test_llama_chunked_prefill_matches_transformers(llama, block_size, chunk):
    # Long prompts take several forwards while short ones already decode: mixed batches,
    # and chunks whose query is shorter than their context (start > 0).
    model, prompts, ref = llama
    runner = PagedGreedyRunner(model, block_size=block_size, num_blocks=800)
    assert runner.generate(prompts, NEW_TOKENS, chunk_size=chunk) == ref


@pytest.mark.parametrize("block_size", [4, 16])
def test_llama_cached_prefix_matches_transformers(llama, block_size):
    """Second requests reuse the first requests' full prefix blocks: start > 0 at their first
    forward, attention reads blocks they never wrote."""
    model, prompts, ref = llama
    runner = PagedGreedyRunner(model, block_size=block_size, num_blocks=1000, shuffle_seed=3)
    long_ids = [i for i, p in enumerate(prompts) if len(p) > 2 * block_size]
    assert len(long_ids) >= 5
    assert runner.generate([prompts[i] for i in long_ids], NEW_TOKENS) == [ref[i] for i in long_ids]
    prefixes = [runner.full_blocks(j, len(prompts[i]) - 1) for j, i in enumerate(long_ids)]
    assert all(n > 0 for _, n in prefixes)
    again = runner.generate([prompts[i] for i in long_ids], NEW_TOKENS, prefixes=prefixes)
    assert again == [ref[i] for i in long_ids]
    # Chunked continuation over the cached prefix as well.
    runner2 = PagedGreedyRunner(model, block_size=block_size, num_blocks=1000, shuffle_seed=4)
    runner2.generate([prompts[i] for i in long_ids], 1)
    prefixes = [runner2.full_blocks(j, len(prompts[i]) - 1) for j, i in enumerate(long_ids)]
    out = runner2.generate([prompts[i] for i in long_ids], NEW_TOKENS, chunk_size=3,
                           prefixes=prefixes)
    assert out == [ref[i] for i in long_ids]


def test_llama_mixed_arrival_matches_transformers(llama):
    """Sequences join a running batch: new prefills alongside ongoing decodes."""
    model, prompts, ref = llama
    block_size = 8
    runner = PagedGreedyRunner(model, block_size=block_size, num_blocks=600)
    kv, free = runner.kv, runner.free
    tokens = {i: list(p) for i, p in enumerate(prompts[:10])}
    computed = {i: 0 for i in tokens}
    tables: dict[int, list[int]] = {i: [] for i in tokens}
    done: dict[int, list[int]] = {}
    step = 0
    while len(done) < len(tokens):
        active = [i for i in tokens if i not in done and i <= step * 2]  # two arrivals per step
        chunks = []
        for i in active:
            while len(tables[i]) * block_size < len(tokens[i]):
                tables[i].append(free.pop())
            chunks.append(SeqChunk(tokens[i][computed[i]:], computed[i], tables[i]))
        logits = model(PagedBatch(chunks), kv)
        for i, row in zip(active, logits):
            computed[i] = len(tokens[i])
            tokens[i].append(int(row.argmax()))
            if len(tokens[i]) - len(prompts[i]) == NEW_TOKENS:
                done[i] = tokens[i][len(prompts[i]):]
        step += 1
    assert [done[i] for i in range(10)] == ref[:10]


@pytest.mark.parametrize("variant", ["qwen2", "qwen3", "granite", "llama3", "mistral",
                                     "qwen2_yarn", "llama_linear", "phi3"])
def test_variants_match_transformers(hf_reference, variant):
    d, _, prompts, ref = hf_reference(variant, 8, NEW_TOKENS)
    model = load_model(d)
    runner = PagedGreedyRunner(model, block_size=16, num_blocks=200)
    assert runner.generate(prompts, NEW_TOKENS) == ref
    runner = PagedGreedyRunner(model, block_size=4, num_blocks=800)
    assert runner.generate(prompts, NEW_TOKENS, chunk_size=6) == ref


def test_variant_configs_parsed_as_intended(hf_dir_factory):
    q = load_model(hf_dir_factory("qwen2")).config
    assert q.model_type == "qwen2" and q.qkv_bias and not q.o_bias and q.tie_word_embeddings
    q3 = load_model(hf_dir_factory("qwen3")).config
    assert q3.model_type == "qwen3" and q3.qk_norm and q3.head_dim == 32 and not q3.qkv_bias
    assert not q.qk_norm
    g = load_model(hf_dir_factory("granite")).config
    assert (g.embedding_multiplier, g.residual_multiplier, g.attention_multiplier,
            g.logits_scaling) == (12.0, 0.22, 0.04, 8.0) and g.o_bias and g.mlp_bias
    l3 = load_model(hf_dir_factory("llama3")).config
    assert l3.rope_scaling.rope_type == "llama3" and l3.rope_theta == 500000.0
    assert l3.head_dim == 32 and l3.qkv_bias and l3.o_bias and l3.mlp_bias
    assert l3.num_key_value_heads == 1
    assert load_model(hf_dir_factory("mistral")).config.sliding_window == 12


@pytest.mark.parametrize("variant", ["qwen3", "granite", "qwen2_yarn", "llama_linear",
                                     "phi3"])
def test_variant_logits_match_transformers(hf_reference, variant):
    """The logits themselves, not only their argmax: Granite divides its logits by
    logits_scaling, which greedy decoding cannot see but sampling and logprobs do."""
    d, hf, prompts, _ = hf_reference(variant, 8, NEW_TOKENS)
    model = load_model(d)
    ids = list(prompts[-1])
    kv = allocate_kv_cache(8, model.config, 16, torch.float32, "cpu")
    ours = model(PagedBatch([SeqChunk(ids, 0, list(range(8)))]), kv)[0]
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0, -1]
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_tiny_model_matches_transformers(tmp_path):
    """The built-in tiny model, saved as a HF directory, is the same model in transformers."""
    import transformers

    d = save_tiny_model(tmp_path / "tiny")
    hf = transformers.LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    cfg, model, tok = build_tiny_model()
    ids = tok.encode("Paged attention over a tiny model. 🎉")
    kv = allocate_kv_cache(8, cfg, 16, torch.float32, "cpu")
    ours = model(PagedBatch([SeqChunk(ids, 0, [5, 2, 7])]), kv)[0]
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0, -1]
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    assert load_tokenizer(d).encode("x y") == tok.encode("x y")
    loaded = load_model(d)
    torch.testing.assert_close(loaded(PagedBatch([SeqChunk(ids, 0, [1, 3, 0])]), kv)[0], ours)


def test_bfloat16_close_to_float32(hf_reference):
    d, _, prompts, _ = hf_reference("llama", NUM_PROMPTS, NEW_TOKENS)
    logits = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = load_model(d, dtype)
        assert model.embed_tokens.weight.dtype == dtype
        kv = allocate_kv_cache(64, model.config, 16, dtype, "cpu")
        chunks, nxt = [], 0
        for p in prompts[5:9]:
            n = -(-len(p) // 16)
            chunks.append(SeqChunk(p, 0, list(range(nxt, nxt + n))))
            nxt += n
        out = model(PagedBatch(chunks), kv)
        assert out.dtype == torch.float32  # logits always come back in float32
        logits[dtype] = out
    a, b = logits[torch.float32], logits[torch.bfloat16]
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)
    assert cos.min() > 0.99, cos
