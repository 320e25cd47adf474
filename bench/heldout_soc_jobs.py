"""bench.heldout's ``soc_copilot`` shape, the scheduled side: the world is built, nightly
threat hunts walk a client's asset inventory (and some nights its rule catalog) in order behind
the night's intel, weekly client reports go over the week's closed cases, and editors change
clients' environment profiles, runbooks and hunt checklists. See
bench/heldout_soc_copilot.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_call_center_jobs import local_time
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned, revise
from bench.heldout_meeting_parts import pick
from bench.heldout_soc_alerts import CAMPAIGNS, STORMS, SYSTEM
from bench.heldout_soc_cases import SUMMARY, Cases
from bench.heldout_soc_parts import (ASSET, DAY, HOUR, SOC_TZ, Client, clients, next_office,
                                     shift_end)

INSTRUCTION = {"note": 45, "handoff": 50, "close": 55, "asset": 40, "rule": 40}
SECTIONS = (70, 60, 80, 60, 75)  # the weekly report's section instructions (tokens)
TEMPLATE = (900, 0.3, 500, 1500)  # tokens of the MSSP's report template
CHURN = 0.03  # inventory chunks the nightly CMDB sync rewrites
IOCS = (300, 0.4, 150, 500)  # tokens of the night's IOC excerpt after each asset chunk
HYPOTHESIS = (550, 0.4, 300, 900)  # tokens of a rule review's hunt hypothesis
RULE_REVIEW = 0.35 # nights on which a rule-catalog review follows the asset sweep
STEP = (2.0, 8.0)  # seconds between two items of a walk
EDITS = 0.5  # edits a day at a client of mean size (x size^0.5), in its office hours
EDIT = (("profile", 0.35), ("runbook", 0.5), ("checklist", 0.15))
LAST_WEEK = (6, 0.5, 2, 60)  # cases closed the week before the trace (x size)


@dataclass
class Hunt:
    """A night's hunt walk for a client: "asset" (inventory chunks) or "rule" (the rule
    catalog), its head, its items (each a list of segments, in inventory or catalog order),
    what follows each item, and its request indices."""

    client: int
    kind: str
    head: list[Segment]
    items: list[list[Segment]]
    tail: list[Segment]
    sent: list[int] = field(default_factory=list)


@dataclass
class Report:
    """A client's weekly report: the closed cases' summaries it goes over (in closing order)
    and its request indices (one per section)."""

    client: int
    summaries: list[Segment]
    sent: list[int] = field(default_factory=list)


class Soc(Cases):
    """The whole SOC: world, alerts, cases and engineering (``Cases``), scheduled jobs."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.system = {role: self.new(n) for role, n in SYSTEM.items()}
        self.instructions = {step: self.new(n) for step, n in INSTRUCTION.items()}
        self.sections = [self.new(n) for n in SECTIONS]
        self.template = self.new(clipped_length(rng, *TEMPLATE))
        self.digest = Versioned([(-1e18, self.digest_text())])
        self.clients: list[Client] = clients(rng, self.new, scale)
        self.alerts, self.bursts, self.cases, self.sessions = [], [], [], []
        self.hunts: list[Hunt] = []
        self.reports: list[Report] = []
        self.open_cases = {}
        for ci in range(len(self.clients)):
            self.schedule(ci)
        self.at(HOUR, "digest", None)
        self.at(shift_end(0.0), "shift", None)
        self.at(next_office(rng, 0.0, SOC_TZ), "routine", None)

    def schedule(self, ci: int) -> None:
        """A client's first events; the cases it closed the week before the trace."""
        c, rng = self.clients[ci], self.rng
        for _ in range(clipped_length(rng, LAST_WEEK[0] * c.weight, *LAST_WEEK[1:])):
            c.closed.append((-rng.uniform(0, 7 * DAY), self.new(clipped_length(rng, *SUMMARY))))
        c.closed.sort()
        self.at(rng.uniform(0, 600), "arrive", ci)
        self.at(self.incident_time(c, CAMPAIGNS), "campaign", ci)
        self.at(self.incident_time(c, STORMS), "storm", ci)
        self.at(self.edit_time(c), "edit", ci)
        if c.hunts:
            self.at(local_time(0.0, c.tz, 1.0) + rng.uniform(0, HOUR), "hunt", ci)
        monday = (7 - c.tz) * HOUR  # 07:00 local on the first Monday
        self.at(monday if monday >= 0 else monday + 7 * DAY, "report", ci)

    def edit_time(self, c: Client) -> float:
        """The next edit's time: Poisson at EDITS a day (x size^0.5), in office hours."""
        t = self.now + self.rng.expovariate(EDITS * c.weight ** 0.5 / DAY)
        return next_office(self.rng, t, c.tz)

    def _on_edit(self, ci: int) -> None:
        """An edit to the profile, a runbook or the hunt checklist: 1..2 sections reworded,
        inserted or struck, so from the first changed section on the content is new."""
        c, rng = self.clients[ci], self.rng
        self.at(self.edit_time(c), "edit", ci)
        what = pick(rng, EDIT)
        doc = {"profile": c.profile, "checklist": c.checklist,
               "runbook": c.runbooks[rng.randrange(len(c.runbooks))]}[what]
        doc.versions.append((self.now, revise(rng, self.new, doc.current, rng.randint(1, 2))))

    def _on_hunt(self, ci: int) -> None:
        """01:00..02:00 local: the CMDB sync rewrites a few inventory chunks, then the asset
        sweep walks every chunk in order behind the hunt checklist, each followed by the
        night's IOC excerpt."""
        c, rng = self.clients[ci], self.rng
        self.at(local_time(self.now, c.tz, 1.0) + rng.uniform(0, HOUR), "hunt", ci)
        c.assets = [self.new(clipped_length(rng, *ASSET)) if rng.random() < CHURN else a
                    for a in c.assets]
        head = [self.system["hunt"], *c.profile.at(self.now), *c.checklist.at(self.now)]
        tail = [self.new(clipped_length(rng, *IOCS)), self.instructions["asset"]]
        self.walk(Hunt(ci, "asset", head, [[a] for a in c.assets], tail))

    def walk(self, hunt: Hunt) -> None:
        self.hunts.append(hunt)
        self.at(self.now, "hunt_step", (len(self.hunts) - 1, 0))

    def _on_hunt_step(self, arg: tuple[int, int]) -> None:
        """One item of a walk: head, item, tail. After the asset sweep, some nights, a review
        of the rule catalog in order behind a new hunt hypothesis."""
        j, i = arg
        h, rng = self.hunts[j], self.rng
        h.sent.append(self.emit("hunt", h.client, j, h.head + h.items[i] + h.tail))
        if i + 1 < len(h.items):
            self.at(self.now + rng.uniform(*STEP), "hunt_step", (j, i + 1))
        elif h.kind == "asset" and rng.random() < RULE_REVIEW:
            c = self.clients[h.client]
            head = [self.system["hunt"], *c.profile.at(self.now),
                    self.new(clipped_length(rng, *HYPOTHESIS))]
            self.walk(Hunt(h.client, "rule", head, [r.text.at(self.now) for r in c.rules],
                           [self.instructions["rule"]]))

    def _on_report(self, ci: int) -> None:
        """Monday 07:00 local: the weekly report over the cases closed in the last 7 days,
        one request per section, back to back."""
        c = self.clients[ci]
        self.at(self.now + 7 * DAY, "report", ci)
        week = [s for t, s in c.closed if self.now - 7 * DAY <= t]
        self.reports.append(Report(ci, week))
        self.at(self.now, "report_step", (len(self.reports) - 1, 0))

    def _on_report_step(self, arg: tuple[int, int]) -> None:
        j, i = arg
        r = self.reports[j]
        c = self.clients[r.client]
        segs = [self.system["report"], self.template, *c.profile.at(self.now), *r.summaries,
                self.sections[i]]
        r.sent.append(self.emit("report", r.client, j, segs))
        if i + 1 < len(self.sections):
            self.at(self.now + self.rng.uniform(20, 90), "report_step", (j, i + 1))

    def trim(self) -> None:
        """Cut the trace to ``size`` requests (the last handler may send a few more)."""
        n = self.size
        del self.out[n:], self.meta[n:], self.times[n:]
        for owner in (*self.alerts, *self.cases, *self.sessions, *self.hunts, *self.reports):
            owner.sent = [i for i in owner.sent if i < n]
        for case in self.cases:
            case.handoffs = [i for i in case.handoffs if i < n]
