"""Scheduler: continuous batching over the BlockSpaceManager (vLLM v0's scheduling loop).

Invariants (``check_invariants``): every unfinished request is in exactly one of the queues
``waiting`` / ``running`` / ``swapped``, matching its status, each queue sorted by the policy's
key; the live sequences of RUNNING requests number ``num_running_seqs <= max_num_seqs`` (forks
aside); a RUNNING sequence has a device block table, a SWAPPED one a host table, a WAITING one
none; between steps a decoding sequence's table holds ``num_tokens - 1`` tokens (the last
sampled token gets its slot when it is scheduled).

One ``schedule()`` (the seeds' ``_schedule_running`` / ``_schedule_swapped`` /
``_schedule_prefills``, with chunked prefill)::

    0. priority policy: a blocked waiting request preempts lower-priority running ones
    1. decodes     every running decoding sequence gets one slot (append_slots, exact need);
                   if the pool is short, preempt from the running tail (lowest priority, newest)
                   until it fits, or the sequence's own request is the tail: it is preempted
    2. chunks      running requests still prefilling get the next chunk of their prompt
    3. swapped     only if step 1 preempted nobody: resume in order while the manager's
                   admission is OK (blocks + the next decode's, above the watermark); LATER
                   stops the pass; NEVER sends the request back to waiting to be recomputed
    4. waiting     only if nothing is left swapped (priority policy: nothing swapped of equal
                   or better priority) and step 1 preempted nobody: admit (in order; with
                   tenants, the oldest request of the tenant running fewest, under
                   tenant_max_running_seqs, within the best priority class) while
                   can_allocate is OK (watermark); LATER stops (head-of-line), NEVER and prompts
                   longer than max_model_len are ignored with a reason (a request coming back
                   with output tokens: NEVER only past the whole pool, NOTE(alone))
    5. defrag      if external fragmentation > defrag_threshold and no swap-out happened

Budgets: ``max_num_batched_tokens`` per step (a decode is 1 token, a chunk its length) and
``max_num_seqs`` live sequences in running requests.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterable

from kvpool.core import AllocStatus, BlockSpaceManager
from kvpool.errors import RequestError, SchedulerError
from kvpool.sched.admission_gate import AdmissionGate
from kvpool.sched.completion import CompletionMixin
from kvpool.sched.config import CostModel, SchedulerConfig
from kvpool.sched.invariants import check_scheduler
from kvpool.sched.output import (ScheduledDecode, ScheduledPrefill, SchedulerOutput,
                                 SchedulerStats)
from kvpool.sched.preemption import PreemptionMixin
from kvpool.sched.queue import RequestQueue, make_sort_key
from kvpool.sched.sequence import (PrefillUnit, RequestParams, Sequence, SeqStatus,
                                   SequenceGroup, StopLimits)

_RUNNING = SeqStatus.RUNNING


class Scheduler(PreemptionMixin, CompletionMixin):
    """Decides, step by step, which tokens to compute and which blocks to move."""

    def __init__(self, manager: BlockSpaceManager, config: SchedulerConfig | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.manager = manager  # the block pool (shared with nobody else for scheduling)
        self.config = config if config is not None else SchedulerConfig()
        self.cost = CostModel.from_config(self.config)  # refreshed by update_cost_model
        self._clock = clock  # default time for arrivals and metrics (replay: simulated)
        self.waiting = RequestQueue("waiting")  # no blocks; admission order
        self.running = RequestQueue("running")  # device blocks; tail = preemption victim
        self.swapped = RequestQueue("swapped")  # host blocks; resume order
        self._groups: dict[str, SequenceGroup] = {}  # unfinished requests by id
        self._seqs: dict[int, Sequence] = {}  # live sequences by id
        self._seq_ids = itertools.count()  # sequence ids (the manager's keys)
        self._orders = itertools.count()  # submission counter (FCFS tie-break)
        self._step = 0  # schedule() calls
        self._inflight: SchedulerOutput | None = None  # output awaiting on_step_done
        self._defrag_plan = None  # DefragPlan emitted and not yet committed / aborted
        self._num_running_seqs = 0  # live sequences of RUNNING requests
        self._tokens_left = 0  # token budget left in the step being planned
        self.gate = AdmissionGate(manager, self.config, lambda: bool(self.running))  # NOTE(alone)
        # counters (monotonic), read through stats()
        self.preemptions = {"swap": 0, "recompute": 0}
        self.swap_out_blocks = self.swap_in_blocks = self.cow_blocks = 0
        self.prefix_hit_tokens = self.prompt_tokens = self.generation_tokens = 0
        self.num_finished = self.num_aborted = self.num_ignored = 0
        self.defrag_plans = self.defrag_moves = self.defrag_retried = self.defrag_aborted = 0

    # ------------------------------------------------------------------ requests
    def add_request(self, request_id: str, prompt_token_ids: Iterable[int], params=None,
                    priority: int = 0, cache_salt: str | None = None,
                    arrival_time: float | None = None, tenant: str | None = None
                    ) -> tuple[int, ...]:
        """Queue a request; returns its sequence ids (``params.n`` of them). Never rejects
        for size here: schedule() reports a request that can never fit in ``ignored``."""
        if request_id in self._groups:
            raise SchedulerError(f"request {request_id!r} is already queued or running")
        prompt = list(prompt_token_ids)
        if not prompt:
            raise RequestError("the prompt is empty: at least one token is needed", "prompt")
        cfg = self.config
        params = params if params is not None else RequestParams()
        limits = StopLimits.resolve(params, cfg.eos_token_id, cfg.max_model_len, len(prompt))
        if limits.n < 1:
            raise RequestError(f"n={limits.n} is invalid: use n >= 1", "n")
        if limits.max_tokens < 1:
            raise RequestError(f"max_tokens={limits.max_tokens} is invalid: use >= 1",
                               "max_tokens")
        arrival = self._clock() if arrival_time is None else float(arrival_time)
        order = next(self._orders)
        g = SequenceGroup(request_id, prompt, params, limits, priority, arrival, order,
                          make_sort_key(cfg.policy, priority, arrival, order), cache_salt,
                          tenant or "")
        for _ in range(limits.n):
            s = Sequence(next(self._seq_ids), g)
            g.seqs.append(s)
            self._seqs[s.seq_id] = s
        self._groups[request_id] = g
        self.gate.note_tenant(tenant)
        self.waiting.add(g)
        return tuple(s.seq_id for s in g.seqs)

    def fork(self, seq_id: int) -> int:
        """A new sequence in the same request sharing every block of running, decoding
        ``seq_id`` (copy-on-write on the next write); returns its id. Between steps only."""
        s = self._seqs.get(seq_id)
        if s is None or s.status is not _RUNNING or s.unit is not None:
            raise SchedulerError(f"sequence {seq_id} is not a running, decoding sequence")
        if self._inflight is not None:
            raise SchedulerError("fork between steps: a step is in flight")
        if self._num_running_seqs >= self.config.max_num_seqs:
            raise SchedulerError(f"max_num_seqs={self.config.max_num_seqs} sequences run")
        child = Sequence(next(self._seq_ids), s.group, _RUNNING, list(s.output_token_ids))
        self.manager.fork(seq_id, child.seq_id)
        s.group.seqs.append(child)
        self._seqs[child.seq_id] = child
        self._num_running_seqs += 1
        return child.seq_id

    # ------------------------------------------------------------------ queries
    @property
    def num_running_seqs(self) -> int:
        """Live sequences of RUNNING requests: the count max_num_seqs bounds (read-only)."""
        return self._num_running_seqs

    def has_unfinished(self) -> bool:
        return bool(self._groups)

    def num_requests(self) -> dict[str, int]:
        """Requests by state (for metrics)."""
        return {"running": len(self.running), "waiting": len(self.waiting),
                "swapped": len(self.swapped)}

    def request_status(self, request_id: str) -> SeqStatus | None:
        g = self._groups.get(request_id)
        return None if g is None else g.status

    def num_cached_tokens(self, request_id: str) -> int | None:
        """Prompt tokens the prefix cache served at the request's first admission; None when
        the request is unknown or not admitted yet."""
        g = self._groups.get(request_id)
        return None if g is None else g.num_cached_tokens

    def seq_ids(self, request_id: str) -> tuple[int, ...]:
        g = self._groups.get(request_id)
        return () if g is None else tuple(s.seq_id for s in g.seqs)

    def stats(self) -> SchedulerStats:
        return SchedulerStats(
            self._step, len(self.running), len(self.waiting), len(self.swapped),
            self._num_running_seqs, dict(self.preemptions), self.swap_out_blocks,
            self.swap_in_blocks, self.cow_blocks, self.prefix_hit_tokens, self.prompt_tokens,
            self.generation_tokens, self.num_finished, self.num_aborted, self.num_ignored,
            self.defrag_plans, self.defrag_moves, self.defrag_retried, self.defrag_aborted)

    # ------------------------------------------------------------------ schedule
    def schedule(self, now: float | None = None) -> SchedulerOutput:
        """Plan one step (see the module docstring). When the output ``has_work`` the runtime
        must execute it and call ``on_step_done`` before the next schedule()."""
        if self._inflight is not None:
            raise SchedulerError(f"step {self._inflight.step_id} is still in flight: call "
                                 "on_step_done (or on_step_failed) with its output first")
        cfg = self.config
        now = self._clock() if now is None else now
        out = SchedulerOutput(self._step)
        self._step += 1
        self._tokens_left = cfg.max_num_batched_tokens
        if cfg.policy == "priority" and self.waiting and self.running:
            self._priority_preempt(out)
        before = len(out.preempted)
        if self.running:
            self._schedule_decodes(out)
            self._schedule_chunks(out)
        if len(out.preempted) == before:
            if self.swapped:
                self._schedule_swapped(out)
            if self.waiting:
                self._schedule_waiting(out, now)
        if cfg.defrag_threshold is not None and not out.blocks_to_swap_out \
                and self._defrag_plan is None:
            self._maybe_defrag(out)
        out.num_batched_tokens = cfg.max_num_batched_tokens - self._tokens_left
        if out.has_work:
            self._inflight = out
        return out

    def _emit_decodes(self, out: SchedulerOutput, seqs: list[Sequence],
                      pairs: list[list[tuple[int, int]]]) -> None:
        add = out.decodes.append
        table = self.manager.get_block_table
        for s, cow in zip(seqs, pairs):
            g = s.group
            if cow:
                out.add_copies("cow", g.request_id, cow)
                self.cow_blocks += len(cow)
            toks = s.output_token_ids
            add(ScheduledDecode(g.request_id, s.seq_id, toks[-1],
                                len(g.prompt_token_ids) + len(toks) - 1, table(s.seq_id)))
        self._tokens_left -= len(seqs)

    def _schedule_decodes(self, out: SchedulerOutput) -> None:
        items: list[tuple[int, tuple[int]]] = []
        seqs: list[Sequence] = []
        for g in self.running:
            for s in g.seqs:
                if s.status is _RUNNING and s.unit is None:
                    items.append((s.seq_id, (s.output_token_ids[-1],)))
                    seqs.append(s)
        if not items:
            return
        res = self.manager.append_slots_batch(items)  # fast path: all fit, one lock
        if res is not None:
            self._emit_decodes(out, seqs, res)
            return
        mgr = self.manager
        running = self.running
        i = 0
        while i < len(running):
            g = running[i]
            seqs = [s for s in g.seqs if s.status is _RUNNING and s.unit is None]
            if not seqs:
                i += 1
                continue
            ids = [s.seq_id for s in seqs]
            while not mgr.can_append_slots(ids):
                victim = running.pop()  # the tail: lowest priority, newest arrival
                self._preempt(victim, out, "decode")
                if victim is g:
                    break
            else:
                res = mgr.append_slots_batch([(s.seq_id, (s.output_token_ids[-1],))
                                              for s in seqs])
                if res is None:
                    raise SchedulerError("append_slots_batch failed after can_append_slots")
                self._emit_decodes(out, seqs, res)
                i += 1
                continue
            break  # the request at i preempted itself: nobody after it is left

    def _emit_chunk(self, out: SchedulerOutput, g: SequenceGroup, u: PrefillUnit,
                    cached: int, may_chunk: bool) -> None:
        if u.after is not None and u.waits():
            return  # its shared blocks are not written yet (sequence.py)
        left = self._tokens_left
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
                                             self.manager.get_block_table(ids[0])))
        self._tokens_left = left - n
        self.prompt_tokens += n

    def _schedule_chunks(self, out: SchedulerOutput) -> None:
        for g in self.running:
            if self._tokens_left <= 0:
                return
            if g.units is not None:
                for u in g.units:
                    if u.computed < u.num_tokens:
                        # NOTE(no-chunking): even without chunked prefill an admitted unit
                        # that waited a step is chunked, or decodes could starve it forever
                        self._emit_chunk(out, g, u, 0, True)

    def _schedule_swapped(self, out: SchedulerOutput) -> None:
        mgr, cfg, swapped = self.manager, self.config, self.swapped
        while swapped:
            g = swapped[0]
            if cfg.policy == "priority" and self.waiting \
                    and self.waiting[0].priority < g.priority:
                return  # a better-priority waiting request goes first
            live = g.live_seqs
            n = len(live)
            if self._num_running_seqs + n > cfg.max_num_seqs or self._tokens_left < n:
                return
            ids = [s.seq_id for s in live]
            status = mgr.admission(swapped=ids).status
            if status is AllocStatus.NEVER:
                # NOTE(never): it was admitted, so it is not dropped here: recomputed, it goes
                # through the same admission rule as a new prompt, which alone may refuse it
                swapped.pop(0)
                self._requeue_for_recompute(g)
                continue
            if status is AllocStatus.LATER:
                return
            pairs = mgr.swap_in(ids)
            if pairs is None:
                return
            swapped.pop(0)
            out.add_copies("swap_in", g.request_id, pairs)
            out.swapped_in.extend(ids)
            self.swap_in_blocks += len(pairs)
            g.set_status(_RUNNING)
            self.running.add(g)
            self._num_running_seqs += n
            res = mgr.append_slots_batch([(s.seq_id, (s.output_token_ids[-1],))
                                          for s in live])
            if res is None:
                raise SchedulerError("append after swap-in failed despite its reservation")
            self._emit_decodes(out, live, res)

    # ------------------------------------------------------------------ admission (gate)
    def _schedule_waiting(self, out: SchedulerOutput, now: float) -> None:
        mgr, cfg, waiting = self.manager, self.config, self.waiting
        fcfs = cfg.policy == "fcfs"
        per_tenant: Counter[str] = Counter()  # live running sequences per tenant
        for r in self.running:
            per_tenant[r.tenant] += r.num_live
        while waiting and self._tokens_left > 0:
            g = self.gate.next_waiting(waiting, per_tenant)
            if g is None:
                return  # every tenant with waiting requests is at its cap
            if self.swapped and (fcfs or self.swapped[0].priority <= g.priority):
                return  # swapped requests resume before new prefills
            reason = self.gate.never_reason(g, None)
            if reason is not None:
                waiting.remove(g)
                self._ignore(g, out, reason)
                continue
            n = g.num_live
            if self._num_running_seqs + n > cfg.max_num_seqs:
                return
            units = self.gate.units(g)
            status = self.gate.status(units)
            if status is AllocStatus.NEVER:
                waiting.remove(g)
                self._ignore(g, out, self.gate.never_reason(g, units))
                continue
            if status is AllocStatus.LATER:
                return
            if not cfg.enable_chunked_prefill:
                # the other units of a recomputed n > 1 request may follow
                if self.gate.tokens_to_compute(units[0]) > self._tokens_left:
                    return
            allocs = self.gate.allocations(g, units)
            res = mgr.allocate_batch(allocs)
            if any(r is None for r in res):
                done = [s for a, r in zip(allocs, res) if r is not None for s in a.seq_ids]
                if done:
                    mgr.free_batch(done)
                return
            waiting.remove(g)
            g.set_status(_RUNNING)
            self.running.add(g)
            self._num_running_seqs += n
            per_tenant[g.tenant] += n
            if g.first_scheduled_time is None:
                g.first_scheduled_time = now
                g.num_cached_tokens = res[0]
            for u, cached in zip(units, res):
                u.allocated(cached)
                for s in u.seqs:
                    s.unit = u
                self.prefix_hit_tokens += cached
                self._emit_chunk(out, g, u, cached, cfg.enable_chunked_prefill)

    # ------------------------------------------------------------------ invariants
    def check_invariants(self) -> None:
        """Raise SchedulerError if queues, statuses, counters and block tables disagree
        (between steps); then check the manager's own invariants (invariants.py)."""
        check_scheduler(self.manager, ((self.waiting, SeqStatus.WAITING),
                                       (self.running, _RUNNING),
                                       (self.swapped, SeqStatus.SWAPPED)),
                        self._groups, self._seqs, self._num_running_seqs,
                        self._inflight is None)
