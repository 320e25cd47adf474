"""EngineCore under faults (issue 12, items 1, 10, 11), with the built-in tiny model and real
KV tensors:

- every swap-in copy failing with prefix caching on and an 8-block pool must not poison the
  prefix cache: afterwards each failed prompt, run fault-free, gives the greedy output of an
  engine with prefix caching off;
- an invariant break the scheduler reports (SchedulerError) is counted and logged, and the
  engine keeps serving;
- background copy failures recorded from another thread are never lost while the step
  thread drains them."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading

from kvpool.runtime.engine.async_engine import AsyncEngine, collect
from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import SamplingParams
from stress.faults import InjectedFaults
from tests.configs import engine_config
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
PROMPTS = [f"request {i}: paged blocks swap to the host and back " * (2 + i % 2)
           for i in range(8)]  # ~40..75 tokens: 3..5 blocks of 16 each
# 12 device blocks: these requests preempt, by swapping
SWAP = dict(max_num_seqs=8, max_num_batched_tokens=256, preemption_mode="swap")


def toks(out) -> list[int]:
    return list(out.outputs[0].token_ids)


async def started(config: EngineConfig, fault: InjectedFaults | None = None) -> AsyncEngine:
    eng = AsyncEngine(config, faults=fault)
    eng.invariant_check_interval = 1
    await eng.start()
    return eng


async def stopped(eng: AsyncEngine) -> None:
    await eng.shutdown()
    st = eng.core.manager.stats()
    assert st.device.num_used == 0 and st.host.num_used == 0 and st.num_seqs == 0
    assert eng.core.invariant_violations == 0


async def test_failed_swap_ins_do_not_poison_the_prefix_cache():
    # A (39 prompt tokens, 64 new) and B (54 prompt tokens: 3 full blocks) fill the 8-block
    # pool; A's growth swaps B out and then evicts B's cached device blocks, so B's swap-in
    # must copy full prompt blocks, and every swap-in copy fails. Before the fix B's copied
    # blocks were hashed when the step was scheduled and kept their hashes after the failed
    # copy: re-running B's prompt hit 48 cached tokens of garbage KV.
    prompts = PROMPTS[:2]
    params = [SamplingParams(max_tokens=m, temperature=0.0, ignore_eos=True) for m in (64, 24)]
    few = {**SWAP, "num_device_blocks": 8}
    ref_eng = await started(engine_config("scarce", **{**few, "num_device_blocks": 64,
                                                       "enable_prefix_caching": False}))
    try:
        ref = [toks(await collect(ref_eng.generate(f"ref{i}", p, params[i])))
               for i, p in enumerate(prompts)]
    finally:
        await stopped(ref_eng)

    fault = InjectedFaults()
    fault.add("swap_in", fail=True, times=None)  # every swap-in copy fails
    eng = await started(engine_config("scarce", **few, enable_prefix_caching=True), fault)
    try:
        outs = await asyncio.gather(*(collect(eng.generate(f"r{i}", p, params[i]))
                                      for i, p in enumerate(prompts)))
        snap = eng.snapshot()
        assert snap.preemptions.get("swap", 0) > 0, "the test needs swapping to happen"
        failed = [i for i, o in enumerate(outs) if o.error]
        assert failed, "the test needs a failed swap-in"
        assert all("copy failed" in outs[i].error for i in failed)
        for i, o in enumerate(outs):
            if i not in failed:
                assert toks(o) == ref[i]
        fault.clear()
        for i in failed:  # fault-free now, one at a time: cached prefixes are used
            again = await collect(eng.generate(f"again{i}", prompts[i], params[i]))
            assert again.error is None
            assert toks(again) == ref[i], (f"prompt {i}: {again.num_cached_tokens} cached "
                                           "tokens gave a different greedy output")
    finally:
        await stopped(eng)


async def test_a_scheduler_invariant_break_is_counted_and_the_engine_goes_on(caplog):
    eng = await started(engine_config("scarce", **SWAP, num_device_blocks=64))
    mgr = eng.core.manager
    try:
        first = await collect(eng.generate("a", PROMPTS[0], GREEDY))
        # a real break: a block table the scheduler does not know about (its check raises
        # SchedulerError "sequence registry and block tables disagree")
        mgr.allocate([10**6], [5, 6, 7])
        with caplog.at_level(logging.ERROR, logger="kvpool.runtime.engine.core"):
            second = await collect(eng.generate("b", PROMPTS[0], GREEDY))
        assert second.error is None and toks(second) == toks(first)
        assert eng.is_healthy()
        n = eng.core.invariant_violations
        assert n >= 1 and eng.snapshot().invariant_violations == n
        assert any("SchedulerError" in r.getMessage() for r in caplog.records)
        mgr.free(10**6)
        assert eng.core.check_invariants()
        assert eng.core.invariant_violations == n
    finally:
        eng.core.invariant_violations = 0  # counted above; stopped() checks nothing else broke
        await stopped(eng)


def test_background_failures_recorded_while_draining_are_never_lost():
    core = EngineCore(engine_config("scarce", **SWAP, num_device_blocks=16))
    n = 20_000
    drained: list[str] = []
    done = threading.Event()

    def worker() -> None:  # plays the copy worker's done callbacks
        for i in range(n):
            core.failed_copies.note(f"r{i}")
        done.set()

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # force thread switches between bytecodes
    try:
        t = threading.Thread(target=worker)
        t.start()
        while not done.is_set():
            drained += core.failed_copies.drain()
        t.join()
        drained += core.failed_copies.drain()
    finally:
        sys.setswitchinterval(before)
        core.close()
    assert sorted(drained) == sorted(f"r{i}" for i in range(n))
    assert core.failed_copies.drain() == []
