"""CopyEngine's order and lifetime: FIFO batches (the last writer wins), busy blocks and waits,
close (draining or cancelling), many submitting threads, the worker's own priority, and no
asyncio in the copy modules."""

from __future__ import annotations

import ast
import os
import threading
import time
from pathlib import Path

import pytest
import torch

from kvpool.errors import EngineError
from kvpool.runtime.kv.copy_engine import CopyCancelledError, CopyEngine
from stress.faults import InjectedFaults
from tests.runtime.copy_pools import N_HOST, failed_of, make_pools


# ---------------------------------------------------------------- ordering
def test_fifo_order_and_last_writer_wins(engine, faults, pools):
    dev, _ = pools
    old = dev.clone()
    order: list[int] = []
    faults.add("cow", delay=0.05, fail=False)  # first batch is slow: a queue builds
    handles = []
    for s in range(1, 12):
        h = engine.submit("cow", [(s, 0)], tag=s)
        h.add_done_callback(lambda h: order.append(h.tag))
        handles.append(h)
    assert failed_of(handles) == []
    assert order == list(range(1, 12))
    assert [h.seq for h in handles] == sorted(h.seq for h in handles)
    assert torch.equal(dev[0], old[11])
    assert all(a.finished_at <= b.started_at for a, b in zip(handles, handles[1:]))


def test_swap_out_then_reuse_of_the_freed_block(engine, faults, pools):
    """A swap-out reads device block 4; a later CoW writes it. FIFO makes the host copy hold
    the old bytes."""
    dev, host = pools
    old4 = dev[4].clone()
    faults.add("swap_out", delay=0.05, fail=False)
    h1 = engine.submit("swap_out", [(4, 0)])
    h2 = engine.submit("cow", [(9, 4)])
    assert failed_of([h1, h2]) == []
    assert torch.equal(host[0], old4) and torch.equal(dev[4], dev[9])


# ---------------------------------------------------------------- busy blocks
def test_busy_blocks_and_wait_for_blocks(engine, faults):
    faults.add("swap_out", delay=1.0, fail=False)
    h = engine.submit("swap_out", [(3, 5), (4, 6)])
    assert engine.stats().pending == 1
    assert engine.wait_for_blocks([7, 8]) == []  # unrelated blocks: no wait
    assert engine.wait_for_blocks([3], pool="host") == []  # host 3 is not touched
    with pytest.raises(TimeoutError):  # its host destination is busy
        engine.wait_for_blocks([5], pool="host", timeout=0.01)
    assert not h.done()
    assert engine.wait_for_blocks([9, 4], timeout=10) == [h]
    assert h.done() and engine.stats().pending == 0
    assert engine.wait_for_blocks([3, 4]) == [] and engine.wait_for_blocks([5, 6], "host") == []


def test_same_pool_batch_marks_sources_and_destinations_busy(engine, faults):
    faults.add(delay=0.3, fail=False)
    h = engine.submit("defrag", [(20, 1), (21, 2)])
    for b in (1, 2, 20, 21):
        with pytest.raises(TimeoutError):
            engine.wait_for_blocks([b], timeout=0.001)
    assert engine.wait_for_blocks([20], pool="device", timeout=10) == [h]


def test_wait_timeouts(engine, faults):
    faults.add(delay=0.5, fail=False)
    h = engine.submit("cow", [(0, 1)])
    with pytest.raises(TimeoutError):
        h.wait(timeout=0.01)
    with pytest.raises(TimeoutError):
        h.exception(timeout=0.01)
    with pytest.raises(TimeoutError):
        engine.wait_for_blocks([1], timeout=0.01)
    assert failed_of([h, None]) == []


# ---------------------------------------------------------------- close
def test_close_drains_pending_work(pools):
    dev, host = pools
    faults = InjectedFaults()
    eng = CopyEngine(dev, host, faults=faults)
    faults.add(delay=0.05, fail=False, times=3)
    handles = [eng.submit("swap_out", [(i, i)]) for i in range(8)]
    eng.close()
    assert all(h.done() and h.exception() is None for h in handles)
    assert torch.equal(host[:8], dev[:8])
    with pytest.raises(EngineError, match="closed"):
        eng.submit("cow", [(0, 1)])
    eng.close()  # idempotent
    assert eng.closed


def test_close_cancel_fails_queued_handles(pools):
    dev, host = pools
    faults = InjectedFaults()
    eng = CopyEngine(dev, host, faults=faults)
    faults.add(delay=0.2, fail=False)
    first = eng.submit("swap_out", [(0, 0)])
    deadline = time.monotonic() + 10
    while first.started_at is None and time.monotonic() < deadline:
        time.sleep(0.001)  # let the worker start the first batch
    rest = [eng.submit("swap_out", [(i, i)]) for i in range(1, 6)]
    eng.close(cancel=True)
    assert first.exception() is None  # the running batch completes
    for h in rest:
        assert h.cancelled() and isinstance(h.exception(), CopyCancelledError)
        with pytest.raises(CopyCancelledError):
            h.wait()
    assert eng.stats().pending == 0 and eng.wait_for_blocks(range(N_HOST), "host") == []
    assert eng.stats().failures["swap_out"] == 5


def test_context_manager_joins_the_worker(pools):
    dev, host = pools
    with CopyEngine(dev, host, name="cm-copy") as eng:
        h = eng.submit("cow", [(0, 1)])
    assert h.done() and not any(t.name == "cm-copy" for t in threading.enumerate())


# ---------------------------------------------------------------- threads
def test_many_submitting_threads():
    dev, host = make_pools(n_dev=256, n_host=256)
    old = dev.clone()
    n_threads, per_thread = 4, 40
    handles: list = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(per_thread):
                j = t * per_thread + i  # disjoint destinations per thread
                # Sources 0..63 are never written, so every copy's expected bytes are known.
                hs = [eng.submit("cow", [(j % 64, 64 + j)]), eng.submit("swap_out", [(j % 64, j)])]
                if i % 10 == 0:
                    waited = eng.wait_for_blocks([64 + j], timeout=10)
                    assert waited in ([], [hs[0]]) and hs[0].done()  # [] if already done
                    assert torch.equal(dev[64 + j], old[j % 64])
                with lock:
                    handles.extend(hs)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    with CopyEngine(dev, host) as eng:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert failed_of(handles, timeout=30) == []
        s = eng.stats()
        assert s.blocks["cow"] == s.blocks["swap_out"] == n_threads * per_thread
        assert s.pending == 0
    n = n_threads * per_thread
    assert len({h.seq for h in handles}) == 2 * n
    for j in range(n):
        assert torch.equal(dev[64 + j], old[j % 64])
        assert torch.equal(host[j], old[j % 64])


# ---------------------------------------------------------------- layering
def test_runtime_copy_modules_do_not_import_asyncio():
    root = Path(__file__).resolve().parents[2] / "kvpool" / "runtime" / "kv"
    for name in ("storage.py", "copy_engine.py", "copy_backends.py"):
        tree = ast.parse((root / name).read_text())
        imported = {a.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for a in node.names}
        imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom)}
        assert not imported & {"asyncio", "aiohttp"}, name


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="POSIX thread priorities")
def test_worker_nice_lowers_only_the_worker(pools):
    dev, host = pools
    main_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with CopyEngine(dev, host, worker_nice=3) as eng:
        eng.submit("cow", [(0, 1)]).wait(timeout=10)  # the worker has started and set its priority
        worker = os.getpriority(os.PRIO_PROCESS, eng._thread.native_id)
        assert worker == min(19, main_nice + 3)
        assert torch.equal(dev[1], dev[0])
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_nice
