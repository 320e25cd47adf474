"""The built-in byte-level BPE tokenizer, constructed in code (no file, no download).

Vocabulary (512 ids, stable across runs and `tokenizers` versions)::

    0 <s>   1 </s>   2 <pad>   |  3 .. 258: the 256 bytes  |  259 .. 511: learned merges
    specials                      (GPT-2 byte->char alphabet)   (from the corpus below)

Every byte has a token, so any UTF-8 text (emoji included) round-trips exactly through
``decode(encode(text), skip_special_tokens=True)``. The merges are learned here by a tiny
deterministic BPE pass (highest pair count first, ties broken by the pair's characters), so the
vocabulary does not depend on a trainer's implementation.
"""

from __future__ import annotations

import functools
from collections import Counter

from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

from .tokenizer import Tokenizer

__all__ = ["BOS", "EOS", "PAD", "ByteLevelBPEBuilder", "build_byte_tokenizer", "byte_alphabet",
           "learned_merges"]

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
SPECIALS = (BOS, EOS, PAD)
VOCAB_SIZE = 512

# A fixed corpus; changing it changes the built-in vocabulary (and so the tiny model's outputs).
_CORPUS = """
The quick brown fox jumps over the lazy dog. A paged key value cache stores the attention keys
and values of every token in fixed size blocks, and a block table maps each sequence to the
blocks that hold its tokens. When a request arrives, the scheduler checks whether there are
enough free blocks; if there are not, the request waits in the queue. When memory runs low,
running sequences are preempted: their blocks are swapped out to host memory or freed and
recomputed later. Prefix caching lets requests that share a prompt prefix share the same blocks,
which saves both memory and compute. Copy on write makes a private copy of a shared block before
a sequence writes into it. The model reads the cache through the block table, writes the new
keys and values into their slots, and returns the logits of the last token of each sequence.
Hello, world! How are you today? I am fine, thank you. What is the answer to the question?
This is a small model for testing the server, the engine and the scheduler. It is not trained,
so its text is random, but it is fast and it is the same on every machine because its weights
come from a seeded generator. Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 3.14 42.
def forward(self, x): return self.linear(x) + x  # Python code, JSON {"key": "value"} and more.
"""


def byte_alphabet() -> list[str]:
    """The 256 printable characters standing for bytes 0..255 (the GPT-2 byte-level scheme).

    Printable Latin-1 bytes map to themselves; the others to code points 256, 257, ... in order.
    """
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(ord("\xa1"), ord("\xac") + 1)) \
        | set(range(ord("\xae"), ord("\xff") + 1))
    out, shifted = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + shifted))
            shifted += 1
    return out


@functools.lru_cache(maxsize=4)
def learned_merges(corpus: str, num_merges: int) -> tuple[tuple[str, str], ...]:
    """The first ``num_merges`` merges of the deterministic BPE pass over ``corpus``.

    Learned once per process: every engine on the built-in model builds its tokenizer, and
    the pass costs ~0.1 s (a test session builds hundreds of engines; a router or a server
    builds one per start)."""
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    words = Counter(piece for piece, _ in pre.pre_tokenize_str(corpus))
    pieces = {w: list(w) for w in words}
    merges: list[tuple[str, str]] = []
    for _ in range(num_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, freq in words.items():
            seq = pieces[word]
            for pair in zip(seq, seq[1:]):
                pairs[pair] += freq
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        joined = best[0] + best[1]
        for word, seq in pieces.items():
            i, out = 0, []
            while i < len(seq):
                if i + 1 < len(seq) and seq[i] == best[0] and seq[i + 1] == best[1]:
                    out.append(joined)
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            pieces[word] = out
    return tuple(merges)


class ByteLevelBPEBuilder:
    """The ``tokenizers`` pipeline over the merges ``learned_merges`` finds in a corpus.

    Invariant of the produced vocab: ids are dense ``0 .. len(vocab)-1``; every merge's two parts
    and its result are in the vocab, and a merge's result id is greater than its parts' ids.
    """

    def __init__(self, corpus: str = _CORPUS, vocab_size: int = VOCAB_SIZE) -> None:
        self.corpus = corpus
        self.vocab_size = vocab_size

    def build(self) -> HFTokenizer:
        vocab = {tok: i for i, tok in enumerate(SPECIALS)}
        for ch in byte_alphabet():
            vocab[ch] = len(vocab)
        merges = learned_merges(self.corpus, self.vocab_size - len(vocab))
        for a, b in merges:
            vocab.setdefault(a + b, len(vocab))
        tok = HFTokenizer(models.BPE(vocab=vocab, merges=merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, vocab[BOS])])
        return tok


def build_byte_tokenizer() -> Tokenizer:
    """The built-in tokenizer: BOS ``<s>`` (0) is prepended by ``encode``; EOS is ``</s>`` (1).

    Special-token strings inside text are encoded as plain bytes, so every string round-trips.
    """
    backend = ByteLevelBPEBuilder().build()
    return Tokenizer(backend, eos_token_ids=(backend.token_to_id(EOS),),
                     bos_token_id=backend.token_to_id(BOS), name="kvpool-tiny-byte-bpe",
                     split_special_tokens=True)
