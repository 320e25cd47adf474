"""bench.heldout's ``ad_creative`` shape, the platform's requests on the clock: bulk generation
jobs walking a campaign's cells variant by variant, the seasonal event's wave of jobs behind
the shared template, the nightly A/B refresh re-generating the losing variants with the
winners pasted in, marketers' editing sessions re-sent whole with the current draft, and
policy reviews of what was generated (and of a region's live ads when its policy changes). See
bench/heldout_ad_creative.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_ad_creative_world import (DAY, END, FORMATS, HOUR, MINUTE, Layout, World,
                                             week_times)
from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_lab_world import WORK

RATE = 60.0  # tokens a second a variant or reply decodes at
GAP = 0.3  # seconds between one request's end and a job's next
ANGLES = (8, (40, 0.4, 15, 90))  # a job's angle cues ("variant 3: urgency"), tokens each
NEW_CAMPAIGN = 0.45  # share of bulk jobs for a new campaign (else one already running)
REVIEW = 900  # the policy reviewer's prompt and rubric
REVIEW_DELAY = (5.0, 30.0)  # seconds after a cell's variants change
REVIEW_OUT = 120  # tokens of a review's verdicts
SWEEP_DELAY = (10 * MINUTE, 30 * MINUTE)  # a policy rewrite to its re-check sweep
AB_AT = (3.0, 3.5)  # local hours the nightly A/B refresh starts
AB_AGE = 12 * HOUR  # a test needs this long live before a refresh
AB_NIGHT = 0.3  # chance a tested cell's test concludes on a night (then it is refreshed)
AB_CUE = 60  # "rewrite this losing variant in the winners' manner"
WINNERS = 3  # winners pasted at most
LOSERS = (1, 2)  # losers re-generated per tested cell
SEASON_AT = (9.0, 10.0)  # local hours the seasonal event launches
SEASON_TAU = 20 * MINUTE  # mean delay of a participant's job after the launch
SEASON_FORMATS = (1, 2)
EDIT = 600  # the editing assistant's prompt
# turns, message tokens, reply tokens (median, sigma, lo, hi), pause (median s, sigma)
CHAT = ((4, 0.6, 1, 12), (35, 0.8, 5, 300), (140, 0.5, 30, 600), (60.0, 0.9))
MAX_CONTEXT = 24000  # tokens of a session's prompt that end it


@dataclass
class Job:
    """A generation job (bulk, or seasonal) over a campaign: its cells in order and the
    variants it writes in each, its angle shift, the outputs so far of the cell it is in,
    and its requests."""

    kind: str
    campaign: int
    plan: list[tuple[int, int]]  # (cell, variants)
    shift: int
    outs: list[Segment] = field(default_factory=list)
    done: int = 0  # cells finished
    sent: list[int] = field(default_factory=list)


@dataclass
class Refresh:
    """A night's A/B refresh: the tested cells it walks in order; the plan of the cell it is
    in as (winners, loser) pairs; its requests as (cell, winners, loser, request)."""

    todo: list[int]
    queue: list[tuple[int, tuple[Segment, ...], Segment]] = field(default_factory=list)
    sent: list[tuple[int, tuple[Segment, ...], Segment, int]] = field(default_factory=list)


@dataclass
class EditChat(Chat):
    """A marketer's editing session (owner: the cell) with its drafts, one a turn (the first
    a live variant of the cell)."""

    drafts: list[Segment] = field(default_factory=list)


class Desk(World):
    """The whole replica: the world and the platform's requests."""

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, scale, layout)
        new, days = self.new, int(self.END // DAY)
        self.angles = [new(clipped_length(rng, *ANGLES[1])) for _ in range(ANGLES[0])]
        self.reviewer, self.editor, self.ab_cue = new(REVIEW), new(EDIT), new(AB_CUE)
        self.review_cue = new(40)
        self.jobs: list[Job] = []
        self.refreshes: list[Refresh] = []
        self.chats: list[EditChat] = []
        # (campaign, cells, why, request)
        self.reviews: list[tuple[int, tuple[int, ...], str, int]] = []
        self.season: list[int] = []  # the seasonal event's jobs
        self.launch = END  # when the seasonal event launched
        for t in week_times(rng, layout.per_day[0] * scale, WORK, days):
            self.at(t, "job", None)
        for t in week_times(rng, layout.per_day[1] * scale, WORK, days):
            self.at(t, "edit", None)
        for day in range(days):
            self.at((24 * day + rng.uniform(*AB_AT)) * HOUR, "refresh", day)
        self.at((24 * layout.seasonal[1] + rng.uniform(*SEASON_AT)) * HOUR, "season", None)

    def an_advertiser(self, ok=lambda a: True) -> int | None:
        """An advertiser by activity weight among those ``ok`` accepts (None if none)."""
        pool = [a for a in range(len(self.advertisers)) if ok(a)]
        if not pool:
            return None
        return self.rng.choices(pool, [self.advertisers[a].weight for a in pool])[0]

    def start_job(self, kind: str, c: int, when: float) -> int:
        """A job over campaign ``c``'s cells, each with its format's variants, from ``when``."""
        rng = self.rng
        plan = [(k, rng.randint(*FORMATS[self.cells[k].format].variants))
                for k in self.campaigns[c].cells]
        self.jobs.append(Job(kind, c, plan, rng.randrange(ANGLES[0])))
        self.at(when, "step", len(self.jobs) - 1)
        return len(self.jobs) - 1

    def _on_job(self, _) -> None:
        """A marketer starts a bulk job: a new campaign, or more variants for a running one."""
        a = self.an_advertiser()
        adv = self.advertisers[a]
        running = [c for c in adv.campaigns if self.campaigns[c].brief]
        if not running or self.rng.random() < NEW_CAMPAIGN:
            running = [self.add_campaign(a)]
        self.start_job("bulk", self.rng.choice(running), self.now)

    # NOTE(ad-variants): a job writes a cell's variants one request at a time, each with an
    # angle cue and, so that it does not repeat itself, the variants it wrote before in that
    # cell pasted before the cue (this writer's guess at how a platform keeps variants
    # diverse); a cell's variants go live, replacing the old ones, when the cell is done.
    def _on_step(self, j: int) -> None:
        """A job's next variant: head, format spec, locale guide, the cell's variants so far
        in this job, the angle cue (NOTE(ad-variants)); the next after it is decoded."""
        job = self.jobs[j]
        k, n = job.plan[job.done]
        cue = self.angles[(job.shift + len(job.outs)) % len(self.angles)]
        segs = [*self.head(job.campaign), *self.task(k), *job.outs, cue]
        job.sent.append(self.emit(job.kind, j, len(job.sent), segs))
        out = self.new(clipped_length(self.rng, *FORMATS[self.cells[k].format].output))
        job.outs.append(out)
        if len(job.outs) == n:
            self.go_live(k, job.outs)
            job.outs, job.done = [], job.done + 1
        if job.done < len(job.plan):
            self.at(self.now + out[1] / RATE + GAP, "step", j)

    def go_live(self, k: int, variants: list[Segment]) -> None:
        """Cell ``k``'s new variants go live (an A/B test on them by the layout's share) and
        are reviewed."""
        cell = self.cells[k]
        cell.variants, cell.since = list(variants), self.now
        cell.tested = self.rng.random() < self.layout.ab
        self.review_soon(k, "new")

    def review_soon(self, k: int, why: str) -> None:
        """A review of cell ``k``'s live variants, seconds after they changed."""
        c = self.cells[k].campaign
        self.at(self.now + self.rng.uniform(*REVIEW_DELAY), "review", (c, (k,), why))

    def _on_review(self, arg: tuple[int, tuple[int, ...], str]) -> None:
        """A policy review of a campaign's cells' live variants: the reviewer's prompt, the
        advertiser's policies as they stand, the variants cell by cell, the cue."""
        c, cells, why = arg
        step = sum(r[0] == c for r in self.reviews)
        ads = [v for k in cells for v in self.cells[k].variants]
        segs = [self.reviewer, *self.policies(self.campaigns[c].advertiser), *ads,
                self.review_cue]
        self.reviews.append((c, cells, why, self.emit("review", c, step, segs)))

    def policy_changed(self, region: int) -> None:
        """Re-check every live campaign of the region's advertisers, one after another, all
        its live cells in one review."""
        t = self.now + self.rng.uniform(*SWEEP_DELAY)
        for c, camp in enumerate(self.campaigns):
            cells = tuple(k for k in camp.cells if self.cells[k].variants)
            if cells and self.advertisers[camp.advertiser].region == region:
                t += REVIEW_OUT / RATE + GAP
                self.at(t, "review", (c, cells, "policy"))

    def _on_season(self, _) -> None:
        """The seasonal event launches: the layout's share of the advertisers (at least 3)
        each get a seasonal campaign (1..2 formats) and its job minutes later."""
        rng, share = self.rng, self.layout.seasonal[0]
        self.launch = self.now
        n = min(len(self.advertisers), max(3, round(share * len(self.advertisers))))
        for a in sorted(rng.sample(range(len(self.advertisers)), n)):
            c = self.add_campaign(a, seasonal=True, formats=rng.randint(*SEASON_FORMATS))
            when = self.now + rng.expovariate(1.0 / SEASON_TAU)
            self.season.append(self.start_job("seasonal", c, when))

    def _on_refresh(self, day: int) -> None:
        """The night's A/B refresh: every tested cell live for AB_AGE or longer, in order."""
        todo = [k for k, c in enumerate(self.cells)
                if c.tested and len(c.variants) >= 2 and c.since <= self.now - AB_AGE
                and self.rng.random() < AB_NIGHT]
        self.refreshes.append(Refresh(todo))
        self._on_ab(len(self.refreshes) - 1)

    def plan_cell(self, ref: Refresh) -> None:
        """The refresh's next cell: its variants ranked by the night's results, the top ones
        (up to WINNERS, best first) pasted for each of its 1..2 losers."""
        k = ref.todo.pop(0)
        ranked = list(self.cells[k].variants)
        self.rng.shuffle(ranked)
        w = min(WINNERS, len(ranked) - 1)
        lose = min(self.rng.randint(*LOSERS), len(ranked) - w)
        ref.queue = [(k, tuple(ranked[:w]), x) for x in ranked[len(ranked) - lose:]]

    # NOTE(ad-ab): an A/B refresh re-writes a losing variant behind the campaign's head and
    # the cell's task, with the winners pasted in best first, then the loser and the cue
    # (this writer's guess): the winners' order follows each night's results.
    def _on_ab(self, r: int) -> None:
        """The refresh's next loser: head, task, winners, the loser, the cue
        (NOTE(ad-ab)); its new variant takes the loser's place; the next after it."""
        ref = self.refreshes[r]
        if not ref.queue:
            if not ref.todo:
                return
            self.plan_cell(ref)
        k, winners, loser = ref.queue.pop(0)
        cell = self.cells[k]
        segs = [*self.head(cell.campaign), *self.task(k), *winners, loser, self.ab_cue]
        ref.sent.append((k, winners, loser, self.emit("abtest", r, len(ref.sent), segs)))
        out = self.new(clipped_length(self.rng, *FORMATS[cell.format].output))
        if loser in cell.variants:
            cell.variants[cell.variants.index(loser)] = out
        if not ref.queue:
            cell.since = self.now
            self.review_soon(k, "ab")
        self.at(self.now + out[1] / RATE + GAP, "ab", r)

    def _on_edit(self, _) -> None:
        """A marketer opens a live variant of one of their campaigns in the editor."""
        def live(a: int) -> list[int]:
            return [k for c in self.advertisers[a].campaigns for k in self.campaigns[c].cells
                    if self.cells[k].variants]
        a = self.an_advertiser(lambda a: bool(live(a)))
        if a is None:
            return
        k = self.rng.choice(live(a))
        chat = EditChat("edit", k, clipped_length(self.rng, *CHAT[0]), [],
                        drafts=[self.rng.choice(self.cells[k].variants)])
        self.chats.append(chat)
        self._on_turn(len(self.chats) - 1)

    # NOTE(ad-edit-draft): an editing turn re-sends the whole chat and the draft as it stands
    # (the marketer edits it between turns, so each turn's draft is new): on a layout with
    # ``draft_in_head`` the draft sits before the chat (in the system part, as a canvas-style
    # editor might put it), else after it, just before the message (this writer's guesses).
    def _on_turn(self, n: int) -> None:
        """A turn: head, the editing prompt, the cell's task, the draft and the chat in the
        layout's order, the message (NOTE(ad-edit-draft)); at the end the last draft
        replaces the variant the session opened and is reviewed."""
        chat, rng = self.chats[n], self.rng
        k = chat.owner
        cell = self.cells[k]
        head = [*self.head(cell.campaign), self.editor, *self.task(k)]
        draft, msg = chat.drafts[-1], self.new(clipped_length(rng, *CHAT[1]))
        tail = [draft, *chat.history] if self.layout.draft_in_head else [*chat.history, draft]
        segs = [*head, *tail, msg]
        chat.sent.append(self.emit("edit", n, len(chat.sent), segs))
        reply = self.new(clipped_length(rng, *CHAT[2]))
        chat.history += [msg, reply]
        chat.turns -= 1
        chat.drafts.append(self.new(clipped_length(rng, *FORMATS[cell.format].output)))
        if chat.turns > 0 and sum(t for _, t in segs) < MAX_CONTEXT:
            self.at(self.now + reply[1] / RATE + rng.lognormvariate(0.0, CHAT[3][1])
                    * CHAT[3][0], "turn", n)
            return
        old = chat.drafts[0]
        at = cell.variants.index(old) if old in cell.variants else len(cell.variants)
        cell.variants[at:at + 1] = [chat.drafts[-1]]
        self.review_soon(k, "edit")
