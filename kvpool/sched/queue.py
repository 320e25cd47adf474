"""RequestQueue: the waiting / running / swapped queues, kept sorted by the policy's key.

Keys (smaller first)::

    fcfs      (arrival_time, order)
    priority  (priority, arrival_time, order)

The head is served first; the tail is the preemption victim (lowest priority, then newest
arrival). A preempted request re-enters the waiting or swapped queue at its original key, so it
goes ahead of requests that arrived after it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from operator import attrgetter

from kvpool.errors import SchedulerError
from kvpool.sched.sequence import SequenceGroup

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
