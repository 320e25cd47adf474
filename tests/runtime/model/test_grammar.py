"""kvpool.runtime.model.grammar: vocabulary bytes as llguidance sees them, the batched token
mask against the matcher's own verdict token by token, the mask applied in the sampler, and
GrammarMatchers as a state machine."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvpool.errors import RequestError
from kvpool.runtime.model import (Sampler, SamplingParams, SeqHistory,
                                  build_byte_tokenizer)
from kvpool.runtime.model.byte_tokenizer import byte_alphabet
from kvpool.runtime.model.grammar import GrammarSpec, TokenMask, apply_token_mask, unpack_bitmask
from kvpool.runtime.model.grammar_matchers import GrammarMatchers

TOK = build_byte_tokenizer()
VOCAB = 520  # wider than the tokenizer's 512, as a model's padded embedding can be
SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
                                      "age": {"type": "integer"}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"c": {"enum": ["red", "green", "blue"]}},
     "required": ["c"], "additionalProperties": False},
    {"type": "array", "items": {"type": "number"}, "maxItems": 3},
    {"type": "object"},
]
MATCHERS = GrammarMatchers(TOK, VOCAB)
SPECS = [MATCHERS.compiler.compile(GrammarSpec.json_schema(s)) for s in SCHEMAS]


def test_vocabulary_bytes_are_the_byte_level_tokens():
    """llguidance's bytes for every id are what the byte-level decoder makes of it."""
    inv = {c: b for b, c in enumerate(byte_alphabet())}
    lt = MATCHERS.compiler.lltokenizer
    assert lt.vocab_size == VOCAB and lt.eos_token == TOK.eos_token_id
    for i in range(3):
        assert lt.is_special_token(i)
    for i in range(3, TOK.vocab_size):
        want = bytes(inv[c] for c in TOK.id_to_token(i))
        if want == b"\xff":  # NOTE(0xff) in grammar.py: llguidance's special-token marker
            continue
        assert lt.decode_bytes([i]) == want, i
        assert not lt.is_special_token(i)


def accepted(matcher, token: int) -> bool:
    return matcher.validate_tokens([token]) == 1


@settings(max_examples=40, deadline=None)
@given(which=st.integers(0, len(SPECS) - 1),
       picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=25))
def test_mask_never_allows_a_token_the_matcher_rejects(which, picks):
    """Walk the grammar with random allowed tokens; at each step every token the batched mask
    allows is one the matcher accepts. (Not the converse: llguidance may leave out a token its
    parser would take, e.g. a non-canonical split of a key and its colon.)"""
    g = GrammarMatchers(TOK, VOCAB)
    g.add([7], SPECS[which])
    ref = g.new_matcher(SPECS[which])  # a twin fed the same tokens, asked token by token
    for pick in picks:
        mask = g.token_mask([3, 7, 9])  # rows 0 and 2 have no grammar
        assert mask is not None and mask.rows.tolist() == [1]
        allowed = unpack_bitmask(mask.bits, VOCAB)[0].nonzero().flatten().tolist()
        assert allowed, "a live grammar always allows something (EOS at the end)"
        for t in allowed:
            assert accepted(ref, t), (t, TOK.decode([t]))
        t = allowed[pick % len(allowed)]
        done = g.advance([3, 7, 9], [0, t, 0])
        assert ref.consume_token(t)
        if done or t == TOK.eos_token_id:
            assert done == [7] and ref.is_stopped()
            break


def test_unpack_bitmask_matches_a_plain_reference():
    gen = torch.Generator().manual_seed(0)
    bits = torch.randint(-(1 << 31), (1 << 31) - 1, (3, 17), dtype=torch.int32, generator=gen)
    got = unpack_bitmask(bits, 530)
    for r in range(3):
        for t in range(530):
            word = int(bits[r, t // 32]) & 0xFFFFFFFF
            assert bool(got[r, t]) == bool((word >> (t % 32)) & 1)


def test_apply_token_mask_touches_only_masked_rows_and_falls_back():
    logits = torch.randn(4, 64)
    bits = torch.zeros(2, 2, dtype=torch.int32)
    bits[0, 0] = 0b1010  # row 1: tokens 1 and 3
    bits[1, 1] = 1  # row 3: token 32 only
    mask = TokenMask(torch.tensor([1, 3]), bits)
    raw = logits.clone()
    adjusted = logits.clone()
    adjusted[3, 32] = float("-inf")  # e.g. min_tokens masking the only token the grammar allows
    out = apply_token_mask(adjusted, mask, fallback=raw)
    assert torch.equal(out[0], raw[0]) and torch.equal(out[2], raw[2])
    assert torch.isfinite(out[1]).nonzero().flatten().tolist() == [1, 3]
    assert torch.isfinite(out[3]).nonzero().flatten().tolist() == [32]
    assert out[3, 32] == raw[3, 32]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), greedy=st.booleans(), top_k=st.sampled_from([-1, 5]))
def test_sampler_only_picks_allowed_tokens(seed, greedy, top_k):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, VOCAB, generator=gen) * 5
    allowed = torch.rand(2, VOCAB, generator=gen) < 0.05
    allowed[:, 11] = True
    bits = torch.zeros(2, (VOCAB + 31) // 32, dtype=torch.int64)
    for t in range(VOCAB):
        bits[:, t // 32] |= allowed[:, t].long() << (t % 32)
    bits = torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32)
    mask = TokenMask(torch.tensor([0, 2]), bits)
    p = SamplingParams(temperature=0.0 if greedy else 1.0, top_k=top_k,
                       presence_penalty=0.5)
    hist = [SeqHistory([1, 2], [11])] * 3  # the penalty runs before the mask
    before = logits.clone()
    got = Sampler(torch.Generator().manual_seed(seed))(logits, [p] * 3, None, hist,
                                                         token_mask=mask).tolist()
    assert torch.equal(logits, before)  # the model's logits are never written
    assert allowed[0, got[0]] and allowed[1, got[2]]


WAIT = 7  # NOTE(think-grammar): the token a waiting sequence's grammar starts after


class MatchersMachine(RuleBasedStateMachine):
    """add / step / remove in any order: one matcher per live constrained sequence; a spec
    with ``after`` leaves its sequences free (no mask row) until they sample that token."""

    def __init__(self) -> None:
        super().__init__()
        self.g = GrammarMatchers(TOK, VOCAB)
        self.live: dict[int, int] = {}  # seq_id -> spec index (the model)
        self.waiting: set[int] = set()  # the model's waiting sequences
        self.next_id = 0

    @rule(which=st.integers(0, len(SPECS) - 1), n=st.integers(1, 3), wait=st.booleans())
    def add(self, which, n, wait):
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        self.g.add(ids, dataclasses.replace(SPECS[which], after=WAIT) if wait else SPECS[which])
        self.live.update({s: which for s in ids})
        self.waiting |= set(ids) if wait else set()

    @precondition(lambda self: self.live)
    @rule(pick=st.integers(0, 10_000))
    def step(self, pick):
        seqs = sorted(self.live) + [10_000]  # one unconstrained row too
        rows = [j for j, s in enumerate(seqs[:-1]) if s not in self.waiting]
        mask = self.g.token_mask(seqs)
        assert (mask.rows.tolist() if mask is not None else []) == rows
        allowed = iter(unpack_bitmask(mask.bits, VOCAB) if rows else ())
        tokens = [(WAIT if (pick + j) % 2 else 5) if s in self.waiting else
                  int((a := next(allowed)).nonzero().flatten()[pick % int(a.sum())])
                  for j, s in enumerate(seqs[:-1])] + [5]
        self.waiting -= {s for s, t in zip(seqs, tokens) if t == WAIT and s in self.waiting}
        for s in self.g.advance(seqs, tokens):
            self.g.remove(s)
            del self.live[s]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def remove(self, data):
        s = data.draw(st.sampled_from(sorted(self.live)))
        self.g.remove(s)
        del self.live[s]
        self.waiting.discard(s)

    @invariant()
    def consistent(self):
        assert len(self.g) == len(self.live) and set(self.g.waiting) == self.waiting
        assert all((s in self.g) == (s not in self.waiting) for s in self.live)
        self.g.check_invariants(set(self.live))
        if not self.live:
            assert self.g.token_mask([1, 2, 3]) is None


TestMatchersMachine = MatchersMachine.TestCase
TestMatchersMachine.settings = settings(max_examples=20, stateful_step_count=20, deadline=None)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_spec_is_canonical(schema):
    spec = GrammarSpec.json_schema(schema, "x")
    assert json.loads(spec.schema) == schema and spec.kind == "json_schema"
    assert GrammarSpec.json_object().kind == "json_object"


def test_a_rejected_token_is_a_failure_never_a_completion():
    """NOTE(grammar-error): the matcher breaks on a token its grammar rejects; the sequence
    goes to ``failures`` (the engine fails its request), not to the completed ones (a stop)."""
    g = GrammarMatchers(TOK, VOCAB)
    g.add([4, 5], SPECS[1])  # {"c": "red" | "green" | "blue"}
    bad = TOK.encode("x", add_special_tokens=False)[0]  # an object never starts with x
    good = TOK.encode("{", add_special_tokens=False)[0]
    assert g.advance([4, 5], [bad, good]) == []
    assert set(g.failures) == {4} and "response_format" in g.failures[4]
    assert g.advance([4], [good]) == []  # a broken matcher is left alone
    g.remove(4)
    assert set(g.failures) == set() and 5 in g and 4 not in g


def test_uncompiled_specs_never_reach_the_step_thread():
    with pytest.raises(RequestError) as e:
        GrammarMatchers(TOK, VOCAB).add([1], GrammarSpec.json_object())
    assert e.value.param == "response_format"
