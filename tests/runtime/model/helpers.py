"""Test helpers: tiny HF checkpoints built in-test, and a greedy paged-generation driver.

The driver plays the engine's role with the least machinery: a shuffled free list of block ids,
one block table per sequence that grows as tokens arrive, chunked prefill, and optional prefix
sharing (a request starts with another request's full blocks in its table and ``start > 0``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from kvpool.runtime.model import LlamaModel, PagedBatch, SeqChunk, allocate_kv_cache

SENTENCES = [
    "The cat sat on the mat and looked at the moon.",
    "Paged attention stores keys and values in fixed size blocks.",
    "A scheduler decides which requests run in the next step.",
    "Hello world! This is a small test of the tokenizer.",
    "Numbers like 12, 345 and 6789 also appear in text.",
    "Prefix caching shares blocks between requests with the same prompt.",
    "When memory is short, sequences are swapped out to the host.",
    "Greedy decoding picks the most likely token at every step.",
]


def train_tokenizer(directory: Path, vocab_size: int = 300) -> None:
    """Train a byte-level BPE offline on SENTENCES and save it as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(SENTENCES * 4, trainer=trainer)
    tok.save(str(directory / "tokenizer.json"))


def save_hf_model(directory: Path, kind: str, seed: int = 0, **overrides) -> Path:
    """Build a seeded tiny transformers model of ``kind`` (llama, qwen2, qwen3, granite, phi3
    or mistral) and save it."""
    import transformers

    directory.mkdir(parents=True, exist_ok=True)
    base = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
                max_position_embeddings=512, rms_norm_eps=1e-6, initializer_range=0.1,
                bos_token_id=0, eos_token_id=1, pad_token_id=2, tie_word_embeddings=False)
    base.update(overrides)
    cls_cfg, cls_model = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "granite": (transformers.GraniteConfig, transformers.GraniteForCausalLM),
        "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[kind]
    config = cls_cfg(**base)
    torch.manual_seed(seed)
    model = cls_model(config).to(torch.float32).eval()
    with torch.no_grad():  # random, non-trivial norms and biases (HF inits them to 1 / 0)
        gen = torch.Generator().manual_seed(seed + 1)
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(directory)
    train_tokenizer(directory)
    return directory


def hf_greedy(hf_model, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    """transformers reference: one prompt at a time, no padding, EOS disabled."""
    hf_model.generation_config.eos_token_id = None
    outs = []
    for ids in prompts:
        inp = torch.tensor([list(ids)])
        out = hf_model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                                max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                                pad_token_id=2)
        outs.append(out[0, inp.shape[1]:].tolist())
    return outs


@dataclass
class _Seq:
    tokens: list[int]
    prompt_len: int
    computed: int = 0  # tokens whose K/V are in the cache
    table: list[int] = field(default_factory=list)
    shared: int = 0  # leading blocks borrowed from another sequence (never written)


class PagedGreedyRunner:
    """Greedy generation through ``LlamaModel.forward`` over a paged pool."""

    def __init__(self, model: LlamaModel, *, block_size: int, num_blocks: int = 512,
                 shuffle_seed: int = 0) -> None:
        self.model = model
        self.block_size = block_size
        self.kv = allocate_kv_cache(num_blocks, model.config, block_size, model.dtype, model.device)
        self.free = list(range(num_blocks))
        random.Random(shuffle_seed).shuffle(self.free)  # non-contiguous, unordered tables

    def _ensure(self, seq: _Seq, num_tokens: int) -> None:
        while len(seq.table) * self.block_size < num_tokens:
            seq.table.append(self.free.pop())

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, *,
                 chunk_size: int | None = None,
                 prefixes: Sequence[tuple[list[int], int] | None] | None = None) -> list[list[int]]:
        """Run all prompts as one batch; ``prefixes[i] = (blocks, n_tokens)`` pre-fills seq i's
        table with another sequence's full blocks holding its first ``n_tokens`` tokens."""
        seqs = [_Seq(list(p), len(p)) for p in prompts]
        for i, seq in enumerate(seqs):
            if prefixes and prefixes[i] is not None:
                blocks, n = prefixes[i]
                assert n % self.block_size == 0 and n < seq.prompt_len
                seq.table, seq.computed, seq.shared = list(blocks), n, len(blocks)
        self.last_seqs = seqs
        while True:
            active = [s for s in seqs if len(s.tokens) - s.prompt_len < max_new_tokens]
            if not active:
                break
            chunks = []
            for s in active:
                end = len(s.tokens)
                if chunk_size is not None:
                    end = min(end, s.computed + chunk_size)
                self._ensure(s, end)
                chunks.append(SeqChunk(s.tokens[s.computed:end], s.computed, list(s.table)))
            logits = self.model(PagedBatch(chunks), self.kv)
            for s, c, row in zip(active, chunks, logits):
                s.computed += len(c.token_ids)
                if s.computed == len(s.tokens):
                    s.tokens.append(int(row.argmax()))
        return [s.tokens[s.prompt_len:] for s in seqs]

    def full_blocks(self, seq_index: int, num_tokens: int) -> tuple[list[int], int]:
        """The blocks of an earlier sequence that hold its first ``num_tokens`` tokens."""
        n = num_tokens // self.block_size
        return self.last_seqs[seq_index].table[:n], n * self.block_size


def ref_logprobs(hf, ids: list[int]) -> torch.Tensor:
    """transformers' float32 log_softmax at every position of ``ids`` (the logprob oracle)."""
    with torch.no_grad():
        return torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), dim=-1)


def assert_prompt_logprobs_match(model: LlamaModel, hf, ids: list[int]) -> None:
    """``model``'s prompt logprobs over ``ids`` (one prefill into a fresh pool of 8-token
    blocks) equal transformers' (``ref_logprobs``) within float32's noise."""
    kv = allocate_kv_cache(16, model.config, 8, torch.float32, "cpu")
    blocks = list(range(-(-len(ids) // 8)))
    _, (rows,) = model.forward_with_prompt_logits(PagedBatch([SeqChunk(ids, 0, blocks)]), kv,
                                                  [0])
    torch.testing.assert_close(torch.log_softmax(rows.float(), dim=-1), ref_logprobs(hf, ids),
                               atol=1e-4, rtol=1e-4)
