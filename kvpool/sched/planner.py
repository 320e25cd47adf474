"""StepPlanner: the stages of one ``schedule()`` (see ``kvpool.sched.scheduler``).

``plan`` runs them in order over the ``SchedulerState`` it was handed::

    priority   a blocked waiting request preempts lower-priority running ones (Preemptor)
    decodes    a slot for every running decoding sequence (not ``awaiting`` a deferred
               sample: completion.py); preempt from the tail when short
    chunks     the next prompt chunk of every running request still prefilling
    swapped    resume swapped requests in order (only if the decodes preempted nobody)
    waiting    admit waiting requests in order (only if nothing is left swapped ahead)

Each stage spends ``state.tokens_left`` (a decode is 1 token, a chunk its length) and appends
to the step's ``SchedulerOutput``.
"""

from __future__ import annotations

from collections import Counter
from itertools import islice

from kvpool.core import AllocStatus, BlockSpaceManager
from kvpool.errors import SchedulerError
from kvpool.sched.admission_gate import AdmissionGate
from kvpool.sched.completion import StepCompletion
from kvpool.sched.output import ScheduledPrefill, SchedulerOutput
from kvpool.sched.preemption import Preemptor
from kvpool.sched.sequence import PrefillUnit, Sequence, SeqStatus, SequenceGroup
from kvpool.sched.state import RequestQueue, SchedulerState

_RUNNING = SeqStatus.RUNNING


class StepPlanner:
    """Plans one step over ``state``: what to compute, which blocks to move."""

    def __init__(self, state: SchedulerState, manager: BlockSpaceManager, gate: AdmissionGate,
                 preemptor: Preemptor, completion: StepCompletion) -> None:
        self.state = state
        self.manager = manager
        self.gate = gate
        self.preemptor = preemptor
        self.completion = completion  # rejects requests that can never run

    def plan(self, out: SchedulerOutput, now: float) -> None:
        st = self.state
        if st.config.policy == "priority" and st.waiting and st.running:
            self.preemptor.priority_preempt(out)
        before = len(out.preempted)
        if st.running:
            self._schedule_decodes(out)
            self._schedule_chunks(out)
        if len(out.preempted) == before:
            if st.swapped:
                self._schedule_swapped(out)
            if st.waiting:
                self._schedule_waiting(out, now)

    # ------------------------------------------------------------------ decodes
    def _emit_decodes(self, out: SchedulerOutput, seqs: list[Sequence], ids: list[int],
                      toks: list[int], cows: list, tables: list[list[int]]) -> None:
        """The appended sequences' decodes (``manager.slots.append_decodes`` appended the
        first ``len(tables)`` of ``seqs``), as columns (``DecodeBatch``)."""
        n = len(tables)
        if n != len(seqs):
            seqs, ids, toks = seqs[:n], ids[:n], toks[:n]
        out.decodes.extend([s.group.request_id for s in seqs], ids, toks,
                           [s.group.prompt_len + len(s.output_token_ids) - 1 for s in seqs],
                           tables)
        st = self.state
        st.decode_seqs += seqs
        if any(cows):
            for s, cow in zip(seqs, cows):
                if cow:
                    out.add_copies("cow", s.group.request_id, cow)
                    st.counters.cow_blocks += len(cow)
        st.tokens_left -= n

    def _append(self, out: SchedulerOutput, seqs: list[Sequence],
                ends: list[int] | None = None) -> int:
        """Append one slot to each of ``seqs`` for the leading groups (``ends``; None: all of
        them as one) that fit, emit their decodes; returns how many groups were appended."""
        ids = [s.seq_id for s in seqs]
        toks = [s.output_token_ids[-1] for s in seqs]
        cows, tables, groups = self.manager.slots.append_decodes(ids, toks, ends)
        self._emit_decodes(out, seqs, ids, toks, cows, tables)
        return groups

    def _append_all(self, out: SchedulerOutput, running: RequestQueue, i: int) -> bool:
        """NOTE(speed): the common step: one all-or-nothing append for the decoding sequences
        of requests ``i`` onwards, with no per-request bookkeeping here or in the manager
        (which checks the fit in the same call). False: nothing was appended."""
        seqs = [s for g in islice(running, i, None) for s in g.seqs
                if s.status is _RUNNING and s.unit is None and not s.awaiting]
        return self._append(out, seqs) == 1

    @staticmethod
    def _decoding(running: RequestQueue, i: int) -> tuple[list[Sequence], list[int]]:
        """The decoding sequences of running requests ``i`` onwards, flat, and the end of each
        request's run in that list (no list per request)."""
        seqs: list[Sequence] = []
        ends: list[int] = []
        add, end = seqs.append, ends.append
        n = 0
        for g in islice(running, i, None):
            for s in g.seqs:
                if s.status is _RUNNING and s.unit is None and not s.awaiting:
                    add(s)
                    n += 1
            end(n)
        return seqs, ends

    def _schedule_decodes(self, out: SchedulerOutput) -> None:
        """A slot for every decoding sequence, request by request from the head: all the
        requests that fit in one manager call; when one does not, preempt from the tail until
        it does, or until the request itself was the tail (nobody after it is left then)."""
        st = self.state
        running, pool = st.running, self.manager.device_pool
        i = 0
        while i < len(running):
            # NOTE(speed): the all-or-nothing append only when it cannot fail (a block for
            # every running sequence is free); short of that, request by request at once
            if st.num_running_seqs <= pool.num_free_blocks and self._append_all(out, running, i):
                return
            seqs, ends = self._decoding(running, i)
            k = self._append(out, seqs, ends)
            i += k
            if i == len(running):
                return
            g, own = running[i], seqs[ends[k - 1] if k else 0:ends[k]]
            if not self._preempt_for(g, own, out):
                return  # the request at i preempted itself: nobody after it is left
            if own and self._append(out, own) != 1:
                raise SchedulerError("slots.append_decodes failed after slots.can_append")
            i += 1

    def _preempt_for(self, g: SequenceGroup, seqs: list[Sequence],
                     out: SchedulerOutput) -> bool:
        """Preempt from the running tail until ``g``'s decodes fit; False if ``g`` itself
        was preempted."""
        ids = [s.seq_id for s in seqs]
        running = self.state.running
        while not self.manager.slots.can_append(ids):
            victim = running.pop()  # the tail: lowest priority, newest arrival
            self.preemptor.preempt(victim, out, "decode")
            if victim is g:
                return False
        return True

    # ------------------------------------------------------------------ prefill chunks
    def _emit_chunk(self, out: SchedulerOutput, g: SequenceGroup, u: PrefillUnit,
                    cached: int, may_chunk: bool) -> None:
        if u.after is not None and u.waits():
            return  # its shared blocks are not written yet (sequence.py)
        st = self.state
        left = st.tokens_left
        start = u.computed
        remaining = u.num_tokens - start
        if remaining <= left:
            n = remaining
        elif may_chunk and left > 0:
            n = left
        else:
            return
        ids = tuple(s.seq_id for s in u.seqs if s.status is _RUNNING)
        if not ids:
            return
        out.prefills.append(ScheduledPrefill(g.request_id, ids, start, start + n,
                                             u.num_tokens, cached,
                                             u.token_ids(start, start + n),
                                             self.manager.get_block_table(ids[0]),
                                             g.first_token_time is not None))
        st.tokens_left = left - n
        st.counters.prompt_tokens += n

    def _schedule_chunks(self, out: SchedulerOutput) -> None:
        st = self.state
        for g in st.running:
            if st.tokens_left <= 0:
                return
            if g.units is not None:
                for u in g.units:
                    if u.computed < u.num_tokens:
                        # NOTE(no-chunking): even without chunked prefill an admitted unit
                        # that waited a step is chunked, or decodes could starve it forever
                        self._emit_chunk(out, g, u, 0, True)

    # ------------------------------------------------------------------ swapped
    def _schedule_swapped(self, out: SchedulerOutput) -> None:
        """Resume in order while the manager's admission is OK; LATER stops the pass."""
        st, cfg, swapped = self.state, self.state.config, self.state.swapped
        while swapped:
            g = swapped[0]
            if cfg.policy == "priority" and st.waiting \
                    and st.waiting[0].priority < g.priority:
                return  # a better-priority waiting request goes first
            live = g.live_seqs
            n = len(live)
            if st.num_running_seqs + n > cfg.max_num_seqs or st.tokens_left < n:
                return
            status = self.manager.admission(swapped=[s.seq_id for s in live]).status
            if status is AllocStatus.NEVER:
                # NOTE(never): it was admitted, so it is not dropped here: recomputed, it goes
                # through the same admission rule as a new prompt, which alone may refuse it
                swapped.pop(0)
                self.preemptor.requeue_for_recompute(g)
                continue
            if status is AllocStatus.LATER or not self._swap_in(g, live, out):
                return

    def _swap_in(self, g: SequenceGroup, live: list[Sequence], out: SchedulerOutput) -> bool:
        """Swap head ``g`` in and schedule its decodes; False when the blocks ran short."""
        st, mgr = self.state, self.manager
        ids = [s.seq_id for s in live]
        pairs = mgr.swap.swap_in(ids)
        if pairs is None:
            return False
        st.swapped.pop(0)
        out.add_copies("swap_in", g.request_id, pairs)
        out.swapped_in.extend(ids)
        st.counters.swap_in_blocks += len(pairs)
        g.set_status(_RUNNING)
        st.running.add(g)
        st.num_running_seqs += len(live)
        decoding = [s for s in live if not s.awaiting]  # the rest hold their slot already
        if decoding and self._append(out, decoding) != 1:
            raise SchedulerError("append after swap-in failed despite its reservation")
        return True

    # ------------------------------------------------------------------ waiting
    def _schedule_waiting(self, out: SchedulerOutput, now: float) -> None:
        """Admit in order (tenant fairness: AdmissionGate.next_waiting) while the gate says
        OK; LATER stops the pass (head-of-line), NEVER rejects the request with its reason."""
        st = self.state
        per_tenant: Counter[str] = Counter()  # live running sequences per tenant
        if self.gate.fair:  # NOTE(speed): one tenant and no cap: the queue order, no counts
            for r in st.running:
                per_tenant[r.tenant] += r.num_live
        while st.waiting and st.tokens_left > 0:
            g = self.gate.next_waiting(st.waiting, per_tenant)
            if g is None:
                return  # every tenant with waiting requests is at its cap
            if st.swapped and (st.config.policy == "fcfs"
                               or st.swapped[0].priority <= g.priority):
                return  # swapped requests resume before new prefills
            go_on, units = self._vet(g, out)
            if units is not None:
                cached = self._allocate(g, units)
                if cached is None:
                    return
                self._start(g, units, cached, out, now)
                per_tenant[g.tenant] += g.num_live
            elif not go_on:
                return

    def _reject(self, g: SequenceGroup, out: SchedulerOutput, reason: str) -> None:
        self.state.waiting.remove(g)
        self.completion.ignore(g, out, reason)

    def _vet(self, g: SequenceGroup,
             out: SchedulerOutput) -> tuple[bool, list[PrefillUnit] | None]:
        """(True, units): admit ``g`` now; (True, None): ``g`` was rejected, go on with the
        next request; (False, None): stop the pass (``g`` must wait, head-of-line)."""
        st, cfg, gate = self.state, self.state.config, self.gate
        reason = gate.never_reason(g, None)
        if reason is not None:
            self._reject(g, out, reason)
            return True, None
        if st.num_running_seqs + g.num_live > cfg.max_num_seqs:
            return False, None
        units = gate.units(g)
        status = gate.status(units)
        if status is AllocStatus.NEVER:
            self._reject(g, out, gate.never_reason(g, units))
            return True, None
        if status is AllocStatus.LATER:
            return False, None
        # without chunked prefill the first unit's whole prompt must fit this step (the
        # other units of a recomputed n > 1 request may follow)
        if not cfg.enable_chunked_prefill and gate.tokens_to_compute(units[0]) > st.tokens_left:
            return False, None
        return True, units

    def _allocate(self, g: SequenceGroup, units: list[PrefillUnit]) -> list[int] | None:
        """Block tables for every unit (cached tokens per unit), or None with none kept."""
        mgr = self.manager
        allocs = self.gate.allocations(g, units)
        res = mgr.prompts.allocate_batch(allocs)
        if all(r is not None for r in res):
            return res
        done = [s for a, r in zip(allocs, res) if r is not None for s in a.seq_ids]
        if done:
            mgr.free(*done)
        return None

    def _start(self, g: SequenceGroup, units: list[PrefillUnit], cached: list[int],
               out: SchedulerOutput, now: float) -> None:
        """Move admitted ``g`` to running and schedule the first chunk of each unit."""
        st = self.state
        st.waiting.remove(g)
        g.set_status(_RUNNING)
        st.running.add(g)
        st.num_running_seqs += g.num_live
        if g.first_scheduled_time is None:
            g.first_scheduled_time = now
            g.num_cached_tokens = cached[0]
        chunked = st.config.enable_chunked_prefill
        # not for a re-admission: NOTE(preempted-queries) in kvpool/core/block_table.py
        first = not g.num_preemptions
        for u, c in zip(units, cached):
            u.allocated(c)
            for s in u.seqs:
                s.unit = u
            if first:
                st.counters.prefix_hit_tokens += c
            self._emit_chunk(out, g, u, c, chunked)
