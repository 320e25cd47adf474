"""bench.heldout's ``news_desk`` shape, the publishing pipeline: every wire version triaged
against the priorities memo, staff stories filed, edited, fact-checked claim by claim against
their source documents and archive, published and updated, headline and SEO variants at each
publish and update, top stories translated into each language edition, and the newsletters'
batch walks over the day's stories. See bench/heldout_news_desk.py's docstring for the
numbers."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_parts import pick
from bench.heldout_newsd_world import (DAY, DEK, DESK_SHARE, DESKS, HOUR, MINUTE, NEWSROOM,
                                       STAFF_PARAS, UPDATE_OPS, WIRE_HOURS, WIRE_PARAS, World,
                                       paragraphs)

SYSTEM = {"wire": 800, "headline": 700, "translate": 450, "factcheck": 1000,
          "newsletter": 650}  # tokens of each job's system prompt
HED_GUIDE = 900  # tokens of the headline and SEO guide
CUES = 8  # headline variants (web, SEO title, meta description, social x2, push, subject, A/B)
CUE = (40, 0.3, 20, 80)  # tokens of a headline cue; the wire, translate and newsletter cues
OUTPUT = {"wire": (150, 0.4, 60, 400), "headline": (60, 0.4, 20, 160),
          "factcheck": (220, 0.4, 80, 600), "newsletter": (90, 0.3, 40, 200),
          "translate": (1100, 0.5, 100, 4000)}  # tokens each job writes
PREFILL, DECODE = 6000.0, 40.0  # tokens a second the replica reads and writes for a job
STAFF = 85  # staff stories filed a day at scale 1.0 (by NEWSROOM)
PRIOR = 160  # stories published the day before the clock, at scale 1.0
WIRE = 280  # wire stories a day at scale 1.0 (by WIRE_HOURS)
WIRE_VERSIONS = ((0, 0.45), (1, 0.25), (2, 0.14), (3, 0.08), (4, 0.05), (6, 0.03))
WIRE_GAP = (40 * MINUTE, 0.9, 5 * MINUTE, 6 * HOUR)  # between a wire story's versions
PICKUP = 0.12  # wire stories the site publishes, 10..40 minutes after they arrive
EDITS = ((0, 0.2), (1, 0.4), (2, 0.3), (3, 0.1))  # editing passes before publishing
EDIT_GAP = (10 * MINUTE, 60 * MINUTE)  # between a filing's edits, and before publishing
UPDATES = (0.35, (1, 3))  # published staff stories updated later, and how often
UPDATE_GAP = (1.5 * HOUR, 0.8, 30 * MINUTE, 8 * HOUR)
DOCS = 0.25  # staff stories with source documents (fact-checked)
DOC = (2500, 0.7, 600, 10000)  # tokens of a source document, in SECTION-token sections
SECTION = 800
DOC_COUNT = (1, 3)
FC_CHUNKS = (3, 8)  # archive chunks a fact-check reads
CLAIMS = (4, 0.5, 2, 12)  # claims checked in a pass, one request each
CLAIM = (70, 0.5, 25, 200)  # tokens of a claim and its question
RECHECK = (0.7, 0.3)  # fact-check again after the edits, after an update
VARIANTS = ((4, 0.4, 2, 8), (1, 3))  # headline variants at publishing, at an update
CLICK = (0.2, 3.0)  # seconds between the variants of one run (fired together)
RETRANSLATE = 45 * MINUTE  # an event story is translated again after this long
# name, local hour, stories, desk (None: all), voice guide tokens
NEWSLETTERS = (("morning", 6.0, 30, None), ("politics", 6.5, 12, 0), ("business", 6.75, 12, 1),
               ("sports", 7.5, 10, 4), ("evening", 17.5, 25, None))
VOICE = (800, 0.4, 300, 2000)


@dataclass
class Walk:
    """A job's requests one after another: kind, owner, items, ``build(item)`` -> (step,
    segments), the seconds between two (None: the job's pace, else a range), what runs after
    the last, how far it is and its request indices."""

    kind: str
    owner: int
    items: list
    build: Callable[[object], tuple[int, list[Segment]]]
    gap: tuple[float, float] | None = None
    then: Callable[[], None] | None = None
    pos: int = 0
    sent: list[int] = field(default_factory=list)


@dataclass
class Edition:
    """A newsletter edition: the newsletter, its stories in rank order, the blurbs written."""

    letter: int
    picks: list[int]
    walk: Walk | None = None
    blurbs: list[Segment] = field(default_factory=list)


def sections(new: Callable, total: int) -> list[Segment]:
    """``total`` tokens in sections of about SECTION tokens."""
    k = max(1, round(total / SECTION))
    return [new(total // k + (i < total % k)) for i in range(k)]


class Jobs(World):
    """The world (``World``) and the publishing pipeline."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        new = self.new
        self.system = {k: new(n) for k, n in SYSTEM.items()}
        self.hed_guide = new(HED_GUIDE)
        self.cues = [new(clipped_length(rng, *CUE)) for _ in range(CUES)]
        self.wire_cue, self.blurb_cue, self.letter_cue = (new(clipped_length(rng, *CUE))
                                                          for _ in range(3))
        self.tr_cues = [new(clipped_length(rng, *CUE)) for _ in self.langs]
        self.voices = [new(clipped_length(rng, *VOICE)) for _ in NEWSLETTERS]
        self.runs: list[tuple[int, int, Walk]] = []  # headline runs: (story, version, walk)
        self.translations: list[tuple[int, int, Walk]] = []  # (story, version, walk)
        self.checks: list[tuple[int, int, Walk]] = []  # fact-check passes: (story, pass, walk)
        self.editions: list[Edition] = []
        self.translated: dict[int, float] = {}
        self.arrivals(STAFF, NEWSROOM, "staff", None)
        self.arrivals(WIRE, WIRE_HOURS, "wire", None)
        for d in (0, 1):
            for k, letter in enumerate(NEWSLETTERS):
                self.at(d * DAY + letter[1] * HOUR, "newsletter", k)
        self._prior()

    def _prior(self) -> None:
        """Yesterday's published stories (one version each), still on the site."""
        rng = self.rng
        for _ in range(round(PRIOR * self.scale * rng.uniform(0.9, 1.1))):
            self.now = -DAY + rng.choices(range(24), NEWSROOM)[0] * HOUR + rng.uniform(0, HOUR)
            n = self.story("prior", self.topic_of(None), rng.lognormvariate(0.0, 0.8),
                           paragraphs(rng, self.new, clipped_length(rng, *STAFF_PARAS)))
            self.stories[n].published = self.now
            self.dek(n)
        self.now = 0.0

    def walk(self, w: Walk) -> Walk:
        self.at(self.now, "walk", w)
        return w

    def _on_walk(self, w: Walk) -> None:
        """A walk's next request; the next (or ``then``) follows at the job's pace (reading
        the prompt, writing the output) or after its ``gap``."""
        step, segs = w.build(w.items[w.pos])
        w.sent.append(self.emit(w.kind, w.owner, step, segs))
        w.pos += 1
        if w.gap:
            wait = self.rng.uniform(*w.gap)
        else:
            work = sum(n for _, n in segs) / PREFILL
            wait = work + clipped_length(self.rng, *OUTPUT[w.kind]) / DECODE
            wait *= self.rng.uniform(0.8, 1.25)
        if w.pos < len(w.items):
            self.at(self.now + wait, "walk", w)
        elif w.then:
            self.at(self.now + wait, "call", w.then)

    def _on_call(self, f: Callable[[], None]) -> None:
        f()

    def _on_wire(self, topic: int | None) -> int:
        """A wire story arrives (on ``topic``, else one by popularity): triaged, versions to
        come, maybe picked up by the site."""
        rng = self.rng
        topic = self.topic_of(None) if topic is None else topic
        n = self.story("wire", topic, rng.lognormvariate(-0.6, 0.8),
                       paragraphs(rng, self.new, clipped_length(rng, *WIRE_PARAS)))
        self.triage(n)
        t = self.now
        for _ in range(pick(rng, WIRE_VERSIONS)):
            t += clipped_length(rng, *WIRE_GAP)
            self.at(t, "update", n)
        if rng.random() < PICKUP:
            self.at(self.now + rng.uniform(10, 40) * MINUTE, "publish", n)
        return n

    def triage(self, n: int) -> None:
        """The wire desk's triage of story ``n``'s version: system prompt, the priorities
        memo as it stands, the version, the cue."""
        s = self.stories[n]
        segs = [self.system["wire"], *self.memo.at(self.now), *s.text.current, self.wire_cue]
        self.emit("wire", n, len(s.ops) - 1, segs)

    def _on_staff(self, _: None) -> int:
        """A reporter files a story: fact-checked if it has source documents, edited 0..3
        times, then published."""
        rng = self.rng
        desk = rng.choices(range(len(DESKS)), DESK_SHARE)[0]
        n = self.story("staff", self.topic_of(desk), rng.lognormvariate(0.0, 0.8),
                       paragraphs(rng, self.new, clipped_length(rng, *STAFF_PARAS)))
        self.file(n, pick(rng, EDITS), rng.random() < DOCS)
        return n

    def file(self, n: int, edits: int, docs: bool) -> None:
        """Story ``n`` filed now: its source documents and a first fact-check if ``docs``,
        ``edits`` editing passes, publishing after them."""
        rng, s = self.rng, self.stories[n]
        if docs:
            for _ in range(rng.randint(*DOC_COUNT)):
                s.docs += sections(self.new, clipped_length(rng, *DOC))
            chunks, k = self.archive[s.topic], rng.randint(*FC_CHUNKS)
            if chunks:
                weights = [1 / (r + 1) for r in range(len(chunks))]
                s.archive = list(dict.fromkeys(rng.choices(chunks, weights, k=k)))
            self.factcheck(n)
        t = self.now
        for _ in range(edits):
            t += rng.uniform(*EDIT_GAP)
            self.at(t, "edit", n)
        self.at(t + rng.uniform(5, 30) * MINUTE, "publish", n)

    def _on_edit(self, n: int) -> None:
        self.version(n, "edit")

    def _on_publish(self, n: int) -> None:
        """Story ``n`` goes live: headline variants, a translation if a top story, a second
        fact-check after edits, later updates for a staff story."""
        rng, s = self.rng, self.stories[n]
        s.published = self.now
        self.headlines(n, clipped_length(rng, *VARIANTS[0]))
        if s.top:
            self.translate(n)
        if s.docs and len(s.ops) > 1 and rng.random() < RECHECK[0]:
            self.factcheck(n)
        main = s.event >= 0 and self.news[s.event].story == n
        if s.source == "staff" and not main and rng.random() < UPDATES[0]:
            t = self.now
            for _ in range(rng.randint(*UPDATES[1])):
                t += clipped_length(rng, *UPDATE_GAP)
                self.at(t, "update", n)

    def _on_update(self, n: int) -> None:
        """A new version of story ``n`` (a wire version, a staff update): triaged if wire;
        if published, new headline variants, a new translation if its top changed."""
        s = self.stories[n]
        op = pick(self.rng, UPDATE_OPS["event" if s.event >= 0 else s.source])
        self.version(n, op)
        if s.source == "wire":
            self.triage(n)
        if s.published > self.now:
            return
        self.headlines(n, self.rng.randint(*VARIANTS[1]))
        late = self.now - self.translated.get(n, -math.inf) >= RETRANSLATE
        if s.top and (op == "top" or (s.event >= 0 and late)):
            self.translate(n)
        if s.docs and self.rng.random() < RECHECK[1]:
            self.factcheck(n)

    def headlines(self, n: int, k: int) -> None:
        """``k`` headline and SEO variants of story ``n``'s version, fired together: system
        prompt, the headline guide, the story, a variant's cue. The chosen one is the new
        headline and summary."""
        s, v = self.stories[n], len(self.stories[n].ops) - 1
        head = [self.system["headline"], self.hed_guide, *s.text.current]
        cues = self.rng.sample(range(CUES), min(k, CUES))
        w = Walk("headline", n, cues, lambda c: (v, [*head, self.cues[c]]), CLICK)
        self.runs.append((n, v, self.walk(w)))
        s.deks.append((self.now, self.new(clipped_length(self.rng, *DEK))))

    def translate(self, n: int) -> None:
        """Story ``n``'s version into each language edition in turn: system prompt, the
        language's glossary and style notes, the story, the language's cue."""
        s, v = self.stories[n], len(self.stories[n].ops) - 1
        paras, sys = s.text.current, self.system["translate"]
        w = Walk("translate", n, list(range(len(self.langs))),
                 lambda k: (k, [sys, self.langs[k], *paras, self.tr_cues[k]]))
        self.translations.append((n, v, self.walk(w)))
        self.translated[n] = self.now

    def factcheck(self, n: int) -> None:
        """A fact-check pass over story ``n``'s version, claim by claim: system prompt, the
        source documents, the archive chunks, the story, the claim."""
        rng, s = self.rng, self.stories[n]
        p = sum(1 for m, _, _ in self.checks if m == n)
        head = [self.system["factcheck"], *s.docs, *s.archive, *s.text.current]
        claims = [self.new(clipped_length(rng, *CLAIM)) for _ in range(clipped_length(rng,
                                                                                     *CLAIMS))]
        w = Walk("factcheck", n, claims, lambda c: (p, [*head, c]))
        self.checks.append((n, p, self.walk(w)))

    def _on_newsletter(self, k: int) -> None:
        """A newsletter's edition: its desk's (or every desk's) most newsworthy published
        stories in rank order, a blurb each (system prompt, the voice guide, the story as it
        stands, the cue), then the assembly over the blurbs."""
        desk = NEWSLETTERS[k][3]
        ids, scores = self.hot()
        ranked = sorted((-sc, n) for n, sc in zip(ids, scores)
                        if desk is None or self.stories[n].desk == desk)
        ed = Edition(k, [n for _, n in ranked[:NEWSLETTERS[k][2]]])
        if not ed.picks:
            return
        self.editions.append(ed)
        e, head = len(self.editions) - 1, [self.system["newsletter"], self.voices[k]]

        def blurb(n: int) -> tuple[int, list[Segment]]:
            ed.blurbs.append(self.new(clipped_length(self.rng, *OUTPUT["newsletter"])))
            return len(ed.blurbs) - 1, [*head, *self.stories[n].text.at(self.now),
                                        self.blurb_cue]

        def assemble() -> None:
            segs = [*head, *ed.blurbs, self.letter_cue]
            ed.walk.sent.append(self.emit("newsletter", e, len(ed.picks), segs))
        ed.walk = self.walk(Walk("newsletter", e, ed.picks, blurb, then=assemble))
