"""bench.heldout's ``property_mgmt`` shape, the people's side: residents' chats in the portal
(some come back the next day to the same conversation), the burst of near-identical questions
an incident causes, prospects' questions over a listing and the building's documents, staff
asking about a lease, tenants' email threads whose replies the assistant drafts as they grow
over days, and maintenance tickets re-read each time a message, a technician's note or a
vendor's quote lands. See bench/heldout_property_mgmt.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_prop_jobs import PROSPECT_HOURS, Jobs
from bench.heldout_prop_world import DAY, END, HOUR, MINUTE, OFFICE

# kind -> (system tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"tenant": (1800, (2, 0.7, 1, 8), (35, 0.9, 6, 300), (140, 0.5, 40, 500),
                    (45.0, 0.9)),
         "incident": (0, (1, 0.5, 1, 3), (20, 0.6, 6, 120), (120, 0.4, 50, 300), (40.0, 0.8)),
         "prospect": (1500, (2, 0.7, 1, 10), (25, 0.9, 6, 200), (120, 0.5, 40, 400),
                      (50.0, 1.0)),
         "lease": (1200, (2, 0.6, 1, 6), (45, 0.8, 10, 300), (220, 0.5, 60, 700), (60.0, 0.9))}
CHUNKS = (2, 3)  # handbook sections retrieved for a resident's message (before it)
RETURN = {"tenant": 0.25, "prospect": 0.2}  # chats back 10..30 h later for 1..3 turns
RATE = 35.0  # tokens a second a reply decodes at
MAX_CONTEXT = 24000  # tokens of a chat's context that end it
TENANTS, PROSPECTS, LEASE_QA = 130, 130, 24  # chats a day at scale 1.0 (x the week's factor)
TENANT_HOURS = (0.2, 0.1, 0.05, 0.03, 0.03, 0.05, 0.3, 0.6, 0.8, 0.8, 0.8, 0.8, 1.0, 0.9,
                0.8, 0.8, 0.9, 1.0, 1.3, 1.5, 1.6, 1.4, 1.0, 0.5)
BUTTON = 0.4  # incident questions that are the portal's quick-reply button
ASKERS = (0.12, 0.35)  # of an incident building's tenants who ask
EMAILS = 75  # new email threads a day at scale 1.0 (x the week's factor), residents' hours
EMAIL_SYSTEM, EMAIL_CUE = 1000, 30
INBOUND = (160, 0.7, 40, 900)  # tokens of a tenant's email
OUTBOUND = (150, 0.5, 50, 500)  # tokens of the reply staff send (the draft, edited)
# from a tenant's email to staff's reply, from staff's reply to the tenant's answer
EMAIL_GAPS = ((1.5 * HOUR, 0.8, 10 * MINUTE, 8 * HOUR),
              (6 * HOUR, 1.0, 20 * MINUTE, 36 * HOUR))
REPLY = 0.55  # tenants who answer staff's reply (a thread holds at most 10 emails)
TICKETS = 60  # new maintenance tickets a day at scale 1.0 (x the week's factor)
TICKET_SYSTEM, TICKET_CUE = 1400, 30
EMERGENCY = 0.1  # tickets that are emergencies (no heat, a leak): steps minutes apart
# step -> tokens; a report is the message and 0..4 photo captions
STEPS = {"report": (90, 0.7, 20, 500), "photo": (140, 0.4, 60, 300),
         "dispatch": (70, 0.5, 30, 150), "visit": (280, 0.5, 100, 600),
         "quote": (800, 0.4, 400, 1500), "followup": (90, 0.6, 30, 250),
         "complete": (160, 0.4, 80, 300)}
OPTIONAL = {"quote": 0.25, "followup": 0.3}
# between a ticket's steps: routine, emergency
STEP_GAP = ((5 * HOUR, 1.0, 10 * MINUTE, 48 * HOUR),
            (40 * MINUTE, 0.8, 5 * MINUTE, 4 * HOUR))
TICKET_HOURS = (0.1, 0.05, 0.03, 0.03, 0.03, 0.05, 0.2, 0.7, 1.0, 1.0, 1.0, 0.9, 0.9, 0.9,
                0.9, 0.9, 1.0, 1.1, 1.2, 1.2, 1.1, 0.9, 0.6, 0.3)
OPEN_DAYS = 4  # tickets and email threads already open began this many days before


@dataclass
class PropChat(Chat):
    """A Chat (owner: the unit, the tenant's or the one a prospect asks about; fixed: a
    prospect's listing text as it stood when the chat began), its building, its incident
    (-1 if none) and when it came back (None if not)."""

    building: int = 0
    incident: int = -1
    back: float | None = None


@dataclass
class Thread:
    """A tenant's email thread: the unit, the emails in order, the draft requests."""

    unit: int
    emails: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


@dataclass
class Ticket:
    """A maintenance ticket: unit, emergency, its steps as (time, step), the texts so far and
    the requests that read it."""

    unit: int
    emergency: bool
    steps: list[tuple[float, str]]
    texts: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


class Desk(Jobs):
    """The whole replica: the portfolio, the jobs (``Jobs``) and the people's side."""

    def __init__(self, rng: random.Random, scale: float, week: str) -> None:
        super().__init__(rng, scale, week)
        self.chat_system = {k: self.new(v[0]) for k, v in CHATS.items() if v[0]}
        self.chat_system["incident"] = self.chat_system["tenant"]
        self.email_system, self.email_cue = self.new(EMAIL_SYSTEM), self.new(EMAIL_CUE)
        self.ticket_system, self.ticket_cue = self.new(TICKET_SYSTEM), self.new(TICKET_CUE)
        self.chats: list[PropChat] = []
        self.threads: list[Thread] = []
        self.tickets: list[Ticket] = []
        self.daily(TENANTS, TENANT_HOURS, 0, "tenant")
        self.daily(PROSPECTS, PROSPECT_HOURS, 0, "prospect")
        self.daily(LEASE_QA, OFFICE, 9, "question")
        self.daily(EMAILS, TENANT_HOURS, 0, "email")
        self.daily(TICKETS, TICKET_HOURS, 0, "ticket")
        self._open_before()
        for n in range(len(self.incidents)):
            self._askers(n)

    def _open_before(self) -> None:
        """Email threads and tickets opened in the OPEN_DAYS before the clock's start: what
        happened to them before it is in place, the rest is on the clock."""
        rng = self.rng
        for c, city in enumerate(self.cities):
            for name, rate in (("email", EMAILS), ("ticket", TICKETS)):
                for _ in range(round(rate * self.scale * city.share * OPEN_DAYS)):
                    self.now = -rng.uniform(0, OPEN_DAYS) * DAY
                    getattr(self, "_on_" + name)(c)
        self.now = 0.0

    def _askers(self, n: int) -> None:
        """Incident ``n``'s askers: ASKERS of the building's tenants, 70 % (75 % unplanned)
        in the hours after it starts, the rest between the first notice and the end."""
        rng, inc = self.rng, self.incidents[n]
        occupied = [u for u in self.buildings[inc.building].units if self.units[u].lease]
        first = inc.notices[0][0] if inc.planned and inc.notices else inc.start
        for u in rng.sample(occupied, round(len(occupied) * rng.uniform(*ASKERS))):
            if rng.random() < (0.7 if inc.planned else 0.75):
                t = inc.start + rng.expovariate(1 / (50 * MINUTE))
            else:
                t = rng.uniform(first if inc.planned else inc.start, inc.end)
            if 0 <= t < END:
                self.at(t, "ask", (n, u))

    def head(self, chat: PropChat) -> list[Segment]:
        """What a chat's turn sends before the history, as the documents stand now."""
        sys, b = self.chat_system[chat.kind], chat.building
        if chat.kind == "incident":
            return self.resident_head(sys, b)
        unit = self.units[chat.owner]
        if chat.kind == "tenant":
            return [*self.resident_head(sys, b), *unit.lease.abstract.at(self.now)]
        if chat.kind == "lease":
            return [sys, *unit.lease.document()]
        bld = self.buildings[b]
        return [sys, bld.marketing, *bld.rules.at(self.now), *chat.fixed]

    def start(self, kind: str, u: int, fixed: list[Segment] | None = None,
              incident: int = -1) -> None:
        """A chat of ``kind`` about unit ``u`` begins now."""
        turns = clipped_length(self.rng, *CHATS[kind][1])
        self.chats.append(PropChat(kind, u, turns, fixed or [], building=self.units[u].building,
                                   incident=incident))
        self.at(self.now, "turn", len(self.chats) - 1)

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, the message; the reply joins the history. A chat
        out of turns comes back the next day with RETURN's chance (once)."""
        chat, rng = self.chats[n], self.rng
        _, _, message, reply, pause = CHATS[chat.kind]
        if chat.kind == "incident" and not chat.sent and rng.random() < BUTTON:
            msg = self.incidents[chat.incident].button
        else:
            msg = self.new(clipped_length(rng, *message))
        if chat.kind in ("tenant", "incident"):
            topics = (self.incidents[chat.incident].topics if chat.incident >= 0
                      else self.topics(rng.randint(*CHUNKS)))
            chunks = self.retrieve(topics)
            segs = [*self.head(chat), *chat.history, *chunks, msg]
            chat.sent.append(self.emit(chat.kind, n, len(chat.sent), segs))
            out = self.new(clipped_length(rng, *reply))
            chat.history += [*chunks, msg, out]
            chat.turns -= 1
        else:
            segs, out = self.turn(chat, self.head(chat), msg, reply,
                                  (chat.kind, n, len(chat.sent)))
        if sum(t for _, t in segs) + out[1] >= MAX_CONTEXT:
            return
        if chat.turns > 0:
            gap = out[1] / RATE + rng.lognormvariate(0.0, pause[1]) * pause[0]
            self.at(self.now + gap, "turn", n)
        elif chat.back is None and rng.random() < RETURN.get(chat.kind, 0.0):
            chat.back, chat.turns = self.now + rng.uniform(10, 30) * HOUR, rng.randint(1, 3)
            self.at(chat.back, "turn", n)

    def _on_tenant(self, c: int) -> None:
        self.start("tenant", self.tenant_in(c))

    def _on_ask(self, arg: tuple[int, int]) -> None:
        n, u = arg
        self.start("incident", u, incident=n)
        self.incidents[n].chats.append(len(self.chats) - 1)

    def _on_prospect(self, c: int) -> None:
        listed = self.listed_in(c)
        if listed:
            u = self.rng.choice(listed)
            self.start("prospect", u, list(self.units[u].listing.text.current))

    def _on_question(self, c: int) -> None:
        self.start("lease", self.tenant_in(c))

    def _on_email(self, c: int) -> None:
        """A tenant starts an email thread (before the clock's start: played out to it)."""
        self.threads.append(Thread(self.tenant_in(c)))
        self.mail((len(self.threads) - 1, 0))

    def mail(self, arg: tuple[int, int]) -> None:
        """Thread ``n``'s next email (``who`` 0 the tenant, 1 staff): a tenant's email gets a
        draft (on the clock), staff answer hours later, the tenant with REPLY's chance."""
        n, who = arg
        rng, thread = self.rng, self.threads[n]
        thread.emails.append(self.new(clipped_length(rng, *(INBOUND, OUTBOUND)[who])))
        if who == 0 and self.now >= 0:
            u = thread.unit
            head = self.resident_head(self.email_system, self.units[u].building)
            segs = [head[0], *self.handbook.at(self.now), *head[1:],
                    *self.units[u].lease.abstract.at(self.now), *thread.emails, self.email_cue]
            thread.sent.append(self.emit("email", n, len(thread.emails) - 1, segs))
        if who == 1 and (rng.random() >= REPLY or len(thread.emails) >= 10):
            return
        self.later(self.now + clipped_length(rng, *EMAIL_GAPS[who]), "mail", (n, 1 - who))

    def later(self, t: float, name: str, arg: tuple) -> None:
        """``name`` at ``t``: at once, on its own clock, if ``t`` is before the clock's
        start; scheduled if it is on the clock."""
        if t < 0:
            now, self.now = self.now, t
            getattr(self, "_on_" + name)(arg)
            self.now = now
        elif t < END:
            self.at(t, name, arg)

    def _on_mail(self, arg: tuple[int, int]) -> None:
        self.mail(arg)

    def _on_ticket(self, c: int) -> None:
        """A tenant reports a problem: the ticket's steps planned (report, dispatch, visit,
        maybe a quote and a follow-up, complete), gaps by STEP_GAP."""
        rng = self.rng
        emergency = rng.random() < EMERGENCY
        names = ["report", "dispatch", "visit", *(s for s, p in OPTIONAL.items()
                                                  if rng.random() < p), "complete"]
        t, steps = self.now, []
        for name in names:
            steps.append((t, name))
            t += clipped_length(rng, *STEP_GAP[emergency])
        self.tickets.append(Ticket(self.tenant_in(c), emergency, steps))
        for k, (t, _) in enumerate(steps):
            self.later(t, "step", (len(self.tickets) - 1, k))

    def _on_step(self, arg: tuple[int, int]) -> None:
        """A ticket's step lands (a report with its photos' captions); on the clock the
        ticket is read again: the maintenance profile, the unit's profile, every text so far."""
        n, k = arg
        rng, ticket = self.rng, self.tickets[n]
        name = ticket.steps[k][1]
        ticket.texts.append(self.new(clipped_length(rng, *STEPS[name])))
        if name == "report":
            ticket.texts += [self.new(clipped_length(rng, *STEPS["photo"]))
                             for _ in range(rng.randint(0, 4))]
        if self.now >= 0:
            unit = self.units[ticket.unit]
            segs = [self.ticket_system, self.buildings[unit.building].plant, unit.profile,
                    *ticket.texts, self.ticket_cue]
            ticket.sent.append(self.emit("ticket", n, k, segs))
