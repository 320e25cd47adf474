"""The tiny model with real tensors: a block filled by a sampled token whose KV the next step
has not written yet is no prefix hit and is published on no tier (tests/sched/
test_offered_once_computed.py is the state machine of the same rule).

Prompt ``P`` (tests/runtime/stepped.py): its o3, appended when the fourth step is scheduled,
fills block 1 with its KV written only by that step. Each test catches the request there, by
the step's failure or by a preemption, and checks that a request sharing the prefix gets,
token for token, the greedy outputs (and their logprobs) of an engine with no prefix cache
(nothing reused, so nothing unwritten read)."""

from __future__ import annotations

import pytest

from kvpool.core import Device
from tests.runtime.stepped import BS, H, P, SUFFIX, FailArmed, Run, fresh, same
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)


class Heard:
    """The block manager's observer (what kvpool.events publishes): the step each hash was
    first stored in, per tier, and the token ids CPU blocks were published with."""

    def __init__(self) -> None:
        self.step = 0
        self.at: dict[Device, dict[bytes, int]] = {Device.DEVICE: {}, Device.HOST: {}}
        self.host_tokens: dict[bytes, list[int]] = {}

    def stored(self, device, hashes, parent, tokens=None, *, salt=None) -> None:
        for i, h in enumerate(hashes):
            self.at[device].setdefault(h, self.step)
            if device is Device.HOST and tokens is not None:
                self.host_tokens[h] = list(tokens[i * BS:(i + 1) * BS])

    def removed(self, device, hashes) -> None:
        pass

    def cleared(self, device) -> None:
        pass


def test_a_block_whose_last_token_failed_in_the_step_is_no_hit():
    """A's o3 fills block 1 in the step that also admits B (P + o1..o3 + 5 tokens), and A's
    forward fails there: block 1's last slot is never written. B must compute block 1 itself
    (16 cached tokens, not 32), and its outputs are the fresh ones."""
    plan = FailArmed()
    run = Run(faults=plan)
    try:
        b = run.fail_a_as_b_joins(plan)
        assert len(run.tokens["b"]) == 1  # B was admitted and prefilled in that same step
        run.drain()
        assert run.final["b"].num_cached_tokens == BS  # block 0 only
        assert same(run.logprobs["b"], fresh({"b": (b, 6)})["b"])
    finally:
        run.close()


@pytest.mark.parametrize("mode", ["swap", "recompute"])
def test_a_sequence_preempted_before_its_last_token_is_computed_publishes_no_such_block(mode):
    """Four device blocks: H (30 tokens) and A (P, 29) fill them after the prefill; at the
    fourth step H needs block 2 and A, the tail, is preempted with o3 sampled, not computed.
    Nothing is published for A's block 1 (P + o1..o3) until a step computed o3: no CPU
    BlockStored at the swap-out (only block 0, with its tokens), no GPU one at the recompute.
    Then every output is the fresh one, and so is C's, sharing A's prefix afterwards."""
    heard = Heard()
    run = Run(heard=heard, num_device_blocks=4, preemption_mode=mode)
    try:
        run.add("h", H, 6)
        run.add("a", P, 8)
        sched = run.core.scheduler
        run.until(lambda: sched.stats().preemptions[mode] == 1)
        at = heard.step  # the step whose schedule preempted A
        assert sched.request_status("a").value == ("swapped" if mode == "swap" else "waiting")
        assert len(run.tokens["a"]) == 3, run.tokens
        a = P + run.tokens["a"][:3]
        h0, h1 = run.core.manager.hasher.hash_blocks(a)
        assert h1 not in heard.at[Device.HOST] and heard.at[Device.DEVICE].get(h1, at + 1) > at
        if mode == "swap":
            assert list(heard.at[Device.HOST]) == [h0]
            assert heard.host_tokens[h0] == a[:BS]
        run.drain()
        assert heard.at[Device.DEVICE][h1] > at  # offered once a step computed o3
        c = a + SUFFIX
        run.add("c", c, 6)
        run.drain()
        assert run.final["c"].num_cached_tokens == 2 * BS  # A's blocks, once computed
        want = fresh({"h": (H, 6), "a": (P, 8), "c": (c, 6)})
        assert all(same(run.logprobs[r], want[r]) for r in want), (run.logprobs, want)
    finally:
        run.close()
