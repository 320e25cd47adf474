"""The scheduler's consistency check, over state the scheduler hands in explicitly.

What must hold between steps (the Scheduler docstring's invariants):

- every unfinished request sits in exactly one queue, the one its status names, with at
  least one live sequence, and is the registered request of its id;
- the running requests' live sequences add up to the scheduler's running counter;
- the live sequences are exactly the registered ones, and the manager holds no table of a
  sequence that is not live;
- a WAITING sequence has no table and no prefill unit; a RUNNING one a device table, a
  SWAPPED one a host table, holding ``unit.num_tokens`` (prefilling) or ``num_tokens - 1``
  (decoding: the last sampled token gets its slot when it is scheduled) tokens, or
  ``num_tokens`` while it is ``awaiting`` a deferred sample.

Each break raises :class:`~kvpool.errors.SchedulerError`; the manager's own check runs last.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kvpool.core import BlockSpaceManager, Device
from kvpool.errors import SchedulerError
from kvpool.sched.sequence import Sequence, SeqStatus, SequenceGroup
from kvpool.sched.state import RequestQueue


def check_scheduler(manager: BlockSpaceManager,
                    queues: Iterable[tuple[RequestQueue, SeqStatus]],
                    groups: Mapping[str, SequenceGroup], seqs: Mapping[int, Sequence],
                    num_running_seqs: int, between_steps: bool) -> None:
    """Raise SchedulerError if queues, statuses, counters and block tables disagree; then
    check the manager. ``between_steps``: no step in flight (table sizes are checked)."""
    seen: set[str] = set()
    running_seqs = 0
    for q, status in queues:
        q.check_invariants()
        for g in q:
            if g.request_id in seen or groups.get(g.request_id) is not g:
                raise SchedulerError(f"request {g.request_id!r} queued twice or unknown")
            seen.add(g.request_id)
            if g.status is not status or g.num_live == 0:
                raise SchedulerError(f"request {g.request_id!r} in {q.name} is {g.status}")
            for s in g.live_seqs:
                _check_seq(manager, s, status, between_steps)
            if status is SeqStatus.RUNNING:
                running_seqs += g.num_live
    if seen != set(groups):
        raise SchedulerError("a request is registered but in no queue")
    if running_seqs != num_running_seqs:
        raise SchedulerError(f"running sequences {running_seqs} != counter "
                             f"{num_running_seqs}")
    live = {s.seq_id for g in groups.values() for s in g.live_seqs}
    if live != set(seqs) or set(manager.seq_ids()) - live:
        raise SchedulerError("sequence registry and block tables disagree")
    manager.check_invariants()


def _check_seq(mgr: BlockSpaceManager, s: Sequence, status: SeqStatus,
               between_steps: bool) -> None:
    if s.status is not status:
        raise SchedulerError(f"sequence {s.seq_id} is {s.status}, its request {status}")
    if status is SeqStatus.WAITING:
        if mgr.has_seq(s.seq_id) or s.unit is not None:
            raise SchedulerError(f"waiting sequence {s.seq_id} holds blocks or a unit")
        return
    want = Device.DEVICE if status is SeqStatus.RUNNING else Device.HOST
    if not mgr.has_seq(s.seq_id) or mgr.get_device(s.seq_id) is not want:
        raise SchedulerError(f"sequence {s.seq_id} ({status}) has no {want} table")
    n = mgr.get_num_tokens(s.seq_id)
    expect = s.unit.num_tokens if s.unit is not None else s.num_tokens - (0 if s.awaiting else 1)
    if between_steps and n != expect:
        raise SchedulerError(f"sequence {s.seq_id}: table holds {n} tokens, expected "
                             f"{expect}")
