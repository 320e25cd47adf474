"""bench.heldout's ``catalog_backfill`` shape, the batch side: the nightly backfill pass over
the whole catalog in catalog order (bare completion prompts: the record, then the job's short
cue), its failed batches retried, the items edited while it ran re-sent by a change-feed sweep
after it, and the recommendation job comparing an anchor item with its neighbours. See
bench/heldout_catalog_backfill.py's docstring for the numbers."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from bench.heldout_catalog_parts import DAY, HOUR, MINUTE
from bench.heldout_catalog_shop import Shop

PASS_START = (0.5, 1.5)  # hours after midnight the backfill pass starts
PASS_RATE = (3.0, 6.0)  # records a second it sends at scale 1.0 (x scale)
NIGHT_FEED = (0.2, 0.7)  # how far into the pass the ERP's nightly price feed lands
CUE = 10  # tokens of the job's completion cue after each record
BATCH = (64, 128, 256)  # records per batch at scale 1.0 (x scale, at least 4)
FAILED = ((2, 5), (0, 2))  # batches that fail on the first night, on the second
RETRY = (10.0, 45.0)  # minutes after a failed batch ends that it is sent again
SWEEP = (5.0, 20.0)  # minutes after the pass ends that the change-feed sweep starts
REC_HOURS = (8, 11, 14, 17, 20, 23)  # the recommendation job's runs
ANCHORS = 28  # anchor items a run at scale 1.0 (at least 2), by popularity
CANDIDATES = (4, 12)  # neighbours compared with an anchor
REC_STEP = (0.3, 2.0)  # seconds between two pairs


@dataclass
class Pass:
    """A night's backfill pass: its night (0, 1), the live items at its start in catalog
    order, their request indices (same order), its batch size and failed batch numbers, the
    retries as (request index, index of the request it repeats), the sweep as (request index,
    item), and the walks still going."""

    night: int
    items: list[int]
    batch: int
    failed: set[int]
    sent: list[int] = field(default_factory=list)
    retries: list[tuple[int, int]] = field(default_factory=list)
    sweep: list[tuple[int, int]] = field(default_factory=list)
    walks: int = 1


@dataclass
class RecRun:
    """A run of the recommendation job: its pairs as (anchor, candidate, request index)."""

    pairs: list[tuple[int, int, int]] = field(default_factory=list)


class Store(Shop):
    """The whole replica: the catalog and its feeds, the daytime work (``Shop``) and the
    batch jobs; ``run`` ends when the second night's pass has finished."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.cue = self.new(CUE)
        self.passes: list[Pass] = []
        self.recs: list[RecRun] = []
        self.rate = 0.0
        for night in (0, 1):
            self.at(night * DAY + rng.uniform(*PASS_START) * HOUR, "backfill", night)
        for day in (0.0, DAY):
            for h in REC_HOURS:
                self.at(day + h * HOUR + rng.uniform(0, 10 * MINUTE), "recs", None)

    def run(self) -> None:
        """Handle events in time order until the second night's pass and its retries and
        sweep are done."""
        while len(self.passes) < 2 or self.passes[1].walks:
            self.now, _, name, payload = heapq.heappop(self.events)
            getattr(self, "_on_" + name)(payload)

    def gap(self) -> float:
        """Seconds until the pass's next record (the job's workers keep a steady rate)."""
        return self.rng.expovariate(self.rate)

    def _on_backfill(self, night: int) -> None:
        """The night's pass starts over the live catalog in catalog order; the ERP's nightly
        price feed lands while it runs."""
        rng = self.rng
        self.rate = rng.uniform(*PASS_RATE) * self.scale
        items = self.catalog.order(self.now)
        batch = max(4, round(rng.choice(BATCH) * self.scale))
        batches = -(-len(items) // batch)
        failed = set(rng.sample(range(batches), min(batches, rng.randint(*FAILED[night]))))
        self.passes.append(Pass(night, items, batch, failed))
        self.at(self.now, "pass_step", (night, 0))
        self.at(self.now + rng.uniform(*NIGHT_FEED) * len(items) / self.rate, "reprice", "night")

    def _on_pass_step(self, arg: tuple[int, int]) -> None:
        """One record: the record as it stands, then the cue. A failed batch is retried
        later; after the last record the change-feed sweep is due."""
        night, i = arg
        p = self.passes[night]
        k = p.items[i]
        p.sent.append(self.emit("backfill", night, k, [*self.catalog.record(k, self.now),
                                                        self.cue]))
        if (i + 1) % p.batch == 0 or i + 1 == len(p.items):
            if i // p.batch in p.failed:
                p.walks += 1
                todo = p.sent[i // p.batch * p.batch:]
                self.at(self.now + self.rng.uniform(*RETRY) * MINUTE, "retry", (night, todo))
        if i + 1 < len(p.items):
            self.at(self.now + self.gap(), "pass_step", (night, i + 1))
        else:
            self.at(self.now + self.rng.uniform(*SWEEP) * MINUTE, "sweep", night)

    def _on_retry(self, arg: tuple[int, list[int]]) -> None:
        """The next record of a failed batch, sent again exactly as it was."""
        night, todo = arg
        p = self.passes[night]
        j = todo[0]
        _, _, k, segs = self.meta[j]
        p.retries.append((self.emit("retry", night, k, segs), j))
        if len(todo) > 1:
            self.at(self.now + self.gap(), "retry", (night, todo[1:]))
        else:
            p.walks -= 1

    def _on_sweep(self, night: int) -> None:
        """The change feed: the records edited after the pass sent them, in catalog order."""
        p = self.passes[night]
        todo = [(k, j) for k, j in zip(p.items, p.sent)
                if self.meta[j][3][:-1] != self.catalog.record(k, self.now)
                and self.catalog.items[k].live(self.now)]
        self.at(self.now, "sweep_step", (night, todo))

    def _on_sweep_step(self, arg: tuple[int, list[tuple[int, int]]]) -> None:
        night, todo = arg
        p = self.passes[night]
        if todo:
            k = todo[0][0]
            segs = [*self.catalog.record(k, self.now), self.cue]
            p.sweep.append((self.emit("delta", night, k, segs), k))
        if len(todo) > 1:
            self.at(self.now + self.gap(), "sweep_step", (night, todo[1:]))
        else:
            p.walks -= 1

    def _on_recs(self, _: object) -> None:
        """A run of the recommendation job: anchors by popularity, each compared with
        neighbours of its department, pair by pair."""
        rng, cat = self.rng, self.catalog
        n = max(2, round(ANCHORS * self.scale))
        anchors = dict.fromkeys(cat.popular(rng, self.now) for _ in range(n))
        pairs = [(a, c) for a in anchors for c in cat.near(rng, a, rng.randint(*CANDIDATES),
                                                             self.now)]
        self.recs.append(RecRun())
        self.at(self.now, "rec_step", (len(self.recs) - 1, pairs))

    def _on_rec_step(self, arg: tuple[int, list[tuple[int, int]]]) -> None:
        """One pair: system prompt, the anchor's record, the candidate's, the question."""
        r, pairs = arg
        if not pairs:
            return
        (a, c), t = pairs[0], self.now
        if self.catalog.items[a].live(t) and self.catalog.items[c].live(t):
            segs = [self.system["rec"], *self.catalog.record(a, t), *self.catalog.record(c, t),
                    self.instructions["rec"]]
            self.recs[r].pairs.append((a, c, self.emit("rec", r, c, segs)))
        self.at(t + self.rng.uniform(*REC_STEP), "rec_step", (r, pairs[1:]))

