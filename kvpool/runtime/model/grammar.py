"""Structured output: ``response_format`` json_object / json_schema through llguidance.

One token mask per step, batched::

    engine step            GrammarMatchers                      Sampler
    ---------------------  -----------------------------------  --------------------------------
    rows [r0 r1 r2 r3]     token_mask(seq_ids) -> TokenMask     logits[rows] masked to -inf
      r1, r3 have a          rows  = [1, 3]                     where the bit is 0 (rows 0, 2
      grammar                bits  = int32 [2, ceil(V/32)]      untouched); then sampling as
                             (one LLExecutor call, parallel)    usual
    sampled [t0..t3]       advance(seq_ids, tokens) -> [seq ids whose grammar is complete]

No grammar in the batch means ``token_mask`` returns None before any per-row work.

Why llguidance (xgrammar and outlines-core were measured beside it; README, Structured output):
no Python dependencies (one abi3 wheel of ~8 MB; xgrammar requires triton, transformers and
apache-tvm-ffi), JSON-schema compile in about a millisecond even for a 150k vocabulary
(outlines-core builds a vocabulary-wide index per schema: 0.1-0.9 s at 150k, on the request path),
and a per-step mask computed lazily over a token trie with no large cache-miss spikes.

Vocabulary: llguidance reads the ``tokenizers`` JSON itself (the way its own ``hf`` helper does),
so byte-level BPE (the built-in tokenizer and HF tokenizer.json BPE) and SentencePiece
byte-fallback tokens map to the bytes they decode to. NOTE(0xff): llguidance marks special
tokens with a leading 0xff byte, so the lone byte token 0xff (never part of valid UTF-8, so never
allowed by a JSON grammar) is not usable under a grammar.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import llguidance
import llguidance.torch as llg_torch
import torch

from kvpool.errors import RequestError

from .tokenizer import Tokenizer

__all__ = ["GrammarMatchers", "GrammarSpec", "TokenMask", "apply_token_mask",
           "unpack_bitmask"]

log = logging.getLogger(__name__)

PARAM = "response_format"
MAX_SCHEMA_CHARS = 64 * 1024  # one request may not hand the compiler an unbounded schema
# NOTE(whitespace): compact JSON (no whitespace between tokens). With flexible whitespace a
# sampled model can emit blanks forever and never close the object before max_tokens; json.loads
# accepts compact JSON just the same.
_OPTIONS = {"whitespace_flexible": False}


def _bad(message: str) -> RequestError:
    return RequestError(f"{PARAM}: {message}", param=PARAM)


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """A validated grammar request: what ``response_format`` asked for, compiled once.

    ``grammar`` is llguidance's grammar JSON (what each sequence's matcher is built from).
    """

    kind: str  # "json_object" | "json_schema"
    schema: str  # canonical JSON text of the schema (json_object: {"type": "object"})
    name: str | None = None  # json_schema.name (echoed nowhere; kept for logs)
    grammar: str = field(default="", compare=False, repr=False)  # compiled, from the schema

    @classmethod
    def json_object(cls) -> "GrammarSpec":
        return cls.json_schema({"type": "object"}, kind="json_object")

    @classmethod
    def json_schema(cls, schema: Any, name: str | None = None, *,
                    kind: str = "json_schema") -> "GrammarSpec":
        """Compile ``schema`` (a dict or bool); an invalid one raises RequestError naming
        response_format (HTTP 400)."""
        if not isinstance(schema, (dict, bool)):
            raise _bad("json_schema.schema must be a JSON object")
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        if len(text) > MAX_SCHEMA_CHARS:
            raise _bad(f"the schema is {len(text)} characters; at most {MAX_SCHEMA_CHARS}")
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(text, defaults=_OPTIONS)
        except ValueError as e:
            raise _bad(f"invalid JSON schema: {e}") from None
        err = llguidance.LLMatcher.validate_grammar(grammar)
        if err:
            raise _bad(f"invalid JSON schema: {err}")
        return cls(kind, text, name, grammar)


@dataclass(frozen=True, slots=True)
class TokenMask:
    """Allowed tokens for some rows of a logits batch (the rest are unconstrained)."""

    rows: torch.Tensor  # int64 [k]: logits rows that have a grammar
    bits: torch.Tensor  # int32 [k, ceil(vocab / 32)]: bit j of word w allows token 32 * w + j


_SHIFTS = torch.arange(32, dtype=torch.int32)


def unpack_bitmask(bits: torch.Tensor, vocab: int) -> torch.Tensor:
    """``bool [k, vocab]`` from an int32 bitmask ``[k, words]`` (little-endian bits)."""
    unpacked = (bits[:, :, None] >> _SHIFTS.to(bits.device)) & 1
    return unpacked.reshape(bits.shape[0], -1)[:, :vocab].bool()


def apply_token_mask(logits: torch.Tensor, mask: TokenMask,
                     fallback: torch.Tensor | None = None) -> torch.Tensor:
    """Set disallowed logits of the masked rows to -inf, in place; returns ``logits``.

    ``fallback`` (the logits before bias/penalties/min_tokens) is used for a row whose every
    allowed token those adjustments had set to -inf (min_tokens masking EOS where the grammar
    allows only EOS): the grammar wins, so the row never samples a forbidden token.
    """
    rows = mask.rows.to(logits.device)
    allowed = unpack_bitmask(mask.bits.to(logits.device), logits.shape[-1])
    sub = logits[rows].masked_fill_(~allowed, float("-inf"))
    if fallback is not None:
        dead = torch.isneginf(sub).all(dim=-1)
        if bool(dead.any()):
            alt = fallback[rows].masked_fill_(~allowed, float("-inf"))
            sub = torch.where(dead[:, None], alt, sub)
    logits[rows] = sub
    return logits


class GrammarMatchers:
    """One llguidance matcher per constrained sequence; the step thread's only.

    Invariant: every key of ``_matchers`` is a live sequence of a request with a
    ``response_format`` (added by ``add``, dropped by ``remove`` when the request leaves), and
    each matcher has consumed exactly that sequence's generated tokens.
    """

    def __init__(self, tokenizer: Tokenizer, vocab_size: int,
                 eos_token_ids: Sequence[int] = (), num_threads: int | None = None) -> None:
        self.tokenizer = tokenizer  # whose tokenizers JSON llguidance reads
        self.vocab_size = vocab_size  # the model's logits width (may exceed the tokenizer's)
        self.eos_token_ids = list(eos_token_ids) or list(tokenizer.eos_token_ids)
        self._num_threads = num_threads or max(1, min(4, (os.cpu_count() or 2) // 2))
        self._lltok: llguidance.LLTokenizer | None = None  # built on first use (~1 s at 150k)
        self._executor: llguidance.LLExecutor | None = None
        self._matchers: dict[int, llguidance.LLMatcher] = {}  # seq_id -> matcher

    @property
    def lltokenizer(self) -> llguidance.LLTokenizer:
        if self._lltok is None:
            eos = self.eos_token_ids[0] if len(self.eos_token_ids) == 1 else self.eos_token_ids
            self._lltok = llguidance.LLTokenizer(self.tokenizer.backend.to_str(),
                                                 n_vocab=self.vocab_size, eos_token=eos or None)
        return self._lltok

    def __len__(self) -> int:
        return len(self._matchers)

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self._matchers

    def new_matcher(self, spec: GrammarSpec) -> llguidance.LLMatcher:
        m = llguidance.LLMatcher(self.lltokenizer, spec.grammar, log_level=0)
        if m.is_error():
            raise _bad(f"the schema cannot be used with this tokenizer: {m.get_error()}")
        return m

    def validate(self, spec: GrammarSpec) -> None:
        """Raise RequestError (400) if ``spec`` cannot run against this vocabulary."""
        self.new_matcher(spec)

    def add(self, seq_ids: Sequence[int], spec: GrammarSpec) -> None:
        matchers = [self.new_matcher(spec) for _ in seq_ids]  # all or none
        self._matchers.update(zip(seq_ids, matchers))

    def remove(self, seq_id: int) -> None:
        self._matchers.pop(seq_id, None)

    def token_mask(self, seq_ids: Sequence[int]) -> TokenMask | None:
        """The mask for the rows (one per entry of ``seq_ids``) that have a grammar, or None."""
        if not self._matchers:
            return None
        get = self._matchers.get
        pairs = [(j, m) for j, s in enumerate(seq_ids) if (m := get(s)) is not None]
        if not pairs:
            return None
        # NOTE(host-mask): llguidance writes into host memory; apply_token_mask moves it to
        # the logits' device (pin_memory raises on CPU torch, so plain host memory here).
        # NOTE(zeros): start from "nothing allowed", so a word the library leaves unwritten
        # disallows. In one early probe over an all-ones buffer (llguidance's own
        # allocate_token_bitmask) token 0 (<s>) came back allowed; not reproduced since.
        bits = torch.zeros(llg_torch.get_bitmask_shape(len(pairs), self.vocab_size),
                           dtype=torch.int32)
        if self._executor is None:
            self._executor = llguidance.LLExecutor(self._num_threads)
        llg_torch.fill_next_token_bitmask_par(
            self._executor, [(m, k) for k, (_, m) in enumerate(pairs)], bits)
        return TokenMask(torch.tensor([j for j, _ in pairs], dtype=torch.long), bits)

    def advance(self, seq_ids: Sequence[int], tokens: Sequence[int]) -> list[int]:
        """Feed each constrained sequence its sampled token; returns the sequences whose
        grammar is complete (nothing but EOS can follow) or broken (a token it rejects)."""
        if not self._matchers:
            return []
        done = []
        for s, t in zip(seq_ids, tokens):
            m = self._matchers.get(s)
            if m is None:
                continue
            if not m.consume_token(t):
                # cannot happen with the mask applied; ending the sequence beats emitting
                # text the schema rejects
                log.error("grammar of seq %d rejected token %d: %s", s, t, m.get_error())
                done.append(s)
            elif m.is_stopped():
                done.append(s)
        return done

    def check_invariants(self, live_seq_ids: set[int]) -> None:
        stray = set(self._matchers) - live_seq_ids
        if stray:
            raise AssertionError(f"grammar matchers for finished sequences: {sorted(stray)}")
