"""bench.heldout's ``batch_eval`` shape (written after ``follow`` was frozen): an offline
evaluation harness behind long shared k-shot headers. Moved here from bench/heldout.py
unchanged (same trace per seed and scale), to keep that file small."""

from __future__ import annotations

import itertools
import random

Trace = list[list[int]]


def batch_eval(seed: int, scale: float = 1.0) -> Trace:
    """Written after ``follow`` was frozen. An offline evaluation harness: 30 benchmark tasks,
    each a k-shot exemplar header of 24..96 blocks and 20..120 items (a unique 2..12-block
    question each). 4 eval jobs run at once, each walking one task's items in order. 6000
    requests; 75 %: header + question of the next item of a random job, sent 1..4 times
    (self-consistency samples; a chat may come in between); a job that finishes its task
    starts another: half the time a task never run, else a re-run (same header, same items,
    from the first) of one run before. 25 %: a one-off chat (a 2..8-block system prompt
    shared by all chats + a unique 4..40-block message)."""
    rng = random.Random(seed)
    ids = itertools.count()
    tasks = [([next(ids) for _ in range(rng.randint(24, 96))],
              [[next(ids) for _ in range(rng.randint(2, 12))]
               for _ in range(rng.randint(20, 120))]) for _ in range(30)]
    system = [next(ids) for _ in range(rng.randint(2, 8))]
    fresh = list(range(30))
    rng.shuffle(fresh)
    done: list[int] = []
    jobs = [_start_job(rng, fresh, done) for _ in range(4)]
    out: Trace = []
    samples = 0  # repeats of the current item still to send
    for _ in range(int(6000 * scale)):
        if rng.random() < 0.25:
            out.append(system + [next(ids) for _ in range(rng.randint(4, 40))])
            continue
        if not samples:
            j = jobs[rng.randrange(4)]
            header, items = tasks[j[0]]
            req = header + items[j[1]]
            samples = rng.randint(1, 4)
            j[1] += 1
            if j[1] == len(items):
                done.append(j[0])
                j[:] = _start_job(rng, fresh, done)
        out.append(list(req))
        samples -= 1
    return out


def _start_job(rng: random.Random, fresh: list[int], done: list[int]) -> list[int]:
    """batch_eval's next job, [task, next item]: half the time a task never run (popped from
    ``fresh``), else a re-run of one in ``done`` (only fresh ones before any is done, only
    re-runs once none is left)."""
    t = fresh.pop() if fresh and (not done or rng.random() < 0.5) else rng.choice(done)
    return [t, 0]
