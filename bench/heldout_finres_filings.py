"""bench.heldout's ``fin_research`` shape, the pipelines: earnings releases, final call
transcripts and periodic filings ingested as they drop (a summary, KPI extraction and more
stages, each re-sending the document behind the same head), validation failures sent again,
live notes over a core name's earnings call as its transcript grows, the overnight screening
job walking one template over the whole universe, and news bursts on a ticker with a digest
that grows with each article. See bench/heldout_finres.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_finres_parts import (DAY, FILING, HOUR, KPI_SHEET, MINUTE, PRESS,
                                        SECTION, Doc, World, cut, tokens)

STAGES = {"press": ("summary", "kpi", "guidance", "compare"),
          "transcript": ("summary", "guidance", "qa", "tone"),
          "10-Q": ("summary", "kpi", "risk", "compare"),
          "10-K": ("summary", "kpi", "risk", "compare")}
KIND = {"press": "press", "transcript": "transcript", "10-Q": "filing", "10-K": "filing"}
CUE = (60, 0.4, 30, 160)  # tokens of a stage's instruction (one per form and stage)
OUTPUT = {"summary": (260, 0.3, 100, 600), "guidance": (150, 0.4, 40, 400),
          "compare": (220, 0.35, 80, 500), "qa": (380, 0.3, 150, 800),
          "tone": (120, 0.4, 40, 300), "risk": (260, 0.4, 80, 600), "kpi": KPI_SHEET}
SYSTEM = {"ingest": 1100, "call": 700, "screen": 900, "news": 600, "digest": 500}
SCHEMA = (900, 0.35, 400, 1600)  # tokens of a sector's KPI schema (the "kpi" stage's)
PREFILL, DECODE = 5000.0, 40.0  # tokens a second the replica reads and writes for a stream
FAIL = 0.02  # stage outputs failing validation (bad JSON), sent again exactly
PICKUP = (5.0, 40.0)  # seconds from a document's arrival to its first stage
CHUNK = (4.0, 6.0)  # minutes of a live call per transcript chunk
SPEECH = (170, 230)  # tokens a minute of a call
POSTED = (1.5, 4.0)  # hours from a call's end to its final transcript
MODEL_AFTER = (20.0, 120.0, 0.5)  # minutes to a model update, transcript ones' chance
SCREEN_START = (60.0, 100.0)  # minutes after midnight the screening job starts
TEMPLATE = (1500, 0.35, 700, 2600)  # tokens of a screen template (criteria, format)
SAME_TEMPLATE = 0.4  # the second night re-runs the first night's screen on refreshed data
SCREEN_OUT, HITS = (140, 0.4, 50, 400), 0.12  # a screen's output; the share that are hits
BURSTS, BURST_HOURS = 3.0, (6.0, 21.0)  # news bursts a day (x scale, at least 1), when
EARNINGS_NEWS = 0.6  # bursts on a company reporting that day (else by interest)
ARTICLES, ARTICLE = (12, 0.5, 4, 40), (600, 0.5, 200, 1600)  # per burst; tokens of one
ARTICLE_GAP, DIGEST_EVERY = 6.0, 3  # mean minutes between articles; a digest every k


@dataclass
class Call:
    """A core name's earnings call with live notes: its report, the head the notes read
    (system prompt, card, the KPI sheet at the call's start), when the last chunk ended, the
    call's end, the chunks so far and the request indices."""

    report: int
    head: list[Segment]
    last: float
    end: float
    chunks: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


@dataclass
class Screen:
    """A night's screening job: its night, template, the companies left (in the universe's
    order), the request indices and the hits (company -> the screen's output)."""

    night: int
    template: Segment
    todo: list[int]
    sent: list[int] = field(default_factory=list)
    hits: dict[int, Segment] = field(default_factory=dict)


@dataclass
class Burst:
    """A news burst on a company: its articles so far and the articles' and digests'
    request indices."""

    company: int
    articles: int
    seen: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    digests: list[int] = field(default_factory=list)


class Filings(World):
    """The universe (``World``) with its pipelines: ingest, live calls, the screening job and
    news. bench.heldout_finres_desk.Desk builds on it (``_on_model`` is the desk's)."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cues = {(f, s): self.new(clipped_length(rng, *CUE)) for f, st in STAGES.items()
                     for s in st}
        self.cues[("call", "")] = self.new(clipped_length(rng, *CUE))
        self.cues[("screen", "")] = self.new(clipped_length(rng, *CUE))
        self.cues[("news", "")], self.cues[("digest", "")] = self.new(50), self.new(70)
        sectors = 1 + max(c.sector for c in self.companies)
        self.schemas = [self.new(clipped_length(rng, *SCHEMA)) for _ in range(sectors)]
        self.retries: list[tuple[int, int]] = []  # (request index, the request it repeats)
        self.calls: list[Call] = []
        self.screens: list[Screen] = []
        self.bursts: list[Burst] = []
        for i, r in enumerate(self.reports):
            self.at(r.release, "release", i)
            self.at(r.call, "call", i)
            if r.filed is not None:
                self.at(r.filed, "filed", i)
        for day in (0, 1):
            self.at(day * DAY + rng.uniform(*SCREEN_START) * MINUTE, "screen", day)
            for _ in range(max(1, round(BURSTS * scale * rng.uniform(0.7, 1.3)))):
                self.at(day * DAY + rng.uniform(*BURST_HOURS) * HOUR, "burst", None)

    def prompt(self, d: int, stage: str) -> list[Segment]:
        """A stage's prompt: the ingest system prompt, the company's card, the document, what
        the stage adds (the sector's KPI schema; the KPI sheet before the document and the
        new one; the previous filing's risk factors) and the stage's instruction."""
        doc = self.docs[d]
        co = self.companies[doc.company]
        extra = {"kpi": [self.schemas[co.sector]], "risk": [doc.risks],
                 "compare": [doc.prior, doc.outputs.get("kpi")]}.get(stage, [])
        return [self.system["ingest"], co.card, *doc.sections, *extra,
                self.cues[(doc.form, stage)]]

    def arrive(self, c: int, form: str, sections: list[Segment]) -> int:
        """A document arrives; the pipeline picks it up seconds later. Its index."""
        co = self.companies[c]
        self.docs.append(Doc(c, form, self.now, sections, co.kpi.current[0]))
        self.at(self.now + self.rng.uniform(*PICKUP), "stage", (len(self.docs) - 1, 0, -1))
        return len(self.docs) - 1

    def _on_release(self, i: int) -> None:
        r = self.reports[i]
        co = self.companies[r.company]
        co.press.versions.append((self.now, cut(self.rng, self.new,
                                                clipped_length(self.rng, *PRESS), SECTION)))
        self.arrive(r.company, "press", co.press.current)

    def _on_filed(self, i: int) -> None:
        r = self.reports[i]
        co = self.companies[r.company]
        risks = co.filing.current[-1]
        co.filing.versions.append((self.now, cut(
            self.rng, self.new, clipped_length(self.rng, *FILING[r.form]), SECTION)))
        self.docs[self.arrive(r.company, r.form, co.filing.current)].risks = risks

    def _on_stage(self, arg: tuple[int, int, int]) -> None:
        """A stage of a document, or the exact re-send of request ``j`` (-1: none) whose
        output failed validation; the next stage follows the output."""
        d, k, j = arg
        doc, rng = self.docs[d], self.rng
        stage = STAGES[doc.form][k]
        segs = self.prompt(d, stage) if j < 0 else self.meta[j][3]
        i = self.emit(KIND[doc.form] if j < 0 else "retry", d, k, segs)
        doc.sent.setdefault(stage, []).append(i)
        if j >= 0:
            self.retries.append((i, j))
        out = clipped_length(rng, *OUTPUT[stage])
        wait = tokens(segs) / PREFILL + out / DECODE
        if j < 0 and rng.random() < FAIL:
            self.at(self.now + wait + rng.uniform(1, 3), "stage", (d, k, i))
            return
        self.finish(d, stage, self.new(out))
        if k + 1 < len(STAGES[doc.form]):
            self.at(self.now + wait + rng.uniform(0.5, 3), "stage", (d, k + 1, -1))

    def finish(self, d: int, stage: str, out: Segment) -> None:
        """A stage's output: a KPI stage's is the company's new KPI sheet; a guidance stage
        sends the analyst of a core name to the model (a release that changes guidance,
        and some transcripts)."""
        doc = self.docs[d]
        doc.outputs[stage] = out
        co = self.companies[doc.company]
        if stage == "kpi":
            co.kpi.versions.append((self.now, [out]))
        if stage != "guidance" or not co.core:
            return
        r = next(r for r in self.reports if r.company == doc.company)
        if (r.guidance and doc.form == "press") or (doc.form == "transcript"
                                                    and self.rng.random() < MODEL_AFTER[2]):
            self.at(self.now + self.rng.uniform(*MODEL_AFTER[:2]) * MINUTE, "model", d)

    def _on_call(self, i: int) -> None:
        """The call starts: live notes for a core name; the final transcript hours after."""
        r, rng = self.reports[i], self.rng
        co = self.companies[r.company]
        end = self.now + r.length * MINUTE
        self.at(end + rng.uniform(*POSTED) * HOUR, "transcript", i)
        if co.core:
            head = [self.system["call"], co.card, co.kpi.current[0]]
            self.calls.append(Call(i, head, self.now, end))
            self.at(self.now + rng.uniform(*CHUNK) * MINUTE, "chunk", len(self.calls) - 1)

    def _on_chunk(self, n: int) -> None:
        """The next chunk of the live transcript (the last one at the call's end): notes
        over the head, every chunk so far and the instruction."""
        call, rng = self.calls[n], self.rng
        spoken = (self.now - call.last) / MINUTE * rng.uniform(*SPEECH)
        call.chunks.append(self.new(max(50, round(spoken))))
        call.last = self.now
        segs = [*call.head, *call.chunks, self.cues[("call", "")]]
        call.sent.append(self.emit("call", n, len(call.sent), segs))
        if self.now < call.end:
            self.at(min(call.end, self.now + rng.uniform(*CHUNK) * MINUTE), "chunk", n)

    def _on_transcript(self, i: int) -> None:
        """The vendor's final transcript (speakers named, cleaned): new text, ingested."""
        r, rng = self.reports[i], self.rng
        total = round(r.length * rng.uniform(*SPEECH))
        self.arrive(r.company, "transcript", cut(rng, self.new, total, SECTION))

    def _on_screen(self, night: int) -> None:
        """The screening job: one template (the first night's again, or a new one) over
        every company in the universe's order, one request after the other."""
        same = night and self.rng.random() < SAME_TEMPLATE
        template = self.screens[0].template if same else self.new(
            clipped_length(self.rng, *TEMPLATE))
        self.screens.append(Screen(night, template, list(range(len(self.companies)))))
        self.at(self.now, "screen_step", len(self.screens) - 1)

    def _on_screen_step(self, n: int) -> None:
        """A company's screen: system prompt, template, card, the KPI sheet as it stands,
        the instruction; the next after reading and writing (x 1/scale: as long at any
        scale)."""
        job, rng = self.screens[n], self.rng
        c = job.todo.pop(0)
        co = self.companies[c]
        segs = [self.system["screen"], job.template, co.card, *co.kpi.current,
                self.cues[("screen", "")]]
        job.sent.append(self.emit("screen", c, job.night, segs))
        out = clipped_length(rng, *SCREEN_OUT)
        if rng.random() < HITS:
            job.hits[c] = self.new(out)
        if job.todo:
            wait = (tokens(segs) / PREFILL + out / DECODE) * rng.uniform(0.8, 1.25)
            self.at(self.now + wait / self.scale, "screen_step", n)

    def _on_burst(self, _: object) -> None:
        """News on a ticker: a company reporting today more often than not."""
        rng, day = self.rng, self.now // DAY
        today = [r.company for r in self.reports if r.release // DAY == day]
        c = rng.choice(today) if today and rng.random() < EARNINGS_NEWS else self.pick()
        self.bursts.append(Burst(c, clipped_length(rng, *ARTICLES)))
        self.at(self.now, "article", len(self.bursts) - 1)

    def _on_article(self, n: int) -> None:
        """An article is tagged (system prompt, card, article, instruction); every
        DIGEST_EVERY articles and at the last, the alert digest re-sends all of them."""
        b, rng = self.bursts[n], self.rng
        card = self.companies[b.company].card
        b.seen.append(art := self.new(clipped_length(rng, *ARTICLE)))
        b.sent.append(self.emit("news", n, len(b.sent), [self.system["news"], card, art,
                                                          self.cues[("news", "")]]))
        if len(b.seen) % DIGEST_EVERY == 0 or len(b.seen) == b.articles:
            segs = [self.system["digest"], card, *b.seen, self.cues[("digest", "")]]
            b.digests.append(self.emit("digest", n, len(b.seen), segs))
        if len(b.seen) < b.articles:
            self.at(self.now + rng.expovariate(1 / ARTICLE_GAP) * MINUTE + 1, "article", n)
