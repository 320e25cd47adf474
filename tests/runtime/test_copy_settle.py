"""A failed swap-in copy fails its request even when the step computes nothing for it
(step_copies.py NOTE(copy-settle)), through the real engine (tiny model, real KV tensors).

An n=2 json_schema request ``g`` whose first mask is held (both sequences await a late
token) is swapped out by a growing plain request ``p``; ``p`` is aborted, so the next step
swaps ``g`` back in while it still awaits, so that step has no entry of ``g``, and that
swap-in copy raises (the fault plan's ``before_copy`` seam). Before the fix nothing looked at
that copy again: ``g`` went on over garbage KV and finished with other tokens and no error,
and the step confirmed its device blocks (hashed the full ones: a later prompt hit them)."""

from __future__ import annotations

import threading

import pytest

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.faults import FaultPlan
from kvpool.runtime.model import SamplingParams
from kvpool.runtime.model.grammar import GrammarSpec
from tests.configs import engine_config
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}},
          "required": ["name"], "additionalProperties": False}
# 12 device blocks of 16 tokens; the mask is held at most this long (the hook's cap)
CONFIG = dict(max_num_seqs=8, max_num_batched_tokens=256, preemption_mode="swap")
HOLD_S = 10.0


class HeldMaskFailedSwapIn(FaultPlan):
    """Holds the first mask until ``release``; fails the swap-in batches of ``fail_tag``
    while set, recording their pairs."""

    def __init__(self) -> None:
        self.held = 0
        self.release = threading.Event()
        self.fail_tag: str | None = None
        self.failed_pairs: list[tuple] = []

    def before_mask(self, seq_ids) -> None:
        if not self.held:
            self.held = len(seq_ids)
            self.release.wait(HOLD_S)

    def before_copy(self, kind, pairs, tag) -> None:
        if kind == "swap_in" and tag == self.fail_tag:
            self.failed_pairs.append(tuple(pairs))
            raise RuntimeError("injected swap-in failure")


@pytest.fixture
def held():
    plan = HeldMaskFailedSwapIn()
    core = EngineCore(engine_config("scarce", **CONFIG), faults=plan)
    yield core, plan
    plan.release.set()
    core.close()


def fail_awaiting_swap_in(core: EngineCore, plan: HeldMaskFailedSwapIn, g_prompt: str,
                          p_prompt: str, p_tokens: int) -> dict:
    """Run the scenario of the module docstring; the errors of the requests that ended."""
    spec = core.grammars.compiler.compile(GrammarSpec.json_schema(SCHEMA, "person"))
    core.add_request("p", core.tokenizer.encode(p_prompt),
                     SamplingParams(max_tokens=p_tokens, temperature=0.0, ignore_eos=True))
    core.add_request("g", core.tokenizer.encode(g_prompt),
                     SamplingParams(n=2, max_tokens=20, temperature=0.0, response_format=spec))
    errors: dict = {}
    for _ in range(p_tokens):  # until p has taken every device block from swapped-out g
        errors |= {o.request_id: o.error for o in core.step() if o.finished}
        dev = core.manager.stats().device
        if core.scheduler.stats().num_swapped and dev.num_used == dev.num_blocks:
            break
    assert not errors and core.scheduler.stats().num_swapped == 1  # g: no token, swapped
    plan.fail_tag = "g"
    core.abort("p")  # frees the device: the next step swaps g in, both sequences awaiting
    errors |= {o.request_id: o.error for o in core.step() if o.finished}
    core.copies.wait_for_blocks(range(core.num_device_blocks), timeout=HOLD_S)  # bounded
    assert plan.failed_pairs, "the test needs g's swap-in to run in this step"
    assert core.check_invariants()
    return errors


def test_a_failed_swap_in_of_an_awaiting_request_fails_it(held):
    core, plan = held
    errors = fail_awaiting_swap_in(core, plan, "a person", "x" * 169, 20)
    assert errors == {"g": "KV copy failed"}  # in the very step, before any block confirms
    plan.release.set()
    while core.has_work():
        core.step()
    st = core.manager.stats()
    assert st.device.num_used == 0 and st.host.num_used == 0 and st.num_seqs == 0


def test_no_block_of_a_failed_swap_in_becomes_a_prefix_hit(held):
    core, plan = held
    g_prompt = "a person described in json: name and age, please "  # 36 tokens: 2 full blocks
    # p (137 tokens) grows by 50 into all 12 blocks: g's cached prompt blocks are evicted,
    # so its swap-in copies its two full blocks into blocks that held p's KV
    errors = fail_awaiting_swap_in(core, plan, g_prompt, "x" * 137, 50)
    assert len(plan.failed_pairs[0]) == 3, "the swap-in must copy g's full prompt blocks"
    plan.release.set()
    greedy = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    core.add_request("again", core.tokenizer.encode(g_prompt), greedy)
    got, cached = run(core, "again")
    assert cached == 0  # no hit on the blocks the failed copy never wrote
    ref = EngineCore(engine_config("scarce", **CONFIG, enable_prefix_caching=False))
    try:
        ref.add_request("ref", ref.tokenizer.encode(g_prompt), greedy)
        assert got == run(ref, "ref")[0]
    finally:
        ref.close()
    assert errors == {"g": "KV copy failed"}


def run(core: EngineCore, rid: str) -> tuple[list[int], int]:
    """Step ``core`` to its end: ``rid``'s tokens and cached prompt tokens (no error)."""
    tokens, cached = [], -1
    while core.has_work():
        for o in core.step():
            if o.request_id == rid:
                tokens += [t for c in o.outputs for t in c.token_ids]
                cached = o.num_cached_tokens
                assert o.error is None, o.error
    return tokens, cached
