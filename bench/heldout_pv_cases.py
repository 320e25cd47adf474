"""bench.heldout's ``pv_intake`` shape, the case pipeline: each adverse-event case's intake
(extraction into the case fields, then MedDRA-style coding and seriousness, both behind the
system prompt, the coding guide as it stands, the area's term excerpt and the source
document), follow-up information re-extracted over the original source hours later, the
duplicate check against prior case narratives of the product, and the daily literature
screening walk over journal abstracts against each product's search protocol. See
bench/heldout_pv_intake.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_pv_world import DAY, HOUR, SOURCES, World

SYSTEM = {"intake": 900, "dupcheck": 600, "literature": 700}  # system prompts (tokens)
CUE = {"extract": 80, "code": 70, "followup": 75, "dupcheck": 50, "screen": 50,
       "lit_extract": 60}  # the instruction at a prompt's end
OUTPUT = {"extract": (420, 0.35, 150, 1200), "code": (160, 0.4, 60, 400),
          "followup": (300, 0.4, 100, 900), "dupcheck": (120, 0.4, 40, 300),
          "screen": (50, 0.4, 15, 150), "lit_extract": (350, 0.4, 120, 900)}
PREFILL, DECODE = 6000.0, 40.0  # tokens a second the replica reads and writes
FOLLOWUP = (0.18, (8 * HOUR, 0.8, 1 * HOUR, 40 * HOUR))  # cases with follow-up, its delay
FOLLOWUP_DOC = (450, 0.7, 80, 2500)  # tokens of the follow-up document
DUP = (3, 8)  # candidate cases the pre-filter hands the duplicate check
SURGE_SOURCES = (("email", 0.6, (300, 0.6, 80, 1500)), ("form", 0.4, (500, 0.3, 250, 1200)))
LIT_HOUR = (4.0, 4.5)  # UTC hours the day's literature walk starts
ABSTRACTS = (160, 0.5, 40, 900)  # abstracts a product's weekly search returns (x scale)
ABSTRACT = (330, 0.35, 120, 900)  # tokens of an abstract
RELEVANT = 0.12  # abstracts the screen flags, then extracted for a possible case


@dataclass
class Walk:
    """The day's literature walk: its day, items (product, abstract), how far it is, the
    request indices of each item (one, or two for a flagged abstract)."""

    day: int
    items: list[tuple[int, Segment]]
    pos: int = 0
    sent: list[list[int]] = field(default_factory=list)


class Cases(World):
    """The world (``World``) and the case pipeline."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.followups: dict[int, Segment] = {}  # case -> follow-up document
        self.dups: dict[int, list[tuple[str, int]]] = {}  # case -> candidates
        self.walks: list[Walk] = []
        for day in (0, 1):
            self.at(day * DAY + rng.uniform(*LIT_HOUR) * HOUR, "literature", day)

    def pace(self, segs: list[Segment], out: int) -> float:
        """Seconds a request takes: reading its prompt, writing ``out`` tokens."""
        return sum(n for _, n in segs) / PREFILL + out / DECODE

    def intake_head(self, c: int) -> list[Segment]:
        """System prompt, the coding guide as it stands, the area's excerpt, the source."""
        case = self.cases[c]
        area = self.products[case.product].area
        return [self.system["intake"], *self.guide.at(self.now), self.excerpts[area],
                case.source]

    def _on_case(self, p: int) -> None:
        self.at(self.now, "step", (self.new_case(p, SOURCES, False), 0))

    def _on_surge_case(self, p: int) -> None:
        self.at(self.now, "step", (self.new_case(p, SURGE_SOURCES, True), 0))

    def _on_step(self, job: tuple[int, int]) -> None:
        """Intake step 0 (extraction) or 1 (coding and seriousness over the extraction);
        after step 1 the duplicate check, a follow-up maybe, a narrative if serious."""
        c, k = job
        case = self.cases[c]
        cue = self.cue["code" if k else "extract"]
        segs = [*self.intake_head(c), *case.outputs, cue]
        case.sent.append(self.emit("intake", c, k, segs))
        out = self.new(clipped_length(self.rng, *OUTPUT["code" if k else "extract"]))
        case.outputs.append(out)
        then = self.now + self.pace(segs, out[1])
        if not k:
            self.at(then, "step", (c, 1))
            return
        self.at(then, "dupcheck", c)
        if self.rng.random() < FOLLOWUP[0]:
            self.at(self.now + clipped_length(self.rng, *FOLLOWUP[1]), "followup", c)
        if case.serious:
            self.serious_case(c)

    def serious_case(self, c: int) -> None:
        """A hook for the desk (the narrative)."""

    def _on_followup(self, c: int) -> None:
        """Follow-up information: the original source and the new document re-extracted."""
        doc = self.followups[c] = self.new(clipped_length(self.rng, *FOLLOWUP_DOC))
        segs = [*self.intake_head(c), doc, self.cue["followup"]]
        self.cases[c].sent.append(self.emit("followup", c, 2, segs))

    def candidates(self, c: int) -> list[tuple[str, int]]:
        """The pre-filter's candidates: up to half earlier in-trace cases of the product
        (the most recent first), the rest prior narratives, in case-number order."""
        rng, prod = self.rng, self.products[self.cases[c].product]
        k = rng.randint(*DUP)
        recent = [x for x in prod.cases if x < c and len(self.cases[x].outputs) == 2]
        mine = sorted(rng.sample(recent[-12:], min(len(recent[-12:]), k // 2)))
        prior = sorted(rng.sample(range(len(prod.prior)), min(len(prod.prior), k - len(mine))))
        return [("prior", i) for i in prior] + [("case", x) for x in mine]

    def candidate_text(self, p: int, cand: tuple[str, int]) -> Segment:
        kind, i = cand
        return self.products[p].prior[i] if kind == "prior" else self.cases[i].outputs[0]

    def _on_dupcheck(self, c: int) -> None:
        """Duplicate check: system prompt, the candidates' narratives, the new case's
        extraction, the cue."""
        case = self.cases[c]
        cands = self.dups[c] = self.candidates(c)
        segs = [self.system["dupcheck"], *(self.candidate_text(case.product, x) for x in cands),
                case.outputs[0], self.cue["dupcheck"]]
        case.sent.append(self.emit("dupcheck", c, 3, segs))

    def _on_literature(self, day: int) -> None:
        """The day's walk: each product whose weekly search runs today (Tuesday is weekday
        1), its abstracts in order, one product after another."""
        items = []
        for p, prod in enumerate(self.products):
            if prod.weekday == day + 1:
                n = max(5, round(clipped_length(self.rng, *ABSTRACTS) * self.scale))
                items += [(p, self.new(clipped_length(self.rng, *ABSTRACT))) for _ in range(n)]
        if items:
            self.walks.append(w := Walk(day, items))
            self.at(self.now, "walk", w)

    def _on_walk(self, w: Walk) -> None:
        """One abstract screened against the protocol; a flagged one is then extracted (the
        screen, its verdict and the extraction cue)."""
        if w.pos >= len(w.items):
            return
        p, abstract = w.items[w.pos]
        w.pos += 1
        segs = [self.system["literature"], self.products[p].protocol, abstract, self.cue["screen"]]
        w.sent.append([self.emit("literature", p, len(w.sent), segs)])
        verdict = self.new(clipped_length(self.rng, *OUTPUT["screen"]))
        then = self.now + self.pace(segs, verdict[1])
        if self.rng.random() < RELEVANT:
            self.at(then, "lit_extract", (w, [*segs, verdict, self.cue["lit_extract"]]))
        else:
            self.at(then, "walk", w)

    def _on_lit_extract(self, job: tuple[Walk, list[Segment]]) -> None:
        """A flagged abstract extracted: the screen, its verdict, the extraction cue."""
        w, segs = job
        w.sent[-1].append(self.emit("literature", w.items[w.pos - 1][0], len(w.sent) - 1, segs))
        out = clipped_length(self.rng, *OUTPUT["lit_extract"])
        self.at(self.now + self.pace(segs, out), "walk", w)
