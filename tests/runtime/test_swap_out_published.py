"""A swapped-out block is published (CPU BlockStored) only once the swap-out copy that wrote
its host bytes completed, and never when that copy failed (core/swap.py
NOTE(swap-out-confirm); vLLM's offloading publishes a store once it completed). The tiny model
with real tensors, as tests/runtime/test_uncomputed_kv_engine.py crowds it: four device
blocks, H (30 tokens) needs its block 2 at its fourth step and A (P, 29 tokens), the tail, is
swapped out then. Events and the copy engine's completions go to one log, in order."""

from __future__ import annotations

from kvpool.core import Device
from kvpool.runtime.faults import FaultPlan
from tests.runtime.stepped import BS, H, P, Run
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)


class Log:
    """The pools' observer and the swap-out copies' done callback, writing one log."""

    def __init__(self) -> None:
        self.step = 0  # told by Run
        self.entries: list[tuple] = []
        self.cpu_tokens: dict[bytes, list[int]] = {}

    def stored(self, device, hashes, parent, tokens=None, *, salt=None) -> None:
        self.entries.append(("stored", device, tuple(hashes)))
        if device is Device.HOST and tokens is not None:
            for i, h in enumerate(hashes):
                self.cpu_tokens[h] = list(tokens[i * BS:(i + 1) * BS])

    def removed(self, device, hashes) -> None:
        self.entries.append(("removed", device, tuple(hashes)))

    def cleared(self, device) -> None:
        self.entries.append(("cleared", device, ()))

    def copied(self, handle) -> None:  # the copy worker's thread
        self.entries.append(("copied", handle.tag, handle.exception() is None))

    def cpu(self, kind: str) -> list[int]:
        return [i for i, e in enumerate(self.entries) if e[0] == kind and e[1] is Device.HOST]


class FailSwapOut(FaultPlan):
    def before_copy(self, kind, pairs, tag) -> None:
        if kind == "swap_out":
            raise RuntimeError("injected: the swap-out copy failed")


def _crowded(faults: FaultPlan | None) -> tuple[Run, Log]:
    """H and A running until A is swapped out; every swap-out copy's end is logged."""
    log = Log()
    run = Run(faults=faults, heard=log, num_device_blocks=4, preemption_mode="swap")
    copies = run.core.copies
    submit = copies.submit

    def logged(kind, pairs, **kw):
        h = submit(kind, pairs, **kw)
        if kind == "swap_out":
            h.add_done_callback(log.copied)
        return h

    copies.submit = logged  # the real engine, its swap-out completions logged
    run.add("h", H, 6)
    run.add("a", P, 8)
    return run, log


def test_the_cpu_block_stored_comes_after_the_swap_out_copy_completed():
    run, log = _crowded(None)
    try:
        run.until(lambda: run.core.scheduler.stats().preemptions["swap"] == 1)
        run.drain()
        cpu = log.cpu("stored")
        assert cpu, "no swap-out was published"
        done = [i for i, e in enumerate(log.entries) if e == ("copied", "a", True)]
        assert done and done[0] < cpu[0], log.entries
        h0 = run.core.manager.hasher.hash_blocks(P[:BS])[0]
        assert log.entries[cpu[0]][2] == (h0,)  # A's one computed full block, its tokens kept
        assert log.cpu_tokens[h0] == P[:BS]
        assert not run.final["a"].error and not run.final["h"].error
    finally:
        run.close()


def test_a_failed_swap_out_copy_publishes_nothing_on_the_cpu_tier():
    run, log = _crowded(FailSwapOut())
    try:
        run.until(lambda: run.core.scheduler.stats().preemptions["swap"] == 1)
        run.drain()
        assert ("copied", "a", False) in log.entries
        assert not log.cpu("stored") and not log.cpu("removed"), log.entries
        assert run.final["a"].error == "KV copy failed"
        assert not run.final["h"].error and len(run.tokens["h"]) == 6
    finally:
        run.close()
