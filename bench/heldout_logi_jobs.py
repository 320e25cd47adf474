"""bench.heldout's ``logistics_dispatch`` shape, the automated side: the exception agent (a
case per exception scan, its tool-call steps each re-sending the case so far), a weather
storm's flood of exceptions behind the storm advisory as it is reissued, customs-document
checks against regulations and tariff chapters (one chapter amended in the trace), carrier
rate-confirmation extraction, and the nightly route-planning walk over the depots. See
bench/heldout_logistics_dispatch.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_logi_desk import Desk
from bench.heldout_logi_parts import DAY, HOUR, MINUTE, REGIONS, sections

SYSTEM = {"exception": 1500, "customs": 900, "rateconf": 700, "route": 1500}
PLAYBOOK = (2400, 0.25, 1500, 4000)  # tokens of the exception playbook (600-token sections)
CUE = {"exception": 40, "weather": 55, "customs": 45, "rateconf": 35, "plan": 60, "check": 50}
STEPS = (0.45, 0.3, 0.15, 0.1)  # chance a case takes 1, 2, 3, 4 requests (tool-call steps)
TOOL = ((80, 0.4, 30, 200), (300, 0.6, 60, 1200))  # tokens of a step's call and tool result
REPEAT = 0.3  # exceptions on a shipment of the region that had one before
DAMAGE = 0.12  # exceptions that are damage (the claims desk picks them up)
EXCEPTIONS = (90, (0.3, 0.2, 0.2, 0.2, 0.3, 0.5, 0.8, 1.0, 1.1, 1.1, 1.0, 1.0, 1.0, 1.0,
                    1.0, 1.1, 1.1, 1.0, 0.9, 0.8, 0.7, 0.5, 0.4, 0.3))  # a day, by hour
STORM = ((400, 900), (10.0, 20.0), (3.0, 6.0), (30.0, 60.0), (800, 0.3, 400, 2000))
# a storm's exceptions (x scale), start hour, hours, minutes between advisories, their tokens
SECOND_STORM = (0.2, (200, 500))  # seeds with a second storm (the other day): chance, size
WEATHER_STEPS = 0.3  # storm cases with a second step
COUNTRIES = (0.3, 0.2, 0.12, 0.1, 0.08, 0.08, 0.06, 0.06)  # destinations' shares of filings
REGULATION = (3500, 0.35, 2000, 6000)  # tokens of a country's import rules (600 sections)
CHAPTERS = 24  # tariff schedule chapters a filing's goods fall in, Zipf(1.0)
CHAPTER = (6000, 0.4, 3000, 10000)  # tokens of a chapter (800-token sections)
CUSTOMS = (80, (0.5, 0.9, 1.0, 1.0, 0.9, 0.6, 0.8, 1.0, 1.0, 0.9, 0.7, 0.4), 7)
DOC = ((1, 4), (600, 0.4, 300, 900))  # a filing's documents: count, tokens each
CORRECTED = (0.25, (10.0, 90.0))  # filings sent again with one document fixed, minutes later
AMEND = (0.6, (1, 3))  # chance the amendment lands at day 1's midnight, chapters amended
CARRIERS = 150  # carriers whose rate confirmations come in, Zipf(1.1)
CARRIER_TERMS = (2400, 0.45, 1200, 4000)  # tokens of a carrier's boilerplate (600 sections)
RATECONF = (150, (0.6, 0.9, 1.0, 1.0, 0.9, 0.7, 0.9, 1.0, 1.0, 0.9, 0.7, 0.5), 7)
SCHEMA, LOAD = 900, (400, 0.4, 150, 900)  # extraction schema, a load's own page
NIGHT = (1.0, 2.0)  # hours the route walk starts at
MANIFEST = (4500, 0.4, 2000, 12000)  # tokens of a depot's manifest for the day (800 sections)
PLAN, CHECK = (700, 0.4, 300, 1500), (150, 0.4, 80, 300)  # tokens the two stages write
PREFILL, DECODE = 6000.0, 35.0  # tokens a second for one stream (reading, writing)


@dataclass
class Case:
    """An exception case: its kind ("exception" or "weather"), shipment, steps left, the
    prompt so far and its request indices."""

    kind: str
    shipment: int
    steps: int
    segs: list[Segment]
    sent: list[int] = field(default_factory=list)


@dataclass
class Storm:
    """A weather storm over a region: its start, end, the advisory's versions and the cases."""

    region: int
    start: float
    end: float
    advisory: Versioned
    cases: list[int] = field(default_factory=list)


def pace(rng: random.Random, segs: list[Segment], out: int) -> float:
    """Seconds to read ``segs`` and write ``out`` tokens, x 0.8..1.25."""
    return (sum(t for _, t in segs) / PREFILL + out / DECODE) * rng.uniform(0.8, 1.25)


class Operations(Desk):
    """The whole replica: the network, the desk (``Desk``) and the automated jobs; ``run``
    ends at the second midnight."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system.update({tool: self.new(n) for tool, n in SYSTEM.items()})
        self.playbook = sections(rng, self.new, clipped_length(rng, *PLAYBOOK))
        self.cues = {k: self.new(n) for k, n in CUE.items()}
        self.regulations = [sections(rng, self.new, clipped_length(rng, *REGULATION))
                            for _ in COUNTRIES]
        self.chapters = [Versioned([(-1e18, sections(rng, self.new,
                                                     clipped_length(rng, *CHAPTER), 800))])
                         for _ in range(CHAPTERS)]
        self.carriers = [sections(rng, self.new, clipped_length(rng, *CARRIER_TERMS))
                         for _ in range(CARRIERS)]
        self.schema = self.new(SCHEMA)
        self.cases: list[Case] = []
        self.storms: list[Storm] = []
        self.filings: list[tuple[int, int, list[int]]] = []  # (country, chapter, requests)
        self.amendments: list[tuple[float, int, int]] = []  # (time, chapter, section)
        self.confirmations: list[tuple[int, int]] = []  # (request, carrier)
        self.walks: list[list[tuple[int, int, int]]] = []  # per night: (depot, stage, request)
        self.daily("exception", EXCEPTIONS[0], EXCEPTIONS[1], 0)
        self.daily("filing", *CUSTOMS)
        self.daily("rateconf", *RATECONF)
        self.plan_storms()
        when = DAY if rng.random() < AMEND[0] else rng.uniform(0, 2 * DAY)
        self.at(when, "amend", rng.randint(*AMEND[1]))
        for night in (0, 1):
            self.at(night * DAY + rng.uniform(*NIGHT) * HOUR, "night", night)

    def plan_storms(self) -> None:
        """A storm on a random day over a region by volume; on some seeds a smaller second one
        on the other day over another region. Their cases' arrival times are drawn now."""
        rng = self.rng
        day = rng.randrange(2)
        plan = [(day, self.region_by_volume(), STORM[0])]
        if rng.random() < SECOND_STORM[0]:
            other = rng.choice([r for r in range(REGIONS) if r != plan[0][1]])
            plan.append((1 - day, other, SECOND_STORM[1]))
        for day, r, size in plan:
            start = day * DAY + rng.uniform(*STORM[1]) * HOUR
            end = start + rng.uniform(*STORM[2]) * HOUR
            adv, t = [], start - rng.uniform(1, 3) * HOUR  # the first advisory comes before
            while t < end:
                adv.append((t, [self.new(clipped_length(rng, *STORM[4]))]))
                t += rng.uniform(*STORM[3]) * MINUTE
            self.storms.append(Storm(r, start, end, Versioned(adv)))
            for _ in range(max(2, round(rng.randint(*size) * self.scale))):
                when = start + (end - start) * rng.betavariate(1.6, 3.0)
                self.at(when, "storm_case", len(self.storms) - 1)

    def open_case(self, kind: str, s: int, head: list[Segment], steps: int) -> None:
        """A case on shipment ``s`` (its exception scan added now): ``head``, the tracking
        record as it stands, the kind's cue; its first step now."""
        segs = [*head, *self.except_(s), self.cues[kind]]
        self.cases.append(Case(kind, s, steps, segs))
        self.excepted.append((self.now, s))
        self.at(self.now, "step", len(self.cases) - 1)

    def _on_exception(self, _: object) -> None:
        """An exception scan on a shipment of a region by volume (a repeat one REPEAT of the
        time): the agent's case behind its system prompt, playbook and the region's policy."""
        rng = self.rng
        r = self.region_by_volume()
        before = [s for _, s in self.excepted if self.shipments[s].region == r]
        s = rng.choice(before) if before and rng.random() < REPEAT else self.new_shipment(r)
        if rng.random() < DAMAGE:
            self.damaged.append(s)
        head = [self.system["exception"], *self.playbook, self.regions[r].policy]
        self.open_case("exception", s, head, rng.choices((1, 2, 3, 4), STEPS)[0])

    def _on_storm_case(self, n: int) -> None:
        """A storm's exception: a shipment of the region (one seen before a fifth of the time),
        the agent's head, the region's policy and the advisory as it stands."""
        rng, storm = self.rng, self.storms[n]
        seen = self.regions[storm.region].shipments
        s = rng.choice(seen) if seen and rng.random() < 0.2 else self.new_shipment(storm.region)
        head = [self.system["exception"], *self.playbook, self.regions[storm.region].policy,
                *storm.advisory.at(self.now)]
        storm.cases.append(len(self.cases))
        self.open_case("weather", s, head, 2 if rng.random() < WEATHER_STEPS else 1)

    def _on_step(self, c: int) -> None:
        """A case's next request: the case so far; unless it was the last, the call the
        model wrote and the tool's result join it and the next step follows."""
        case, rng = self.cases[c], self.rng
        case.sent.append(self.emit(case.kind, c, len(case.sent), list(case.segs)))
        case.steps -= 1
        if case.steps <= 0:
            return
        call = self.new(clipped_length(rng, *TOOL[0]))
        case.segs = [*case.segs, call, self.new(clipped_length(rng, *TOOL[1]))]
        self.at(self.now + pace(rng, case.segs, call[1]) + rng.uniform(0.5, 3.0), "step", c)

    def filing(self, f: int, docs: list[Segment]) -> list[Segment]:
        country, chapter, _ = self.filings[f]
        return [self.system["customs"], *self.regulations[country],
                *self.chapters[chapter].current, *docs, self.cues["customs"]]

    def _on_filing(self, arg: tuple[int, list[Segment]] | None) -> None:
        """A customs filing checked: the rules of its destination, the tariff chapter as it
        stands, its documents; CORRECTED of them come back later with one document fixed."""
        rng = self.rng
        if arg is None:
            country = rng.choices(range(len(COUNTRIES)), COUNTRIES)[0]
            chapter = rng.choices(range(CHAPTERS), [1 / (k + 1) for k in range(CHAPTERS)])[0]
            self.filings.append((country, chapter, []))
            f = len(self.filings) - 1
            docs = [self.new(clipped_length(rng, *DOC[1])) for _ in range(rng.randint(*DOC[0]))]
        else:
            f, docs = arg
        self.filings[f][2].append(self.emit("customs", f, len(self.filings[f][2]),
                                            self.filing(f, docs)))
        if arg is None and rng.random() < CORRECTED[0]:
            k = rng.randrange(len(docs))
            fixed = [*docs[:k], self.new(max(40, round(docs[k][1] * rng.uniform(0.9, 1.2)))),
                     *docs[k + 1:]]
            self.at(self.now + rng.uniform(*CORRECTED[1]) * MINUTE, "filing", (f, fixed))

    def _on_amend(self, n: int) -> None:
        """A tariff amendment: one section of ``n`` chapters (by popularity) is rewritten."""
        rng = self.rng
        for ch in set(rng.choices(range(CHAPTERS), [1 / (k + 1) for k in range(CHAPTERS)],
                                  k=n)):
            secs = list(self.chapters[ch].current)
            k = rng.randrange(len(secs))
            secs[k] = self.new(max(100, round(secs[k][1] * rng.uniform(0.9, 1.15))))
            self.chapters[ch].versions.append((self.now, secs))
            self.amendments.append((self.now, ch, k))

    def _on_rateconf(self, _: object) -> None:
        """A carrier's rate confirmation: the extractor's prompt, the schema, the carrier's
        boilerplate terms, the load's own page."""
        rng = self.rng
        c = rng.choices(range(CARRIERS), [(k + 1) ** -1.1 for k in range(CARRIERS)])[0]
        segs = [self.system["rateconf"], self.schema, *self.carriers[c],
                self.new(clipped_length(rng, *LOAD)), self.cues["rateconf"]]
        self.confirmations.append((self.emit("rateconf", c, 0, segs), c))

    def _on_night(self, night: int) -> None:
        """The route planner's walk: every depot in order, each with its manifest for the day."""
        rng = self.rng
        todo = [(d, sections(rng, self.new, clipped_length(rng, *MANIFEST), 800))
                for d in range(len(self.depots))]
        self.walks.append([])
        self.at(self.now, "route", (night, todo, None))

    def _on_route(self, arg: tuple) -> None:
        """The walk's next request: a depot's plan (the planner's prompt, its region's roads,
        its profile, its manifest), then the check (that prompt, the plan, the check cue)."""
        night, todo, plan = arg
        rng = self.rng
        d, manifest = todo[0]
        r, profile = self.depots[d]
        stage = 1 if plan is None else 2
        if plan is None:
            segs = [self.system["route"], *self.regions[r].roads, profile, *manifest,
                    self.cues["plan"]]
            out = clipped_length(rng, *PLAN)
            nxt = (night, todo, [*segs, self.new(out), self.cues["check"]])
        else:
            segs, out, nxt = plan, clipped_length(rng, *CHECK), (night, todo[1:], None)
        i = self.emit("route", d, 2 * night + stage - 1, segs)
        self.walks[night].append((d, stage, i))
        if nxt[1]:
            self.at(self.now + pace(rng, segs, out), "route", nxt)
