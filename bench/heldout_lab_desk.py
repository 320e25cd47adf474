"""bench.heldout's ``lab_notebook`` shape, the scientists' side: chats with the lab assistant
behind the lab's system prompt and their team's SOP index, protocol lookups (a protocol's text
retrieved, the standard ones again and again), questions on a run's analysis right after it
finishes (or the next morning), literature Q&A over the shared paper set, reagent inventory
questions over the table as the LIMS last synced it, plate-map reviews (the map revised after
the first review now and then) and long grant-report drafting sessions that re-read a
project's notebook entries. See bench/heldout_lab_notebook.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_lab_jobs import Jobs
from bench.heldout_lab_world import (DAY, HOUR, MINUTE, PAST, Layout, daily_times,
                                     hour_in)
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick, poisson
from bench.heldout_pv_desk import chat_turn
from bench.heldout_recruit_parts import sections

# kind -> (system tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"ask": (0, (3, 0.7, 1, 10), (50, 0.9, 6, 600), (260, 0.6, 40, 1200), (60.0, 0.9)),
         "protocol": (350, (2, 0.6, 1, 5), (35, 0.8, 6, 300), (300, 0.5, 60, 1000),
                      (45.0, 0.8)),
         "lit": (450, (2, 0.6, 1, 6), (45, 0.8, 8, 400), (380, 0.5, 80, 1500), (70.0, 0.9)),
         "inventory": (400, (1, 0.5, 1, 3), (25, 0.7, 5, 150), (120, 0.5, 30, 500),
                       (30.0, 0.8)),
         "platemap": (500, (2, 0.5, 1, 4), (60, 0.8, 10, 400), (350, 0.5, 80, 1000),
                      (240.0, 0.7)),
         "grant": (900, (6, 0.5, 3, 16), (120, 0.8, 20, 800), (900, 0.5, 200, 3000),
                   (150.0, 0.8)),
         "followup": (0, (2, 0.5, 1, 5), (40, 0.8, 8, 300), (250, 0.5, 60, 900), (60.0, 0.8))}
RATES = {"ask": 120.0, "protocol": 200.0, "lit": 90.0, "inventory": 80.0, "platemap": 40.0}
GRANTS = 3.0  # grant-drafting sessions a day at scale 1.0 (at least one in the trace)
GRANT_HOURS = (0,) * 9 + (0.3, 0.5, 0.6, 0.4, 1.0, 1.0, 1.0, 0.9, 0.7, 0.4, 0.2, 0, 0, 0, 0)
GRANT_BUDGET = 60000  # tokens of a project's entries a grant session re-reads (the latest)
FOLLOWUPS = ((0, 0.55), (1, 0.35), (2, 0.1))  # scientists who ask about a run's analysis
FOLLOW_DELAY = (2 * MINUTE, 30 * MINUTE)  # after the run finishes, in the lab's hours
MORNING = (8.0, 10.0)  # else the next morning (or the same day's, before 08:00)
PAPERS_READ = ((1, 0.7), (2, 0.2), (3, 0.1))  # papers a literature session reads
PLATE = ((96, 0.6, (1800, 0.4, 800, 3500)), (384, 0.4, (5500, 0.4, 3000, 9000)))
REMAP = 0.35  # plate-map reviews where the map is revised before the second turn
RATE = 40.0  # tokens a second a reply decodes at
MAX_CONTEXT = {"grant": 120000}  # tokens of a chat's context that end it; others 32000


@dataclass
class LabChat(Chat):
    """A Chat (owner: the team for ask, inventory, platemap and grant, the protocol, the run
    for followup, the chat itself for lit; fixed: lit's papers, grant's aims and entries) and
    the plate map (versions) a review is over, and whether it gets revised."""

    team: int = 0
    plate: Versioned | None = None
    remap: bool = False


class Desk(Jobs):
    """The whole replica: the world, the jobs, the entries and the scientists' chats."""

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, scale, layout)
        self.chat_system = {k: self.new(v[0]) for k, v in CHATS.items() if v[0]}
        self.chats: list[LabChat] = []
        self.remaps: list[tuple[int, float, int]] = []  # (chat, when, first row changed)
        for kind, per_day in RATES.items():
            boost = layout.plates if kind == "platemap" else 1.0
            for t in daily_times(rng, per_day * scale * boost):
                self.at(t, kind, None)
        days = [d for d in (0, 1) for _ in range(poisson(rng, GRANTS * scale))]
        for day in days or [rng.choice((0, 1))]:
            self.at(hour_in(rng, day, GRANT_HOURS), "grant", None)

    def head(self, chat: LabChat) -> list[Segment]:
        """What a chat's turn sends before the history."""
        kind, lab = chat.kind, self.lab_system
        if kind == "followup":
            run = self.runs[chat.owner]
            return [*self.run_head(chat.owner), *run.log, self.cue["run"]]
        if kind == "ask":
            return [lab, *self.digest_of(chat.team)]
        sys = self.chat_system[kind]
        if kind == "protocol":
            return [lab, sys, *self.sops[chat.owner].text.at(self.now)]
        if kind == "inventory":
            return [lab, sys, *self.inventory.at(self.now)]
        if kind == "platemap":
            return [lab, sys, self.teams[chat.team].conventions, *chat.plate.at(self.now)]
        return [lab, sys, *chat.fixed]

    def start(self, chat: LabChat, when: float | None = None) -> int:
        """Chat ``chat`` starts at ``when`` (now if None); its index."""
        self.chats.append(chat)
        self.at(self.now if when is None else when, "turn", len(self.chats) - 1)
        return len(self.chats) - 1

    def _on_turn(self, n: int) -> None:
        """A turn; a plate map to be revised is revised before the second (rows from one on)."""
        chat = self.chats[n]
        if chat.remap and len(chat.sent) == 1:
            secs = list(chat.plate.current)
            k = self.rng.randrange(len(secs))
            secs[k:] = [self.new(t) for _, t in secs[k:]]
            chat.plate.versions.append((self.now, secs))
            self.remaps.append((n, self.now, k))
        chat_turn(self, n, CHATS[chat.kind], MAX_CONTEXT.get(chat.kind, 32000), RATE)

    def turns(self, kind: str) -> int:
        return clipped_length(self.rng, *CHATS[kind][1])

    def a_team(self) -> int:
        """A team by its share of the scientists."""
        return self.rng.choices(range(len(self.teams)), [t.weight for t in self.teams])[0]

    def _on_ask(self, _) -> None:
        t = self.a_team()
        self.start(LabChat("ask", t, self.turns("ask"), [], team=t))

    def _on_protocol(self, _) -> None:
        """A protocol lookup: the team's own library or the lab-wide one (the layout's
        share), a protocol by popularity."""
        t, rng = self.a_team(), self.rng
        own = self.teams[t].sops
        pool = self.lab_sops if not own or rng.random() < self.layout.shared else own
        p = rng.choices(pool, [self.sops[k].weight for k in pool])[0]
        self.start(LabChat("protocol", p, self.turns("protocol"), [], team=t))

    def _on_lit(self, _) -> None:
        """Literature Q&A: 1..3 papers retrieved by weight (hot ones most), in that order."""
        rng, picks = self.rng, []
        want = pick(rng, PAPERS_READ)
        while len(picks) < want:
            k = rng.choices(range(len(self.papers)), self.paper_weights)[0]
            if k not in picks:
                picks.append(k)
        chat = LabChat("lit", len(self.chats), self.turns("lit"),
                       [self.papers[k] for k in picks], team=self.a_team())
        self.start(chat)

    def _on_inventory(self, _) -> None:
        t = self.a_team()
        self.start(LabChat("inventory", t, self.turns("inventory"), [], team=t))

    def _on_platemap(self, _) -> None:
        """A plate-map review: a new 96- or 384-well map, a row section per plate row."""
        rng, t = self.rng, self.a_team()
        wells, _, size = rng.choices(PLATE, [p[1] for p in PLATE])[0]
        total = clipped_length(rng, *size)
        plate = Versioned([(PAST, sections(self.new, total, total // (8 if wells == 96 else 16)))])
        remap = rng.random() < REMAP
        turns = max(2, self.turns("platemap")) if remap else self.turns("platemap")
        self.start(LabChat("platemap", t, turns, [], team=t, plate=plate, remap=remap))

    def _on_grant(self, _) -> None:
        """A grant-report session on one of a team's projects: its aims and its latest
        entries that fit GRANT_BUDGET, oldest first."""
        t = self.a_team()
        project = self.rng.choice(self.teams[t].projects)
        entries, used = [], 0
        for _, segs in reversed(project.entries):
            used += sum(n for _, n in segs)
            if used > GRANT_BUDGET:
                break
            entries[:0] = segs
        self.start(LabChat("grant", t, self.turns("grant"), [project.aims, *entries], team=t))

    def run_done(self, r: int) -> None:
        """0..2 scientists of the run's team ask about its analysis: minutes after it finished
        in the lab's hours, else at the next 08..10."""
        rng = self.rng
        for _ in range(pick(rng, FOLLOWUPS)):
            when = self.now + rng.uniform(*FOLLOW_DELAY)
            hour = when / HOUR % 24
            if not 8 <= hour < 19:
                day = int(when // DAY) + (hour >= 19)
                when = (day * 24 + rng.uniform(*MORNING)) * HOUR
            chat = LabChat("followup", r, self.turns("followup"), [], team=self.runs[r].team)
            chat.history = [self.runs[r].summary]
            self.start(chat, when)

