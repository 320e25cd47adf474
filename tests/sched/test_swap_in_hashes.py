"""A swapped-in sequence's blocks carry prefix hashes only once the swap-in copy is confirmed
(issue 12, item 1): a failed swap-in copy must not leave hashed blocks whose bytes were never
written, or a later prompt with the same prefix hits them and reads wrong KV.

Pure core: the real BlockSpaceManager and Scheduler, the copy engine's part played by the test
(``on_step_done`` = the step and its copies completed; ``abort`` before it = a copy failed)."""

from __future__ import annotations

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.sched import SeqStatus
from tests.sched.helpers import BS, FakeRuntime, assert_empty, make, params, prompt

PROMPT_B = prompt(2 * BS + 1, 200)  # two full blocks (hashable) and a partial one


def swapped_b(s) -> FakeRuntime:
    """Run "a" and "b" until "b" is swapped out, then drop every evictable cached block so
    b's swap-in must copy its full blocks instead of reusing cached device copies."""
    rt = FakeRuntime(s)
    s.add_request("a", prompt(2 * BS, 100), params(max_tokens=3))
    s.add_request("b", PROMPT_B, params(max_tokens=6))
    rt.step()
    for _ in range(3):
        rt.step()
        if s.request_status("b") is SeqStatus.SWAPPED:
            break
    assert s.request_status("b") is SeqStatus.SWAPPED, "the scenario needs b swapped out"
    s.manager.device_pool.reset_prefix_cache()
    while s.request_status("b") is SeqStatus.SWAPPED:
        assert s.has_unfinished()
        out = s.schedule(now=rt.now)
        if out.blocks_to_swap_in:
            rt.pending = out  # type: ignore[attr-defined]
            return rt
        if out.has_work:
            rt.finished += s.on_step_done(out, rt.sample_for(out), now=rt.now)
    raise AssertionError("b was never swapped in")


def hits(s, token_ids) -> int:
    mgr = s.manager
    return mgr.prompts.prefix_hits(mgr.hasher.hash_blocks(token_ids))


def test_swapped_in_blocks_are_no_prefix_hit_until_the_copy_is_confirmed():
    s = make(blocks=5, host=8, caching=True, preemption_mode="swap")
    rt = swapped_b(s)
    out = rt.pending
    assert len(out.blocks_to_swap_in) >= 2  # b's full blocks are copied, not reused
    assert s.request_status("b") is SeqStatus.RUNNING
    # scheduled (append_slots ran), copy not yet run: nothing of b may be findable
    assert hits(s, PROMPT_B) == 0
    rt.finished += s.on_step_done(out, rt.sample_for(out), now=rt.now)
    assert hits(s, PROMPT_B) == 2  # confirmed: b's full blocks are hits again
    rt.drain()
    assert_empty(s)


def test_after_a_failed_swap_in_the_same_prompt_gets_no_cached_tokens():
    s = make(blocks=5, host=8, caching=True, preemption_mode="swap")
    rt = swapped_b(s)
    out = rt.pending
    # the swap-in copy failed: the runtime aborts b before completing the step
    fr = s.abort("b", "KV copy failed")
    assert fr is not None and fr.status is SeqStatus.FINISHED_ABORTED
    rt.finished += s.on_step_done(out, rt.sample_for(out), now=rt.now)
    assert hits(s, PROMPT_B) == 0
    s.add_request("b2", PROMPT_B, params(max_tokens=2))
    rt.drain()
    assert rt.by_id()["b2"].num_cached_tokens == 0
    assert_empty(s)


def test_manager_swap_in_then_free_leaves_no_hash():
    """The manager alone: swap_in + the step's append register nothing; a free before
    mark_computed (the copy failed) leaves the blocks unhashed; mark_computed confirms."""
    for confirm in (False, True):
        mgr = BlockSpaceManager(CacheConfig(num_device_blocks=8, num_host_blocks=8,
                                            block_size=BS, watermark=0.0,
                                            enable_prefix_caching=True))
        toks = PROMPT_B
        assert mgr.allocate([1], toks) == 0
        mgr.mark_computed(1)
        assert mgr.append_slots(1, [5]) == []
        assert mgr.swap.swap_out([1]) is not None
        mgr.device_pool.reset_prefix_cache()  # the device copies are gone: swap-in copies
        pairs = mgr.swap.swap_in([1])
        assert pairs is not None and len(pairs) == 3
        assert mgr.append_slots(1, [6]) == []
        assert hits_mgr(mgr, toks) == 0
        mgr.check_invariants()
        if confirm:
            mgr.mark_computed(1)
            assert hits_mgr(mgr, toks) == 2
        mgr.free(1)
        mgr.check_invariants()
        assert mgr.allocate([2], toks) == (2 * BS if confirm else 0)
        mgr.free(2)


def hits_mgr(mgr, token_ids) -> int:
    return mgr.prompts.prefix_hits(mgr.hasher.hash_blocks(token_ids))
