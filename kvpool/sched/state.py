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
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from kvpool.core import DefragPlan
from kvpool.sched.config import SchedulerConfig
from kvpool.sched.output import SchedulerOutput, SchedulerStats
from kvpool.sched.queue import RequestQueue
from kvpool.sched.sequence import Sequence, SeqStatus, SequenceGroup


@dataclass(slots=True, eq=False)
class SchedulerCounters:
    """Monotonic counters (metrics read them through ``SchedulerState.stats``)."""

    preemptions: dict[str, int] = field(default_factory=lambda: {"swap": 0, "recompute": 0})
    swap_out_blocks: int = 0  # blocks scheduled device -> host
    swap_in_blocks: int = 0  # blocks scheduled host -> device
    cow_blocks: int = 0  # copy-on-write copies scheduled
    prefix_hit_tokens: int = 0  # prompt tokens the prefix cache served at admission
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
            self.num_running_seqs, dict(c.preemptions), c.swap_out_blocks, c.swap_in_blocks,
            c.cow_blocks, c.prefix_hit_tokens, c.prompt_tokens, c.generation_tokens,
            c.num_finished, c.num_aborted, c.num_ignored, c.defrag_plans, c.defrag_moves,
            c.defrag_retried, c.defrag_aborted)
