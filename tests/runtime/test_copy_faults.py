"""CopyEngine under faults and bad input: invalid submissions, injected copy faults, a refusing
fault plan, a failing backend, a raising callback, and the split backend's helper thread
failing or stalling mid-batch."""

from __future__ import annotations

import threading

import pytest
import torch

from kvpool.errors import CopyError, InvalidBlockError
from kvpool.runtime.faults import FaultPlan
from kvpool.runtime.kv.copy_backends import TorchCopyBackend
from kvpool.runtime.kv.copy_engine import CopyEngine
from tests.runtime.copy_pools import N_DEV, N_HOST, failed_of, make_pools, reference


# ---------------------------------------------------------------- validation
def test_submit_validates(engine):
    with pytest.raises(ValueError, match="unknown copy kind"):
        engine.submit("teleport", [(0, 1)])
    with pytest.raises(InvalidBlockError, match="host pool of 16"):
        engine.submit("swap_out", [(0, N_HOST)])
    with pytest.raises(InvalidBlockError, match="device pool"):
        engine.submit("cow", [(-1, 3)])


def test_swap_without_host_pool_is_rejected():
    dev, _ = make_pools()
    with CopyEngine(dev) as eng:
        with pytest.raises(InvalidBlockError, match="host pool of 0"):
            eng.submit("swap_out", [(0, 0)])
        eng.submit("cow", [(0, 1)]).wait()
    with pytest.raises(ValueError, match="block shape"):
        CopyEngine(dev, torch.zeros(2, 1, 2, 3, 4, 5))


# ---------------------------------------------------------------- faults
def test_failed_handle_reraises_and_engine_keeps_serving(engine, faults, pools):
    dev, host = pools
    faults.add("swap_out", block=7)
    bad = engine.submit("swap_out", [(7, 0)], tag="victim")
    good = engine.submit("swap_out", [(8, 1)])
    other = engine.submit("swap_out", [(7, 2)])  # the rule fired once (times=1): this one copies
    with pytest.raises(CopyError, match="injected copy fault") as info:
        bad.wait(timeout=10)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert isinstance(bad.exception(), CopyError) and not bad.cancelled()
    good.wait(timeout=10)
    other.wait(timeout=10)
    assert torch.equal(host[1], dev[8]) and torch.equal(host[2], dev[7])
    assert failed_of([bad, good, other]) == [bad]
    s = engine.stats()
    assert s.failures["swap_out"] == 1 and s.batches["swap_out"] == 2
    assert s.pending == 0


def test_the_fault_plan_sees_each_batch_and_fails_only_the_one_it_raises_for(pools):
    dev, host = pools

    class Refuse(FaultPlan):
        def __init__(self):
            self.seen = []

        def before_copy(self, kind, pairs, tag):
            self.seen.append((kind, tuple(pairs), tag))
            if tag == "bad":
                raise RuntimeError("the plan refuses")

    plan = Refuse()
    with CopyEngine(dev, host, faults=plan) as eng:
        bad = eng.submit("cow", [(0, 1)], tag="bad")
        good = eng.submit("swap_out", [(2, 3)], tag="good")
        assert failed_of([bad, good]) == [bad]
        assert "the plan refuses" in str(bad.exception())
    assert plan.seen == [("cow", ((0, 1),), "bad"), ("swap_out", ((2, 3),), "good")]
    assert torch.equal(host[3], dev[2])
    with CopyEngine(dev, host) as eng:  # the default plan: no faults
        assert failed_of([eng.submit("cow", [(4, 5)], tag="bad")]) == []


def test_backend_exception_fails_only_its_handle(pools):
    dev, host = pools

    class Flaky(TorchCopyBackend):
        def copy(self, src_pool, dst_pool, pairs):
            if (13, 13) in pairs:
                raise MemoryError("simulated allocation failure")
            return super().copy(src_pool, dst_pool, pairs)

    with CopyEngine(dev, host, backend=Flaky()) as eng:
        bad = eng.submit("swap_out", [(13, 13)])
        good = eng.submit("swap_out", [(12, 12)])
        assert isinstance(bad.exception(timeout=10).__cause__, MemoryError)
        assert good.wait(timeout=10).exception() is None


def test_callbacks(engine, faults):
    seen = []
    faults.add(delay=0.1, fail=False)
    h = engine.submit("cow", [(0, 1)])
    h.add_done_callback(lambda _: 1 / 0)  # logged, does not break the worker
    h.add_done_callback(lambda hh: seen.append(("before", threading.current_thread().name)))
    h.wait(timeout=10)
    h.add_done_callback(lambda hh: seen.append(("after", threading.current_thread().name)))
    assert seen == [("before", "kvpool-copy"), ("after", threading.current_thread().name)]
    assert engine.submit("cow", [(1, 2)]).wait(timeout=10).exception() is None


# ---------------------------------------------------------------- split batches: failures, stalls
def hooked_backend(hook, raw):
    """A two-thread TorchCopyBackend that splits every batch and sends each chunk, on the
    torch path and the memmove path alike, through ``hook(run, items)``."""

    class Hooked(TorchCopyBackend):
        def _copy_runs(self, dsts, srcs):
            hook(lambda _: super(Hooked, self)._copy_runs(dsts, srcs), dsts)

        @staticmethod
        def _memmove_runs(moves):
            hook(TorchCopyBackend._memmove_runs, moves)

    return Hooked(num_threads=None, split_threads=2, split_min_bytes=0, raw_large=raw)


@pytest.mark.parametrize("raw", [False, True])
def test_a_failing_share_fails_the_batch_after_every_share_ends(raw):
    dev, host = make_pools()
    finished = []
    helper_failed = threading.Event()

    def flaky(run, items):
        if threading.current_thread().name.startswith("kvpool-copy-split"):
            helper_failed.set()
            raise RuntimeError("share lost")
        # the worker's chunks wait until a helper has taken one (bounded): chunks are pulled,
        # so without this the worker could drain the batch before the helper thread runs
        helper_failed.wait(10)
        run(items)
        finished.append(len(items))

    backend = hooked_backend(flaky, raw)
    with CopyEngine(dev, host, backend=backend) as eng:
        handle = eng.submit("swap_out", [(i, i) for i in range(0, 16, 2)])
        with pytest.raises(CopyError, match="share lost"):
            handle.wait(5)
        assert finished  # the worker's own share ran to its end before the error surfaced
        assert eng.stats().pending == 0
        eng.submit("cow", [(0, 1)]).wait(5)  # small batch, no split: the engine keeps working
    assert torch.equal(dev[1], dev[0])
    with pytest.raises(ValueError, match="split_threads"):
        TorchCopyBackend(split_threads=0)


@pytest.mark.parametrize("raw", [False, True])
def test_a_stalled_thread_holds_back_one_chunk_not_half_the_batch(raw):
    """NOTE(straggler) in copy_backends: a helper stalls in its first chunk; the worker thread
    copies every other chunk meanwhile (with fixed halves it did half and waited)."""
    dev, host = make_pools(n_host=N_DEV)
    pairs = [(i, N_DEV - 1 - i) for i in range(N_DEV)]
    expected = reference(dev, host, pairs)
    lock = threading.Lock()
    seen = {"worker": 0, "stalled": None}
    caught_up = threading.Event()

    def counted(run, part):
        helper = threading.current_thread().name.startswith("kvpool-copy-split")
        with lock:
            if helper and seen["stalled"] is None:
                seen["stalled"] = len(part)
                wait = seen["worker"] + len(part) < N_DEV
            else:
                wait = False
                if not helper:
                    seen["worker"] += len(part)
                if seen["stalled"] is not None and seen["worker"] + seen["stalled"] >= N_DEV:
                    caught_up.set()
        if wait:
            caught_up.wait(10)  # bounded: with fixed halves nobody sets it
        run(part)

    backend = hooked_backend(counted, raw)
    backend.attach({"device": dev, "host": host})
    try:
        assert backend.copy("device", "host", pairs) == N_DEV
    finally:
        backend.close()
    assert torch.equal(host, expected)
    stalled = seen["stalled"] or 0  # 0: the worker drained every chunk before the helper ran
    assert stalled <= -(-N_DEV // (TorchCopyBackend.CHUNKS_PER_THREAD * 2))  # one chunk
    assert seen["worker"] == N_DEV - stalled
