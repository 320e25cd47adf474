"""CopyEngine and its CPU backend on real tensors: bytes, coalescing, order, faults, threads."""

from __future__ import annotations

import ast
import os
import threading
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.errors import CopyError, EngineError, InvalidBlockError
from kvpool.runtime.faults import FaultPlan
from kvpool.runtime.kv.copy_backends import TorchCopyBackend, plan_copies
from kvpool.runtime.kv.copy_engine import COPY_KINDS, CopyCancelledError, CopyEngine
from stress.faults import InjectedFaults

BLOCK = (2, 2, 4, 2, 8)  # layers, K|V, block_size, kv_heads, head_dim: 1 KiB float32 blocks
N_DEV, N_HOST = 24, 16


def make_pools(n_dev=N_DEV, n_host=N_HOST):
    """Pools whose every element is distinct: block b of the device pool holds values
    b*1000 + i, of the host pool -(b*1000 + i) - 1."""
    per = torch.Size(BLOCK).numel()
    dev = (torch.arange(n_dev)[:, None] * 1000 + torch.arange(per)).float().view(n_dev, *BLOCK)
    host = -(torch.arange(n_host)[:, None] * 1000 + torch.arange(per)).float() - 1
    return dev.contiguous(), host.view(n_host, *BLOCK).contiguous()


def reference(src, dst, pairs):
    """All reads before writes: dst'[d] = src_before[s]."""
    before = src.clone()
    out = dst.clone()
    if src.data_ptr() == dst.data_ptr():
        out = before.clone()
    for s, d in pairs:
        out[d] = before[s]
    return out


@pytest.fixture
def pools():
    return make_pools()


@pytest.fixture
def faults():
    return InjectedFaults()


@pytest.fixture
def engine(pools, faults):
    dev, host = pools
    eng = CopyEngine(dev, host, faults=faults)
    yield eng
    eng.close(cancel=True)


def failed_of(handles, timeout=10):
    """Wait for every handle (None skipped); the failed ones."""
    return [h for h in handles if h is not None and h.exception(timeout) is not None]


# ---------------------------------------------------------------- every kind moves the right bytes
@pytest.mark.parametrize("kind", list(COPY_KINDS))
def test_each_kind_copies_exactly_the_pairs(engine, pools, kind):
    dev, host = pools
    src_pool, dst_pool = COPY_KINDS[kind]
    src = dev if src_pool == "device" else host
    dst = dev if dst_pool == "device" else host
    pairs = {"swap_out": [(3, 0), (17, 9), (4, 1), (5, 2)],
             "swap_in": [(0, 20), (9, 3), (1, 21), (15, 0)],
             "cow": [(2, 10), (2, 11), (7, 23)],  # fan-out from one source
             "defrag": [(20, 1), (21, 2), (22, 3), (19, 6)]}[kind]
    expected = reference(src, dst, pairs)
    untouched_src = src.clone()
    h = engine.submit(kind, pairs, tag="req-1")
    assert h.wait(timeout=10) is h
    assert torch.equal(dst, expected)
    if src is not dst:
        assert torch.equal(src, untouched_src)
    assert (h.kind, h.pairs, h.num_blocks, h.tag) == (kind, tuple(pairs), len(pairs), "req-1")
    assert h.bytes == len(pairs) * 1024
    assert h.seconds is not None  # the batch's duration is recorded (never asserted on)
    assert h.done() and h.exception() is None and not h.cancelled()
    st_ = engine.stats()
    assert st_.blocks[kind] == len(pairs) and st_.bytes[kind] == len(pairs) * 1024
    assert st_.batches[kind] == 1 and st_.pending == 0
    assert engine.bandwidth(kind) > 0 and engine.bandwidth() > 0


def test_kinds_in_sequence_and_empty_batch(engine, pools):
    dev, host = pools
    engine.submit("swap_out", [(1, 1)]).wait()
    engine.submit("swap_in", [(1, 5)]).wait()
    assert torch.equal(dev[5], dev[1])
    engine.submit("cow", [(5, 6)]).wait()
    engine.submit("defrag", [(6, 7)]).wait()
    assert torch.equal(dev[7], dev[1])
    h = engine.submit("cow", [])
    assert h.done() and h.bytes == 0


# ---------------------------------------------------------------- coalescing and overlap semantics
def test_plan_coalesces_consecutive_runs():
    plan = plan_copies([(10, 0), (11, 1), (12, 2), (30, 3), (5, 7), (6, 8)], same_pool=True)
    assert [r[:3] for r in plan.runs] == [(10, 0, 3), (30, 3, 1), (5, 7, 2)]
    assert plan.num_blocks == 6 and plan.stage == ()
    # Runs are found whatever the submission order.
    plan = plan_copies([(12, 2), (10, 0), (11, 1)], same_pool=False)
    assert [r[:3] for r in plan.runs] == [(10, 0, 3)]


def test_plan_rejects_duplicate_destinations(engine):
    with pytest.raises(ValueError, match="destination of two copies"):
        plan_copies([(1, 2), (3, 2)], same_pool=True)
    with pytest.raises(ValueError, match="destination of two copies"):
        engine.submit("defrag", [(1, 2), (3, 2)])
    assert engine.stats().pending == 0


def test_overlapping_moves_read_before_write(engine, pools):
    dev, _ = pools
    old = dev.clone()
    # A chain (1->2->3->4) and a swap (10<->11) and a no-op (5->5) in one batch.
    engine.submit("defrag", [(1, 2), (2, 3), (3, 4), (10, 11), (11, 10), (5, 5)]).wait()
    for s, d in [(1, 2), (2, 3), (3, 4), (10, 11), (11, 10), (5, 5)]:
        assert torch.equal(dev[d], old[s])
    assert torch.equal(dev[1], old[1])


pair_lists = st.integers(1, 20).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, N_DEV - 1), min_size=n, max_size=n),
    st.lists(st.integers(0, N_DEV - 1), min_size=n, max_size=n, unique=True),
)).map(lambda t: list(zip(*t)))


@settings(max_examples=150, deadline=None)
@given(pairs=pair_lists, cache_views=st.booleans())
def test_coalesced_same_pool_copy_equals_per_block_reference(pairs, cache_views):
    dev, _ = make_pools()
    expected = reference(dev, dev, pairs)
    backend = TorchCopyBackend(num_threads=None, cache_views=cache_views)
    backend.attach({"device": dev})
    backend.copy("device", "device", pairs)
    assert torch.equal(dev, expected)


@settings(max_examples=100, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, N_DEV - 1), st.integers(0, N_HOST - 1)),
                      max_size=N_HOST, unique_by=lambda p: p[1]))
def test_coalesced_cross_pool_copy_equals_per_block_loop(pairs):
    dev, host = make_pools()
    expected = host.clone()
    for s, d in pairs:  # the plain per-block loop
        expected[d].copy_(dev[s])
    backend = TorchCopyBackend(num_threads=None)
    backend.attach({"device": dev, "host": host})
    assert backend.copy("device", "host", pairs) == len(pairs)
    assert torch.equal(host, expected)


@settings(max_examples=100, deadline=None)
@given(pairs=pair_lists, threads=st.integers(1, 4), raw=st.booleans(),
       cross=st.booleans())
def test_large_batches_equal_the_per_block_reference(pairs, threads, raw, cross):
    """Large batches (memmove per run, or torch views) split over helper threads: the same
    bytes as the per-block loop, read-before-write included, within a pool and across two."""
    dev, host = make_pools(n_host=N_DEV)
    dst = host if cross else dev
    expected = reference(dev, dst, pairs)
    moved = []

    class Spy(TorchCopyBackend):
        @staticmethod
        def _memmove_runs(moves):
            moved.append(len(moves))
            TorchCopyBackend._memmove_runs(moves)

    backend = Spy(num_threads=None, split_threads=threads, split_min_bytes=0, raw_large=raw)
    backend.attach({"device": dev, "host": host})
    try:
        backend.copy("device", "host" if cross else "device", pairs)
    finally:
        backend.close()
    assert torch.equal(dst, expected)
    assert bool(moved) == (raw and (cross or any(s != d for s, d in pairs)))


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


def test_swap_round_trip_keeps_model_outputs():
    """The tiny model decodes the same logits after its blocks went device -> host -> other
    device blocks (and a defrag move), with the freed blocks overwritten in between."""
    from kvpool.runtime.kv.storage import KVStorage
    from kvpool.runtime.model import PagedBatch, SeqChunk, build_tiny_model

    config, model, _ = build_tiny_model()
    storage = KVStorage(config, 4, num_device_blocks=16, num_host_blocks=8)
    kv = storage.device_kv
    prompt = list(range(40, 50))  # 10 tokens: blocks 0, 1, 2 (the last one partial)
    model(PagedBatch([SeqChunk(prompt, 0, [0, 1, 2])]), kv)
    expected = model(PagedBatch([SeqChunk([77], 10, [0, 1, 2])]), kv.clone())
    with CopyEngine.for_storage(storage) as eng:
        eng.submit("swap_out", [(0, 5), (1, 6), (2, 7)]).wait()
        kv[:3].fill_(3.0)  # the freed device blocks are reused by someone else
        eng.submit("swap_in", [(5, 9), (6, 10), (7, 4)]).wait()
        eng.submit("defrag", [(4, 11)]).wait()
    got = model(PagedBatch([SeqChunk([77], 10, [9, 10, 11])]), kv)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    storage.check_invariants()
