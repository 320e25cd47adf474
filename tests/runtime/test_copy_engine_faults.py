"""CopyEngine faults an outside probe found, with real pools and the real engine: a worker
killed mid-batch (copy_engine.py NOTE(worker-death)), ids that are not ints (NOTE(int-ids)), a
pool on the meta device (NOTE(pool-device)); and the host front's count check (host_front.py
NOTE(host-count))."""

from __future__ import annotations

import logging
import threading

import pytest
import torch

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, Device
from kvpool.errors import CopyError, EngineError
from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.faults import FaultPlan
from kvpool.runtime.kv.copy_engine import CopyEngine
from kvpool.runtime.model import SamplingParams
from kvpool.runtime.remote.host_front import HostBlockFront
from tests.configs import engine_config
from tests.runtime.copy_pools import make_pools
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

DIED = "copy worker died"
GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)


class Kill(FaultPlan):
    """Kills the copy worker (a BaseException) in the first batch of ``kind`` or ``tag``,
    once ``go`` is set or ``hold`` seconds passed; records the engine step it happened in."""

    def __init__(self, kind=None, tag=None, hold=5.0) -> None:
        self.kind, self.tag, self.hold, self.core = kind, tag, hold, None
        self.go = threading.Event()
        self.fired_at = None

    def before_copy(self, kind, pairs, tag):
        if self.fired_at is None and (kind == self.kind or tag == self.tag and tag):
            self.go.wait(self.hold)
            self.fired_at = self.core.steps if self.core is not None else 0
            raise SystemExit(f"injected: the copy worker is killed in a {kind} batch")


def test_a_dying_worker_fails_its_running_batch_and_the_queued_ones(caplog):
    dev, host = make_pools()
    plan = Kill(tag="die")
    caplog.set_level(logging.CRITICAL, logger="kvpool.runtime.kv.copy_engine")
    eng = CopyEngine(dev, host, faults=plan)
    try:
        ok = eng.submit("cow", [(0, 1)])
        dying = eng.submit("swap_out", [(2, 3)], tag="die")
        queued = eng.submit("cow", [(4, 5)])
        plan.go.set()
        err = dying.exception(timeout=3)  # before the fix: pending forever (TimeoutError)
        assert isinstance(err, CopyError) and DIED in str(err)
        assert isinstance(err.__cause__, SystemExit)
        assert ok.exception(timeout=3) is None and torch.equal(dev[1], dev[0])
        assert isinstance(queued.exception(timeout=3), CopyError)
        assert not eng.is_healthy() and eng.stats().pending == 0
        with pytest.raises(EngineError, match=DIED):
            eng.wait_for_blocks([2, 4, 5], timeout=3)
        with pytest.raises(EngineError, match=DIED):
            eng.submit("cow", [(6, 7)])
        logged = [r for r in caplog.records if DIED in r.getMessage()]
        assert len(logged) == 1 and logged[0].exc_info[0] is SystemExit
    finally:
        eng.close(timeout=5)


def test_the_engine_fails_in_the_step_its_copy_worker_dies():
    """A worker killed in a swap-in the step waits for: that step raises EngineError (the
    async engine then fails every stream and turns unhealthy), rather than wait forever."""
    # hold: the step's other submits go first (one finding the worker dead would raise too)
    plan = Kill(kind="swap_in", hold=0.05)
    plan.core = core = EngineCore(engine_config(
        "scarce", max_num_seqs=8, max_num_batched_tokens=256, preemption_mode="swap"),
        faults=plan)
    for i in range(8):
        prompt = f"request {i}: paged blocks swap to the host and back " * (2 + i % 2)
        core.add_request(f"r{i}", core.tokenizer.encode(prompt), GREEDY)
    raised: list[EngineError] = []

    def run() -> None:
        try:
            while core.has_work():
                core.step()
        except EngineError as e:
            raised.append(e)

    stepper = threading.Thread(target=run, daemon=True)
    stepper.start()
    try:
        stepper.join(20)  # before the fix: the step waits forever on the dead worker's batch
        assert not stepper.is_alive() and plan.fired_at is not None
        assert raised and DIED in str(raised[0]) and plan.fired_at == core.steps
    finally:
        core.close()


def test_the_first_step_after_a_background_copy_killed_the_worker_fails():
    """The worker died in a copy no step waits for (like a swap-out): the next step raises,
    though it needs no copy (before, the engine served on, healthy, with no copy worker)."""
    plan = Kill(tag="background", hold=0)
    core = EngineCore(engine_config("small"), faults=plan)
    try:
        dying = core.copies.submit("cow", [(0, 0)], tag="background")
        assert isinstance(dying.exception(timeout=5), CopyError)
        core.add_request("r0", core.tokenizer.encode("no copy is needed here"), GREEDY)
        with pytest.raises(EngineError, match=DIED):
            core.step()
    finally:
        core.close()


@pytest.mark.parametrize("bad", [1.7, "2", True])
def test_block_ids_must_be_ints(engine, pools, bad):
    dev, host = pools
    before = (dev.clone(), host.clone())
    with pytest.raises(TypeError, match="block ids must be ints"):
        engine.submit("cow", [(bad, 5)])
    with pytest.raises(TypeError, match="block ids must be ints"):
        engine.submit("swap_out", [(0, 1), (3, bad)])
    assert engine.stats().pending == 0
    assert torch.equal(dev, before[0]) and torch.equal(host, before[1])
    engine.submit("cow", [(torch.tensor(1), 5)]).wait(5)  # an integer type is an int
    assert torch.equal(dev[5], before[0][1])


@pytest.mark.parametrize("which", ["host", "device"])
def test_a_pool_on_the_meta_device_is_refused(which):
    dev, host = make_pools()
    if which == "host":
        host = torch.empty_like(host, device="meta")
    else:
        dev = torch.empty_like(dev, device="meta")
    with pytest.raises(ValueError, match=f"the {which} pool is on the meta device"):
        CopyEngine(dev, host)


@pytest.mark.parametrize("n", [-1, True, 1.5])
async def test_allocate_host_blocks_refuses_a_count_that_is_not_one(n):
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=16, num_host_blocks=8, block_size=4))
    front = HostBlockFront(mgr)
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        await front.allocate_host_blocks(n)
    assert mgr.host_pool.num_free_blocks == 8 and not mgr.lender.lent(Device.HOST)
    mgr.check_invariants()
