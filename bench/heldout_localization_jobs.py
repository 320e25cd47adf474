"""bench.heldout's ``localization`` shape, the job scheduler: CI pushes of new UI strings into
every locale at once, writers' published edits (only the changed sections re-run, each behind
the section before it), new pages and content drops (hours of work), the string-freeze release
job each cadence's morning, QA checks walking a finished job's items again, and nightly
glossary audits over the whole corpus in one locale. A job walks its items document-major or
language-major (the customer's setting) with a few requests in flight. See
bench/heldout_localization.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_bi_parts import next_local, weekday
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import revise
from bench.heldout_localization_desk import Desk, Unit
from bench.heldout_localization_parts import (DAY, FACTOR, HOUR, LOCALES, PREFILL, RATE,
                                              STRING_TOKENS, STRINGS, make_doc)
from bench.heldout_meeting_parts import poisson

PUSHES = 1.5  # CI pushes of new strings a customer of mean size makes a weekday
PUBLISHES = 0.8  # batches of published page edits a customer of mean size makes a weekday
DROPS = 0.03  # content drops (a docs section, a campaign) a customer makes a weekday
WORKERS = {"push": 8, "translate": 4, "release": 8, "qa": 4, "audit": 2}  # in flight
AUDITED = 2  # customers with a nightly audit: the largest (scaled, at least 1)
CHUNK = 2500  # source tokens a whole-page translation request holds at most
CHECKS = {1: ("terminology",), 2: ("terminology", "consistency")}  # a customer's QA
OUTPUT = {"qa": (120, 0.6, 30, 600), "audit": (150, 0.7, 30, 800)}  # reply tokens
Item = tuple[Unit, str, str, int]  # (unit, locale, instruction, document)


@dataclass
class Job:
    """A job of a customer: "push", "translate", "release", "qa" or "audit"; its items in the
    order it sends them, its request indices, workers still running."""

    customer: int
    kind: str
    items: list[Item]
    cursor: int = 0
    running: int = 0
    sent: list[int] = field(default_factory=list)


def chunks(secs: list[Segment]) -> list[Unit]:
    """A page's sections as whole-page units of at most CHUNK tokens (one section each at
    least), no context."""
    out: list[list[Segment]] = [[]]
    for s in secs:
        if out[-1] and sum(n for _, n in out[-1]) + s[1] > CHUNK:
            out.append([])
        out[-1].append(s)
    return [((), tuple(c)) for c in out]


def ordered(units: list[tuple[Unit, int]], langs: list[str], order: str,
            kind: str) -> list[Item]:
    """Each (unit, document) into each locale, document-major or language-major."""
    if order == "doc":
        return [(u, lang, kind, d) for u, d in units for lang in langs]
    return [(u, lang, kind, d) for lang in langs for u, d in units]


class Jobs(Desk):
    """The whole generator: the Desk plus the jobs. ``run`` walks it until the trace has its
    requests."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.jobs: list[Job] = []
        self.nights = [0] * len(self.customers)
        by_size = sorted(range(len(self.customers)), key=lambda k: -self.customers[k].weight)
        self.audited = by_size[:max(1, round(AUDITED * scale))]
        for cid, c in enumerate(self.customers):
            if c.cadence:
                first = next_local(rng.uniform(0, c.cadence) * DAY, c.tz, 9.0, True)
                self.at(first + rng.uniform(0, HOUR), "release", cid)
            if cid in self.audited:
                self.at(next_local(0.0, c.tz, 1.0, False) + rng.uniform(0, 1800), "audit", cid)

    def book(self, cid: int, w: float) -> None:
        """This hour's CI pushes, published edits and content drops of customer ``cid``."""
        c, rng = self.customers[cid], self.rng
        for _ in range(poisson(rng, PUSHES * c.weight * w)):
            self.at(self.now + rng.uniform(0, HOUR), "push", cid)
        for _ in range(poisson(rng, PUBLISHES * c.weight * w)):
            self.at(self.now + rng.uniform(0, HOUR), "publish", cid)
        if rng.random() < DROPS * c.weight * w:
            self.at(self.now + rng.uniform(0, HOUR), "drop", cid)

    def new_doc(self, cid: int, kind: str) -> int:
        c = self.customers[cid]
        self.docs.append(make_doc(self.rng, self.new, c, kind))
        self.docs[-1].pop = self.rng.uniform(0.2, 1.0)  # new pages are edited again soon
        c.docs.append(len(self.docs) - 1)
        return len(self.docs) - 1

    def add_strings(self, cid: int, n: int) -> tuple[Segment, int]:
        """``n`` new UI strings appended to one of the customer's string files (a new one if
        it has none) as a new section; the section and the file."""
        c, rng = self.customers[cid], self.rng
        files = [d for d in c.docs if self.docs[d].kind == "strings"]
        d = rng.choice(files) if files else self.new_doc(cid, "strings")
        seg = self.new(n * STRING_TOKENS)
        c.terms[seg] = c.concepts(rng, seg[1])
        text = self.docs[d].text
        text.versions.append((self.now, [*text.current, seg]))
        return seg, d

    def _on_push(self, cid: int) -> None:
        """A developer merges new strings (1..60, median 8); the CI integration sends them into
        every locale at once."""
        seg, d = self.add_strings(cid, clipped_length(self.rng, 8, 0.9, 1, 60))
        langs = self.customers[cid].langs
        self.start_job(cid, "push", ordered([(((), (seg,)), d)], langs, "doc", "push"))

    def _on_release(self, cid: int) -> None:
        """The string freeze: the strings changed since the last release (80..2500, median
        300 x size^0.5) in batches of STRINGS, into every locale, one locale's job after
        another; the next freeze a cadence later at 09:00 local (a weekday)."""
        c, rng = self.customers[cid], self.rng
        n = clipped_length(rng, 300 * c.weight ** 0.5, 0.6, 80, 2500)
        units = []
        for k in range(0, n, STRINGS):
            seg, d = self.add_strings(cid, min(STRINGS, n - k))
            units.append((((), (seg,)), d))
        self.released[cid] = self.now
        self.start_job(cid, "release", ordered(units, c.langs, "lang", "release"))
        later = next_local(self.now + (c.cadence - 0.5) * DAY, c.tz, 9.0, True)
        self.at(later + rng.uniform(0, HOUR), "release", cid)

    def edited(self, cid: int, d: int) -> list[tuple[Unit, int]]:
        """A writer rewords, inserts or strikes 1..3 sections of page ``d``: one unit per
        changed section, behind the section before it (the context)."""
        c, rng, text = self.customers[cid], self.rng, self.docs[d].text
        old = set(text.current)
        secs = revise(rng, self.new, text.current, clipped_length(rng, 1, 0.6, 1, 3))
        text.versions.append((self.now, secs))
        units = []
        for k, s in enumerate(secs):
            if s not in old:
                c.terms[s] = c.concepts(rng, s[1])
                units.append((((secs[k - 1],) if k else (), (s,)), d))
        return units

    def _on_publish(self, cid: int) -> None:
        """Writers publish 1..8 pages (median 2, by popularity): 75 % edited (changed sections
        only), 10 % rewritten and 15 % new (every section, whole-page units)."""
        c, rng = self.customers[cid], self.rng
        pages = [d for d in c.docs if self.docs[d].kind != "strings"]
        units: list[tuple[Unit, int]] = []
        for d in set(rng.choices(pages, [self.docs[p].pop for p in pages],
                                 k=clipped_length(rng, 2, 0.7, 1, 8))):
            r = rng.random()
            if r < 0.75:
                units += self.edited(cid, d)
                continue
            if r < 0.85:
                fresh = make_doc(rng, self.new, c, self.docs[d].kind).text.current
                self.docs[d].text.versions.append((self.now, fresh))
            else:
                d = self.new_doc(cid, "docs" if rng.random() < 0.7 else "marketing")
            units += [(u, d) for u in chunks(self.docs[d].text.current)]
        self.start_job(cid, "translate", ordered(units, c.langs, c.order, "translate"))

    def _on_drop(self, cid: int) -> None:
        """A content drop: a new docs section (60 %: 15..120 pages, median 35, every locale)
        or a campaign (5..30 pages, median 10, the customer's first 3..8 locales in tier
        order)."""
        c, rng = self.customers[cid], self.rng
        tier = [code for code, _, _ in LOCALES if code in c.langs]
        if rng.random() < 0.6:
            kind, n, langs = "docs", clipped_length(rng, 35, 0.6, 15, 120), c.langs
        else:
            kind, n = "marketing", clipped_length(rng, 10, 0.6, 5, 30)
            langs = sorted(tier[:rng.randint(3, 8)])
        units = [(u, d) for d in (self.new_doc(cid, kind) for _ in range(n))
                 for u in chunks(self.docs[d].text.current)]
        self.start_job(cid, "translate", ordered(units, langs, c.order, "translate"))

    def _on_audit(self, cid: int) -> None:
        """The nightly audit at 01:00 local after each working day (Tuesday to Saturday
        mornings): the next locale in turn, the whole corpus in repository order, each page
        behind the whole glossary."""
        c = self.customers[cid]
        later = next_local(self.now + HOUR, c.tz, 1.0, False)
        self.at(later + self.rng.uniform(0, 1800), "audit", cid)
        if weekday(self.now, c.tz) in (0, 6):
            return
        lang = c.langs[self.nights[cid] % len(c.langs)]
        self.nights[cid] += 1
        items = [(((), tuple(self.doc_text(d))), lang, "audit", d) for d in c.docs]
        self.start_job(cid, "audit", items)

    def start_job(self, cid: int, kind: str, items: list[Item]) -> int:
        self.jobs.append(Job(cid, kind, items))
        j = len(self.jobs) - 1
        for _ in range(min(WORKERS[kind], len(items))):
            self.jobs[j].running += 1
            self.at(self.now, "work", j)
        return j

    def finished(self, j: int) -> None:
        """A translation job's QA job 1..20 min on: each item again with each check."""
        job = self.jobs[j]
        checks = CHECKS.get(self.customers[job.customer].qa, ())
        if job.kind in ("push", "translate", "release") and checks:
            items = [(u, lang, ch, d) for u, lang, _, d in job.items for ch in checks]
            self.at(self.now + self.rng.uniform(60, 1200), "qa", (job.customer, items))

    def _on_qa(self, payload: tuple[int, list[Item]]) -> None:
        self.start_job(payload[0], "qa", payload[1])

    def _on_work(self, j: int) -> None:
        """A job's worker sends its next item, then takes the next when the reply is done."""
        job = self.jobs[j]
        if job.cursor == len(job.items):
            job.running -= 1
            if job.running == 0:
                self.finished(j)
            return
        unit, lang, tag, d = job.items[job.cursor]
        job.cursor += 1
        segs = self.prompt(job, unit, lang, tag)
        job.sent.append(len(self.out))
        self.send(job.kind, job.customer, j, segs)
        if job.kind in ("push", "translate", "release"):
            recent = self.customers[job.customer].recent.setdefault(lang, [])
            recent[:] = [*recent[-199:], (self.now, d)]
            out = round(sum(n for _, n in unit[1]) * FACTOR[lang])
        else:
            out = clipped_length(self.rng, *OUTPUT["audit" if tag == "audit" else "qa"])
        took = sum(n for _, n in segs) / PREFILL + out / RATE
        self.at(self.now + took + 0.2, "work", j)

    def prompt(self, job: Job, unit: Unit, lang: str, tag: str) -> list[Segment]:
        """Translation kinds: translate_prompt; QA: qa_prompt; an audit: the head, the whole
        glossary, the page and its translation, the instruction."""
        cid = job.customer
        if job.kind == "qa":
            return self.qa_prompt(cid, unit, lang, tag)
        if job.kind != "audit":
            return self.translate_prompt(cid, unit, lang, tag)
        text = [self.translation(s, lang) for s in unit[1]]
        return [*self.head(cid, "review", lang), *self.terms(cid, (), lang, full=True),
                *unit[1], *text, self.instruction("audit", lang)]

