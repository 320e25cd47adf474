"""SchedulerState: everything the scheduler knows between calls, as one plain object.

The scheduler's collaborators (``StepPlanner``, ``Preemptor``, ``StepCompletion``,
``DefragDriver``) receive it in their constructors and read and write its fields; none of
them keeps state of its own beyond what it was handed. The fields::

    queues     waiting (no blocks, admission order), running (device blocks; tail = the
               preemption victim), swapped (host blocks, resume order)
    registry   groups (unfinished requests by id), seqs (live sequences by id), the id and
               submission counters
    step       step (schedule() calls), inflight (the output awaiting on_step_done),
               defrag_plan (emitted, not yet committed or aborted), tokens_left (token
               budget left in the step being planned), decode_seqs (the sequences of the
               step's decodes, in order)
    counts     num_running_seqs (live sequences of RUNNING requests: what max_num_seqs
               bounds) and the monotonic counters read through ``stats()``

Invariants: see ``Scheduler`` (checked by ``check_invariants``).

RequestQueue: the waiting / running / swapped queues, kept sorted by the policy's key.
Keys (smaller first)::

    fcfs      (arrival_time, order)
    priority  (priority, arrival_time, order)

The head is served first; the tail is the preemption victim (lowest priority, then newest
arrival). A preempted request re-enters the waiting or swapped queue at its original key, so it
goes ahead of requests that arrived after it.

DefragDriver: the life of the scheduler's one defrag plan at a time, kept in ``defrag_plan``.
``maybe_start`` (the last stage of ``schedule()``) asks the manager for a plan when external
fragmentation passes ``defrag_threshold`` and leaves the watermark's blocks free; the step
carries its moves; ``done`` commits the moves still valid once the runtime copied them, or
releases the destinations when the copies failed. ``settle`` does that for a finished or
failed step unless the runtime already called ``done``.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, insort
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter

from kvpool.core import BlockSpaceManager, DefragPlan, DefragResult
from kvpool.errors import SchedulerError
from kvpool.sched.config import SchedulerConfig
from kvpool.sched.output import SchedulerOutput, SchedulerStats
from kvpool.sched.sequence import Sequence, SeqStatus, SequenceGroup

_KEY = attrgetter("sort_key")


def make_sort_key(policy: str, priority: int, arrival_time: float, order: int) -> tuple:
    if policy == "priority":
        return (priority, arrival_time, order)
    return (arrival_time, order)


class RequestQueue:
    """Sequence groups sorted by ``sort_key``.

    Invariant: ``_items`` is sorted by ``sort_key`` and holds each group at most once (keys
    are unique: ``order`` is a per-scheduler counter).
    """

    __slots__ = ("name", "_items")

    def __init__(self, name: str) -> None:
        self.name = name  # for error messages
        self._items: list[SequenceGroup] = []

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[SequenceGroup]:
        return iter(self._items)

    def __getitem__(self, i: int) -> SequenceGroup:
        return self._items[i]

    def __contains__(self, g: SequenceGroup) -> bool:
        i = bisect_left(self._items, g.sort_key, key=_KEY)
        return i < len(self._items) and self._items[i] is g

    def snapshot(self) -> list[SequenceGroup]:
        """A copy of the items in order (safe to iterate while the queue changes)."""
        return list(self._items)

    def add(self, g: SequenceGroup) -> None:
        items = self._items
        if not items or items[-1].sort_key < g.sort_key:
            items.append(g)  # the common case: a new arrival goes last
        else:
            insort(items, g, key=_KEY)

    def remove(self, g: SequenceGroup) -> None:
        i = bisect_left(self._items, g.sort_key, key=_KEY)
        if i >= len(self._items) or self._items[i] is not g:
            raise SchedulerError(f"request {g.request_id!r} is not in the {self.name} queue")
        del self._items[i]

    def pop(self, i: int = -1) -> SequenceGroup:
        return self._items.pop(i)

    @property
    def tail(self) -> SequenceGroup | None:
        return self._items[-1] if self._items else None

    def check_invariants(self) -> None:
        keys = [g.sort_key for g in self._items]
        if keys != sorted(keys) or len(set(keys)) != len(keys):
            raise SchedulerError(f"{self.name} queue is out of order or has duplicates")


def live_seqs(queue: RequestQueue) -> int:
    """The live sequences of ``queue``'s requests, read from a copy (the metrics read it while
    the step thread changes the queue); per scrape, O(queued requests)."""
    return sum(g.num_live for g in queue.snapshot())


@dataclass(slots=True, eq=False)
class SchedulerCounters:
    """Monotonic counters (metrics read them through ``SchedulerState.stats``)."""

    preemptions: dict[str, int] = field(default_factory=lambda: {"swap": 0, "recompute": 0})
    # the live sequences of those preempted requests (an n > 1 request's n), as vLLM counts
    # its preempted child requests (NOTE(preempted-seqs) in kvpool/metrics/vllm_series.py)
    preempted_seqs: int = 0
    swap_out_blocks: int = 0  # blocks scheduled device -> host
    swap_in_blocks: int = 0  # blocks scheduled host -> device
    cow_blocks: int = 0  # copy-on-write copies scheduled
    # prompt tokens the prefix cache served at a request's first admission; not a preempted
    # request's re-admission (NOTE(preempted-queries), kvpool/core/block_table.py)
    prefix_hit_tokens: int = 0
    prompt_tokens: int = 0  # prompt tokens scheduled in prefill chunks
    generation_tokens: int = 0  # sampled tokens accepted
    num_finished: int = 0  # requests finished (stopped or length)
    num_aborted: int = 0  # requests aborted
    num_ignored: int = 0  # requests rejected as never servable
    defrag_plans: int = 0  # defrag plans emitted
    defrag_moves: int = 0  # defrag moves committed
    defrag_retried: int = 0  # planned moves dropped at commit
    defrag_aborted: int = 0  # plans aborted (copies failed)


@dataclass(slots=True, eq=False)
class SchedulerState:
    """The scheduler's queues, registry, step bookkeeping and counters (see the module)."""

    config: SchedulerConfig
    clock: Callable[[], float]  # default time for arrivals and metrics (replay: simulated)
    waiting: RequestQueue = field(default_factory=lambda: RequestQueue("waiting"))
    running: RequestQueue = field(default_factory=lambda: RequestQueue("running"))
    swapped: RequestQueue = field(default_factory=lambda: RequestQueue("swapped"))
    groups: dict[str, SequenceGroup] = field(default_factory=dict)  # unfinished, by id
    seqs: dict[int, Sequence] = field(default_factory=dict)  # live sequences by id
    seq_ids: itertools.count = field(default_factory=itertools.count)  # the manager's keys
    orders: itertools.count = field(default_factory=itertools.count)  # FCFS tie-break
    step: int = 0  # schedule() calls
    inflight: SchedulerOutput | None = None  # output awaiting on_step_done
    defrag_plan: DefragPlan | None = None  # emitted and not yet committed / aborted
    num_running_seqs: int = 0  # live sequences of RUNNING requests
    tokens_left: int = 0  # token budget left in the step being planned
    # the Sequence of each of the step's decodes, in order (completion reads them directly)
    decode_seqs: list[Sequence] = field(default_factory=list)
    counters: SchedulerCounters = field(default_factory=SchedulerCounters)

    def queue_of(self, status: SeqStatus) -> RequestQueue:
        """The queue holding live requests of ``status`` (WAITING / RUNNING / SWAPPED)."""
        if status is SeqStatus.RUNNING:
            return self.running
        return self.waiting if status is SeqStatus.WAITING else self.swapped

    def new_seq(self, group: SequenceGroup, status: SeqStatus = SeqStatus.WAITING,
                output_token_ids: list[int] | None = None, *,
                seq_id: int | None = None) -> Sequence:
        """A registered sequence of ``group`` (appended to its sequences); ``seq_id``: one
        already drawn from ``seq_ids``."""
        s = Sequence(next(self.seq_ids) if seq_id is None else seq_id, group, status,
                     [] if output_token_ids is None else output_token_ids)
        group.seqs.append(s)
        self.seqs[s.seq_id] = s
        return s

    def stats(self) -> SchedulerStats:
        c = self.counters
        return SchedulerStats(
            self.step, len(self.running), len(self.waiting), len(self.swapped),
            self.num_running_seqs, live_seqs(self.waiting), live_seqs(self.swapped),
            dict(c.preemptions), c.swap_out_blocks, c.swap_in_blocks,
            c.cow_blocks, c.prefix_hit_tokens, c.prompt_tokens, c.generation_tokens,
            c.num_finished, c.num_aborted, c.num_ignored, c.defrag_plans, c.defrag_moves,
            c.defrag_retried, c.defrag_aborted, c.preempted_seqs)


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
