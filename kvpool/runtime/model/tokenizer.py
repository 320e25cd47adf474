"""Tokenizer: a thin wrapper over a ``tokenizers.Tokenizer`` plus the ids an engine needs.

The engine encodes prompts, checks ``eos_token_ids`` after each sampled token and streams text
through :class:`IncrementalDetokenizer`, which never emits half a UTF-8 character and whose
deltas join to the text vLLM 0.33 gives for the same prompt and generated ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import tokenizers

__all__ = ["IncrementalDetokenizer", "Tokenizer"]

_REPLACEMENT = "\ufffd"  # what a decoder emits for an incomplete UTF-8 byte sequence


class Tokenizer:
    """Encode/decode text; knows its BOS and EOS ids (EOS may be several, as in Llama 3)."""

    def __init__(self, backend: tokenizers.Tokenizer, *, eos_token_ids: Iterable[int] = (),
                 bos_token_id: int | None = None, name: str = "",
                 split_special_tokens: bool = False) -> None:
        """``split_special_tokens=True`` encodes text such as ``"</s>"`` as plain characters
        (so user text can never inject a control token); False follows transformers' default
        of matching special-token strings in the text."""
        self.backend = backend
        backend.encode_special_tokens = split_special_tokens
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(int(t) for t in eos_token_ids))
        self.bos_token_id = bos_token_id
        self.name = name
        self._max_chars: int | None = 0  # max_chars_per_token's answer; 0: not computed yet

    @classmethod
    def from_file(cls, path: str | Path, **kwargs) -> "Tokenizer":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: a tokenizer.json (the `tokenizers` format)"
                                    " is required")
        return cls(tokenizers.Tokenizer.from_file(str(path)), **kwargs)

    @property
    def eos_token_id(self) -> int | None:
        """The primary EOS id (the first of ``eos_token_ids``), or None."""
        return self.eos_token_ids[0] if self.eos_token_ids else None

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_unlocked(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """``encode``, releasing the GIL while the Rust side works (``tokenizers`` releases it
        in the batch calls only): call it from a worker thread so the event loop keeps
        running while a megabyte prompt is tokenized.

        NOTE(fast): ``encode_batch_fast`` (tokenizers >= 0.20) gives the same ids without
        tracking offsets; the offsets, token strings and word ids of a full Encoding are freed
        with the GIL held, ~0.2 s per MB of text (0.7 s for 4 MB), a stall of the event loop
        while a worker thread drops them. The fast call's Encoding frees in ~1 ms."""
        batch = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
        return batch([text], add_special_tokens=add_special_tokens)[0].ids

    def max_chars_per_token(self) -> int | None:
        """The most characters of input text one token can stand for, or None if no bound
        holds. A text longer than ``n * max_chars_per_token()`` needs more than ``n`` tokens,
        so a server can reject it without tokenizing (NOTE(char-bound))."""
        # NOTE(char-bound): every token covers at most as many characters of the text as its
        # vocabulary string is long: byte-level pieces are one char per byte (a text char is
        # >= 1 byte), metaspace pieces one char per char, byte-fallback pieces (<0x41>) spell
        # one byte in 6. A normalizer can only shrink text by composing code points (NFC/NFKC
        # compose at most 4 into one, e.g. U+1F87): x4. An unknown-token model without byte
        # fallback turns a word of any length into one token: no bound.
        if self._max_chars != 0:
            return self._max_chars
        model = self.backend.model
        if getattr(model, "unk_token", None) and not getattr(model, "byte_fallback", False):
            bound = None
        else:
            vocab = self.backend.get_vocab(with_added_tokens=True)
            bound = max((len(piece) for piece in vocab), default=1)
            if self.backend.normalizer is not None:
                bound *= 4
        self._max_chars = bound
        return bound

    def encode_batch(self, texts: Sequence[str],
                     add_special_tokens: bool = True) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts),
                                                         add_special_tokens=add_special_tokens)]

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def save(self, path: str | Path) -> None:
        """Write the backend as ``tokenizer.json``-format JSON."""
        self.backend.save(str(path))

    def detokenizer(self, skip_special_tokens: bool = True,
                    prompt_ids: Sequence[int] = ()) -> IncrementalDetokenizer:
        """A detokenizer for ids generated after ``prompt_ids`` (NOTE(prompt-context))."""
        return IncrementalDetokenizer(self, skip_special_tokens, prompt_ids)

    def __repr__(self) -> str:
        return (f"Tokenizer(name={self.name!r}, vocab_size={self.vocab_size}, "
                f"bos={self.bos_token_id}, eos={self.eos_token_ids})")


class IncrementalDetokenizer:
    """Turns generated ids into text deltas, one ``push`` per step, exactly as vLLM 0.33's
    detokenizer does (``FastIncrementalDetokenizer``: tokenizers' ``DecodeStream`` primed with
    the prompt ids).

    It decodes a window ``ids`` (at first the whole prompt) and subtracts ``prefix``, the text
    of ``ids[:cut]`` already accounted for; after each delta the window drops what lies before
    the previous cut, so it keeps the previous delta's tokens as left context::

        ids:  | context ... | prefix's tokens ... | new
        delta = decode(ids) minus prefix, held back while it ends in U+FFFD

    NOTE(prompt-context) (docs/architecture.md "Output text"): vLLM parity; prompt +
    completion then reads as the text. With the prompt's tail as context a SentencePiece
    decoder keeps the first generated token's leading space ("Hello," + " world"; without it,
    "world"), and a generated continuation byte completes a character the prompt left open
    ("\u00e9", not "\ufffd\ufffd"). Where the prompt's own text ends in U+FFFD there is no
    prefix to subtract, so the first delta holds the decoded prompt as well (vLLM's stream
    does the same). Bytes of a character still incomplete when the sequence ends are never
    shown: vLLM never flushes them.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True,
                 prompt_ids: Sequence[int] = ()) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = list(prompt_ids)  # the window decoded at each step
        self.prefix = ""  # the text of ids[:cut], subtracted from the window's text
        self.cut = 0
        self.text = ""  # every delta returned so far, joined

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token_ids: int | Sequence[int]) -> str:
        """Append generated ids; return the newly readable text (maybe empty)."""
        ids = [token_ids] if isinstance(token_ids, int) else token_ids
        delta = "".join(self._step(t) for t in ids)
        self.text += delta
        return delta

    def _step(self, token_id: int) -> str:
        if not self.prefix and self.ids:  # nothing subtracted yet: the window's text, if whole
            text = self._decode(self.ids)
            if not text.endswith(_REPLACEMENT):
                self.prefix, self.cut = text, len(self.ids)
        self.ids.append(token_id)
        text = self._decode(self.ids)
        if text.endswith(_REPLACEMENT):
            return ""
        if not text.startswith(self.prefix):
            # The stream compares UTF-8 lengths; a longer text that rewrote its prefix is
            # DecodeStream's "Invalid prefix", on which vLLM restarts without context.
            if len(text.encode()) <= len(self.prefix.encode()):
                return ""
            self.ids, self.prefix, self.cut = [], "", 0
            return self._step(token_id)
        if len(text) <= len(self.prefix):
            return ""
        delta = text[len(self.prefix):]
        self.ids, self.cut = self.ids[self.cut:], len(self.ids) - self.cut
        self.prefix = self._decode(self.ids)
        return delta
