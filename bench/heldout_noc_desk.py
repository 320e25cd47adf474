"""bench.heldout's ``telecom_noc`` shape, the people's side and the nightly jobs: engineers'
chats over a runbook (and an incident's timeline as it stands), customer-care escalations
quoting the status page as last issued, configuration diffs explained turn by turn over the
platform's configuration reference, log dumps pasted once, the shift handover twice a day
(drafted, re-drafted, then talked over) and each region's nightly KPI walk over its sites'
counters with a roll-up. See bench/heldout_telecom_noc.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_noc_alarms import Alarms
from bench.heldout_noc_parts import CARE_HOURS, DAY, HOUR, LOG_HOURS, MINUTE, OFFICE, count

# kind -> (system prompt tokens, turns, first message, later messages, reply, pause (median
# s)); a shift chat has no system prompt of its own: it goes on from the last handover draft
CHATS = {"engineer": (1500, (4, 0.6, 1, 14), (80, 0.8, 10, 600), (45, 0.9, 6, 400),
                      (260, 0.5, 60, 1000), 60.0),
         "care": (700, (2, 0.5, 1, 5), (150, 0.6, 30, 400), (30, 0.8, 5, 200),
                  (150, 0.5, 50, 400), 40.0),
         "config": (900, (3, 0.5, 1, 8), (40, 0.8, 8, 300), (40, 0.8, 8, 300),
                    (320, 0.5, 80, 1200), 50.0),
         "logs": (500, (1, 0.6, 1, 4), (60, 0.8, 10, 300), (50, 0.8, 8, 300),
                  (350, 0.5, 80, 1000), 90.0),
         "shift": (0, (3, 0.5, 1, 6), (40, 0.8, 8, 300), (40, 0.8, 8, 300),
                      (200, 0.5, 60, 600), 60.0)}
RATE = 40.0  # tokens a second a reply decodes at
MAX_CONTEXT = 48000  # tokens of a chat's context that end it
ENGINEER = 45  # runbook chats a day at scale 1.0 not tied to an incident (LOG_HOURS)
PER_HOUR = 0.8  # chats an hour over a major incident's span (a minor one gets one)
CARE = 220  # escalations a day at scale 1.0 (CARE_HOURS)
SURGE = (0.3, 400)  # escalations a site-hour of a major incident (thinned by CARE_HOURS), at most
ACCOUNT = (200, 0.4, 100, 400)  # tokens of the customer's account summary
CONFIG = 30  # diffs a day at scale 1.0 (office hours)
DIFF = (1000, 0.7, 200, 6000)  # tokens of a configuration diff
CHANGE_DIFF = (0.6, (7.0, 11.0))  # executed changes whose diff is explained that morning
LOGS = 60  # log dumps a day at scale 1.0 (LOG_HOURS)
LOG = (6000, 0.8, 800, 28000)  # tokens of a pasted log
HANDOVERS = (7.0, 19.0)  # shift changes; the draft starts 0..15 minutes before
HANDOVER = (1100, 600, 40)  # tokens of its system prompt, template and instruction
NOTES = (500, 0.5, 200, 1500)  # tokens of the outgoing lead's notes
REDRAFTS = ((0, 0.4), (1, 0.4), (2, 0.2))  # re-drafts with amended notes, 5..20 min apart
SUMMARY = (700, 0.4, 300, 1500)  # tokens of the handover summary
KPI = {"system": 700, "cue": 30, "rollup": 650, "rollup_cue": 40}
COUNTERS = (350, 0.4, 150, 800)  # tokens of a site's day of counters
FINDING = (90, 0.5, 30, 300)  # tokens the walk writes for a site
KPI_START = (1.0, 3.0)  # hours each region's walk starts each night
PREFILL = 8000.0  # tokens a second the replica reads for one stream


@dataclass
class NocChat(Chat):
    """A Chat (owner: runbook, incident, platform or shift; fixed after the system prompt:
    the runbook, the account, the diff, the log, the handover) and the incident whose
    timeline it quotes."""

    incident: int | None = None


@dataclass
class Walk:
    """A region's nightly KPI walk: the region, the night, its sites, how far it is, the
    findings it wrote and its request indices (the roll-up last)."""

    region: int
    night: int
    items: list[int]
    pos: int = 0
    findings: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


class Desk(Alarms):
    """The whole replica: the world and the alarms (``Alarms``), the chats, the handovers
    and the nightly KPI walks."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.chat_system = {k: self.new(v[0]) for k, v in CHATS.items() if v[0]}
        self.handover_system = self.new(HANDOVER[0])
        self.kpi = {k: self.new(n) for k, n in KPI.items()}
        self.handover_template, self.handover_cue = (self.new(n) for n in HANDOVER[1:])
        self.chats: list[NocChat] = []
        self.walks: list[Walk] = []
        self.handovers: list[tuple[float, list[int]]] = []  # (shift change, drafts)
        self.daily(ENGINEER, LOG_HOURS, 0, "engineer")
        self.daily(CARE, CARE_HOURS, 0, "care")
        self.daily(CONFIG, OFFICE, 8, "config")
        self.daily(LOGS, LOG_HOURS, 0, "logs")
        for d in (0, 1):
            for g in range(len(self.regions)):
                self.at(d * DAY + rng.uniform(*KPI_START) * HOUR, "night", (g, d))
            for h in HANDOVERS:
                self.at(d * DAY + h * HOUR - rng.uniform(0, 15) * MINUTE, "handover", h)

    def head(self, chat: NocChat) -> list[Segment]:
        """What a turn sends before the history."""
        if chat.kind == "shift":
            return list(chat.fixed)
        sys = self.chat_system[chat.kind]
        if chat.kind == "engineer" and chat.incident is not None:
            return [sys, *chat.fixed, *self.incidents[chat.incident].at(self.now)]
        if chat.kind == "care":
            return [sys, *self.status.at(self.now), *chat.fixed]
        if chat.kind == "config":
            return [sys, *self.platforms[chat.owner].ref.at(self.now), *chat.fixed]
        return [sys, *chat.fixed]

    def start(self, kind: str, owner: int, fixed: list[Segment], incident=None) -> None:
        turns = clipped_length(self.rng, *CHATS[kind][1])
        self.chats.append(NocChat(kind, owner, turns, fixed, incident=incident))
        self.at(self.now, "turn", len(self.chats) - 1)

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, the message; the reply joins the history and the
        next turn follows its decoding and a pause."""
        chat, rng = self.chats[n], self.rng
        _, _, first, later, reply, pause = CHATS[chat.kind]
        msg = self.new(clipped_length(rng, *(later if chat.sent else first)))
        segs, out = self.turn(chat, self.head(chat), msg, reply, (chat.kind, n, len(chat.sent)))
        if chat.turns > 0 and sum(t for _, t in segs) + out[1] < MAX_CONTEXT:
            self.at(self.now + out[1] / RATE + rng.lognormvariate(0.0, 0.8) * pause, "turn", n)

    def runbook(self) -> int:
        return self.rng.choices(range(len(self.runbooks)), self.runbook_weights)[0]

    def _on_engineer(self, _: None) -> None:
        r = self.runbook()
        self.start("engineer", r, list(self.runbooks[r]))

    def _on_care(self, incident: int | None) -> None:
        """A care agent escalates a customer's complaint (during an incident, thinned by the
        care centre's hours)."""
        if incident is not None and self.rng.random() > CARE_HOURS[int(self.now % DAY // HOUR)]:
            return
        self.start("care", -1 if incident is None else incident,
                   [self.new(clipped_length(self.rng, *ACCOUNT))])

    def _on_config(self, p: int | None) -> None:
        """A configuration diff explained: on platform ``p`` (an executed change's), else
        one by the platforms' weights."""
        if p is None:
            p = self.rng.choices(range(len(self.platforms)),
                                 [x.weight for x in self.platforms])[0]
        self.start("config", p, [self.new(clipped_length(self.rng, *DIFF))])

    def _on_logs(self, _: None) -> None:
        self.start("logs", -1, [self.new(clipped_length(self.rng, *LOG))])

    def incident_declared(self, n: int) -> None:
        """Engineers' chats over the incident's runbook and timeline (PER_HOUR over a major
        one's span, one for a minor one) and, for a major one, the care surge."""
        inc, rng = self.incidents[n], self.rng
        hours = (inc.end - inc.start) / HOUR
        chats = max(1, count(rng, PER_HOUR * hours)) if inc.major else 1
        for _ in range(chats):
            self.at(rng.uniform(self.now, max(self.now, inc.end)), "incident_chat", n)
        if inc.major:
            for _ in range(min(SURGE[1], count(rng, SURGE[0] * len(inc.sites) * hours))):
                peak = inc.start + 0.2 * (inc.end - inc.start)
                self.at(rng.triangular(inc.start, max(inc.start, inc.end), peak), "care", n)

    def _on_incident_chat(self, n: int) -> None:
        r = self.incidents[n].runbook
        self.start("engineer", r, list(self.runbooks[r]), n)

    def change_executed(self, n: int) -> None:
        """Most executed changes get their diff explained that morning."""
        if self.rng.random() < CHANGE_DIFF[0]:
            day = self.now // DAY * DAY
            self.at(day + self.rng.uniform(*CHANGE_DIFF[1]) * HOUR, "config",
                    self.changes[n].platform)

    def _on_handover(self, hour: float) -> None:
        """The shift handover: system prompt, the template, the timeline as it stands of every
        incident open in the last 12 hours, the log lines of changes reviewed or run in them,
        the outgoing lead's notes, the instruction; re-drafted with amended notes, then the
        incoming lead talks it over (the summary in the head)."""
        since = self.now - 12 * HOUR
        incs = [i for i in self.incidents if i.start <= self.now and i.timeline
                and (not i.closed or i.timeline[-1][0] >= since)]
        lines = [c.line for c in self.changes if since <= c.submitted <= self.now or (
            c.window is not None and since <= c.window <= self.now)]
        head = [self.handover_system, self.handover_template,
                *(s for i in incs for s in i.at(self.now)), *lines]
        self.handovers.append((self.now, []))
        redrafts = self.rng.choices([n for n, _ in REDRAFTS], [w for _, w in REDRAFTS])[0]
        self.at(self.now, "draft", (len(self.handovers) - 1, head, redrafts))

    def _on_draft(self, arg: tuple[int, list[Segment], int]) -> None:
        n, head, left = arg
        notes = self.new(clipped_length(self.rng, *NOTES))
        self.handovers[n][1].append(self.emit("handover", n, len(self.handovers[n][1]),
                                              [*head, notes, self.handover_cue]))
        if left:
            self.at(self.now + self.rng.uniform(5, 20) * MINUTE, "draft", (n, head, left - 1))
        else:
            summary = self.new(clipped_length(self.rng, *SUMMARY))
            self.at(self.now + self.rng.uniform(5, 15) * MINUTE, "shift",
                    (n, [*head, notes, self.handover_cue, summary]))

    def _on_shift(self, arg: tuple[int, list[Segment]]) -> None:
        """The incoming shift lead talks the handover over: the last draft and the summary
        it wrote head every turn."""
        self.start("shift", arg[0], arg[1])

    def _on_night(self, arg: tuple[int, int]) -> None:
        g, night = arg
        self.walks.append(w := Walk(g, night, list(self.regions[g].sites)))
        self.at(self.now, "kpi", w)

    def _on_kpi(self, w: Walk) -> None:
        """The walk's next site: system prompt, the region's template, the site's record as
        it stands, its counters, the instruction; after the last, the roll-up of the
        findings in site order."""
        template, rng = self.regions[w.region].template, self.rng
        if w.pos == len(w.items):
            segs = [self.kpi["rollup"], template, *w.findings, self.kpi["rollup_cue"]]
            w.sent.append(self.emit("rollup", w.region, w.night, segs))
            return
        s = w.items[w.pos]
        w.pos += 1
        segs = [self.kpi["system"], template, self.record(s),
                self.new(clipped_length(rng, *COUNTERS)), self.kpi["cue"]]
        w.sent.append(self.emit("kpi", w.region, s, segs))
        w.findings.append(self.new(clipped_length(rng, *FINDING)))
        work = sum(n for _, n in segs) / PREFILL + w.findings[-1][1] / RATE
        self.at(self.now + work * rng.uniform(0.8, 1.25), "kpi", w)
