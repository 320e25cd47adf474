"""bench.heldout's ``soc_copilot`` shape, the analysts' side: escalated alerts and campaigns
become cases that analysts investigate in multi-turn chats over hours (pasting query results),
closing each working session with a case note; at every shift change the open cases get a
hand-off note and the next shift resumes them behind the case notes; closed cases leave a
summary. Detection engineers rewrite rules in chat sessions after a storm or as routine work.
See bench/heldout_soc_copilot.py's docstring for the numbers."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_soc_alerts import Alerts
from bench.heldout_soc_parts import DAY, HOUR, MINUTE, SOC_TZ, next_office, shift, shift_end

ESCALATE = 0.06  # normal alerts the triage escalates to a case
WAIT = 15 * MINUTE  # mean wait for an analyst at full staffing (/ staffing)
TURNS = (8, 0.6, 2, 30)  # an analyst's turns in one working session
ASK = (40, 0.8, 8, 300)  # tokens of an analyst's question
PASTE = (0.25, (600, 0.8, 150, 2500))  # turns that paste query results first, their tokens
REPLY = (220, 0.6, 60, 900)  # tokens of the copilot's answer
GAP = (180, 0.7, 30, 1200)  # seconds between two turns
NOTE = (220, 0.4, 80, 500)  # tokens of a case note (session end or hand-off)
CLOSE = 0.35  # working sessions after which the case is closed
SUMMARY = (160, 0.4, 60, 400)  # tokens of a closed case's summary
DRAFT = (0.3, (260, 0.5, 80, 700))  # engineering turns that paste a draft rule, its tokens
EDIT = 0.75  # engineering sessions that end with the rule rewritten
ROUTINE = 3.0  # routine rule-tuning sessions a day at scale 1.0 (scaled)


@dataclass
class Case:
    """A case: client, rule, origin ("alert" or "campaign") and the alert or burst it came
    from, the case file (incident context, events, lookups), its notes (session notes and
    hand-offs, in order), the live session's chat, turns left, a token that outdates pending
    events, whether a session is on, when it was opened and closed, its request indices and
    the hand-off requests among them."""

    client: int
    rule: int
    origin: str
    source: int
    file: list[Segment]
    opened: float
    notes: list[Segment] = field(default_factory=list)
    chat: list[Segment] = field(default_factory=list)
    turns: int = 0
    token: int = 0
    active: bool = False
    closed: float | None = None
    sent: list[int] = field(default_factory=list)
    handoffs: list[int] = field(default_factory=list)


@dataclass
class Session:
    """A detection engineer's session on one rule: client, rule, origin ("storm" or
    "routine"), the head (system prompt, profile, the rule as it stood, sample events), the
    chat, turns left, when the rule was rewritten (or None) and its request indices."""

    client: int
    rule: int
    origin: str
    head: list[Segment]
    chat: list[Segment] = field(default_factory=list)
    turns: int = 0
    edited: float | None = None
    sent: list[int] = field(default_factory=list)


def revise_rule(rng: random.Random, new: Callable, text: list[Segment]) -> list[Segment]:
    """A rule rewritten: its logic (50 %), exclusions (40 %) or header (10 %) reworded, so
    that section and every later one is new content."""
    k = rng.choices((1, 2, 0), (0.5, 0.4, 0.1))[0]
    out = list(text)
    out[k] = new(max(20, round(out[k][1] * rng.uniform(0.8, 1.4))))
    return out


class Cases(Alerts):
    """Cases, hand-offs and detection engineering on top of the alert side."""

    cases: list[Case]
    sessions: list[Session]
    open_cases: dict[int, None]  # open cases, in the order they were opened

    def verdict(self, k: int) -> None:
        """A normal alert is escalated to a case now and then."""
        a = self.alerts[k]
        if a.origin == "normal" and self.rng.random() < ESCALATE:
            self.open_case(a.client, a.rule, "alert", k, a.segs[a.head:])

    def _on_burst_end(self, b: int) -> None:
        """A campaign becomes one incident case (its first alert's file, the last context);
        a storm gets a detection engineer in office hours."""
        burst, rng = self.bursts[b], self.rng
        if burst.kind == "campaign" and burst.alerts:
            a = self.alerts[burst.alerts[0]]
            context = [burst.context[-1][1]] if burst.context else []
            self.open_case(a.client, a.rule, "campaign", b, context + a.segs[a.head:])
        elif burst.kind == "storm":
            t = next_office(rng, self.now + rng.uniform(0.5, 3) * HOUR, SOC_TZ)
            self.at(t, "engineer", (burst.client, burst.rules[0], "storm"))

    def open_case(self, ci: int, rule: int, origin: str, source: int,
                  file: list[Segment]) -> None:
        """Open a case; an analyst picks it up after a wait that grows as staffing drops (a
        campaign's within minutes)."""
        self.cases.append(Case(ci, rule, origin, source, file, self.now))
        k = len(self.cases) - 1
        self.open_cases[k] = None
        wait = (self.rng.uniform(1, 5) * MINUTE if origin == "campaign" else
                MINUTE + self.rng.expovariate(shift(self.now)[2] / WAIT))
        self.at(self.now + wait, "pickup", (k, 0))

    def case_head(self, case: Case) -> list[Segment]:
        """The investigation prompt up to the chat: system prompt, profile, runbook and rule
        as they stand now, the case file, the case notes."""
        c, t = self.clients[case.client], self.now
        r = c.rules[case.rule]
        return [self.system["investigate"], *c.profile.at(t), *c.runbooks[r.category].at(t),
                *r.text.at(t), *case.file, *case.notes]

    def say(self, kind: str, k: int, segs: list[Segment]) -> None:
        case = self.cases[k]
        case.sent.append(self.emit(kind, case.client, k, segs))

    def _on_pickup(self, arg: tuple[int, int]) -> None:
        """An analyst opens the case: a new chat behind the case notes."""
        k, token = arg
        case = self.cases[k]
        if token != case.token or case.closed is not None or case.active:
            return
        case.active, case.chat, case.turns = True, [], clipped_length(self.rng, *TURNS)
        self.at(self.now + self.rng.uniform(20, 120), "ask", (k, token))

    def _on_ask(self, arg: tuple[int, int]) -> None:
        """An analyst's turn (query results pasted first now and then); the answer joins the
        chat. The session ends after its turns or before the shift does."""
        k, token = arg
        case, rng = self.cases[k], self.rng
        if token != case.token:
            return
        if rng.random() < PASTE[0]:
            case.chat.append(self.new(clipped_length(rng, *PASTE[1])))
        case.chat.append(self.new(clipped_length(rng, *ASK)))
        self.say("investigate", k, self.case_head(case) + case.chat)
        case.chat.append(self.new(clipped_length(rng, *REPLY)))
        case.turns -= 1
        t = self.now + clipped_length(rng, *GAP)
        if case.turns > 0 and t < shift_end(self.now):
            self.at(t, "ask", (k, token))
        else:
            self.end_session(k, True)

    def end_session(self, k: int, may_close: bool) -> None:
        """The analyst writes the session's case note (head, notes, chat); then the case is
        closed, or resumed later this shift (else the shift change hands it off)."""
        case, rng = self.cases[k], self.rng
        self.say("note", k, self.case_head(case) + case.chat + [self.instructions["note"]])
        case.notes.append(self.new(clipped_length(rng, *NOTE)))
        case.active, case.chat, case.token = False, [], case.token + 1
        if may_close and rng.random() < CLOSE:
            self.close(k)
            return
        t = self.now + rng.uniform(0.5, 6) * HOUR
        if t < shift_end(self.now):
            self.at(t, "pickup", (k, case.token))

    def close(self, k: int) -> None:
        """The case's closing summary (head and notes); it goes to the weekly report."""
        case = self.cases[k]
        self.say("close", k, self.case_head(case) + [self.instructions["close"]])
        case.closed = self.now
        self.clients[case.client].closed.append(
            (self.now, self.new(clipped_length(self.rng, *SUMMARY))))
        del self.open_cases[k]

    def _on_shift(self, _: object) -> None:
        """Shift change: a live session is wrapped up with its note, every open case gets a
        hand-off note, and the next shift resumes it after its briefing."""
        self.at(shift_end(self.now + 1), "shift", None)
        staff = shift(self.now + 1)[2]
        for k in list(self.open_cases):
            case = self.cases[k]
            if case.active:
                self.end_session(k, False)
            self.say("handoff", k, self.case_head(case) + [self.instructions["handoff"]])
            case.handoffs.append(case.sent[-1])
            case.notes.append(self.new(clipped_length(self.rng, *NOTE)))
            case.token += 1
            wait = self.rng.uniform(10, 90) * MINUTE / staff
            self.at(self.now + wait, "pickup", (k, case.token))

    def _on_routine(self, _: object) -> None:
        """Routine rule tuning in the SOC's office hours: a client by size, a rule by how
        often it fires."""
        rng = self.rng
        self.at(next_office(rng, self.now + rng.expovariate(ROUTINE * self.scale / DAY),
                            SOC_TZ), "routine", None)
        ci = rng.choices(range(len(self.clients)), [c.weight for c in self.clients])[0]
        self.at(self.now, "engineer", (ci, self.clients[ci].rule(rng), "routine"))

    def _on_engineer(self, arg: tuple[int, int, str]) -> None:
        """A detection engineer opens the rule with the events of its last 3..8 alerts."""
        ci, rule, origin = arg
        c, rng = self.clients[ci], self.rng
        recent = [a.events for a in self.alerts[-2000:] if (a.client, a.rule) == (ci, rule)]
        head = [self.system["engineer"], *c.profile.at(self.now), *c.rules[rule].text.at(
            self.now), *recent[-rng.randint(3, 8):]]
        self.sessions.append(Session(ci, rule, origin, head,
                                     turns=clipped_length(rng, 8, 0.5, 3, 20)))
        self.at(self.now + rng.uniform(30, 120), "draft", len(self.sessions) - 1)

    def _on_draft(self, k: int) -> None:
        """An engineering turn (a draft rule pasted now and then); at the end the rule may be
        rewritten: from the changed section on, its text is new content."""
        s, rng = self.sessions[k], self.rng
        if rng.random() < DRAFT[0]:
            s.chat.append(self.new(clipped_length(rng, *DRAFT[1])))
        s.chat.append(self.new(clipped_length(rng, *ASK)))
        s.sent.append(self.emit("engineer", s.client, k, s.head + s.chat))
        s.chat.append(self.new(clipped_length(rng, *REPLY)))
        s.turns -= 1
        if s.turns > 0:
            self.at(self.now + rng.uniform(1, 6) * MINUTE, "draft", k)
        elif rng.random() < EDIT:
            text = self.clients[s.client].rules[s.rule].text
            text.versions.append((self.now, revise_rule(rng, self.new, text.current)))
            s.edited = self.now
