"""bench.heldout's ``city_311`` shape, the back office: the intake router that classifies each
new ticket behind a fixed routing prompt and the department taxonomy, the duplicate check that
compares a new place-bound report against the open tickets of its department in its
neighborhood, agents' case summaries that re-read a ticket's growing history (and come back to
it after adding a note), tickets filed through the web form and the phone line, residents'
comments on their tickets, and the nightly batch that drafts a status update for every open
ticket (posted only where something changed). See bench/heldout_city_311.py's docstring for
the numbers."""

from __future__ import annotations

import random

from bench.heldout_c311_world import (CELLS, DAY, FIELD_DEPTS, HOUR, MINUTE, TEXT, World,
                                      sections)
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_recruit_jobs import Stream

# prompts of the jobs: system prompt and closing instruction, tokens
SYSTEM = {"intake": 700, "dedup": 500, "summary": 650, "nightly": 550}
CUE = {"intake": 30, "dedup": 35, "summary": 40, "nightly": 35}
TAXONOMY = (1800, 300)  # tokens of the department taxonomy (service codes), section size
OUTPUT = {"intake": (40, 0.3, 15, 120), "dedup": (60, 0.4, 20, 200),
          "summary": (180, 0.4, 60, 500), "nightly": (110, 0.4, 40, 300)}
PREFILL, DECODE = 8000.0, 40.0  # tokens a second the replica reads and writes for a job
REPORTS = 420  # tickets a day filed by web form, app and phone (no chat) at scale 1.0
COMMENTS = 260  # residents' comments on their open tickets a day at scale 1.0
CANDIDATES = 6  # open nearby tickets a duplicate check compares against (the latest)
DUPLICATE = 0.12  # new reports merged into an older one (INCIDENT_DUPLICATE for incidents)
INCIDENT_DUPLICATE = 0.45
SUMMARIES = 650  # agents' case summaries a day at scale 1.0 (office hours)
ACTIVE = 0.6  # summaries of a recently active ticket (else any open one)
RECENT = 300  # the latest tickets counted as recently active
AGENT_NOTE, AGENT_CLOSE = 0.8, 0.25  # after a summary: the agent adds a note, closes it
REVISIT = (0.2, (5.0, 60.0))  # summaries the agent runs again after its note, minutes later
NIGHT_HOURS = (1.0, 1.5)  # the nightly status batch starts
# agents' hours: 08..17
OFFICE = (0,) * 8 + (0.8, 1.0, 1.0, 0.9, 0.6, 0.9, 1.0, 0.9, 0.7) + (0,) * 7


class Jobs(World):
    """The world (``World``) and the back office's jobs."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.taxonomy = sections(self.new, *TAXONOMY)
        self.nights: list[Stream] = []
        self.incident_tickets: set[int] = set()
        self.duplicates: dict[int, int] = {}  # merged ticket -> the ticket it joined
        for t, ticket in enumerate(self.tickets):
            ticket.seen = -1 if ticket.created > -DAY else len(ticket.history)
        office = {"holiday": (0.3, 1.0), "storm": (1.0, 1.5)}.get(scenario, (1.0, 1.0))
        self.daily(REPORTS, "report")
        self.daily(COMMENTS, "comment")
        self.daily(SUMMARIES, "summary", lambda d: office[d], OFFICE)
        for night in (0, 1):
            self.at(night * DAY + rng.uniform(*NIGHT_HOURS) * HOUR, "night", night)

    def pace(self, segs: list[Segment], kind: str) -> float:
        """Seconds a job's request takes: reading the prompt, writing the output."""
        out = clipped_length(self.rng, *OUTPUT[kind])
        return (sum(n for _, n in segs) / PREFILL + out / DECODE) * self.rng.uniform(0.8, 1.25)

    def submit(self, t: int) -> None:
        """A new ticket goes to the intake router a few seconds after it is filed."""
        self.at(self.now + self.rng.uniform(1.0, 8.0), "intake", t)

    def _on_report(self, _) -> None:
        """A ticket filed through the web form, the app or the phone line."""
        self.submit(self.file(self.dept_by_weight(), self.rng.randrange(CELLS), self.now))

    def _on_intake(self, t: int) -> None:
        """The router: system prompt, taxonomy, the ticket's text, the instruction; a
        place-bound report then goes to the duplicate check."""
        segs = [self.system["intake"], *self.taxonomy, self.tickets[t].text, self.cue["intake"]]
        self.emit("intake", t, 0, segs)
        if self.tickets[t].dept in FIELD_DEPTS:
            self.at(self.now + self.pace(segs, "intake"), "dedup", t)

    def candidates(self, t: int) -> list[int]:
        """The latest CANDIDATES open tickets of ``t``'s department and neighborhood."""
        ticket = self.tickets[t]
        near = [o for o in self.nearby[(ticket.dept, ticket.cell)] if o < t]
        return near[-CANDIDATES:]

    def _on_dedup(self, t: int) -> None:
        """The duplicate check: system prompt, the nearby open tickets' texts (oldest first),
        the new one's text, the instruction; some are merged into the latest of them."""
        near = self.candidates(t)
        if not near:
            return
        segs = [self.system["dedup"], *(self.tickets[o].text for o in near),
                self.tickets[t].text, self.cue["dedup"]]
        self.emit("dedup", t, len(near), segs)
        dup = INCIDENT_DUPLICATE if t in self.incident_tickets else DUPLICATE
        if self.tickets[t].open and self.rng.random() < dup:
            self.close(t)
            self.duplicates[t] = near[-1]
            self.note(near[-1])

    def _on_comment(self, _) -> None:
        """A resident adds to an open ticket (a photo caption, 'still not fixed')."""
        opened = self.open_tickets()
        if opened:
            self.note(self.rng.choice(opened[-RECENT:] if self.rng.random() < 0.7 else opened))

    def summary_prompt(self, t: int) -> list[Segment]:
        ticket = self.tickets[t]
        return [self.system["summary"], self.depts[ticket.dept].template, ticket.text,
                *ticket.history, self.cue["summary"]]

    def _on_summary(self, t: int | None) -> None:
        """An agent opens a ticket (a recently active one, or any open one; ``t`` when the
        agent comes back to it) and gets its case summary; then adds a note, maybe closes it,
        maybe comes back to it after the note."""
        rng = self.rng
        if t is None:
            opened = self.open_tickets()
            if not opened:
                return
            t = rng.choice(opened[-RECENT:] if rng.random() < ACTIVE else opened)
        if not self.tickets[t].open:
            return
        self.emit("summary", t, len(self.tickets[t].history), self.summary_prompt(t))
        if rng.random() < AGENT_NOTE:
            self.note(t)
            if rng.random() < REVISIT[0]:
                self.at(self.now + rng.uniform(*REVISIT[1]) * MINUTE, "summary", t)
                return
        if rng.random() < AGENT_CLOSE:
            self.close(t)

    def night_prompt(self, t: int) -> list[Segment]:
        ticket = self.tickets[t]
        return [self.system["nightly"], self.depts[ticket.dept].template, ticket.text,
                *ticket.history, self.cue["nightly"]]

    def _on_night(self, night: int) -> None:
        """The nightly batch: every open ticket, by department then id."""
        todo = sorted(self.open_tickets(), key=lambda t: (self.tickets[t].dept, t))
        self.nights.append(s := Stream("nightly", night, todo))
        self.at(self.now, "walk", s)

    def _on_walk(self, s: Stream) -> None:
        """The batch's next ticket: its status draft is posted to the history only if the
        history changed since the last night's run (or the ticket is new)."""
        if s.pos >= len(s.items):
            return
        t = s.items[s.pos]
        s.pos += 1
        ticket, segs = self.tickets[t], self.night_prompt(t)
        s.sent.append(self.emit("nightly", t, s.owner, segs))
        if ticket.seen != len(ticket.history):
            self.note(t)
            ticket.seen = len(ticket.history)
        self.at(self.now + self.pace(segs, "nightly"), "walk", s)

    def incident_report(self, dept: int, cell: int) -> int:
        """A ticket an incident's report files (duplicates merged more often); its id."""
        t = self.file(dept, cell, self.now, self.new(clipped_length(self.rng, *TEXT)))
        self.incident_tickets.add(t)
        self.submit(t)
        return t
