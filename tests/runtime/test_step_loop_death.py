"""A step that raises ends the AsyncEngine's step loop (step_failure.py NOTE(abandon)): every
request fails with the engine's error, every block is back in the pool at once, and shutdown
does not wait for a loop that is gone. Real engine (tiny model, real KV tensors).

The step fails through the fault plan's copy seam: the first swap-out batch raises SystemExit,
which kills the copy worker (copy_engine.py NOTE(worker-death)), so the next step's copy stage
raises EngineError while requests are running, swapped and waiting."""

from __future__ import annotations

import asyncio

from kvpool.runtime.engine.async_engine import AsyncEngine, collect
from kvpool.runtime.faults import FaultPlan
from kvpool.runtime.model import SamplingParams
from tests.configs import engine_config
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
PROMPTS = [f"request {i}: paged blocks swap to the host and back " * (2 + i % 2)
           for i in range(8)]  # 3..5 blocks each: 12 device blocks make them swap
SWAP = dict(max_num_seqs=8, max_num_batched_tokens=256, preemption_mode="swap")


class KillCopyWorker(FaultPlan):
    def before_copy(self, kind, pairs, tag) -> None:
        if kind == "swap_out":
            raise SystemExit("injected: the copy worker dies")


async def test_a_dead_step_loop_frees_every_block_and_shutdown_does_not_wait_for_it():
    eng = AsyncEngine(engine_config("scarce", **SWAP), faults=KillCopyWorker())
    await eng.start()
    streams = [eng.generate(f"r{i}", p, GREEDY) for i, p in enumerate(PROMPTS)]
    try:
        # half the clients read to the end (their error); the other half never read
        await asyncio.wait_for(asyncio.gather(*map(collect, streams[:4])), 30)
        assert not eng.is_healthy() and eng.core.copies.worker_error is not None
        st = eng.core.manager.stats()  # freed by the step thread before the errors went out
        assert st.device.num_used == 0 and st.host.num_used == 0 and st.num_seqs == 0
        assert not eng.core.has_work() and eng.core.check_invariants()
    finally:
        # bounded: before, a dead loop was waited for (unread streams: the whole timeout)
        await asyncio.wait_for(eng.shutdown(timeout=60), 20)
    st = eng.core.manager.stats()
    assert st.device.num_used == 0 and st.host.num_used == 0 and st.num_seqs == 0
