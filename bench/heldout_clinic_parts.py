"""bench.heldout's ``clinical_scribe`` shape, its world: a hospital network's sites in several
time zones (specialty clinics whose clinicians use the ambient scribe, hospitals with inpatient
units), patients whose chart summaries grow as notes are signed, the fixed texts each of the
assistant's tools puts first (system prompts, note templates, coding guidelines, payer
templates, formulary and guideline documents), the event clock and the generator's base that
sends requests. See bench/heldout_clinical_scribe.py's docstring for the numbers."""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts at midnight on the network's clock (Eastern), ends 48 h later
ZONES = (0, -1, -2, -3)  # a site's hours behind the network clock: Eastern .. Pacific
SITES = (3, 5)  # sites a network has; site 0 (Eastern) always has the main hospital
HOSPITAL = 0.5  # chance another site has a hospital (inpatient units, an emergency department)
# specialty -> (note template tokens, transcript (median, sigma, lo, hi), visits a
# clinician-day, signed note tokens (median), prior-authorization chance)
SPECIALTIES = {
    "primary": (1200, (5500, 0.4, 1500, 14000), 18, 650, 0.05),
    "cardiology": (1800, (6000, 0.35, 2000, 14000), 14, 800, 0.2),
    "oncology": (2400, (7500, 0.35, 2500, 16000), 10, 950, 0.3),
    "orthopedics": (1400, (3500, 0.4, 1000, 9000), 20, 550, 0.25),
    "pediatrics": (1300, (4000, 0.4, 1200, 10000), 20, 550, 0.03),
    "psychiatry": (1600, (9000, 0.3, 3000, 18000), 9, 900, 0.05),
    "neurology": (1800, (7000, 0.35, 2000, 15000), 12, 850, 0.15),
    "dermatology": (1000, (2500, 0.4, 800, 7000), 24, 400, 0.1),
    "obstetrics": (1500, (4500, 0.4, 1200, 11000), 16, 600, 0.05),
    "emergency": (1500, (3500, 0.5, 800, 10000), 0, 700, 0.0),  # hospitals, around the clock
}
CLINICS = (2, 4)  # outpatient specialties a site has (primary care always)
CLINICIANS = (12, 15)  # scribe-using clinicians the network routes to this replica (x scale)
SYSTEM = {"scribe": 1100, "chart": 900, "inbox": 700, "prior_auth": 500, "handoff": 900,
          "discharge": 700, "coding": 600, "lookup": 600}  # tokens of each tool's system prompt
CUE = {"scribe": 45, "inbox": 30, "prior_auth": 30, "handoff": 40, "discharge": 40,
       "coding": 50}  # tokens of a tool's closing instruction
# chart summary: problem list, medications, allergies, recent results, then the latest notes
FIXED = {"problems": (500, 0.6, 80, 2000), "medications": (350, 0.6, 60, 1500),
         "allergies": (40, 0.5, 16, 200), "results": (500, 0.7, 80, 2500)}
CHANGES = {0: 0.15, 1: 0.35, 3: 0.3}  # a signed note rewrites problems, medications, results
NOTE_SUMMARY = (250, 0.4, 100, 600)  # tokens of a note's summary in the chart
WINDOW = 8  # note summaries a chart summary keeps (the oldest drops)
PRIOR_NOTES = (0.1, 0.15, 0.15, 0.1, 0.1, 0.1, 0.05, 0.05, 0.2)  # 0..8 notes before the trace
GUIDELINE = (4000, 0.35, 2000, 7000)  # tokens of a specialty's coding guideline
GUIDE_SECTION = 800  # tokens of a coding guideline's or a document's section
PAYERS = 6  # payer prior-authorization templates (900..2500 tokens)
DOCS = 300  # formulary monographs and clinical guidelines a lookup quotes, Zipf(1.1)
DOC = (3000, 0.6, 1200, 12000)  # tokens of a looked-up document


@dataclass
class Chart:
    """A record as the assistant sends it: ``fixed`` sections, then the latest ``window``
    notes. Its versions as (since, segments) and, per change, (time, first changed
    section): every block from that section on is new content."""

    fixed: list[Segment]
    notes: list[Segment]
    window: int
    versions: list[tuple[float, list[Segment]]] = field(default_factory=list)
    changes: list[tuple[float, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.versions.append((-1e18, [*self.fixed, *self.notes]))

    at = Versioned.at  # the sections at a time, and the latest: Versioned's, over ``versions``
    current = Versioned.current

    def add(self, t: float, note: Segment | None, swaps: dict[int, Segment]) -> int:
        """Rewrite fixed sections (index -> new content) and append a note (the oldest drops
        past the window); the first changed section's index."""
        old = self.current
        self.fixed = [swaps.get(k, s) for k, s in enumerate(self.fixed)]
        if note is not None:
            self.notes = [*self.notes, note][-self.window:]
        new = [*self.fixed, *self.notes]
        first = next((k for k, (a, b) in enumerate(zip(old, new)) if a != b), len(old))
        self.versions.append((t, new))
        self.changes.append((t, first))
        return first


@dataclass
class Patient:
    """A patient: their site, chart summary, the clinician who answers their messages
    (-1: none) and their hospital stay's index in ``stays`` while admitted."""

    site: int
    chart: Chart
    clinician: int = -1
    stay: int = -1


@dataclass
class Site:
    """A site: its zone (hours behind the network clock), its clinics (specialty -> the
    clinicians' ids) and, at a hospital, its inpatient units' ids."""

    zone: int
    clinics: dict[str, list[int]]
    hospital: bool
    units: list[int] = field(default_factory=list)


def sections(new: Callable, total: int, size: int) -> list[Segment]:
    """``total`` tokens of new content in sections of ``size`` (the last one longer)."""
    k = max(1, total // size)
    return [new(total // k + (i < total % k)) for i in range(k)]


def texts(rng: random.Random, new: Callable) -> dict:
    """The fixed texts: system prompts and cues per tool, note templates and coding
    guidelines per specialty (and "inpatient"), payer templates, looked-up documents."""
    return {"system": {k: new(n) for k, n in SYSTEM.items()},
            "cue": {k: new(n) for k, n in CUE.items()},
            "template": {s: new(v[0]) for s, v in SPECIALTIES.items()},
            "guideline": {s: sections(new, clipped_length(rng, *GUIDELINE), GUIDE_SECTION)
                          for s in [*SPECIALTIES, "inpatient"]},
            "payer": [new(rng.randint(900, 2500)) for _ in range(PAYERS)],
            "doc": [sections(new, clipped_length(rng, *DOC), GUIDE_SECTION)
                    for _ in range(DOCS)]}


class Network(ClockedState):
    """The sites, patients and fixed texts on the event clock; ``emit`` sends a request.
    bench.heldout_clinic_visits.Clinics builds on it (and bench.heldout_clinic_wards.Wards
    on that)."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.weekday0 = rng.randrange(4)  # day 0 is Monday..Thursday (two weekdays)
        self.texts = texts(rng, self.new)
        self.patients: list[Patient] = []
        self.clinicians: list[tuple[int, str]] = []  # (site, specialty)
        self.sites: list[Site] = []
        for s in range(rng.randint(*SITES)):
            self.sites.append(self._site(s))
        self._staff()
        self.doc_cum = list(itertools.accumulate((d + 1) ** -1.1 for d in range(DOCS)))

    def _site(self, s: int) -> Site:
        """Site ``s``: a zone, primary care and 1..3 other clinics, a hospital at site 0 and
        at half the others."""
        rng = self.rng
        zone = 0 if s == 0 else rng.choice(ZONES)
        outpatient = [k for k, v in SPECIALTIES.items() if v[2] and k != "primary"]
        specs = ["primary", *rng.sample(outpatient, rng.randint(*CLINICS) - 1)]
        return Site(zone, {spec: [] for spec in specs}, s == 0 or rng.random() < HOSPITAL)

    def _staff(self) -> None:
        """CLINICIANS x scale clinicians among the clinics (primary care weighs twice)."""
        rng = self.rng
        clinics = [(s, spec) for s, site in enumerate(self.sites) for spec in site.clinics]
        weights = [2.0 if spec == "primary" else 1.0 for _, spec in clinics]
        n = max(1, round(rng.uniform(*CLINICIANS) * self.scale))
        for s, spec in sorted(rng.choices(clinics, weights, k=n)):
            self.sites[s].clinics[spec].append(len(self.clinicians))
            self.clinicians.append((s, spec))

    def clock(self, day: int, site: int, hour: float) -> float:
        """The network time of local ``hour`` on ``day`` at ``site``."""
        return day * DAY + (hour - self.sites[site].zone) * HOUR

    def patient(self, site: int, clinician: int = -1) -> int:
        """A new patient of ``site`` with a chart summary as it stood before the trace."""
        rng, new = self.rng, self.new
        fixed = [new(clipped_length(rng, *v)) for v in FIXED.values()]
        k = rng.choices(range(len(PRIOR_NOTES)), PRIOR_NOTES)[0]
        notes = [new(clipped_length(rng, *NOTE_SUMMARY)) for _ in range(k)]
        self.patients.append(Patient(site, Chart(fixed, notes, WINDOW), clinician))
        return len(self.patients) - 1

    def chart_note(self, p: int) -> int:
        """A signed note's summary joins patient ``p``'s chart, which may also get a new
        problem list, medication list or results; the first changed section."""
        rng = self.rng
        chart = self.patients[p].chart
        swaps = {k: self.new(max(16, round(chart.fixed[k][1] * rng.uniform(0.9, 1.25))))
                 for k, chance in CHANGES.items() if rng.random() < chance}
        return chart.add(self.now, self.new(clipped_length(rng, *NOTE_SUMMARY)), swaps)

    def doc(self) -> int:
        """A looked-up document by popularity (Zipf 1.1)."""
        return bisect.bisect_left(self.doc_cum, self.rng.random() * self.doc_cum[-1])

