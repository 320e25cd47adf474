"""bench.heldout's ``localization`` shape, its world: software companies (customers) in eight
time zones, each with target locales, a style guide (general sections, one section a locale), a
termbase (concepts in glossary order, one entry a concept and locale, looked up by the terms a
text holds) and a source corpus (UI string files, documentation pages, marketing pages) whose
sections carry the concepts they mention. See bench/heldout_localization.py's docstring for
what each part models and its numbers."""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_bi_parts import local_hour, weekday
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick

HOUR, DAY = 3600.0, 86400.0
RATE = 40.0  # tokens a second a reply decodes at
PREFILL = 12000.0  # prompt tokens a second
CUSTOMERS = 12  # at scale 1.0 (scaled, at least 3)
ZIPF = 1.0  # customer size by a random rank
# (UTC offset of the customer's writers and developers, share of the customers)
ZONES = ((-8.0, 0.3), (-5.0, 0.15), (0.0, 0.15), (1.0, 0.15), (2.0, 0.08), (5.5, 0.07),
         (9.0, 0.05), (10.0, 0.05))
# how busy an office is in each local hour of a weekday (1.0 at the peak)
HOURS = (0.01, 0.01, 0.01, 0.01, 0.01, 0.02, 0.05, 0.2, 0.6, 1.0, 1.0, 0.9, 0.6, 0.85, 1.0,
         1.0, 0.9, 0.7, 0.35, 0.2, 0.15, 0.1, 0.05, 0.02)
WEEKEND = 0.1  # x a weekday's weight (freelance linguists: LINGUIST_WEEKEND)
LINGUIST_WEEKEND = 0.3
# (locale, its linguists' UTC offset, target tokens a source token) in the usual tier order:
# FIGS, CJK and Brazilian Portuguese first, then the rest of Europe, then long-tail markets
LOCALES = (("de", 1.0, 1.3), ("fr", 1.0, 1.25), ("es", 1.0, 1.2), ("ja", 9.0, 1.3),
           ("zh-CN", 8.0, 1.1), ("pt-BR", -3.0, 1.25), ("it", 1.0, 1.25), ("ko", 9.0, 1.5),
           ("nl", 1.0, 1.3), ("ru", 3.0, 1.6), ("pl", 1.0, 1.5), ("sv", 1.0, 1.3),
           ("tr", 3.0, 1.6), ("zh-TW", 8.0, 1.15), ("es-MX", -6.0, 1.2), ("fr-CA", -5.0, 1.25),
           ("da", 1.0, 1.3), ("nb", 1.0, 1.3), ("fi", 2.0, 1.6), ("cs", 1.0, 1.6),
           ("ar", 3.0, 1.7), ("he", 2.0, 1.6), ("th", 7.0, 2.0), ("vi", 7.0, 1.5),
           ("id", 7.0, 1.3), ("uk", 2.0, 1.7), ("hu", 1.0, 1.7), ("el", 2.0, 1.9),
           ("ro", 2.0, 1.5), ("pt-PT", 0.0, 1.25), ("hi", 5.5, 2.4), ("ms", 8.0, 1.3),
           ("bg", 2.0, 1.7), ("hr", 1.0, 1.6), ("sk", 1.0, 1.6), ("sl", 1.0, 1.6),
           ("lt", 2.0, 1.7), ("lv", 2.0, 1.7), ("et", 2.0, 1.7), ("ca", 1.0, 1.3))
TZ = {code: tz for code, tz, _ in LOCALES}
FACTOR = {code: f for code, _, f in LOCALES}
SECTION = 400  # tokens per section of a page or of the style guide
STRINGS = 40  # UI strings per batch (a string file's section)
STRING_TOKENS = 18  # tokens a UI string with its key and developer comment
# corpus document kinds: (share, (median tokens, sigma, lo, hi))
KINDS = {"strings": (0.15, (2400, 0.6, 600, 9000)), "docs": (0.6, (1400, 0.8, 300, 12000)),
         "marketing": (0.25, (900, 0.5, 200, 4000))}
CORPUS = 80  # documents of a customer of mean size (at least 12)
ENTRY = (24, 0.4, 10, 60)  # tokens of a termbase entry (term, translation, note)


def busy(t: float, tz: float, weekend: float = WEEKEND) -> float:
    """How busy someone at ``tz`` is at ``t`` (1.0 at a weekday's peak)."""
    w = HOURS[int(local_hour(t, tz))]
    return w * (weekend if weekday(t, tz) >= 5 else 1.0)


def next_office(rng: random.Random, t: float, tz: float) -> float:
    """A time at or after ``t`` in office hours at ``tz`` (busy hours likelier)."""
    while rng.random() > busy(t, tz):
        t = (t // HOUR + 1) * HOUR
    return t + rng.uniform(0, HOUR - t % HOUR)


def cut(new: Callable, total: int, size: int) -> list[Segment]:
    """``total`` tokens as sections of about ``size`` tokens, each new content."""
    k = max(1, round(total / size))
    return [new(total // k + (i < total % k)) for i in range(k)]


@dataclass
class Doc:
    """A source document of a customer: "strings" (a UI string file, sections of STRINGS
    strings), "docs" or "marketing" (a page, sections of ~SECTION tokens); its versions and
    how often writers touch it (by a random rank)."""

    kind: str
    text: Versioned
    pop: float


@dataclass
class Customer:
    """A software company on the platform: time zone, size (mean 1), target locales (in the
    project's locale order), scheduler order ("doc": each document into every locale, "lang":
    one locale's job after another), QA checks run after a job (0, 1: terminology, 2: and
    consistency), whether prompts carry the whole glossary, release cadence (days) or None,
    style guide, termbase, corpus (indices into the trace's docs, in repository order), the
    concepts each source section mentions, locales translated lately (locale -> (time, doc))."""

    tz: float
    weight: float
    langs: list[str]
    order: str
    qa: int
    full: bool
    cadence: float | None
    style: Versioned
    locale: dict[str, Segment]
    alpha: list[float]  # a concept's place in the glossary order
    cum: list[float]  # cumulative concept popularity (concept 0 the product name)
    entries: dict[tuple[int, str], Segment] = field(default_factory=dict)
    docs: list[int] = field(default_factory=list)
    terms: dict[Segment, tuple[int, ...]] = field(default_factory=dict)
    recent: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    def concepts(self, rng: random.Random, tokens: int) -> tuple[int, ...]:
        """The concepts a text of ``tokens`` mentions: one per 60 tokens (2..40), by
        Zipf(1.0) popularity, listed in glossary order."""
        k = max(2, min(40, tokens // 60))
        hits = {bisect.bisect_left(self.cum, rng.random() * self.cum[-1]) for _ in range(k)}
        return tuple(sorted(hits, key=self.alpha.__getitem__))

    def entry(self, rng: random.Random, new: Callable, c: int, lang: str) -> Segment:
        """The termbase entry of concept ``c`` for ``lang`` (made the first time it is used:
        it was in the termbase before)."""
        key = (c, lang)
        if key not in self.entries:
            self.entries[key] = new(clipped_length(rng, *ENTRY))
        return self.entries[key]

    def add_concepts(self, rng: random.Random, n: int) -> None:
        """``n`` new terms (a feature's name, say) at random places in the glossary order,
        each about as frequent as the median concept."""
        for _ in range(n):
            self.alpha.append(rng.random())
            self.cum.append(self.cum[-1] + 1.0 / (len(self.cum) / 2 + 1))


def pick_langs(rng: random.Random, n: int) -> list[str]:
    """``n`` target locales: tier-weighted (weight rank^-0.9) sampling without replacement,
    in the platform's locale order (alphabetical by code, as a TMS project lists them)."""
    keyed = sorted(range(len(LOCALES)),
                   key=lambda i: -rng.random() ** ((i + 1) ** 0.9))
    return sorted(LOCALES[i][0] for i in keyed[:n])


def style_guide(rng: random.Random, new: Callable, langs: list[str]
                ) -> tuple[Versioned, dict[str, Segment]]:
    """General sections (voice, tone, formatting, UI conventions: 500..4000 tokens, median
    1200) and one locale section a target (formality, punctuation, 150..1000, median 350)."""
    general = cut(new, clipped_length(rng, 1200, 0.5, 500, 4000), SECTION)
    return (Versioned([(-1e18, general)]),
            {lang: new(clipped_length(rng, 350, 0.5, 150, 1000)) for lang in langs})


def make_customer(rng: random.Random, new: Callable, weight: float) -> Customer:
    """A customer of size ``weight``: 5..40 locales (median 12, more for larger ones), a
    termbase of 100..1500 concepts, the scheduler order, QA and release settings."""
    n = clipped_length(rng, 12 * weight ** 0.3, 0.5, 5, 40)
    langs = pick_langs(rng, n)
    style, locale = style_guide(rng, new, langs)
    concepts = clipped_length(rng, 300 * weight ** 0.5, 0.5, 100, 1500)
    cum, total = [], 0.0
    for r in range(1, concepts + 1):
        total += 1.0 / r
        cum.append(total)
    full = concepts * ENTRY[0] <= 4000 or rng.random() < 0.15
    qa = pick(rng, ((0, 0.35), (1, 0.4), (2, 0.25)))
    cadence = pick(rng, ((7.0, 0.3), (14.0, 0.4), (28.0, 0.15), (None, 0.15)))
    order = "lang" if rng.random() < 0.55 else "doc"
    return Customer(pick(rng, ZONES), weight, langs, order, qa, full, cadence, style, locale,
                    [rng.random() for _ in range(concepts)], cum)


def make_doc(rng: random.Random, new: Callable, c: Customer, kind: str) -> Doc:
    """A ``kind`` document of ``c`` with the concepts of each section noted."""
    median, sigma, lo, hi = KINDS[kind][1]
    size = STRINGS * STRING_TOKENS if kind == "strings" else SECTION
    secs = cut(new, clipped_length(rng, median, sigma, lo, hi), size)
    for s in secs:
        c.terms[s] = c.concepts(rng, s[1])
    return Doc(kind, Versioned([(-1e18, secs)]), 1.0)


def corpus(rng: random.Random, new: Callable, c: Customer, docs: list[Doc]) -> None:
    """``c``'s corpus (CORPUS x size^0.7, at least 12) in repository order: string files, then
    documentation, then marketing pages; writers touch them with Zipf(1) popularity."""
    n = max(12, round(CORPUS * c.weight ** 0.7))
    kinds = sorted((pick(rng, tuple((k, v[0]) for k, v in KINDS.items())) for _ in range(n)),
                   key=list(KINDS).index)
    for r, kind in zip(rng.sample(range(1, n + 1), n), kinds):
        docs.append(make_doc(rng, new, c, kind))
        docs[-1].pop = 1.0 / r
        c.docs.append(len(docs) - 1)


def customers(rng: random.Random, new: Callable, docs: list[Doc],
              scale: float) -> list[Customer]:
    """CUSTOMERS (scaled, at least 3) of Zipf(ZIPF) sizes by a random rank, mean size 1."""
    n = max(3, round(CUSTOMERS * scale))
    sizes = [r ** -ZIPF for r in rng.sample(range(1, n + 1), n)]
    mean = sum(sizes) / n
    out = [make_customer(rng, new, s / mean) for s in sizes]
    for c in out:
        corpus(rng, new, c, docs)
    return out
