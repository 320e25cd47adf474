"""GrammarCompiler: a ``response_format``'s matcher built, budgeted and probed before the
request runs, on a worker thread (never the event loop, never the engine's step thread).

Life of a grammar::

    parse (server)         GrammarSpec.json_schema: schema -> llguidance grammar JSON,
                           validate_grammar under LIMITS (a 400 naming the request field)
    compile (worker)       GrammarCompiler.compile: the matcher (llguidance builds its lexer
                           lazily, on the first masks), probed: PROBE_STEPS masks along the
                           first allowed token, for the schema and for each ``pattern`` and
                           referenced definition in it as a grammar of its own (at most
                           MAX_PROBES); an error -> 400 naming the field it came from
    step thread            GrammarMatchers.add: one deep copy of the probed matcher per
                           sequence (cheap: the lexer is shared); masks under LIMITS

NOTE(budget): llguidance counts work in fuel and fails a matcher whose step runs out (it never
returns a partial mask). LIMITS (grammar.py) is tighter than llguidance's defaults, measured on
the tiny vocabulary and a synthetic 150k byte-level one (bench/structured.py): every schema the
tests and benchmarks use passes on both, while ``^(abc){1000000000}$``, ``^x{100000}$`` and
``((a{100}){100}){100}`` exhaust the fuel within the probe (with the defaults ``^x{100000}$``
was accepted and cost ~50 ms per mask on a 512-token vocabulary, every step, for every
sequence). A ``$ref`` loop allows nothing at all: its first mask is an error. Why each
pattern and referenced definition is probed alone: llguidance builds a regex's derivatives
only when the lexer enters it, so a pattern (or a looping definition) deep inside an object is
costed only once generation reaches it; probed alone, it is reached at once. A grammar that
slips past the probes and runs out of fuel later ends its request with an error
(grammar_matchers.py, NOTE(grammar-error)); the fuel caps what one step of it costs its
neighbours.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Sequence

import llguidance
import torch

from kvpool.errors import RequestError

from .grammar import LIMITS, OPTIONS, GrammarSpec, unpack_bitmask
from .tokenizer import Tokenizer

__all__ = ["PROBE_STEPS", "GrammarCompiler"]

PROBE_STEPS = 3  # masks computed along the first allowed token, per probed grammar


_WHAT = {"regex": "the regex", "grammar": "the grammar", "choice": "the choice"}
# why a grammar of each kind may allow nothing at all (its first mask an error): the hint of
# its 400 (a schema's or a definition's is a $ref cycle)
_NOTHING = {"regex": "no string matches it", "pattern": "no string matches it",
            "grammar": "a rule that can never end: a recursion with no base case?",
            "choice": "no choice can be generated"}


class GrammarCompiler:
    """Builds probed matchers for one vocabulary; safe to call from any thread."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int,
                 eos_token_ids: Sequence[int] = ()) -> None:
        self.tokenizer = tokenizer  # whose tokenizers JSON llguidance reads
        self.vocab_size = vocab_size  # the model's logits width (may exceed the tokenizer's)
        self.eos_token_ids = list(eos_token_ids) or list(tokenizer.eos_token_ids)
        self._lock = threading.Lock()  # builds the LLTokenizer once
        self._lltok: llguidance.LLTokenizer | None = None  # built on first use (~1 s at 150k)

    @property
    def lltokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._lltok is None:
                eos = self.eos_token_ids
                self._lltok = llguidance.LLTokenizer(
                    self.tokenizer.backend.to_str(), n_vocab=self.vocab_size,
                    eos_token=(eos[0] if len(eos) == 1 else eos) or None)
            return self._lltok

    def matcher(self, grammar: str) -> llguidance.LLMatcher:
        """A fresh matcher under LIMITS (the caller checks ``is_error``)."""
        return llguidance.LLMatcher(self.lltokenizer, grammar, log_level=0,
                                    limits=llguidance.LLParserLimits(**LIMITS))

    def compile(self, spec: GrammarSpec) -> GrammarSpec:
        """``spec`` with its probed matcher (``spec.compiled``); RequestError (HTTP 400 naming
        ``spec.param``, the request's field) when the grammar is invalid here or exceeds its
        budget. Blocking: call it on a worker thread."""
        if spec.compiled is not None:
            return spec
        param, whole = spec.param, _WHAT.get(spec.kind, "the schema")
        proto = self.matcher(spec.grammar)
        self._probe(proto.deep_copy(), whole, param, _NOTHING.get(spec.kind))
        if proto.is_error():
            raise RequestError.field(
                param, f"{whole} cannot be used with this tokenizer: {_first_line(proto)}")
        for sub in spec.probes:
            what = f"the pattern {sub['pattern'][:60]!r}" if "pattern" in sub else \
                f"the definition {sub['$ref'][:60]!r}"
            try:
                g = llguidance.LLMatcher.grammar_from_json_schema(sub, defaults=OPTIONS)
            except ValueError as e:
                raise RequestError.field(param, f"{what}: {e}") from None
            self._probe(self.matcher(g), what, param, _NOTHING["pattern"] if "pattern" in sub
                        else None)
        return dataclasses.replace(spec, compiled=proto)

    def _probe(self, m: llguidance.LLMatcher, what: str, param: str,
               nothing: str | None) -> None:
        """PROBE_STEPS masks along the first allowed non-EOS token; raise on an error (one
        that allows nothing at all says why it may: ``nothing``, else a $ref cycle)."""
        eos = set(self.eos_token_ids)
        for _ in range(PROBE_STEPS):
            bits = torch.frombuffer(bytearray(m.compute_bitmask()), dtype=torch.int32)
            if m.is_error():
                break
            allowed = unpack_bitmask(bits[None], self.vocab_size)[0].nonzero().flatten()
            nxt = next((t for t in allowed.tolist() if t not in eos), None)
            if nxt is None or not m.consume_token(nxt):
                break
        if m.is_error():
            err = _first_line(m)
            if err.startswith("NoExtension"):  # nothing can be generated at all
                err = f"it allows no value at all ({nothing or 'a $ref cycle?'})"
            raise RequestError.field(
                param, f"{what} is too large or invalid for structured output: {err}")


def _first_line(m: llguidance.LLMatcher) -> str:
    """llguidance's error without its parser-state dump (its verbose tail)."""
    err = m.get_error().strip().splitlines()
    return err[0][:200] if err else "unknown error"
