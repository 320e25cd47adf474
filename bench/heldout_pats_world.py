"""bench.heldout's ``patent_search`` shape, its world: the firm's prompts (one system prompt,
an instruction per task, a closing cue per task), the technology areas and their prior-art
index (documents made the first time something retrieves them: a front page and description
passages, a foreign one only a machine abstract until the translator has done it), the
matters (prosecution applications and litigations, each a claim set whose amendments make new
versions) and their office actions. The clock and the office calendar. See
bench/heldout_patent_search.py's docstring for the numbers."""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_meeting_parts import pick

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts Tuesday 00:00 US Eastern and ends Thursday 00:00
AREAS = 12  # technology areas (CPC subclasses the firm practises in)
AREA_DOCS = 60000  # documents an area's index can return; rank drawn log-uniform (Zipf-like)
KEY_TOP = 250  # a matter's key references come from its area's top ranks
LANGS = (("en", 0.7), ("ja", 0.12), ("zh", 0.1), ("de", 0.05), ("ko", 0.03))
FRONT = (480, 0.5, 200, 1400)  # tokens of a front page (abstract, bibliography, claim 1)
PASSAGE = (700, 0.45, 250, 1600)  # tokens of a description passage
PASSAGES = (3, 9)  # passages a document has
SHOWN = 3  # passages a screening shows (the retriever's best)
MT = (260, 0.4, 120, 500)  # tokens of a foreign document's machine abstract
INDEP = (280, 0.5, 100, 700)  # tokens of an independent claim
DEP = (55, 0.5, 20, 180)  # tokens of a dependent claim
ELEMENTS = (3, 9)  # elements (limitations) of an independent claim
ELEMENT = (45, 0.5, 12, 160)  # tokens of an element as a chart row states it
PROS_MATTERS = 160  # prosecution matters at scale 1.0 (at least 12)
LIT_MATTERS = (3, 5)  # litigations (invalidity defence) at any scale
PROS_INDEP = ((1, 0.15), (2, 0.35), (3, 0.4), (4, 0.1))
LIT_INDEP = (2, 5)  # asserted independent claims
DEPS = {"pros": (2, 9), "lit": (3, 10)}  # dependents per independent claim
KEYS = {"pros": (4, 10), "lit": (12, 30)}  # key references a matter's searches keep finding
PACIFIC = 0.3  # matters run from the Pacific office (3 h behind Eastern)
FIRM = 1400  # tokens of the firm's system prompt, at the head of every request
INSTR = {"screen": 500, "invalidity": 700, "chart": 600, "family": 300, "translate": 400,
         "landscape": 600, "triage": 350, "oa": 900, "amend": 500, "chat": 350}
CUE = {"screen": 40, "invalidity": 50, "chart": 35, "family": 30, "translate": 25,
       "landscape": 45, "cluster": 60, "triage": 40}
REJECTION = ((2, 6), (600, 0.5, 200, 1400))  # sections of an office action, tokens each
CITED = ((1, 0.3), (2, 0.45), (3, 0.25))  # references an office action cites
PATTERNS = ((("pros", "lit"), 0.3), (("lit", "pros"), 0.3), (("pros", "pros"), 0.25),
            (("lit", "lit"), 0.15))  # each day: prosecution-led or litigation-led
OFFICE = (0.4, 0.9, 1.0, 1.0, 0.7, 0.8, 1.0, 1.0, 0.9, 0.7, 0.5, 0.3)  # local 08..19


@dataclass
class Doc:
    """A prior-art document: its area and rank, language, English text as (front page,
    passages) (None for a foreign one until translated), its machine abstract and source
    sections if foreign, when its translation landed."""

    area: int
    rank: int
    lang: str
    english: tuple[Segment, list[Segment]] | None
    mt: Segment | None = None
    source: list[Segment] = field(default_factory=list)
    translated: float | None = None
    queued: bool = False


@dataclass
class Claim:
    """A claim: its text, whether independent, and its elements as a chart states them."""

    seg: Segment
    indep: bool
    elements: list[Segment]


@dataclass
class Matter:
    """A prosecution application ("pros") or a litigation's asserted patent ("lit"): its area,
    the attorney's office (hours behind Eastern), activity weight, claim-set versions as
    (time, claims), key references (document ids), the long tail its searches found, its
    office actions."""

    kind: str
    area: int
    tz: float
    weight: float
    versions: list[tuple[float, list[Claim]]]
    keys: list[int]
    tail: list[int] = field(default_factory=list)
    oas: list[int] = field(default_factory=list)

    def claims(self, t: float) -> list[Claim]:
        k = bisect.bisect_right([v[0] for v in self.versions], t) - 1
        return self.versions[max(k, 0)][1]


@dataclass
class OfficeAction:
    """An office action: its matter, when it arrived (negative: before the clock), the
    examiner's rejection in sections, the cited references as (document, passage indices),
    its drafting sessions (chat ids)."""

    matter: int
    arrived: float
    rejection: list[Segment]
    cited: list[tuple[int, tuple[int, ...]]]
    sessions: list[int] = field(default_factory=list)


class World(ClockedState):
    """The firm's prompts, the areas' index, the matters and office actions; ``emit`` sends
    a request. bench.heldout_pats_jobs.Jobs builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.firm = self.new(FIRM)
        self.instr = {k: self.new(n) for k, n in INSTR.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.modes: tuple[str, str] = pick(rng, PATTERNS)
        ranks = rng.sample(range(1, AREAS + 1), AREAS)
        self.area_weight = [1.0 / r for r in ranks]
        self.docs: list[Doc] = []
        self.index: dict[tuple[int, int], int] = {}
        self.matters = [self.matter("pros") for _ in range(max(12, round(PROS_MATTERS * scale)))]
        self.matters += [self.matter("lit") for _ in range(rng.randint(*LIT_MATTERS))]
        self.oas: list[OfficeAction] = []

    def head(self, kind: str) -> list[Segment]:
        """The firm's system prompt and the task's instruction."""
        return [self.firm, self.instr[kind]]

    def rank_draw(self, top: int) -> int:
        """A rank 0..top-1, log-uniform: the index's popular documents come up often."""
        return min(top - 1, int(top ** self.rng.random()) - 1)

    def doc(self, area: int, rank: int) -> int:
        """The id of the document at ``rank`` of ``area``'s index, made on first use."""
        key = (area, rank)
        if key not in self.index:
            rng, new = self.rng, self.new
            lang = pick(rng, LANGS)
            text = (new(clipped_length(rng, *FRONT)),
                    [new(clipped_length(rng, *PASSAGE)) for _ in range(rng.randint(*PASSAGES))])
            if lang == "en":
                self.docs.append(Doc(area, rank, lang, text))
            else:
                source = [text[0], *text[1]]  # the original-language sections
                self.docs.append(Doc(area, rank, lang, None, new(clipped_length(rng, *MT)),
                                     source))
            self.index[key] = len(self.docs) - 1
        return self.index[key]

    def shown(self, d: int, full: bool = False) -> list[Segment]:
        """A document as a prompt shows it: front page and the best passages (all of them if
        ``full``); a foreign one not yet translated, its machine abstract."""
        doc = self.docs[d]
        if doc.english is None:
            return [doc.mt]
        front, passages = doc.english
        return [front, *(passages if full else passages[:SHOWN])]

    def claim(self, indep: bool) -> Claim:
        rng = self.rng
        if not indep:
            return Claim(self.new(clipped_length(rng, *DEP)), False, [])
        return Claim(self.new(clipped_length(rng, *INDEP)), True,
                     [self.new(clipped_length(rng, *ELEMENT))
                      for _ in range(rng.randint(*ELEMENTS))])

    def claim_set(self, kind: str) -> list[Claim]:
        """Independent claims, each followed by its dependents."""
        rng = self.rng
        n = pick(rng, PROS_INDEP) if kind == "pros" else rng.randint(*LIT_INDEP)
        out: list[Claim] = []
        for _ in range(n):
            out.append(self.claim(True))
            out += [self.claim(False) for _ in range(rng.randint(*DEPS[kind]))]
        return out

    def matter(self, kind: str) -> Matter:
        """A matter of ``kind`` in an area by weight, its claims from before the clock and its
        key references from the area's top ranks."""
        rng = self.rng
        area = rng.choices(range(AREAS), self.area_weight)[0]
        tz = -3.0 if rng.random() < PACIFIC else 0.0
        keys: list[int] = []
        for _ in range(rng.randint(*KEYS[kind])):
            d = self.doc(area, self.rank_draw(KEY_TOP))
            if d not in keys:
                keys.append(d)
        weight = rng.lognormvariate(0.0, 1.0)
        return Matter(kind, area, tz, weight, [(-1e18, self.claim_set(kind))], keys)

    def claim_segs(self, m: int) -> list[Segment]:
        """Matter ``m``'s claims as they stand now."""
        return [c.seg for c in self.matters[m].claims(self.now)]

    def ranked(self, m: int, n: int, repeat: float) -> list[int]:
        """A search's ranked hits for matter ``m``: its key references (neighbours swapped now
        and then), then a tail, ``repeat`` of it drawn again from earlier searches' tails."""
        rng, matter = self.rng, self.matters[m]
        out = list(matter.keys)
        for i in range(len(out) - 1):
            if rng.random() < 0.3:
                out[i], out[i + 1] = out[i + 1], out[i]
        seen, old = set(out), list(matter.tail)
        while len(out) < n:
            if old and rng.random() < repeat:
                d = old.pop(rng.randrange(len(old)))
            else:
                d = self.doc(matter.area, self.rank_draw(AREA_DOCS))
                matter.tail.append(d)
            if d not in seen:
                seen.add(d)
                out.append(d)
        return out[:n]

    def office_action(self, m: int, arrived: float) -> int:
        """A new office action on matter ``m``: the rejection and the cited references (key
        references first), each cited at two passages."""
        rng, matter = self.rng, self.matters[m]
        (lo, hi), size = REJECTION
        rejection = [self.new(clipped_length(rng, *size)) for _ in range(rng.randint(lo, hi))]
        cited = []
        for _ in range(pick(rng, CITED)):
            d = (rng.choice(matter.keys) if rng.random() < 0.7
                 else self.doc(matter.area, self.rank_draw(AREA_DOCS)))
            if all(d != c for c, _ in cited):
                doc = self.docs[d]
                n = len(doc.english[1]) if doc.english else len(doc.source) - 1
                cited.append((d, tuple(sorted(rng.sample(range(n), min(2, n))))))
        self.oas.append(OfficeAction(m, arrived, rejection, cited))
        matter.oas.append(len(self.oas) - 1)
        return len(self.oas) - 1

    def cited_text(self, oa: int) -> list[Segment]:
        """The cited references as the examiner cites them: front page and the cited passages
        (the machine abstract for one not yet translated)."""
        out: list[Segment] = []
        for d, passages in self.oas[oa].cited:
            doc = self.docs[d]
            if doc.english is None:
                out.append(doc.mt)
            else:
                out += [doc.english[0], *(doc.english[1][k] for k in passages)]
        return out

    def mode(self, t: float) -> str:
        """Whether day ``t`` falls on is prosecution-led ("pros") or litigation-led ("lit")."""
        return self.modes[min(1, int(t // DAY))]

    def at_local(self, day: int, hour: float, tz: float, name: str, payload: object) -> None:
        """Schedule ``name`` at local ``hour`` of ``day`` in an office ``tz`` hours behind
        Eastern, if that falls on the clock."""
        t = (day * 24 + hour - tz) * HOUR
        if 0 <= t < self.END:
            self.at(t, name, payload)

    def office_hour(self) -> float:
        """A local hour of office work (with its minutes), by OFFICE."""
        return self.rng.choices(range(8, 8 + len(OFFICE)), OFFICE)[0] + self.rng.random()

    def matter_by_weight(self, kind: str) -> int:
        ms = [m for m, x in enumerate(self.matters) if x.kind == kind]
        return self.rng.choices(ms, [self.matters[m].weight for m in ms])[0]
