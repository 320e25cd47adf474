"""bench.heldout's ``clinical_scribe`` shape, the hospitals' side: inpatient units whose
nurses' shift notes and physicians' progress notes grow each stay's record, the nursing
hand-off job before each shift change walking a unit's beds in order, incoming nurses
re-opening hand-offs (exact re-sends), discharge summaries and their revisions (the summary
then joins the patient's chart), admissions into freed beds, the emergency department's
scribe drafts around the clock, on-call nights' chart questions, and the nightly coding job
walking the signed notes behind each specialty's coding guideline. See
bench/heldout_clinical_scribe.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_clinic_parts import DAY, HOUR, MINUTE, Chart
from bench.heldout_clinic_visits import DECODE, INSTRUCTION, REVIEW, Clinics
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_parts import poisson

UNITS = (1, 3)  # inpatient units a hospital has
BEDS = (70, 90)  # beds whose patients this replica serves (x scale), among the units
OCCUPIED = 0.9  # beds taken when the trace starts
STAY_WINDOW = 6  # notes a stay's record keeps (the last ~72 hours; the oldest drops)
HP = (2500, 0.35, 1200, 5000)  # tokens of the admission history and physical
NURSING = (350, 0.4, 120, 800)  # tokens of a nurse's shift note
PROGRESS = (900, 0.35, 400, 1800)  # tokens of a physician's progress note (rounds 09..12)
PROTOCOL = (600, 1500)  # tokens of a unit's hand-off protocol (I-PASS fields, unit rules)
SHIFTS = (7.0, 19.0)  # local shift changes: notes 60..35 minutes before, the job 30..20
HANDOFF_OUT = (350, 0.3, 150, 700)  # tokens of a hand-off summary
REOPEN = (0.25, 45.0)  # hand-offs re-opened (sent again) in the shift's first minutes
DISCHARGES = (0.18, (10.0, 15.0))  # occupied beds discharged a day, at local hours
DISCHARGE_TEMPLATE = 1600  # tokens of the discharge-summary template
SUMMARY_OUT = (900, 0.35, 400, 2000)  # tokens of a discharge summary
REVISIONS = (0.5, 0.35, 0.15)  # chance a discharge summary is revised 0..2 times
ADMIT = (1.0, 8.0)  # hours a freed bed stays empty
ED = 1.2  # emergency visits an hour at a hospital at the peak (x scale)
ED_HOURS = (5, 4, 3, 3, 3, 4, 5, 7, 9, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 9, 9, 8, 7, 6)
ED_STAY = (30.0, 180.0)  # minutes from arrival to the scribe's draft at disposition
ONCALL = 0.02  # on-call chart sessions an occupied bed an hour, 19..07 local
CODING = (23.0, 23.5)  # network hours the coding job starts each night
CODE_OUT = (120, 0.4, 40, 300)  # tokens of the codes and rationale written
PREFILL = 6000.0  # tokens a second the replica reads for one stream


@dataclass
class Unit:
    """An inpatient unit: its site, hand-off protocol and beds (stay index, -1 empty)."""

    site: int
    protocol: Segment
    beds: list[int]


@dataclass
class Stay:
    """A hospital stay: patient, unit, bed, record (the chart at admission and the H&P, then
    the latest notes), admission time, discharge summary revisions planned, its prompt,
    drafts and instructions, request indices, discharge time."""

    patient: int
    unit: int
    bed: int
    record: Chart
    admitted: float
    revisions: int = 0
    prompt: list[Segment] = field(default_factory=list)
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    discharged: float = float("inf")


@dataclass
class Handoff:
    """One run of a unit's hand-off job: the unit, the shift change, the stays in bed order
    and the request indices."""

    unit: int
    change: float
    stays: list[int]
    sent: list[int] = field(default_factory=list)


class Wards(Clinics):
    """The whole replica: clinics (``Clinics``) and hospitals; ``run`` ends at END."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.template = self.new(DISCHARGE_TEMPLATE)
        self.units: list[Unit] = []
        self.stays: list[Stay] = []
        self.handoffs: list[Handoff] = []
        self.reopens: list[tuple[int, int]] = []  # (request, the hand-off request it repeats)
        self.coded: list[tuple[int, str, int]] = []  # (request, "visit" or "stay", its id)
        sites = [s for s, site in enumerate(self.sites) for _ in range(
            rng.randint(*UNITS) if site.hospital else 0)]
        sizes = [rng.uniform(0.6, 1.4) for _ in sites]
        total = rng.uniform(*BEDS) * scale
        for s, size in zip(sites, sizes):
            self._unit(s, max(2, round(total * size / sum(sizes))))
        for day in (0, 1):
            self.at(day * DAY, "ward_day", day)
            self.at(day * DAY + rng.uniform(*CODING) * HOUR, "coding", None)

    def _unit(self, s: int, beds: int) -> None:
        """A unit of ``s`` with ``beds`` beds, 90 % taken by patients admitted 0..5 days ago
        (their records hold up to STAY_WINDOW earlier notes)."""
        rng, u = self.rng, len(self.units)
        self.units.append(Unit(s, self.new(rng.randint(*PROTOCOL)), [-1] * beds))
        self.sites[s].units.append(u)
        for b in range(beds):
            if rng.random() < OCCUPIED:
                st = self.admit(u, b, -rng.uniform(0.2, 5.0) * DAY)
                record = self.stays[st].record
                k = min(STAY_WINDOW, int(-self.stays[st].admitted // (DAY / 3)))
                record.notes = [self.new(clipped_length(rng, *NURSING)) for _ in range(k)]
                record.versions[0] = (-1e18, [*record.fixed, *record.notes])

    def admit(self, u: int, b: int, t: float) -> int:
        """A new patient into bed ``b`` of unit ``u`` at ``t``: the chart as it stands and
        the H&P begin the record."""
        p = self.patient(self.units[u].site)
        hp = self.new(clipped_length(self.rng, *HP))
        record = Chart([*self.patients[p].chart.current, hp], [], STAY_WINDOW)
        record.versions[0] = (t, record.versions[0][1])
        self.stays.append(Stay(p, u, b, record, t))
        self.units[u].beds[b] = self.patients[p].stay = len(self.stays) - 1
        return len(self.stays) - 1

    def _on_ward_day(self, day: int) -> None:
        """A day at each hospital: notes and hand-off jobs at each shift change, rounds,
        discharges, emergency arrivals, on-call nights."""
        rng = self.rng
        for s, site in enumerate(self.sites):
            for u in site.units:
                for h in SHIFTS:
                    change = self.clock(day, s, h)
                    self.at(change - 60 * MINUTE, "shift_notes", u)
                    self.at(change - rng.uniform(20, 30) * MINUTE, "handoff_job", (u, change))
                self.at(self.clock(day, s, 8.0), "discharges", (u, day))
                self.at(self.clock(day, s, 9.0), "rounds", u)
                for lo, hi in ((0.0, 7.0), (19.0, 24.0)):
                    self._nights(u, self.clock(day, s, lo), self.clock(day, s, hi))
            if site.hospital:
                self._emergency(day, s)

    def occupied(self, u: int) -> list[int]:
        return [st for st in self.units[u].beds if st >= 0]

    def _on_shift_notes(self, u: int) -> None:
        """Each patient's nurse charts the shift's note in the next 25 minutes."""
        for st in self.occupied(u):
            self.at(self.now + self.rng.uniform(0, 25) * MINUTE, "note", (st, NURSING))

    def _on_rounds(self, u: int) -> None:
        """Each patient's progress note lands during the morning's rounds (09..12)."""
        for st in self.occupied(u):
            self.at(self.now + self.rng.uniform(0, 3) * HOUR, "note", (st, PROGRESS))

    def _on_note(self, arg: tuple[int, tuple]) -> None:
        st, size = arg
        stay = self.stays[st]
        if stay.discharged > self.now:
            stay.record.add(self.now, self.new(clipped_length(self.rng, *size)), {})

    def _on_handoff_job(self, arg: tuple[int, float]) -> None:
        u, change = arg
        if taken := self.occupied(u):
            self.handoffs.append(Handoff(u, change, taken))
            self.at(self.now, "handoff", len(self.handoffs) - 1)

    def _on_handoff(self, h: int) -> None:
        """The job's next bed: system prompt, the unit's protocol, the record as it stands,
        the cue; the incoming nurse may re-open it in the shift's first minutes."""
        job, rng, tx = self.handoffs[h], self.rng, self.texts
        st = job.stays[len(job.sent)]
        segs = [tx["system"]["handoff"], self.units[job.unit].protocol,
                *self.stays[st].record.at(self.now), tx["cue"]["handoff"]]
        i = self.emit("handoff", h, len(job.sent), segs)
        job.sent.append(i)
        if rng.random() < REOPEN[0]:
            when = job.change + rng.uniform(0, REOPEN[1]) * MINUTE
            self.at(max(when, self.now + 60.0), "reopen", i)
        if len(job.sent) < len(job.stays):
            out = clipped_length(rng, *HANDOFF_OUT)
            pace = (sum(n for _, n in segs) / PREFILL + out / DECODE) * rng.uniform(0.9, 1.2)
            self.at(self.now + pace, "handoff", h)

    def _on_reopen(self, i: int) -> None:
        """The incoming nurse opens hand-off request ``i`` again: sent again exactly."""
        _, h, step, segs = self.meta[i]
        self.reopens.append((self.emit("reopen", h, step, segs), i))

    def _on_discharges(self, arg: tuple[int, int]) -> None:
        u, day = arg
        for st in self.occupied(u):
            if self.rng.random() < DISCHARGES[0]:
                when = self.clock(day, self.units[u].site, self.rng.uniform(*DISCHARGES[1]))
                self.at(when, "discharge", st)

    def _on_discharge(self, st: int) -> None:
        """The discharge summary (system prompt, template, the record as it stands, the cue),
        then each revision re-sends it with the drafts and instructions so far; after the
        last, the patient leaves, the summary joins the chart and the bed is freed."""
        stay, rng, tx = self.stays[st], self.rng, self.texts
        if not stay.sent:
            stay.revisions = rng.choices(range(len(REVISIONS)), REVISIONS)[0]
            stay.prompt = [tx["system"]["discharge"], self.template,
                           *stay.record.at(self.now), tx["cue"]["discharge"]]
            segs = stay.prompt
        else:
            stay.history.append(self.new(clipped_length(rng, *INSTRUCTION)))
            segs = [*stay.prompt, *stay.history]
        stay.sent.append(self.emit("discharge", st, len(stay.sent), segs))
        stay.history.append(out := self.new(clipped_length(rng, *SUMMARY_OUT)))
        done = self.now + out[1] / DECODE
        if len(stay.sent) <= stay.revisions:
            self.at(done + rng.uniform(*REVIEW) * MINUTE, "discharge", st)
            return
        stay.discharged = self.now
        self.chart_note(stay.patient)
        self.patients[stay.patient].stay = -1
        self.units[stay.unit].beds[stay.bed] = -1
        self.to_code.append(("stay", st))
        self.at(done + rng.uniform(*ADMIT) * HOUR, "admit", (stay.unit, stay.bed))

    def _on_admit(self, arg: tuple[int, int]) -> None:
        self.admit(*arg, self.now)

    def _emergency(self, day: int, s: int) -> None:
        """The day's emergency visits (by ED_HOURS, local): each drafted at disposition."""
        rng, peak = self.rng, max(ED_HOURS)
        for h, w in enumerate(ED_HOURS):
            for _ in range(poisson(rng, ED * w / peak * self.scale)):
                begin = self.clock(day, s, h + rng.random())
                e = self.encounter(-1, self.patient(s), "emergency", s, begin)
                self.at(begin + rng.uniform(*ED_STAY) * MINUTE, "scribe", e)

    def _nights(self, u: int, lo: float, hi: float) -> None:
        """On-call questions on the unit's patients between ``lo`` and ``hi``."""
        beds = len(self.units[u].beds) * OCCUPIED
        for _ in range(poisson(self.rng, ONCALL * beds * (hi - lo) / HOUR)):
            self.at(self.rng.uniform(lo, hi), "oncall", u)

    def _on_oncall(self, u: int) -> None:
        """The covering physician asks the chart assistant about one of the unit's patients:
        the chart system prompt, the record as it stands."""
        if taken := self.occupied(u):
            st = self.rng.choice(taken)
            self.open("oncall", st, [self.texts["system"]["chart"],
                                     *self.stays[st].record.at(self.now)])

    def _on_coding(self, _: object) -> None:
        todo, self.to_code = self.to_code, []
        if todo:
            self.at(self.now, "code", todo)

    def _on_code(self, todo: list[tuple[str, int]]) -> None:
        """The coding job's next signed note, in signing order: system prompt, the coding
        guideline of its specialty (inpatient for a stay), the note, the cue."""
        (kind, n), rng, tx = todo[0], self.rng, self.texts
        if kind == "visit":
            spec, note = self.encounters[n].spec, self.encounters[n].note
        else:
            spec, note = "inpatient", self.stays[n].history[-1]
        segs = [tx["system"]["coding"], *tx["guideline"][spec], note, tx["cue"]["coding"]]
        self.coded.append((self.emit("coding", n, kind == "stay", segs), kind, n))
        if len(todo) > 1:
            out = clipped_length(rng, *CODE_OUT)
            pace = (sum(t for _, t in segs) / PREFILL + out / DECODE) * rng.uniform(0.9, 1.2)
            self.at(self.now + pace, "code", todo[1:])
