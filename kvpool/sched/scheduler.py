"""Scheduler: continuous batching over the BlockSpaceManager (vLLM v0's scheduling loop).

Invariants (``check_invariants``): every unfinished request is in exactly one of the queues
``waiting`` / ``running`` / ``swapped``, matching its status, each queue sorted by the policy's
key; the live sequences of RUNNING requests number ``num_running_seqs <= max_num_seqs`` (forks
aside); a RUNNING sequence has a device block table, a SWAPPED one a host table, a WAITING one
none; between steps a decoding sequence's table holds ``num_tokens - 1`` tokens (the last
sampled token gets its slot when it is scheduled), ``num_tokens`` while it is ``awaiting`` a
sample the runtime deferred (no step schedules it until ``accept_late``).

One ``schedule()`` (vLLM v0's running / swapped / prefill passes, with chunked prefill)::

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
                   admission is OK (watermark); LATER stops (head-of-line), NEVER and prompts
                   longer than max_model_len are ignored with a reason (a request coming back
                   with output tokens: NEVER only past the whole pool, NOTE(alone))
    5. defrag      if external fragmentation > defrag_threshold and no swap-out happened

Budgets: ``max_num_batched_tokens`` per step (a decode is 1 token, a chunk its length) and
``max_num_seqs`` live sequences in running requests.

The parts, each handed what it works on in its constructor (docs/architecture.md)::

    SchedulerState   queues, registry, step bookkeeping, counters (state.py)
    StepPlanner      steps 0-4 (planner.py), asking the AdmissionGate (admission_gate.py)
    Preemptor        victims' mode by cost, swap-out / recompute (preemption.py)
    StepCompletion   on_step_done / on_step_failed / finish (completion.py)
    DefragDriver     step 5 and the plan's commit or abort (state.py)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping

from kvpool.core import BlockSpaceManager, DefragResult
from kvpool.errors import RequestError, SchedulerError
from kvpool.sched.admission_gate import AdmissionGate, exceeds_context
from kvpool.sched.completion import StepCompletion
from kvpool.sched.config import CostModel, SchedulerConfig
from kvpool.sched.invariants import check_scheduler
from kvpool.sched.output import FinishedRequest, SchedulerOutput, SchedulerStats, SeqOutput
from kvpool.sched.planner import StepPlanner
from kvpool.sched.preemption import Preemptor
from kvpool.sched.sequence import RequestParams, SeqStatus, SequenceGroup, StopLimits
from kvpool.sched.state import DefragDriver, SchedulerState, make_sort_key

_RUNNING = SeqStatus.RUNNING


class Scheduler:
    """Decides, step by step, which tokens to compute and which blocks to move."""

    def __init__(self, manager: BlockSpaceManager, config: SchedulerConfig | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.manager = manager  # the block pool (shared with nobody else for scheduling)
        self.config = config if config is not None else SchedulerConfig()
        self.cost = CostModel.from_config(self.config)  # refreshed by update_cost_model
        self.state = st = SchedulerState(self.config, clock)
        self.gate = AdmissionGate(manager, self.config, lambda: bool(st.running))  # NOTE(alone)
        self.preemptor = Preemptor(st, manager, self.gate, self.cost)
        self.defrag = DefragDriver(st, manager)
        self.completion = StepCompletion(st, manager, self.defrag)
        self.planner = StepPlanner(st, manager, self.gate, self.preemptor, self.completion)

    # ------------------------------------------------------------------ requests
    def add_request(self, request_id: str, prompt_token_ids: Iterable[int], params=None,
                    priority: int = 0, cache_salt: str | None = None,
                    arrival_time: float | None = None, tenant: str | None = None,
                    skip_reading_prefix_cache: bool = False) -> tuple[int, ...]:
        """Queue a request; returns its sequence ids (``params.n`` of them). Never rejects
        for size here: schedule() reports a request that can never fit in ``ignored``.
        ``skip_reading_prefix_cache``: no admission of it, re-admissions included, reads the
        prefix cache; its blocks are cached all the same (NOTE(skip-read), core/block_table.py)."""
        st = self.state
        if request_id in st.groups:
            raise SchedulerError(f"request {request_id!r} is already queued or running")
        prompt = list(prompt_token_ids)
        if not prompt:
            raise RequestError("the prompt is empty: at least one token is needed", "prompt")
        cfg = self.config
        params = params if params is not None else RequestParams()
        limits = StopLimits.resolve(params, cfg.eos_token_id, cfg.max_model_len, len(prompt),
                                    cfg.other_eos_ids)
        if limits.n < 1:
            raise RequestError(f"n={limits.n} is invalid: use n >= 1", "n")
        if limits.max_tokens < 1:
            raise RequestError(f"max_tokens={limits.max_tokens} is invalid: use >= 1",
                               "max_tokens")
        arrival = st.clock() if arrival_time is None else float(arrival_time)
        order = next(st.orders)
        g = SequenceGroup(request_id, prompt, params, limits, priority, arrival, order,
                          make_sort_key(cfg.policy, priority, arrival, order), cache_salt,
                          tenant or "", skip_reading_prefix_cache=skip_reading_prefix_cache)
        mgr = self.manager
        # NOTE(arrival-hash): on arrival, outside the steps, as vLLM's Request does (not for a
        # prompt past max_model_len: schedule() rejects it without hashing)
        if mgr.caching and not exceeds_context(len(prompt), 0, cfg.max_model_len):
            g.prompt_block_hashes = mgr.hasher.hash_blocks(prompt, cache_salt)
        for _ in range(limits.n):
            st.new_seq(g)
        st.groups[request_id] = g
        self.gate.note_tenant(tenant)
        st.waiting.add(g)
        return tuple(s.seq_id for s in g.seqs)

    def fork(self, seq_id: int) -> int:
        """A new sequence in the same request sharing every block of running, decoding
        ``seq_id`` (copy-on-write on the next write); returns its id. Between steps only."""
        st = self.state
        s = st.seqs.get(seq_id)
        if s is None or s.status is not _RUNNING or s.unit is not None or s.awaiting:
            raise SchedulerError(f"sequence {seq_id} is not a running, decoding sequence")
        if st.inflight is not None:
            raise SchedulerError("fork between steps: a step is in flight")
        if st.num_running_seqs >= self.config.max_num_seqs:
            raise SchedulerError(f"max_num_seqs={self.config.max_num_seqs} sequences run")
        child_id = next(st.seq_ids)
        self.manager.fork(seq_id, child_id)
        child = st.new_seq(s.group, _RUNNING, list(s.output_token_ids), seq_id=child_id)
        st.num_running_seqs += 1
        return child.seq_id

    def finish(self, request_id: str, seq_id: int | None = None,
               status: SeqStatus = SeqStatus.FINISHED_STOPPED, reason: str | None = "stop",
               *, now: float | None = None) -> FinishedRequest | None:
        """Finish one sequence (``seq_id``) or every live sequence of a request, in any state
        (e.g. the runtime matched a stop string), freeing their blocks at once. Returns the
        request when this left it with no live sequence, else None (also for unknown or
        already finished ids). Safe while a step is in flight: its tokens are then dropped."""
        return self.completion.finish(request_id, seq_id, status, reason, now=now)

    def abort(self, request_id: str, reason: str = "aborted", *,
              now: float | None = None) -> FinishedRequest | None:
        """Abort a request in any state, freeing all its blocks. Returns it, or None when the
        id is unknown or already finished."""
        return self.completion.finish(request_id, None, SeqStatus.FINISHED_ABORTED, reason,
                                      now=now)

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        """vLLM's reset: drop every cached block, only while no request holds a block (False:
        nothing dropped); ``reset_running_requests`` first preempts every running and swapped
        request for recompute, so only blocks lent outside the tables can still refuse it
        (docs/architecture.md "Development routes"). Between steps only."""
        if self.state.inflight is not None:
            raise SchedulerError("reset the prefix cache between steps: a step is in flight")
        if reset_running_requests:
            self.preemptor.preempt_all()
        return self.manager.reset_prefix_cache()

    # ------------------------------------------------------------------ queries
    @property
    def num_running_seqs(self) -> int:
        """Live sequences of RUNNING requests: the count max_num_seqs bounds (read-only)."""
        return self.state.num_running_seqs

    def has_unfinished(self) -> bool:
        return bool(self.state.groups)

    def num_requests(self) -> dict[str, int]:
        """Requests by state (for metrics)."""
        st = self.state
        return {"running": len(st.running), "waiting": len(st.waiting),
                "swapped": len(st.swapped)}

    def request_status(self, request_id: str) -> SeqStatus | None:
        g = self.state.groups.get(request_id)
        return None if g is None else g.status

    def num_cached_tokens(self, request_id: str) -> int | None:
        """Prompt tokens the prefix cache served at the request's first admission; None when
        the request is unknown or not admitted yet."""
        g = self.state.groups.get(request_id)
        return None if g is None else g.num_cached_tokens

    def seq_ids(self, request_id: str) -> tuple[int, ...]:
        g = self.state.groups.get(request_id)
        return () if g is None else tuple(s.seq_id for s in g.seqs)

    def request_ids(self) -> list[str]:
        """Ids of the unfinished requests."""
        return list(self.state.groups)

    def stats(self) -> SchedulerStats:
        return self.state.stats()

    # ------------------------------------------------------------------ steps
    def schedule(self, now: float | None = None) -> SchedulerOutput:
        """Plan one step (see the module docstring). When the output ``has_work`` the runtime
        must execute it and call ``on_step_done`` before the next schedule()."""
        st = self.state
        if st.inflight is not None:
            raise SchedulerError(f"step {st.inflight.step_id} is still in flight: call "
                                 "on_step_done (or on_step_failed) with its output first")
        cfg = self.config
        now = st.clock() if now is None else now
        out = SchedulerOutput(st.step)
        st.step += 1
        st.tokens_left = cfg.max_num_batched_tokens
        st.decode_seqs = []
        self.planner.plan(out, now)
        self.defrag.maybe_start(out)
        out.num_batched_tokens = cfg.max_num_batched_tokens - st.tokens_left
        if out.has_work:
            st.inflight = out
        return out

    def on_step_done(self, output: SchedulerOutput, sampled: Mapping[int, int], *,
                     now: float | None = None, defrag_ok: bool = True,
                     stops: Mapping[int, str] | None = None,
                     deferred: Collection[int] = (),
                     swap_outs_done: bool = True) -> list[FinishedRequest]:
        """Apply a completed step (StepCompletion.on_step_done; ``deferred``: sequences whose
        sample comes later through ``accept_late``; ``swap_outs_done`` false: the step's
        swap-outs are confirmed later by ``swap_out_done``); returns the requests that
        finished in it."""
        return self.completion.on_step_done(output, sampled, now=now, defrag_ok=defrag_ok,
                                            stops=stops, deferred=deferred,
                                            swap_outs_done=swap_outs_done)

    @property
    def ended(self) -> list[SeqOutput]:
        """The sequences the last ``on_step_done`` / ``accept_late`` finished (a stop, a stop
        token, a length limit), in the order judged: each with its status and reason."""
        return self.completion.ended

    def swap_out_done(self, request_id: str, step_id: int) -> None:
        """The swap-out copy of ``request_id`` planned by step ``step_id`` completed: publish
        its host blocks (StepCompletion.swap_out_done; never call it for a failed copy)."""
        self.completion.swap_out_done(request_id, step_id)

    def accept_late(self, sampled: Mapping[int, int], stops: Mapping[int, str] | None = None,
                    now: float | None = None) -> list[FinishedRequest]:
        """Between steps: deferred tokens of running ``awaiting`` sequences (StepCompletion.
        accept_late); returns the requests that finished."""
        return self.completion.accept_late(sampled, stops, now)

    def awaiting(self, seq_id: int) -> SeqStatus | None:
        """The status of live ``seq_id`` while it awaits a deferred sample (RUNNING: its token
        may be accepted now; SWAPPED: once it is back), else None (finished, or recomputed: its
        prefill samples the token afresh)."""
        s = self.state.seqs.get(seq_id)
        return s.status if s is not None and s.awaiting else None

    def on_step_failed(self, output: SchedulerOutput, reason: str = "step failed",
                       now: float | None = None) -> list[FinishedRequest]:
        """The step could not run: abort every request in it and its defrag plan."""
        return self.completion.on_step_failed(output, reason, now)

    def defrag_done(self, plan_id: int, ok: bool = True) -> DefragResult | None:
        """The runtime finished (``ok``) or failed the copies of defrag plan ``plan_id``."""
        return self.defrag.done(plan_id, ok)

    def update_cost_model(self, *, copy_bytes_per_s: float | None = None,
                          prefill_tokens_per_s: float | None = None,
                          kv_bytes_per_block: int | None = None) -> None:
        """Feed measured figures (None keeps the current value); used by later preemptions."""
        self.cost.update(copy_bytes_per_s=copy_bytes_per_s,
                         prefill_tokens_per_s=prefill_tokens_per_s,
                         kv_bytes_per_block=kv_bytes_per_block)

    def check_invariants(self) -> None:
        """Raise SchedulerError if queues, statuses, counters and block tables disagree
        (between steps); then check the manager's own invariants (invariants.py)."""
        st = self.state
        check_scheduler(self.manager, ((st.waiting, SeqStatus.WAITING),
                                       (st.running, _RUNNING),
                                       (st.swapped, SeqStatus.SWAPPED)),
                        st.groups, st.seqs, st.num_running_seqs, st.inflight is None)
