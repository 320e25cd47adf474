"""GrammarCompiler: a ``response_format``'s matcher built, budgeted and probed before the
request runs, on a worker thread (never the event loop, never the engine's step thread).

Life of a grammar::

    parse (server)         GrammarSpec.json_schema: schema -> llguidance grammar JSON,
                           validate_grammar under LIMITS (a 400 naming the request field)
    compile (worker)       GrammarCompiler.compile: the matcher (llguidance builds its lexer
                           lazily, on the first masks), probed: PROBE_STEPS masks along the
                           first allowed token, for the schema and for each ``pattern`` and
                           referenced definition in it as a grammar of its own (at most
                           MAX_PROBES), and the whole grammar MIDDLE_STEPS masks along the
                           middle allowed token (NOTE(middle-walk)); an error -> 400 naming
                           the field it came from. Matchers are built without forcing
                           (grammar_forcing.py NOTE(no-forcing))
    step thread            GrammarMatchers.add: one deep copy of the probed matcher per
                           sequence (its compiled grammar shared, its lexer state copied);
                           masks under LIMITS

NOTE(budget): llguidance counts work in fuel and fails a matcher whose step runs out (it never
returns a partial mask). LIMITS (grammar.py) is tighter than llguidance's defaults, measured on
the tiny vocabulary and a synthetic 150k byte-level one (bench/structured.py): every schema the
tests and benchmarks use passes on both, while ``^(abc){1000000000}$``, ``^x{100000}$`` and
``((a{100}){100}){100}`` exhaust the fuel within the probe (with the defaults ``^x{100000}$``
was accepted and cost ~50 ms per mask on a 512-token vocabulary, every step, for every
sequence). Those costs were llguidance forcing a run of bytes, which the matchers no longer do
and the probes still read (NOTE(no-forcing)): it re-read and re-tokenized a long run each mask,
under no fuel. A JSON schema's enum values may get more initial lexer fuel
(grammar_fuel.py NOTE(enum-fuel)); the schema is then probed without them too, under LIMITS
alone. A ``$ref`` loop allows nothing at all: its first mask is an error. Why each pattern and
referenced definition is probed alone: llguidance builds a regex's derivatives
only when the lexer enters it, so a pattern (or a looping definition) deep inside an object is
costed only once generation reaches it; probed alone, it is reached at once. A grammar that
slips past the probes and runs out of fuel later ends its request with an error
(grammar_matchers.py, NOTE(grammar-error)); the fuel caps what one step of it costs its
neighbours.

NOTE(middle-walk): the first allowed token tends to take a grammar's shortest way (``"w0"`` of
``item: "w0" | ... | "w1899"``), where its state stays small; the request's tokens may take
another, where a lexeme ends while it could still go on (``"w57"``, then ``"w570"``...) and the
mask weighs every alternative again: llguidance's step item limit, so that the grammar passed
its probes and its request failed 3 tokens in (an outside probe). The whole grammar is walked
a second time, MIDDLE_STEPS masks along the middle allowed token, which reaches such a state
on this grammar; what neither walk reaches still fails its request midway (NOTE(grammar-error)).

NOTE(compile-cache): an agent loop resends the same tools (a ``required`` union, a schema) with
every turn, and a heavy schema (64 distinct ``pattern``s) costs ~1 s of probes each time; vLLM's
xgrammar backend caches its compiled grammars. So each compiler keeps its last
CACHE_ENTRIES outcomes, least recently used first out, keyed by what decides them: the kind,
the grammar JSON and the probes (the compiler is one vocabulary's, LIMITS and OPTIONS are
constants). A hit hands out the same probed matcher, which nothing ever advances: each
sequence still gets its own deep copy (GrammarMatchers.new_matcher), which copies llguidance's
lexer state too, so a cached grammar's sequence starts exactly as a fresh compile's. A refusal
is cached as its message (fuel is counted, not timed: the same grammar is refused the same
way) and raised again naming the new request's field. llguidance does not say how much memory
a matcher holds: measured, ~18 bytes a grammar character (a 1 MiB ``required`` union of 1,200
tools held 17 MiB), so each entry counts CACHE_BYTES_PER_CHAR bytes a character of its grammar
and the entries' sum stays under CACHE_BYTES. The engine asks the cache on the event loop,
before its compile pool, and shares a compile in flight (NOTE(compile-share),
runtime/engine/grammar_pool.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from typing import Sequence, Union

import llguidance
import torch

from kvpool.errors import RequestError

from .grammar import LIMITS, OPTIONS, GrammarSpec, unpack_bitmask
from .grammar_forcing import unforced
from .tokenizer import Tokenizer

__all__ = ["CACHE_BYTES", "CACHE_BYTES_PER_CHAR", "CACHE_ENTRIES", "MIDDLE_STEPS", "PROBE_STEPS",
           "GrammarCompiler", "Outcome", "cache_key", "first_error_line"]

PROBE_STEPS = 3  # masks computed along the first allowed token, per probed grammar
# NOTE(middle-walk): masks computed along the middle allowed token, the whole grammar only
MIDDLE_STEPS = 4
# NOTE(compile-cache): compiled grammars kept per compiler, and their estimated memory
CACHE_ENTRIES = 64
CACHE_BYTES = 128 * 1024 * 1024
CACHE_BYTES_PER_CHAR = 20


_WHAT = {"regex": "the regex", "grammar": "the grammar", "choice": "the choice"}
# why a grammar of each kind may allow nothing at all (its first mask an error): the hint of
# its 400 (a schema's or a definition's is a $ref cycle)
_NOTHING = {"regex": "no string matches it", "pattern": "no string matches it",
            "grammar": "a rule that can never end: a recursion with no base case?",
            "choice": "no choice can be generated"}


Outcome = Union[llguidance.LLMatcher, str]  # a probed matcher, or why there is none (a 400)


class GrammarCompiler:
    """Builds probed matchers for one vocabulary; safe to call from any thread."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, eos_token_ids: Sequence[int] = (),
                 *, cache_entries: int = CACHE_ENTRIES, cache_bytes: int = CACHE_BYTES) -> None:
        self.tokenizer = tokenizer  # whose tokenizers JSON llguidance reads
        self.vocab_size = vocab_size  # the model's logits width (may exceed the tokenizer's)
        self.eos_token_ids = list(eos_token_ids) or list(tokenizer.eos_token_ids)
        self._lock = threading.Lock()  # builds the LLTokenizer once
        self._lltok: llguidance.LLTokenizer | None = None  # built on first use (~1 s at 150k)
        self._cache = _CompileCache(cache_entries, cache_bytes)  # NOTE(compile-cache)

    @property
    def lltokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._lltok is None:
                eos = self.eos_token_ids
                self._lltok = llguidance.LLTokenizer(
                    self.tokenizer.backend.to_str(), n_vocab=self.vocab_size,
                    eos_token=(eos[0] if len(eos) == 1 else eos) or None)
            return self._lltok

    def matcher(self, grammar: str, fuel: int | None = None) -> llguidance.LLMatcher:
        """A fresh matcher of ``grammar`` without forcing (NOTE(no-forcing)), under LIMITS with
        ``fuel`` as its initial lexer fuel where given (NOTE(enum-fuel)); the caller checks
        ``is_error``."""
        limits = LIMITS if fuel is None else {**LIMITS, "initial_lexer_fuel": fuel}
        return llguidance.LLMatcher(self.lltokenizer, unforced(grammar), log_level=0,
                                    limits=llguidance.LLParserLimits(**limits))

    def compile(self, spec: GrammarSpec) -> GrammarSpec:
        """``spec`` with its probed matcher (``spec.compiled``); RequestError (HTTP 400 naming
        ``spec.param``, the request's field) when the grammar is invalid here or exceeds its
        budget. Blocking: call it on a worker thread. NOTE(compile-cache): a grammar compiled
        (or refused) before is not compiled again."""
        if spec.compiled is not None:
            return spec
        key = cache_key(spec)
        outcome = self.cached(key)
        return self.answer(spec, self.build(spec, key) if outcome is None else outcome)

    def cached(self, key: bytes) -> Outcome | None:
        """NOTE(compile-cache): the outcome kept for ``key`` (``cache_key``), else None. Cheap
        (a dict lookup under a lock no one holds for long) and any thread: the event loop asks
        it before the compile pool (runtime/engine/grammar_pool.py)."""
        return self._cache.get(key)

    def build(self, spec: GrammarSpec, key: bytes) -> Outcome:
        """Compile ``spec`` and keep its outcome under ``key``: the probed matcher, or why it is
        refused (a 400's message). Blocking: call it on a worker thread."""
        try:
            outcome: Outcome = self._build(spec)
        except _Refused as e:  # its message only: no traceback holding the matchers
            outcome = str(e)
        self._cache.put(key, outcome, len(spec.grammar) * CACHE_BYTES_PER_CHAR)
        return outcome

    @staticmethod
    def answer(spec: GrammarSpec, outcome: Outcome) -> GrammarSpec:
        """``spec`` compiled to ``outcome``, or its refusal raised naming ``spec.param`` (an
        outcome is shared by requests that name different fields)."""
        if isinstance(outcome, str):
            raise RequestError.field(spec.param, outcome)
        return dataclasses.replace(spec, compiled=outcome)

    def _build(self, spec: GrammarSpec) -> llguidance.LLMatcher:
        """The probed matcher of ``spec``, built without forcing (NOTE(no-forcing));
        _Refused says why there is none."""
        whole = _WHAT.get(spec.kind, "the schema")
        proto = self.matcher(spec.grammar, spec.lexer_fuel)
        self._probe(proto.deep_copy(), whole, _NOTHING.get(spec.kind))
        self._probe(proto.deep_copy(), whole, None, MIDDLE_STEPS, middle=True)
        if proto.is_error():
            raise _Refused(f"{whole} cannot be used with this tokenizer: {first_error_line(proto)}")
        for sub in spec.probes:
            what = f"the pattern {sub['pattern'][:60]!r}" if "pattern" in sub else \
                f"the definition {sub['$ref'][:60]!r}"
            try:
                g = llguidance.LLMatcher.grammar_from_json_schema(sub, defaults=OPTIONS)
            except ValueError as e:
                raise _Refused(f"{what}: {e}") from None
            self._probe(self.matcher(g), what, _NOTHING["pattern"] if "pattern" in sub
                        else None)
        if spec.rest is not None:  # NOTE(enum-fuel): all but the enums, under LIMITS alone
            g = llguidance.LLMatcher.grammar_from_json_schema(spec.rest, defaults=OPTIONS)
            self._probe(self.matcher(g), "the schema without its enum values", None)
        return proto

    def _probe(self, m: llguidance.LLMatcher, what: str, nothing: str | None,
                steps: int = PROBE_STEPS, *, middle: bool = False) -> None:
        """``steps`` masks along the first allowed non-EOS token (``middle``: the middle one,
        NOTE(middle-walk)), the first walk reading the forced run before each
        (NOTE(no-forcing)); raise on an error (one that allows nothing at all says why it may:
        ``nothing``, else a $ref cycle)."""
        eos = set(self.eos_token_ids)
        for _ in range(steps):
            if not middle:  # NOTE(no-forcing): the forced run from here, as forcing read it
                m.compute_ff_bytes()
            bits = torch.frombuffer(bytearray(m.compute_bitmask()), dtype=torch.int32)
            if m.is_error():
                break
            allowed = unpack_bitmask(bits[None], self.vocab_size)[0].nonzero().flatten()
            ids = [t for t in allowed.tolist() if t not in eos]
            nxt = (ids[len(ids) // 2] if middle else ids[0]) if ids else None
            if nxt is None or not m.consume_token(nxt):
                break
        if m.is_error():
            err = first_error_line(m)
            if err.startswith("NoExtension"):  # nothing can be generated at all
                err = f"it allows no value at all ({nothing or 'a $ref cycle?'})"
            raise _Refused(f"{what} is too large or invalid for structured output: {err}")


def first_error_line(m: llguidance.LLMatcher) -> str:
    """llguidance's error without its parser-state dump (its verbose tail)."""
    err = m.get_error().strip().splitlines()
    return err[0][:200] if err else "unknown error"


class _Refused(Exception):
    """Why a grammar cannot be compiled: a 400's message, less the request field it names."""


def cache_key(spec: GrammarSpec) -> bytes:
    """NOTE(compile-cache): a digest of what decides a compile's outcome and message. Cheap
    enough for the event loop: ~0.6 ms for a 0.9 MB grammar (a 1,200-tool union), which took
    ~230 ms to build on its worker; a few µs for a usual schema."""
    h = hashlib.sha256(f"{spec.kind}\0{spec.grammar}\0".encode())
    h.update(json.dumps(spec.probes, separators=(",", ":")).encode())
    return h.digest()


class _CompileCache:
    """NOTE(compile-cache): the last compile outcomes (a probed matcher, or a refusal), least
    recently used first out, within a count and an estimate of their memory; any thread."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self._max_entries, self._max_bytes = max_entries, max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[bytes, tuple[Outcome, int]] = OrderedDict()  # (it, bytes)
        self._bytes = 0  # the sum of the entries' estimates

    def get(self, key: bytes) -> Outcome | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: bytes, outcome: Outcome, size: int) -> None:
        """Keep ``outcome`` (of ``size`` estimated bytes; one over the whole bound is not kept),
        dropping the least recently used past either bound."""
        if size > self._max_bytes:
            return
        dropped = []  # freed after the lock: a big matcher's free must not hold up get()
        with self._lock:
            old = self._entries.pop(key, None)
            self._bytes += size - (old[1] if old else 0)
            self._entries[key] = (outcome, size)
            while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
                dropped.append(self._entries.popitem(last=False)[1])
                self._bytes -= dropped[-1][1]
        dropped.clear()
