"""Preemption: choosing a victim's mode by cost, and swapping or recomputing it.

``Preemptor`` works on the ``SchedulerState`` and the manager it is handed.

Mode per victim::

    forced "recompute"                       -> RECOMPUTE
    still prefilling (nothing generated yet) -> RECOMPUTE  (its computed full blocks stay in
                                                            the prefix cache for the retry)
    no host room (can_swap_out false)        -> RECOMPUTE
    (a swapped group whose swap-in admission says NEVER is recomputed, never dropped)
    forced "swap"                            -> SWAP
    otherwise                                -> the cheaper of CostModel.swap_seconds(blocks)
                                                and CostModel.recompute_seconds(tokens - kept)

``kept`` counts the leading prompt blocks the prefix cache still holds after the victim lets go
(``prompts.prefix_hits`` bounds the run; a block survives when someone else references it). Its own
blocks become evictable and, under the pressure that caused the preemption, are assumed lost.
"""

from __future__ import annotations

from collections import Counter

from kvpool.core import AllocStatus, BlockSpaceManager
from kvpool.sched.admission_gate import AdmissionGate, recompute_units
from kvpool.sched.config import CostModel, PreemptionMode
from kvpool.sched.output import PreemptedRequest, SchedulerOutput
from kvpool.sched.sequence import PrefillUnit, SeqStatus, SequenceGroup
from kvpool.sched.state import SchedulerState


def recompute_tokens(g: SequenceGroup) -> int:
    """Tokens a recompute of ``g`` would prefill."""
    return sum(u[0].num_tokens for u in recompute_units(g))


class Preemptor:
    """Preempts running requests of ``state``: by mode (swap / recompute, by ``cost``), on
    decode pressure or for a better-priority waiting request (``priority_preempt``)."""

    def __init__(self, state: SchedulerState, manager: BlockSpaceManager, gate: AdmissionGate,
                 cost: CostModel) -> None:
        self.state = state
        self.manager = manager
        self.gate = gate
        self.cost = cost  # the scheduler's, updated by update_cost_model

    # ------------------------------------------------------------------ cost estimates
    def _distinct_blocks(self, seq_ids: list[int]) -> Counter[int]:
        refs: Counter[int] = Counter()
        table = self.manager.get_block_table
        for s in seq_ids:
            refs.update(table(s))
        return refs

    def _kept_prompt_tokens(self, g: SequenceGroup, refs: Counter[int]) -> int:
        """Prompt tokens still cached after the victim drops its own references."""
        mgr = self.manager
        hashes = g.prompt_block_hashes
        if not hashes or not mgr.caching or g.skip_reading_prefix_cache:
            return 0  # nothing kept, or a request that reads none of it (NOTE(skip-read))
        pool = mgr.device_pool
        lookup = pool.index.lookup  # caching is on (checked above)
        kept = 0
        for h in hashes[:mgr.prompts.prefix_hits(hashes)]:
            b = lookup(h)
            if b is None or pool.ref_count(b) <= refs.get(b, 0):
                break
            kept += 1
        return kept * mgr.block_size

    def _choose_mode(self, g: SequenceGroup, ids: list[int],
                     refs: Counter[int]) -> PreemptionMode:
        forced = self.state.config.forced_mode
        if forced is PreemptionMode.RECOMPUTE or g.is_prefilling:
            return PreemptionMode.RECOMPUTE
        if self.manager.host_pool.num_blocks == 0 or not self.manager.swap.can_swap_out(ids):
            return PreemptionMode.RECOMPUTE
        if forced is PreemptionMode.SWAP or len(recompute_units(g)) > 1:
            # NOTE(n>1): sequences whose outputs diverged would each recompute their own
            # output tokens (the prompt once, shared) one unit after another; swapping brings
            # them back at once, so it wins whenever it is possible
            return PreemptionMode.SWAP
        swap_s = self.cost.swap_seconds(len(refs))
        tokens = recompute_tokens(g) - self._kept_prompt_tokens(g, refs)
        recompute_s = self.cost.recompute_seconds(tokens)
        return PreemptionMode.SWAP if swap_s < recompute_s else PreemptionMode.RECOMPUTE

    # ------------------------------------------------------------------ execution
    def preempt(self, g: SequenceGroup, out: SchedulerOutput, cause: str) -> PreemptedRequest:
        """Preempt running group ``g`` (already removed from the running queue)."""
        st = self.state
        live = g.live_seqs
        ids = [s.seq_id for s in live]
        refs = self._distinct_blocks(ids)
        mode = self._choose_mode(g, ids, refs)
        st.num_running_seqs -= len(live)
        if mode is PreemptionMode.SWAP:
            pairs = self.manager.swap.swap_out(ids)
            if pairs is None:  # host ran short after all (cannot happen single-threaded)
                mode = PreemptionMode.RECOMPUTE
            else:
                out.add_copies("swap_out", g.request_id, pairs)
                st.counters.swap_out_blocks += len(pairs)
                g.set_status(SeqStatus.SWAPPED)
                st.swapped.add(g)
                g.swap_out_step = out.step_id  # confirmed by StepCompletion.swap_out_done
        if mode is PreemptionMode.RECOMPUTE:
            self.requeue_for_recompute(g)
        g.num_preemptions += 1
        st.counters.preemptions[mode.value] += 1
        st.counters.preempted_seqs += len(live)  # NOTE(preempted-seqs), vllm_series.py
        p = PreemptedRequest(g.request_id, mode, tuple(ids), len(refs), cause)
        out.preempted.append(p)
        return p

    def requeue_for_recompute(self, g: SequenceGroup) -> None:
        """Drop running or swapped ``g``'s blocks and queue it to prefill its prompt and
        generated tokens again (it is already out of its queue)."""
        mgr = self.manager
        live = g.live_seqs
        for s in live:
            if s.unit is None:  # NOTE(recompute): index written full blocks first so
                mgr.mark_computed(s.seq_id)  # the retry can hit them in the prefix cache
            s.unit = None
            s.awaiting = False  # the recompute's last chunk samples the owed token afresh
        mgr.free(*(s.seq_id for s in live))
        g.units = None
        g.set_status(SeqStatus.WAITING)
        self.state.waiting.add(g)

    def preempt_all(self) -> int:
        """Every running and swapped request back to waiting, to be recomputed, running ones
        tail first (a prefix-cache reset asked for it: docs/architecture.md "Development
        routes"); each counts as a recompute preemption. Returns how many. Between steps."""
        st = self.state
        n = 0
        for queue in (st.running, st.swapped):
            while queue:
                g = queue.pop()
                live = len(g.live_seqs)
                if queue is st.running:
                    st.num_running_seqs -= live
                self.requeue_for_recompute(g)
                g.num_preemptions += 1
                st.counters.preemptions[PreemptionMode.RECOMPUTE.value] += 1
                st.counters.preempted_seqs += live
                n += 1
        return n

    # ------------------------------------------------------------------ priority policy
    def priority_preempt(self, out: SchedulerOutput) -> None:
        """Priority policy: the best waiting request that cannot be admitted preempts running
        requests of strictly lower priority (tail first), when that would make room."""
        st, gate = self.state, self.gate
        for g in st.waiting.snapshot():
            tail = st.running.tail
            if tail is None or tail.priority <= g.priority:
                return
            if gate.never_reason(g, None) is not None:
                continue  # the waiting pass ignores it
            units = gate.units(g)
            status = gate.status(units)
            if status is AllocStatus.NEVER:
                continue
            if status is AllocStatus.OK and self._seqs_fit(g.num_live):
                return  # it will be admitted in the waiting pass
            if self._room_below(g, units):
                self._preempt_below(g, units, out)
            return

    def _seqs_fit(self, need: int, freed: int = 0) -> bool:
        return self.state.num_running_seqs - freed + need <= self.state.config.max_num_seqs

    def _room_below(self, g: SequenceGroup, units: list[PrefillUnit]) -> bool:
        """Whether preempting every running request of lower priority than ``g`` would make
        room for it (blocks and sequences)."""
        lower = [r for r in self.state.running if r.priority > g.priority]
        freeable = len(self._distinct_blocks([s.seq_id for r in lower for s in r.live_seqs]))
        plan = self.manager.admission([(u.num_tokens, ()) for u in units], freeable=freeable,
                                      shared_blocks=self.gate.shared_blocks(units))
        if plan.status is not AllocStatus.OK:
            return False  # even preempting all of them would not make room
        return self._seqs_fit(g.num_live, sum(r.num_live for r in lower))

    def _preempt_below(self, g: SequenceGroup, units: list[PrefillUnit],
                       out: SchedulerOutput) -> None:
        """Preempt lower-priority running requests, tail first, until ``g`` fits."""
        running = self.state.running
        while running.tail is not None and running.tail.priority > g.priority:
            if self._seqs_fit(g.num_live) and self.gate.status(units) is AllocStatus.OK:
                return
            self.preempt(running.pop(), out, "priority")
