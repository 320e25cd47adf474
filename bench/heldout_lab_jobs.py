"""bench.heldout's ``lab_notebook`` shape, the lab's jobs and notebook entries: the analysis
pipeline that reads each run's output log behind its instrument type's parsing guide the moment
the run finishes (and, for a run with a sample sheet, one request per sample in a burst), the
nightly QC batch walking every run of the day, the LIMS sync that rewrites rows of the reagent
inventory table, QA approving protocol revisions (the protocol and its library's index change),
the journal club's preprint, and the scientists' notebook entries that grow over the day as the
assistant drafts sections. See bench/heldout_lab_notebook.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_lab_world import HOUR, MINUTE, PAPER, ROW, SECTION, Layout, World, hour_in
from bench.heldout_recruit_jobs import Stream

SYSTEM = {"run": 700, "qc": 600, "writeup": 450}  # the jobs' and the writer's system prompts
CUE = {"run": 40, "burst": 35, "qc": 50}  # the instruction at a job request's end
QC_POLICY = 1500  # the lab's QC acceptance policy, after the QC system prompt
OUTPUT = {"run": (450, 0.4, 150, 1200), "qc": (120, 0.5, 40, 400)}
PREFILL, DECODE = 7000.0, 40.0  # tokens a second a job stream reads and writes
SAMPLE_GAP = (0.3, 1.5)  # seconds between a burst's per-sample requests
QC_AT = (22.5, 23.5)  # hours of each day the nightly QC walk starts
SYNC = (20 * MINUTE, (7, 20), 0.6, (1, 3))  # LIMS sync: every, hours, odds of a change, rows
SOP_REVISIONS = (2, 4)  # protocol revisions QA approves over the two days
PREPRINT = (33.0, 35.0)  # hours: the journal club's preprint lands (day 1, 09..11)
PREPRINT_WEIGHT = 4.0  # twice a hot paper's
ACTIVE = 0.75  # scientists who keep a notebook entry with the assistant on a day
WRITES = (5, 0.5, 2, 12)  # the assistant's requests on one day's entry
TITLE = (120, 0.4, 60, 200)  # an entry's title and aim
NOTES = (0.6, (250, 0.7, 40, 1200))  # odds the scientist adds notes first, their tokens
EDIT = 0.12  # odds an earlier section is rewritten before a request
INSTRUCTION = (60, 0.8, 10, 300)
DRAFT = (0.6, (420, 0.5, 120, 1400))  # odds the assistant's draft joins the entry, tokens


@dataclass
class Entry:
    """A scientist's notebook entry of a day: team, project, sections as they stand, the
    request indices, the steps before which a section sent before was rewritten, requests
    left, and how many sections the last request sent."""

    scientist: int
    team: int
    project: int
    day: int
    left: int
    sections: list[Segment]
    sent: list[int] = field(default_factory=list)
    edits: list[int] = field(default_factory=list)
    shown: int = 1


class Jobs(World):
    """The world (``World``), its jobs and the notebook entries."""

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, scale, layout)
        self.system = {k: self.new(v) for k, v in SYSTEM.items()}
        self.cue = {k: self.new(v) for k, v in CUE.items()}
        self.qc_policy = self.new(QC_POLICY)
        self.qcs: list[Stream] = []
        self.qc_from = 0.0
        self.bursts: list[tuple[int, list[int]]] = []  # (run, request indices)
        self.syncs: list[tuple[float, int]] = []  # (when, first row changed)
        self.sop_edits: list[tuple[float, int, int, int]] = []  # (when, protocol, section,
        # section of its library's index)
        self.preprint: tuple[float, int] | None = None
        self.entries: list[Entry] = []
        for day in (0, 1):
            self.at((day * 24 + rng.uniform(*QC_AT)) * HOUR, "qc", day)
            t = (day * 24 + SYNC[1][0]) * HOUR
            while t < (day * 24 + SYNC[1][1]) * HOUR:
                self.at(t, "sync", None)
                t += SYNC[0]
            for s in range(len(self.scientists)):
                if rng.random() < ACTIVE:
                    self.plan_entry(s, day)
        for _ in range(rng.randint(*SOP_REVISIONS)):
            self.at(hour_in(rng, rng.choice((0, 1))), "sop_revision", None)
        self.at(rng.uniform(*PREPRINT) * HOUR, "preprint", None)

    def pace(self, segs: list[Segment], out: int) -> float:
        """Seconds a job stream's request takes: reading the prompt, writing ``out``."""
        return (sum(n for _, n in segs) / PREFILL + out / DECODE) * self.rng.uniform(0.8, 1.25)

    def run_head(self, r: int) -> list[Segment]:
        """The analysis pipeline's head for run ``r``: system prompt, the type's guide."""
        return [self.system["run"], self.guides[self.units[self.runs[r].unit]]]

    def _on_finish(self, r: int) -> None:
        """Run ``r`` finishes: its log is analysed at once (the summary joins the run); a run
        with a sample sheet then gets one request per sample, a burst seconds apart."""
        run = self.runs[r]
        self.emit("run", r, 0, [*self.run_head(r), *run.log, self.cue["run"]])
        run.summary = self.new(clipped_length(self.rng, *OUTPUT["run"]))
        if run.samples:
            self.bursts.append((r, []))
            t = self.now
            for k in range(len(run.samples)):
                t += self.rng.uniform(*SAMPLE_GAP)
                self.at(t, "sample", (len(self.bursts) - 1, k))
        self.run_done(r)

    def run_done(self, r: int) -> None:
        """A hook for the desk (scientists look at the run's analysis)."""

    def _on_sample(self, arg: tuple[int, int]) -> None:
        """One sample of a burst: the head, the log's header, the sample's block, the cue."""
        b, k = arg
        r, sent = self.bursts[b]
        run = self.runs[r]
        segs = [*self.run_head(r), run.log[0], run.samples[k], self.cue["burst"]]
        sent.append(self.emit("burst", r, k, segs))

    def _on_qc(self, day: int) -> None:
        """The nightly QC walk: every run finished since the last, unit by unit, in the order
        they finished."""
        todo = [r for r, run in enumerate(self.runs) if self.qc_from <= run.finish < self.now]
        todo.sort(key=lambda r: (self.runs[r].unit, self.runs[r].finish))
        self.qc_from = self.now
        self.qcs.append(s := Stream("qc", day, todo))
        self.at(self.now, "stream", s)

    def qc_prompt(self, r: int) -> list[Segment]:
        """QC: system prompt, the lab's policy, the type's QC spec, the run's log, the cue."""
        run = self.runs[r]
        spec = self.qc_specs[self.units[run.unit]]
        return [self.system["qc"], self.qc_policy, spec, *run.log, self.cue["qc"]]

    def _on_stream(self, s: Stream) -> None:
        if s.pos >= len(s.items):
            return
        segs = self.qc_prompt(s.items[s.pos])
        s.sent.append(self.emit("qc", s.owner, s.items[s.pos], segs))
        s.pos += 1
        self.at(self.now + self.pace(segs, clipped_length(self.rng, *OUTPUT["qc"])), "stream", s)

    def _on_sync(self, _) -> None:
        """The LIMS sync: some of the time a few rows of the inventory table changed (usage
        logged, a delivery received), a new version from the first of them on."""
        rng, rows = self.rng, len(self.inventory.current)
        if rng.random() >= SYNC[2]:
            return
        changed = rng.sample(range(rows), rng.randint(*SYNC[3]))
        secs = list(self.inventory.current)
        for k in changed:
            secs[k] = self.new(secs[k][1])
        self.inventory.versions.append((self.now, secs))
        self.syncs.append((self.now, min(changed)))

    def _on_sop_revision(self, _) -> None:
        """QA approves a revision of a protocol (by popularity): one section rewritten, and
        its row of the library's index."""
        sop_id = self.rng.choices(range(len(self.sops)), [s.weight for s in self.sops])[0]
        sop = self.sops[sop_id]
        k = self.rng.randrange(len(sop.text.current))
        self.revise(sop.text, k)
        index = self.lab_digest if sop.team < 0 else self.teams[sop.team].digest
        row = min(sop.row * ROW // SECTION, len(index.current) - 1)
        self.revise(index, row)
        self.sop_edits.append((self.now, sop_id, k, row))

    def _on_preprint(self, _) -> None:
        """The journal club's preprint joins the paper set, at once the hottest paper."""
        self.papers.append(self.new(clipped_length(self.rng, *PAPER)))
        self.paper_weights.append(PREPRINT_WEIGHT)
        self.preprint = (self.now, len(self.papers) - 1)

    def plan_entry(self, s: int, day: int) -> None:
        """Scientist ``s`` keeps an entry on ``day``: the assistant's requests by the lab's
        hours, the first of them opening it."""
        rng, t = self.rng, self.scientists[s]
        project = rng.randrange(len(self.teams[t].projects))
        n = clipped_length(rng, *WRITES)
        self.entries.append(Entry(s, t, project, day, n, [self.new(clipped_length(rng, *TITLE))]))
        for when in sorted(hour_in(rng, day) for _ in range(n)):
            self.at(when, "write", len(self.entries) - 1)

    def _on_write(self, e: int) -> None:
        """A request on entry ``e``: a section sent before may be rewritten and notes added first;
        the template, the entry as it stands, an instruction; the draft may join the entry.
        After the last, the entry joins its project's archive."""
        entry, rng, new = self.entries[e], self.rng, self.new
        if entry.shown > 1 and rng.random() < EDIT:
            k = rng.randrange(1, entry.shown)
            entry.sections[k] = new(max(40, round(entry.sections[k][1] * rng.uniform(0.7, 1.4))))
            entry.edits.append(len(entry.sent))
        if entry.sent and rng.random() < NOTES[0]:
            entry.sections.append(new(clipped_length(rng, *NOTES[1])))
        team = self.teams[entry.team]
        segs = [self.lab_system, self.system["writeup"], team.template, *entry.sections,
                new(clipped_length(rng, *INSTRUCTION))]
        entry.sent.append(self.emit("writeup", e, len(entry.sent), segs))
        entry.shown = len(entry.sections)
        if rng.random() < DRAFT[0]:
            entry.sections.append(new(clipped_length(rng, *DRAFT[1])))
        entry.left -= 1
        if not entry.left:
            team.projects[entry.project].entries.append((self.now, list(entry.sections)))
