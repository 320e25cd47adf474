"""PoolWorker: one simulated client of the block pool (a thread or a coroutine drives it).

A worker owns the sequence groups it allocated (ids from its own range, so no two workers ever
touch the same sequence) and picks its next operation at random. It does not call the manager:
``next_intent`` returns an :class:`Intent` (operation name + arguments + what to do with the
result), and the driver runs it, directly on the ShadowRuntime (threads) or through the
PoolFront (coroutines). One decision logic, two concurrency styles::

    intent = worker.next_intent()            # e.g. Intent("append_slots", (17, [3, 1]), ...)
    result = getattr(target, intent.op)(*intent.args)     # thread driver
    result = await getattr(front, intent.op)(*intent.args)  # coroutine driver
    worker.done(intent, result)              # bookkeeping: groups, counters

Prompts come from a few shared bases over a small alphabet (prefix hits across workers) and a
few tenants (cache_salt), so sharing and isolation are both exercised.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Intent", "PoolWorker", "TENANTS"]

TENANTS = (None, "tenant-a", "tenant-b")
ID_STRIDE = 10_000_000  # sequence ids of worker w live in [w * stride, (w + 1) * stride)


@dataclass(slots=True)
class Intent:
    op: str  # ShadowRuntime / PoolFront method name, or a pseudo-op (see drivers)
    args: tuple  # positional arguments
    on_result: Callable[[Any], None] | None = None  # bookkeeping once it returned


@dataclass(slots=True)
class Group:
    gid: int  # key in the worker's map (the first sequence id it had)
    seqs: list[int]  # live sequence ids (a prompt's n sequences plus forks)
    salt: str | None  # tenant
    on_device: bool = True
    lengths: dict[int, int] = field(default_factory=dict)  # seq -> tokens


class PoolWorker:
    """Random operations over the groups this worker owns; counts what happened."""

    def __init__(self, wid: int, seed: int, block_size: int, *, max_groups: int = 4,
                 max_len: int = 64, allow_defrag: bool = False) -> None:
        self.wid = wid
        self.rng = random.Random(seed)
        self.bs = block_size
        self.max_groups = max_groups
        self.max_len = max_len
        self.allow_defrag = allow_defrag
        self.groups: dict[int, Group] = {}
        self._next = wid * ID_STRIDE
        rng = random.Random(1234)  # the same bases for every worker: cross-worker prefix hits
        self.bases = [[rng.randrange(4) for _ in range(48)] for _ in range(3)]
        self.ops = 0
        self.scarce = 0  # operations the pool answered with None (no room)
        self.counts: dict[str, int] = {}
        self._pressure = False  # the last allocation found no room: free something first

    def _new_id(self) -> int:
        self._next += 1
        return self._next

    # ---------------------------------------------------------------- choosing
    def next_intent(self) -> Intent:
        r = self.rng.random()
        groups = self.groups
        if not groups or (r < 0.30 and len(groups) < self.max_groups):
            return self._alloc()
        if r < 0.45:
            return self._append()
        if r < 0.55:
            return self._decode()
        if r < 0.62:
            return self._fork()
        if r < 0.76:
            return self._free()
        if r < 0.88:
            return self._swap()
        if r < 0.93:
            return self._abort()
        if r < 0.96 and self.allow_defrag:
            return Intent("defrag", (self.rng.random() < 0.15, self.rng.random() < 0.5))
        return Intent("stats", ())

    def _prompt(self) -> list[int]:
        rng = self.rng
        base = rng.choice(self.bases)
        cut = rng.randint(1, len(base))
        return base[:cut] + [rng.randrange(4) for _ in range(rng.randint(0, 6))]

    def _alloc(self) -> Intent:
        if len(self.groups) >= self.max_groups:
            return self._free()
        prompt = self._prompt()
        ids = [self._new_id() for _ in range(self.rng.choice((1, 1, 1, 2, 3)))]
        salt = self.rng.choice(TENANTS)

        def done(cached: int | None) -> None:
            if cached is None:
                self.scarce += 1
                if self.groups:  # make room like a preempting scheduler would, next time
                    self._pressure = True
                return
            self.groups[ids[0]] = Group(ids[0], list(ids), salt, True,
                                        {s: len(prompt) for s in ids})

        return Intent("allocate", (ids, prompt, salt), done)

    def _pick(self, on_device: bool | None = None) -> Group | None:
        cands = [g for g in self.groups.values() if on_device is None or g.on_device == on_device]
        return self.rng.choice(cands) if cands else None

    def _append(self) -> Intent:
        g = self._pick(True)
        if g is None:
            return self._swap()
        s = self.rng.choice(g.seqs)
        k = self.rng.randint(1, 4)
        if g.lengths[s] + k > self.max_len:
            return self._free_seq(g, s)
        toks = [self.rng.randrange(4) for _ in range(k)]

        def done(pairs: Any) -> None:
            if pairs is None:
                self.scarce += 1
                return
            g.lengths[s] += k

        return Intent("append_slots", (s, toks), done)

    def _decode(self) -> Intent:
        """One token to each sequence of a few on-device groups through the scheduler's
        batched path (ShadowRuntime.decode_step): the groups that fit, in order; with
        ``ends`` None all of them or none."""
        rng = self.rng
        gs = [g for g in self.groups.values()
              if g.on_device and max(g.lengths.values()) < self.max_len]
        if not gs:
            return self._append()
        pairs = [(g, s) for g in rng.sample(gs, rng.randint(1, len(gs))) for s in g.seqs]
        ends = [i + 1 for i, (g, _) in enumerate(pairs)
                if i + 1 == len(pairs) or pairs[i + 1][0] is not g]
        grouped = rng.random() < 0.7

        def done(groups: int) -> None:
            n = ends[groups - 1] if grouped and groups else len(pairs) if groups else 0
            if n < len(pairs):
                self.scarce += 1
            for g, s in pairs[:n]:
                g.lengths[s] += 1

        return Intent("decode_step", ([s for _, s in pairs],
                                      [rng.randrange(4) for _ in pairs],
                                      ends if grouped else None), done)

    def _fork(self) -> Intent:
        g = self._pick(True)
        if g is None or len(g.seqs) >= 4:
            return self._append()
        parent = self.rng.choice(g.seqs)
        child = self._new_id()

        def done(_: Any) -> None:
            g.seqs.append(child)
            g.lengths[child] = g.lengths[parent]

        return Intent("fork", (parent, child), done)

    def _free(self) -> Intent:
        g = self._pick()
        if g is None:
            return self._alloc()
        if len(g.seqs) > 1 and self.rng.random() < 0.4:
            return self._free_seq(g, self.rng.choice(g.seqs))
        return self.free_group_intent(g)

    def free_group_intent(self, g: Group) -> Intent:
        seqs = list(g.seqs)

        def done(_: Any) -> None:
            self.groups.pop(g.gid, None)

        return Intent("free", tuple(seqs), done)

    def _free_seq(self, g: Group, s: int) -> Intent:
        if len(g.seqs) == 1:
            return self.free_group_intent(g)

        def done(_: Any) -> None:
            g.seqs.remove(s)
            del g.lengths[s]

        return Intent("free", (s,), done)

    def _swap(self) -> Intent:
        g = self._pick()
        if g is None:
            return self._alloc()
        op = "swap_out" if g.on_device else "swap_in"

        def done(pairs: Any) -> None:
            if pairs is None:
                self.scarce += 1
                return
            g.on_device = not g.on_device

        return Intent(op, (list(g.seqs),), done)

    def _abort(self) -> Intent:
        ids = [self._new_id() for _ in range(self.rng.choice((1, 2)))]
        return Intent("abort", (ids, self._prompt(), self.rng.choice(TENANTS)))

    # ---------------------------------------------------------------- results
    def done(self, intent: Intent, result: Any) -> None:
        self.ops += 1
        self.counts[intent.op] = self.counts.get(intent.op, 0) + 1
        if intent.on_result is not None:
            intent.on_result(result)

    def adopt(self, ids: list[int], prompt_len: int, salt: str | None) -> None:
        """A cancelled allocation that was applied after all: the worker owns it now."""
        self.groups[ids[0]] = Group(ids[0], list(ids), salt, True, {s: prompt_len for s in ids})

    def release_all(self) -> list[Intent]:
        """Intents that free everything this worker owns (used when the run stops)."""
        return [self.free_group_intent(g) for g in list(self.groups.values())]

    def relieve(self) -> Intent | None:
        """After an allocation found no room: free the oldest group (once)."""
        if not self._pressure or not self.groups:
            self._pressure = False
            return None
        self._pressure = False
        return self.free_group_intent(next(iter(self.groups.values())))
