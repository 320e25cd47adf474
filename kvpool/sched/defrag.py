"""DefragDriver: the life of the scheduler's one defrag plan at a time.

``maybe_start`` (the last stage of ``schedule()``) asks the manager for a plan when external
fragmentation passes ``defrag_threshold`` and leaves the watermark's blocks free; the step
carries its moves; ``done`` commits the moves still valid once the runtime copied them, or
releases the destinations when the copies failed. ``settle`` does that for a finished or
failed step unless the runtime already called ``done``.
"""

from __future__ import annotations

from kvpool.core import BlockSpaceManager, DefragResult
from kvpool.errors import SchedulerError
from kvpool.sched.output import SchedulerOutput
from kvpool.sched.state import SchedulerState


class DefragDriver:
    """Starts, commits and aborts defrag plans for the scheduler's ``state``."""

    def __init__(self, state: SchedulerState, manager: BlockSpaceManager) -> None:
        self.state = state
        self.manager = manager

    def maybe_start(self, out: SchedulerOutput) -> None:
        """Attach a plan to ``out`` when the pool is fragmented enough (and none is open)."""
        st, cfg, mgr = self.state, self.state.config, self.manager
        if cfg.defrag_threshold is None or out.blocks_to_swap_out or st.defrag_plan is not None:
            return
        frag = mgr.stats.fragmentation()
        if frag.external <= cfg.defrag_threshold:
            return
        moves = min(cfg.defrag_max_moves, frag.num_free - mgr.watermark_blocks)
        if moves < 1:
            return
        plan = mgr.defrag.plan(moves)
        if plan is None:
            return
        st.defrag_plan = plan
        out.defrag_moves = plan.moves
        out.defrag_plan_id = plan.plan_id
        st.counters.defrag_plans += 1

    def settle(self, out: SchedulerOutput, ok: bool) -> None:
        """Commit (``ok``) or abort ``out``'s plan if it is still open."""
        plan = self.state.defrag_plan
        if plan is not None and plan.plan_id == out.defrag_plan_id:
            self.done(plan.plan_id, ok)

    def done(self, plan_id: int, ok: bool = True) -> DefragResult | None:
        """The runtime finished (``ok``) or failed the copies of plan ``plan_id``: commit the
        moves still valid (returns the result) or release the destinations."""
        st = self.state
        plan = st.defrag_plan
        if plan is None or plan.plan_id != plan_id:
            raise SchedulerError(f"defrag plan {plan_id} is not in flight")
        st.defrag_plan = None
        c = st.counters
        if not ok:
            self.manager.defrag.abort(plan)
            c.defrag_aborted += 1
            return None
        r = self.manager.defrag.commit(plan)
        c.defrag_moves += len(r.committed)
        c.defrag_retried += len(r.retried)
        return r
