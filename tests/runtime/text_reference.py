"""The text vLLM 0.33 shows for a prompt and generated ids, and a SentencePiece-style tokenizer
to check it with (shared by the detokenizer, text and stop-string tests).

vLLM's ``FastIncrementalDetokenizer`` steps tokenizers' ``DecodeStream`` primed with the prompt
ids and restarts it without context on "Invalid prefix"; :func:`vllm_text` does exactly that,
so it is the reference itself, not a re-implementation (skipped where ``tokenizers`` predates
the primed stream)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

from kvpool.runtime.model import Tokenizer

SP_CORPUS = ["The quick brown fox jumps over the lazy dog. Hello world, how are you?",
             "Paris is the capital of France. A paged key value cache stores blocks."]


def sentencepiece_tokenizer() -> Tokenizer:
    """Llama-2 / Mistral style: Metaspace '▁' pieces, byte-fallback pieces <0xNN> in the plain
    vocabulary (not special: skip_special_tokens keeps them), a decoder that strips the text's
    first space, <s> prepended."""
    tok = HFTokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.train_from_iterator(SP_CORPUS * 10, trainers.BpeTrainer(
        vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    conf = json.loads(tok.to_str())
    vocab = conf["model"]["vocab"]
    vocab.update({f"<0x{b:02X}>": len(vocab) + b for b in range(256)})
    conf["model"]["byte_fallback"] = True
    tok = HFTokenizer.from_str(json.dumps(conf))
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", 1)])
    return Tokenizer(tok, eos_token_ids=(2,), bos_token_id=1)


def sp_byte(tok: Tokenizer, b: int) -> int:
    return tok.token_to_id(f"<0x{b:02X}>")


def vllm_text(tok: Tokenizer, prompt: Sequence[int], generated: Sequence[int],
              skip_special_tokens: bool = True) -> list[str]:
    """vLLM 0.33's delta per generated id (its decode_next), through DecodeStream itself."""
    def stream(ids):
        try:
            return decoders.DecodeStream(ids=list(ids), skip_special_tokens=skip_special_tokens)
        except TypeError:
            pytest.skip("this tokenizers' DecodeStream takes no prompt ids")

    s, out = stream(prompt), []
    for t in generated:
        try:
            piece = s.step(tok.backend, t)
        except Exception as e:  # vLLM's recovery: a fresh stream without the prompt
            assert str(e).startswith("Invalid prefix"), e
            s = stream(())
            piece = s.step(tok.backend, t)
        out.append(piece or "")
    return out
