"""A grammar request whose token mask is late does not stall its neighbours (row_sampler.py
NOTE(late-mask)), through the real engine (tiny model, real KV tensors, real llguidance).

The fault plan's ``before_mask`` hook holds the mask thread: a plain request beside an n=2
json_schema request runs all its tokens while the grammar request has none; released, the
grammar request ends with exactly the greedy output it has alone (valid JSON, "stop"), also
when it was preempted (swap or recompute) while it awaited its late token. No block, matcher
or kept row outlives a request."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading

import jsonschema
import pytest
import torch

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.faults import FaultPlan
from kvpool.runtime.model import SamplingParams
from kvpool.runtime.model.grammar import GrammarSpec
from tests.configs import engine_config

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 999}},  # last: bounded, so it stops
    "required": ["name", "age"], "additionalProperties": False}
HOLD_S = 10.0  # the hook's cap: without deferral the step itself waits this long, once


class HeldMask(FaultPlan):
    """Holds the first mask computed once armed until ``release`` (at most HOLD_S); the mask
    thread is one thread, so every later mask waits behind it."""

    def __init__(self) -> None:
        self.armed = False
        self.held = 0
        self.release = threading.Event()

    def before_mask(self, seq_ids) -> None:
        if self.armed and not self.held:
            self.held = len(seq_ids)
            self.release.wait(HOLD_S)


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def grammar(core: EngineCore) -> SamplingParams:
    spec = core.grammars.compiler.compile(GrammarSpec.json_schema(SCHEMA, "person"))
    return SamplingParams(n=2, max_tokens=60, temperature=0.0, response_format=spec)


PLAIN = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


def collect(tokens: dict, outs) -> set[str]:
    """Add each update's tokens to ``tokens[(rid, index)]``; the ids that finished."""
    done = set()
    for o in outs:
        assert o.error is None, o.error
        for c in o.outputs:
            t = tokens.setdefault((o.request_id, c.index), [[], "", None])
            t[0] += c.token_ids
            t[1] += c.text
            t[2] = c.finish_reason
        if o.finished:
            done.add(o.request_id)
    return done


def run_to_end(core: EngineCore, tokens: dict) -> None:
    for _ in range(500):
        collect(tokens, core.step())
        assert core.check_invariants()
        if not core.has_work():
            return
    raise AssertionError("not finished in 500 steps")


def alone(core: EngineCore) -> dict:
    tokens: dict = {}
    core.add_request("g0", core.tokenizer.encode("a person"), grammar(core))
    run_to_end(core, tokens)
    return {i: tokens[("g0", i)] for i in range(2)}


def assert_clean(core: EngineCore) -> None:
    assert core.manager.stats().device.num_used == 0
    assert core.manager.stats().host.num_used == 0
    assert len(core.grammars) == 0 and not core.rows.has_late


def held_beside(core: EngineCore, plan: HeldMask, plain_prompt: str,
                plain: SamplingParams) -> dict:
    """The plain request to its end beside the grammar one, whose first mask is held."""
    plan.armed = True
    core.add_request("p", core.tokenizer.encode(plain_prompt), plain)
    core.add_request("g", core.tokenizer.encode("a person"), grammar(core))
    tokens: dict = {}
    done: set[str] = set()
    for _ in range(300):
        done |= collect(tokens, core.step())
        assert core.check_invariants()
        if "p" in done:
            break
    assert "p" in done and len(tokens[("p", 0)][0]) == plain.max_tokens
    return tokens


@pytest.mark.parametrize("size, mode, plain_prompt", [
    ("small", None, "The quick brown fox"),
    # 12 device blocks: the plain request's 190 tokens grow into the block of the grammar
    # request (the newer one), which is preempted while it awaits its late token
    ("scarce", "swap", "x" * 169),
    ("scarce", "recompute", "x" * 169)], ids=["beside", "swapped", "recomputed"])
def test_a_late_grammar_mask_stalls_only_its_own_request(torch_threads, size, mode,
                                                         plain_prompt):
    plan = HeldMask()
    core = EngineCore(engine_config(size, max_num_seqs=8, max_num_batched_tokens=256,
                                    preemption_mode=mode), faults=plan)
    try:
        want = alone(core)
        plain = dataclasses.replace(PLAIN, max_tokens=8 if mode is None else 20)
        tokens = held_beside(core, plan, plain_prompt, plain)
        # the plain request ran every token while the grammar's mask was held
        assert plan.held == 2 and not plan.release.is_set()
        assert ("g", 0) not in tokens and ("g", 1) not in tokens
        if mode is not None:
            assert core.scheduler.stats().preemptions[mode] >= 1
        plan.release.set()
        run_to_end(core, tokens)
        for i in range(2):
            assert tokens[("g", i)] == want[i]
            assert want[i][2] == "stop"
            jsonschema.validate(json.loads(want[i][1]), SCHEMA)
        assert_clean(core)
    finally:
        plan.release.set()
        core.close()


@contextlib.contextmanager
def held_core(**overrides):
    """A small-pool engine with a HeldMask plan; the hold ends by ``release_after`` (a timer:
    the step that waits for the mask returns once it fires) or at the end."""
    plan = HeldMask()
    core = EngineCore(engine_config("small", max_num_seqs=8, **overrides), faults=plan)
    timers: list[threading.Timer] = []

    def release_after(seconds: float) -> None:
        timers.append(threading.Timer(seconds, plan.release.set))
        timers[-1].start()
    try:
        yield core, plan, release_after
    finally:
        plan.release.set()
        for t in timers:
            t.cancel()
            t.join()
        core.close()


def test_a_mask_late_for_max_late_steps_is_waited_for(torch_threads):
    with held_core() as (core, plan, release_after):
        core.rows.max_late_steps = 3
        plan.armed = True
        core.add_request("p", core.tokenizer.encode("The quick brown fox"), PLAIN)
        core.add_request("g", core.tokenizer.encode("a person"), grammar(core))
        tokens: dict = {}
        release_after(3.0)
        calls = 0
        while ("g", 0) not in tokens:
            calls += 1
            assert not collect(tokens, core.step()), "p ended before g's late row was taken"
        # deferred by the first step, late 3 steps at the start of the fifth, taken there
        assert calls == 5 and plan.release.is_set()
        assert len(tokens[("p", 0)][0]) == 5 and tokens[("g", 1)][0]  # and maybe its next one
        run_to_end(core, tokens)
        assert len(tokens[("p", 0)][0]) == 8 and tokens[("g", 0)][2] == "stop"
        assert_clean(core)


def test_a_step_with_only_late_rows_left_waits_for_their_mask(torch_threads):
    with held_core() as (core, plan, release_after):
        tokens = held_beside(core, plan, "The quick brown fox", PLAIN)
        assert ("g", 0) not in tokens and core.rows.has_late
        release_after(0.5)  # the mask is held until then: this one step waits for it
        collect(tokens, core.step())
        assert plan.release.is_set() and tokens[("g", 0)][0] and tokens[("g", 1)][0]
        run_to_end(core, tokens)
        assert tokens[("g", 0)][2] == "stop"
        assert_clean(core)
