"""bench.heldout's ``localization`` shape, how the platform builds its prompts and the linguists'
side: every prompt is a role's system prompt, the customer's style guide (general sections,
then the target locale's section), the termbase entries for the terms the source mentions (or
the whole glossary), then the source and whatever the task adds; post-editing chats re-send
a document, its machine translation and the thread every turn; terminologists and style owners
edit the termbase and the guide. See bench/heldout_localization.py's docstring for the
numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import EventState, Segment, clipped_length
from bench.heldout_legal_parts import revise
from bench.heldout_localization_parts import (DAY, FACTOR, HOUR, HOURS, LINGUIST_WEEKEND,
                                              RATE, TZ, busy, customers)
from bench.heldout_meeting_parts import pick, poisson

SYSTEM = {"translate": 650, "review": 520, "assist": 700}  # tokens of each role's prompt
INSTRUCTION = {"translate": 70, "push": 60, "release": 75, "terminology": 90,
               "consistency": 110, "audit": 130}  # the closing instruction (names the locale)
GLOSSARY_CAP = 4000  # tokens of termbase a prompt carries at most (the glossary order's head)
DOC_CAP = 4000  # tokens of a document a post-editing chat or an audit request holds
TM = ((0, 0.3), (1, 0.25), (2, 0.2), (3, 0.15), (4, 0.1))  # translation-memory matches
TURNS = ((1, 0.25), (2, 0.2), (3, 0.15), (4, 0.12), (6, 0.13), (10, 0.1), (15, 0.05))
SESSIONS = 0.25  # post-editing chats a locale of a mean-size customer starts a weekday
AFTER_RELEASE = (24 * HOUR, 3.0)  # linguists are this much busier this long after a freeze
GLOSSARY_EDITS = 0.5  # termbase edits a customer of mean size makes a weekday
STYLE_EDITS = 0.06  # style guide edits a customer makes a weekday
SAVE = 0.5  # chats after which the linguist's edits replace part of the translation

Unit = tuple[tuple[Segment, ...], tuple[Segment, ...]]  # (context before, text to translate)


@dataclass
class Session:
    """A linguist's post-editing chat over one document in one locale: ``base`` (the terms,
    the source and its translation as of the start), turns left, the thread, request indices."""

    customer: int
    lang: str
    doc: int
    base: list[Segment]
    turns: int
    thread: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


class Desk(EventState):
    """Prompts and the interactive side. Every request's meta is (kind, customer, key,
    segments); the key is a session for "postedit", a job for the rest
    (bench/heldout_localization_jobs.py)."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.docs: list = []
        self.customers = customers(rng, self.new, self.docs, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.instructions: dict[tuple[str, str], Segment] = {}
        self.trans: dict[tuple[Segment, str], Segment] = {}
        self.tm: dict[tuple[Unit, str], list[Segment]] = {}
        self.sessions: list[Session] = []
        self.released = [-1e18] * len(self.customers)  # the last string freeze
        self.at(0.0, "hour", None)

    def head(self, cid: int, role: str, lang: str) -> list[Segment]:
        """The role's system prompt, the style guide as of now, the locale's section."""
        c = self.customers[cid]
        return [self.system[role], *c.style.current, c.locale[lang]]

    def terms(self, cid: int, segs: tuple[Segment, ...] | list[Segment], lang: str,
              full: bool = False) -> list[Segment]:
        """The termbase entries for the concepts ``segs`` mention (the whole glossary if the
        customer sends it whole, or ``full``), in glossary order, at most GLOSSARY_CAP."""
        c = self.customers[cid]
        if full or c.full:
            concepts = sorted(range(len(c.alpha)), key=c.alpha.__getitem__)
        else:
            concepts = sorted({k for s in segs for k in c.terms.get(s, ())},
                              key=c.alpha.__getitem__)
        out, total = [], 0
        for k in concepts:
            e = c.entry(self.rng, self.new, k, lang)
            if total + e[1] > GLOSSARY_CAP:
                break
            out.append(e)
            total += e[1]
        return out

    def instruction(self, kind: str, lang: str) -> Segment:
        if (kind, lang) not in self.instructions:
            self.instructions[(kind, lang)] = self.new(INSTRUCTION[kind])
        return self.instructions[(kind, lang)]

    def translation(self, seg: Segment, lang: str) -> Segment:
        """The current translation of source section ``seg`` into ``lang`` (the machine
        translation the first time it is asked for, or one from before the trace)."""
        if (seg, lang) not in self.trans:
            self.trans[(seg, lang)] = self.new(max(4, round(seg[1] * FACTOR[lang])))
        return self.trans[(seg, lang)]

    def translate_prompt(self, cid: int, unit: Unit, lang: str, kind: str) -> list[Segment]:
        """Head, the terms of the text to translate, 0..4 translation-memory matches (the
        same each time the unit is sent), the context and text, the instruction."""
        if (unit, lang) not in self.tm:
            self.tm[(unit, lang)] = [self.new(clipped_length(self.rng, 90, 0.5, 30, 300))
                                     for _ in range(pick(self.rng, TM))]
        return [*self.head(cid, "translate", lang), *self.terms(cid, unit[1], lang),
                *self.tm[(unit, lang)], *unit[0], *unit[1], self.instruction(kind, lang)]

    def qa_prompt(self, cid: int, unit: Unit, lang: str, check: str) -> list[Segment]:
        """Head, the terms, the source text, its translation, the check's instruction."""
        text = [self.translation(s, lang) for s in unit[1]]
        return [*self.head(cid, "review", lang), *self.terms(cid, unit[1], lang), *unit[1],
                *text, self.instruction(check, lang)]

    def doc_text(self, d: int) -> list[Segment]:
        """A document's current sections, at most DOC_CAP tokens (at least one section)."""
        out, total = [], 0
        for s in self.docs[d].text.current:
            if out and total + s[1] > DOC_CAP:
                break
            out.append(s)
            total += s[1]
        return out

    def _on_hour(self, _: None) -> None:
        """Book this hour's events in every customer's office hours (the jobs' side: ``book``)
        and the post-editing chats in each locale's linguists' hours."""
        self.at(self.now + HOUR, "hour", None)
        rng, norm = self.rng, sum(HOURS)
        for cid, c in enumerate(self.customers):
            w = busy(self.now, c.tz) / norm
            self.book(cid, w)
            if rng.random() < GLOSSARY_EDITS * c.weight * w:
                self.at(self.now + rng.uniform(0, HOUR), "glossary", cid)
            if rng.random() < STYLE_EDITS * w:
                self.at(self.now + rng.uniform(0, HOUR), "style", cid)
            after = self.now - self.released[cid] < AFTER_RELEASE[0]
            boost = AFTER_RELEASE[1] if after else 1.0
            for lang in c.langs:
                lw = busy(self.now, TZ[lang], LINGUIST_WEEKEND) / norm
                for _ in range(poisson(rng, SESSIONS * c.weight ** 0.5 * lw * boost)):
                    self.at(self.now + rng.uniform(0, HOUR), "session", (cid, lang))

    def book(self, cid: int, w: float) -> None:
        """The jobs' hourly bookings (bench/heldout_localization_jobs.py)."""

    def pick_doc(self, cid: int, lang: str) -> int:
        """What a linguist opens: 70 % a document translated into ``lang`` in the last three
        days (the later, the likelier), else one by the writers' popularity."""
        c, rng = self.customers[cid], self.rng
        recent = [d for t, d in c.recent.get(lang, []) if self.now - t < 3 * DAY]
        if recent and rng.random() < 0.7:
            return recent[min(len(recent) - 1, int(len(recent) * rng.random() ** 0.5))]
        return rng.choices(c.docs, [self.docs[d].pop for d in c.docs])[0]

    def _on_session(self, payload: tuple[int, str]) -> None:
        """A linguist opens a post-editing chat: the document's terms, source and
        translation, then 1..15 turns."""
        cid, lang = payload
        d = self.pick_doc(cid, lang)
        src = self.doc_text(d)
        base = [*self.terms(cid, src, lang), *src, *[self.translation(s, lang) for s in src]]
        self.sessions.append(Session(cid, lang, d, base, pick(self.rng, TURNS)))
        self._on_turn(len(self.sessions) - 1)

    def _on_turn(self, k: int) -> None:
        """A turn: the head, the base, the thread, a question (15..300 tokens, median 50);
        the reply (median 120) joins the thread and the next turn comes 3 min (median) after
        reading it; after the last, SAVE of chats replace part of the translation."""
        s, rng = self.sessions[k], self.rng
        question = self.new(clipped_length(rng, 50, 0.8, 15, 300))
        segs = [*self.head(s.customer, "assist", s.lang), *s.base, *s.thread, question]
        s.sent.append(len(self.out))
        self.send("postedit", s.customer, k, segs)
        reply = self.new(clipped_length(rng, 120, 0.7, 20, 600))
        s.thread += [question, reply]
        s.turns -= 1
        if s.turns > 0:
            think = clipped_length(rng, 180, 0.9, 20, 1800)
            self.at(self.now + reply[1] / RATE + think, "turn", k)
        elif rng.random() < SAVE:
            src = self.doc_text(s.doc)
            for seg in rng.sample(src, rng.randint(1, len(src))):
                self.trans[(seg, s.lang)] = self.new(max(4, round(seg[1] * FACTOR[s.lang])))

    def _on_glossary(self, cid: int) -> None:
        """A terminologist adds 1..10 terms (40 %) or rewrites 1..5 entries of one locale,
        so prompts carrying those entries change from the entry on."""
        c, rng = self.customers[cid], self.rng
        if rng.random() < 0.4:
            c.add_concepts(rng, rng.randint(1, 10))
            return
        lang = rng.choice(c.langs)
        for k in rng.sample(range(len(c.alpha)), rng.randint(1, 5)):
            c.entries[(k, lang)] = self.new(max(10, c.entry(rng, self.new, k, lang)[1]))

    def _on_style(self, cid: int) -> None:
        """The style guide's owner rewords, inserts or strikes 1..2 general sections (60 %:
        every later section and locale section is new content), or rewrites a locale's."""
        c, rng = self.customers[cid], self.rng
        if rng.random() < 0.6:
            c.style.versions.append((self.now, revise(rng, self.new, c.style.current,
                                                      rng.randint(1, 2))))
        else:
            lang = rng.choice(c.langs)
            c.locale[lang] = self.new(max(60, round(c.locale[lang][1] * rng.uniform(0.8, 1.3))))

