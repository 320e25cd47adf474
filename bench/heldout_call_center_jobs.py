"""bench.heldout's ``call_center`` shape, the scheduled side: the world is built, the nightly
QA job walks a sample of each client's calls of the day behind the QA rubric, outbound
campaigns walk a lead list in the morning (and redial who did not answer), editors change SOPs,
personas, rubrics, scripts and articles, and outages put a banner into the support queue's
prompt and bring a wave of calls. See bench/heldout_call_center.py's docstring for the
numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_bi_parts import local_hour, weekday
from bench.heldout_call_center_calls import INSTRUCTION, SYSTEM, Calls
from bench.heldout_call_center_parts import (ARTICLE, DAY, HOUR, LEAD, Call, Client, clients,
                                             next_hours)
from bench.heldout_fewshot import clipped_length
from bench.heldout_legal_parts import revise
from bench.heldout_meeting_parts import pick

QA_SAMPLE = (0.12, 0.4)  # share of the day's calls QA scores (not transferred, transferred)
EDITS = 0.8  # content edits a client of mean size makes a day (x size^0.5)
EDIT = (("sop", 0.65), ("article", 0.15), ("persona", 0.08), ("rubric", 0.07),
        ("script", 0.05))
OUTAGES = 0.06  # outages a client of mean size has a day (x size^0.5)
OUTAGE = (2 * HOUR, 0.5, HOUR // 2, 6 * HOUR)  # how long one lasts (seconds)
LEADS = 20  # new leads a campaign dials a weekday for a client of mean size
DIAL = (("none", 0.45), ("voicemail", 0.25), ("talk", 0.3))  # what a dial reaches
REDIAL = 0.6  # leads not reached that are dialled again 3..6 h later
PACE = 45.0  # mean seconds between two dials of a campaign on this replica


@dataclass
class QAJob:
    """A night's QA run for a client: the calls it scores (indices, in call order) and its
    request indices."""

    client: int
    calls: list[int]
    sent: list[int] = field(default_factory=list)


def local_time(t: float, tz: float, hour: float) -> float:
    """The first time after ``t`` that is ``hour`` o'clock local at ``tz``."""
    at = t - local_hour(t, tz) * HOUR + hour * HOUR
    return at if at > t else at + DAY


class Center(Calls):
    """The whole center: world, live calls (``Calls``) and the scheduled jobs."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.system = {role: self.new(n) for role, n in SYSTEM.items()}
        self.instructions = {step: self.new(n) for step, n in INSTRUCTION.items()}
        self.clients: list[Client] = clients(rng, self.new, scale)
        self.calls: list[Call] = []
        self.qa_jobs: list[QAJob] = []
        self.done: list[list[int]] = [[] for _ in self.clients]  # calls since the last QA
        for ci, c in enumerate(self.clients):
            self.at(rng.uniform(0, 600), "arrive", ci)
            self.at(local_time(0.0, c.tz, 2.0) + rng.uniform(0, 1800), "qa", ci)
            self.at(self.after(c, EDITS), "edit", ci)
            self.at(self.after(c, OUTAGES), "outage", ci)
            if c.script is not None:
                self.at(local_time(0.0, c.tz, 10.0), "campaign", ci)

    def after(self, c: Client, rate: float) -> float:
        """The next time of a Poisson process of ``rate`` a day (x size^0.5), in open hours."""
        t = self.now + self.rng.expovariate(rate * c.weight ** 0.5 / DAY)
        return next_hours(self.rng, t, c.tz)

    def _on_wrapup(self, k: int) -> None:
        super()._on_wrapup(k)
        if self.calls[k].mode != "outbound":
            self.done[self.calls[k].client].append(k)

    def _on_qa(self, ci: int) -> None:
        """At 02:00..02:30 local: score the calls finished since the last run (auto-QA) or a
        sample of them, in the order they ended."""
        c, rng = self.clients[ci], self.rng
        self.at(local_time(self.now, c.tz, 2.0) + rng.uniform(0, 1800), "qa", ci)
        picked = sorted((k for k in self.done[ci]
                         if c.auto_qa or rng.random() < QA_SAMPLE[self.calls[k].transferred]),
                        key=lambda k: self.calls[k].end)
        self.done[ci] = []
        if picked:
            self.qa_jobs.append(QAJob(ci, picked))
            self.at(self.now, "qa_step", (len(self.qa_jobs) - 1, 0))

    def _on_qa_step(self, arg: tuple[int, int]) -> None:
        """The rubric's three criteria over one call's transcript, back to back."""
        j, i = arg
        job = self.qa_jobs[j]
        c, k = self.clients[job.client], job.calls[i]
        head = [self.system["qa"], *c.rubric.at(self.now), *self.calls[k].transcript]
        for crit in c.criteria:
            self.emit("qa", k, head + [crit])
            job.sent.append(len(self.out) - 1)
        if i + 1 < len(job.calls):
            self.at(self.now + self.rng.uniform(5, 20), "qa_step", (j, i + 1))

    def _on_campaign(self, ci: int) -> None:
        """At 10:00 local on a weekday: the day's new leads, dialled in list order."""
        c, rng = self.clients[ci], self.rng
        self.at(local_time(self.now, c.tz, 10.0), "campaign", ci)
        if weekday(self.now, c.tz) >= 5:
            return
        t = self.now
        for _ in range(clipped_length(rng, LEADS * c.weight, 0.4, 10, 800)):
            c.leads.append(self.new(clipped_length(rng, *LEAD)))
            t += rng.expovariate(1.0 / PACE)
            self.at(t, "dial", (ci, len(c.leads) - 1))

    def _on_dial(self, arg: tuple[int, int]) -> None:
        """A dial: answering-machine detection on what picked up (and a voicemail left), or
        a short conversation; a lead not reached may be dialled again later."""
        ci, lead = arg
        c, rng = self.clients[ci], self.rng
        self.calls.append(Call(ci, -1, lead, "outbound", 0, start=self.now))
        k, call = len(self.calls) - 1, self.calls[-1]
        outcome = pick(rng, DIAL)
        call.transcript.append(self.new(clipped_length(rng, 8 if outcome == "none" else 30,
                                                       0.6, 2, 80)))
        if outcome == "talk":
            call.turns = clipped_length(rng, 3, 0.6, 1, 10)
            self.at(self.now + rng.uniform(2, 6), "turn", k)
            return
        for step in ("amd", "voicemail")[:1 + (outcome == "voicemail")]:
            self.say("outbound", k, self.head(call, "outbound") + call.transcript
                     + [self.instructions[step]])
        call.end, call.resolved = self.now, False
        if rng.random() < REDIAL:
            t = next_hours(rng, self.now + rng.uniform(3 * HOUR, 6 * HOUR), c.tz)
            self.at(t, "dial", (ci, lead))

    def _on_edit(self, ci: int) -> None:
        """An editor changes an SOP, an article, the persona, the rubric or the outbound
        script: from the first changed section on, the content is new."""
        c, rng = self.clients[ci], self.rng
        self.at(self.after(c, EDITS), "edit", ci)
        what = pick(rng, EDIT)
        if what == "article":
            if rng.random() < 0.5:
                c.articles[rng.randrange(len(c.articles))] = self.new(clipped_length(
                    rng, *ARTICLE))
            else:
                c.articles.append(self.new(clipped_length(rng, *ARTICLE)))
                c.cum.append(c.cum[-1] + 1.0 / (len(c.cum) / 4 + 1))
            return
        doc = {"sop": c.queues[rng.randrange(len(c.queues))].sop, "persona": c.persona,
               "rubric": c.rubric, "script": c.script}[what]
        if doc is not None:
            doc.versions.append((self.now, revise(rng, self.new, doc.current,
                                                  rng.randint(1, 2))))

    def _on_outage(self, ci: int) -> None:
        """An outage: a banner after the support queue's SOP until it ends, and more calls
        (see Calls._on_arrive and Client.queue)."""
        c, rng = self.clients[ci], self.rng
        self.at(self.after(c, OUTAGES), "outage", ci)
        q = c.queues[0]
        if q.banner is None:
            q.banner = self.new(rng.randint(100, 400))
            q.outages.append([self.now, None, q.banner])
            self.at(self.now + clipped_length(rng, *OUTAGE), "outage_end", ci)

    def _on_outage_end(self, ci: int) -> None:
        q = self.clients[ci].queues[0]
        q.banner, q.outages[-1][1] = None, self.now

    def trim(self) -> None:
        """Cut the trace to ``size`` requests (the last handler may send a few more)."""
        n = self.size
        del self.out[n:], self.meta[n:], self.times[n:]
        for owner in (*self.calls, *self.qa_jobs):
            owner.sent = [i for i in owner.sent if i < n]
