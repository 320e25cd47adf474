"""StepCopies: the copy batches of one engine step, and when each is known done.

One CopyEngine batch per (kind, request), so a failed copy fails only its request. Every
batch reports a failure through FailedCopies (its done callback, on the copy worker),
whatever the step computes for its request::

    swap-out       runs on behind the step; confirmed later (NOTE(swap-out-confirm))
    swap-in, cow   the forward waits for those touching its blocks; the rest are settled
                   before the step completes (NOTE(copy-settle))

NOTE(copy-settle): a request swapped in while every sequence of it awaits a late grammar mask
(row_sampler.py NOTE(late-mask)) has no entry in the step, so the forward never waits for its
copy. ``on_step_done`` then confirms the swapped-in blocks (NOTE(copy-pending): marked
computed, full ones hashed for the prefix cache). Before, a failure of that copy was never
looked at: the request went on over garbage KV and a later prompt could hit those blocks. Now
the step waits for every swap-in and copy-on-write of its own (after the forward, so the
compute still overlaps them) and fails the requests of the failed ones first.
"""

from __future__ import annotations

from kvpool.runtime.engine.failed_copies import FailedCopies, SwapOutWatch
from kvpool.runtime.kv.copy_engine import CopyEngine, CopyHandle
from kvpool.sched import SchedulerOutput

__all__ = ["StepCopies"]


class StepCopies:
    """Submits a step's copies and waits for them (the step thread only)."""

    def __init__(self, copies: CopyEngine, failed: FailedCopies,
                 swap_outs: SwapOutWatch) -> None:
        self.copies = copies
        self.failed = failed  # every batch's failure, by request (drained by the step)
        self.swap_outs = swap_outs
        self.unsettled: list[CopyHandle] = []  # swap-ins / cows the forward did not wait for

    def submit(self, out: SchedulerOutput) -> None:
        """Submit ``out``'s copies in order and wait for those the forward's blocks need; a
        failure of any of them is in ``failed`` once it is done."""
        jobs = []
        copies = self.copies
        for c in out.copies_in_order():
            h = copies.submit(c.kind, c.pairs, tag=c.request_id)
            h.add_done_callback(self.failed.on_copy_done)  # NOTE(copy-settle)
            if c.kind == "swap_out":  # not waited for by this step: watch it
                self.swap_outs.watch(h, out.step_id)
            else:
                jobs.append(h)
        # nothing in flight, nothing to wait for (copy_engine.py NOTE(speed)); a dead copy
        # worker raises EngineError there (NOTE(worker-death)): the engine fails at once
        if copies.pending or copies.worker_error is not None:
            copies.wait_for_blocks(b for e in out.entries for b in e.block_ids)
        self.unsettled = [h for h in jobs if not h.done()]

    def settle(self) -> list[str]:
        """NOTE(copy-settle): wait for the step's other swap-ins and copy-on-writes; the
        requests whose copies failed since the last drain (to fail before ``on_step_done``)."""
        if self.unsettled:
            for h in self.unsettled:
                h.wait_done()  # a dead worker fails it (NOTE(worker-death)): never hangs
            self.unsettled = []
        return self.failed.drain() if self.failed else []
