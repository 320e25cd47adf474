"""bench.heldout's ``city_311`` shape, the residents' side: the resident assistant's chats
(behind the system prompt of the resident's language, the service catalog and the department's
FAQ; many end in a ticket), the seed's incident (hundreds of residents reporting the same thing
within hours, the assistant's prompt carrying the incident bulletin as the city revises it),
questions about scheduled notices (tomorrow's street sweeping, the holiday collection
schedule), questions over policy documents (one revised when an ordinance passes: its later
sections new) and one-off questions. See bench/heldout_city_311.py's docstring for the
numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_c311_jobs import Jobs
from bench.heldout_c311_world import (CELLS, DAY, DISTRICTS, HOUR, MINUTE, POLICIES,
                                      POLICY_SECTION, hour_at, sections)
from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_legal_parts import Versioned

# kind -> (turns, message tokens, reply tokens, pause (median s, sigma)), clipped lognormals
CHATS = {"chat": ((3, 0.6, 1, 10), (35, 0.8, 5, 300), (110, 0.5, 30, 400), (35.0, 0.8)),
         "incident": ((2, 0.5, 1, 4), (30, 0.7, 5, 200), (90, 0.4, 30, 300), (30.0, 0.7)),
         "notice": ((2, 0.5, 1, 4), (25, 0.7, 5, 120), (90, 0.4, 30, 250), (30.0, 0.7)),
         "policy": ((2, 0.6, 1, 6), (45, 0.8, 8, 300), (160, 0.5, 50, 500), (50.0, 0.8))}
CHATS["lang"] = CHATS["chat"]
RESIDENT_CHATS = 340  # resident assistant chats a day at scale 1.0 (chat and lang)
FILES = 0.5  # resident chats that end in a ticket
NOTICES, POLICY_QS, ONE_OFFS = 220, 120, 120  # a day at scale 1.0
NOTICE_SYSTEM, POLICY_SYSTEM, ONE_OFF_SYSTEM = 600, 800, 150
ONE_OFF = (600, 0.9, 80, 5000)  # tokens of a one-off question with what it pastes in
HOLIDAY_SHARE = (0.1, 0.7)  # notice questions about the holiday schedule (else, holiday seed)
ORDINANCES = {"quiet": 2}  # policy revisions (1 in other scenarios)
BULLETIN = (260, 0.3, 120, 500)  # tokens of one version of the incident bulletin
INCIDENT_CHAT = 0.7  # incident reports through the assistant (else the form or phone)
INCIDENT_FILES = 0.6  # incident chats that file a ticket
RATE = 40.0  # tokens a second a reply decodes at
# scenario -> (departments, day, start hours, reports, hours, neighborhoods, bulletin minutes)
INCIDENTS = {"quiet": ((0,), (0, 1), (7, 16), (40, 80), 3.0, 2, 60.0),
             "storm": ((0, 3), (0,), (14, 18), (450, 700), 9.0, 24, 30.0),
             "holiday": ((1,), (1,), (6.5, 7.5), (180, 280), 10.0, 12, 90.0),
             "watermain": ((2,), (1,), (5, 8), (350, 550), 6.0, 3, 40.0)}


@dataclass
class ResidentChat(Chat):
    """A Chat (owner: the department, the district (-1: the holiday schedule) or the policy
    document), the resident's language and the ticket it ended in (-1: none)."""

    lang: str = "en"
    files: bool = False
    ticket: int = -1


class Desk(Jobs):
    """The whole replica: the world, the jobs (``Jobs``) and the residents' chats."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        self.notice_system, self.policy_system = self.new(NOTICE_SYSTEM), self.new(POLICY_SYSTEM)
        self.one_off_system = self.new(ONE_OFF_SYSTEM)
        self.chats: list[ResidentChat] = []
        self.revisions: list[tuple[float, int, int]] = []  # (time, document, first new section)
        holiday = 3.0 if scenario == "holiday" else 1.0
        self.daily(RESIDENT_CHATS, "chat")
        self.daily(NOTICES, "notice", lambda d: holiday)
        self.daily(POLICY_QS, "policy")
        self.daily(ONE_OFFS, "one_off")
        self.holiday.versions.append((hour_at(rng, 0, (0,) * 9 + (1, 1) + (0,) * 13), [
            self.new(clipped_length(rng, 1400, 0.3, 800, 2500))]))
        for _ in range(ORDINANCES.get(scenario, 1)):
            self.at(rng.uniform(0.3, 1.6) * DAY, "ordinance", None)
        self.plan_incident()

    def plan_incident(self) -> None:
        """The scenario's incident: its bulletin versions and its reports' times."""
        rng = self.rng
        depts, days, hours, reports, span, cells, every = INCIDENTS[self.scenario]
        self.incident = (rng.choice(days) * DAY + rng.uniform(*hours) * HOUR, span * HOUR)
        start, span = self.incident
        self.incident_depts, self.incident_cells = depts, rng.sample(range(CELLS), cells)
        self.bulletin = Versioned([(start + k * every * MINUTE, [self.new(clipped_length(
            rng, *BULLETIN))]) for k in range(int((span + 2 * HOUR) / (every * MINUTE)) + 1)])
        for _ in range(max(2, round(rng.randint(*reports) * self.scale))):
            self.at(start + rng.triangular(0.0, span, 0.2 * span), "incident", None)

    def head(self, chat: ResidentChat) -> list[Segment]:
        """What a chat's turn sends before the history."""
        if chat.kind == "notice":
            doc = self.holiday if chat.owner < 0 else self.notices[chat.owner]
            return [self.notice_system, *doc.at(self.now)]
        if chat.kind == "policy":
            return [self.policy_system, *self.policies[chat.owner].at(self.now)]
        head = [self.langs[chat.lang], *self.catalog, *self.depts[chat.owner].faq]
        return head + self.bulletin.at(self.now) if chat.kind == "incident" else head

    def start(self, chat: ResidentChat) -> None:
        self.chats.append(chat)
        self.at(self.now, "turn", len(self.chats) - 1)

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, the message; the reply joins the history. A chat
        that files a ticket does so after its last turn (an incident chat after its first)."""
        chat, rng = self.chats[n], self.rng
        _, message, reply, pause = CHATS[chat.kind]
        msg = self.new(clipped_length(rng, *message))
        _, out = self.turn(chat, self.head(chat), msg, reply, (chat.kind, n, len(chat.sent)))
        if chat.files and (chat.kind == "incident" or not chat.turns):
            cell = rng.choice(self.incident_cells) if chat.kind == "incident" else None
            chat.ticket = self.resident_ticket(chat.owner, cell)
            chat.files = False
        if chat.turns > 0:
            gap = out[1] / RATE + rng.lognormvariate(0.0, pause[1]) * pause[0]
            self.at(self.now + gap, "turn", n)

    def resident_ticket(self, dept: int, cell: int | None) -> int:
        """The ticket a chat files (an incident's, or one of ``dept`` anywhere)."""
        if cell is not None:
            return self.incident_report(dept, cell)
        t = self.file(dept, self.rng.randrange(CELLS), self.now)
        self.submit(t)
        return t

    def _on_chat(self, _) -> None:
        """A resident opens the assistant about one department's services."""
        rng, lang = self.rng, self.lang()
        turns = clipped_length(rng, *CHATS["chat"][0])
        self.start(ResidentChat("chat" if lang == "en" else "lang", self.dept_by_weight(), turns,
                                [], lang=lang, files=rng.random() < FILES))

    def _on_incident(self, _) -> None:
        """A resident reports the incident: through the assistant (whose prompt carries the
        bulletin), or through the form or the phone line."""
        rng = self.rng
        dept = rng.choice(self.incident_depts)
        if rng.random() >= INCIDENT_CHAT:
            self.incident_report(dept, rng.choice(self.incident_cells))
            return
        turns = clipped_length(rng, *CHATS["incident"][0])
        self.start(ResidentChat("incident", dept, turns, [], lang=self.lang(),
                                files=rng.random() < INCIDENT_FILES))

    def _on_notice(self, _) -> None:
        """A resident asks about tomorrow's sweeping in a district or the holiday schedule."""
        rng = self.rng
        share = HOLIDAY_SHARE[self.scenario == "holiday"]
        owner = -1 if rng.random() < share else rng.randrange(DISTRICTS)
        self.start(ResidentChat("notice", owner, clipped_length(rng, *CHATS["notice"][0]), []))

    def _on_policy(self, _) -> None:
        """A resident (or a contractor) asks about a policy document, Zipf(1.2) by rank."""
        rng = self.rng
        doc = rng.choices(range(POLICIES), [(k + 1) ** -1.2 for k in range(POLICIES)])[0]
        self.start(ResidentChat("policy", doc, clipped_length(rng, *CHATS["policy"][0]), []))

    def _on_one_off(self, _) -> None:
        """A question with its own pasted text (a letter, a lease, a bill)."""
        segs = [self.one_off_system, self.new(clipped_length(self.rng, *ONE_OFF))]
        self.emit("oneoff", len(self.out), 0, segs)

    def _on_ordinance(self, _) -> None:
        """An ordinance passes: one of the 3 most asked documents is revised from a section on
        (every later section new, one more or fewer)."""
        rng = self.rng
        doc = rng.randrange(3)
        old = self.policies[doc].at(self.now)
        k = rng.randrange(1, len(old)) if len(old) > 1 else 0
        tail = sum(n for _, n in old[k:]) + rng.randint(-1, 1) * POLICY_SECTION
        new = old[:k] + sections(self.new, max(POLICY_SECTION // 2, tail), POLICY_SECTION)
        self.policies[doc].versions.append((self.now, new))
        self.revisions.append((self.now, doc, k))
