"""bench.heldout's ``sales_crm`` shape, the reps' side: account briefs generated when an AE
opens an account (its whole history, so each later brief adds the entries that landed),
meeting prep before each meeting (the stage's playbook sections, the product sheets, the
account's documents again; regenerated now and then, prepped by a second attendee too),
reply suggestions in email threads that grow message by message (and new emails composed),
reps' quick chats in the CRM's sidebar, enablement questions over the segment's playbook and a
battlecard or product sheet, and proposals drafted and revised against the price book. See
bench/heldout_sales_crm.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_crm_jobs import OFFICE, RECENT, Jobs
from bench.heldout_crm_world import HOUR, MINUTE, hour_of, utc
from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_meeting_parts import pick, poisson
from bench.heldout_pv_desk import chat_turn

DESK = {"brief": 900, "prep": 1100, "email": 700, "proposal": 1000}  # system prompts
DESK_CUES = {"brief": (40,), "prep": (45, 60), "email": (30, 25, 30, 35, 50),
             "proposal": (40,)}  # email: reply, 3 rewrites, compose
# kind -> (system prompt tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"chat": (1500, (3, 0.7, 1, 10), (40, 0.9, 5, 600), (200, 0.6, 30, 1000), (45.0, 0.9)),
         "enablement": (800, (2, 0.6, 1, 6), (50, 0.8, 8, 400), (300, 0.5, 60, 1200),
                        (40.0, 0.8))}
RATE = 40.0  # tokens a second a reply decodes at
MAX_CONTEXT = 24000  # tokens of a chat's context that end it
BRIEFS = 4.0  # account opens a day per AE (office hours)
MEETINGS = 2.5  # external meetings a day per AE, local 09..16 on the half hour
MEET_HOURS = (0.8, 1.0, 1.0, 0.6, 0.8, 1.0, 1.0, 0.7)  # 09..16
MINUTES = ((30, 0.5), (45, 0.2), (60, 0.3))
PREP_LEAD = (40, 0.6, 10, 120)  # minutes before the meeting its prep is generated
REPREP, SECOND = 0.3, 0.15  # preps regenerated (another cue); prepped by a second attendee
ATTENDEES = (180, 0.5, 60, 500)  # tokens of the agenda and attendees' bios
WITH_OPP, RECORDED, NOTED = 0.8, 0.7, 0.5  # meetings on an open opp, recorded, noted by hand
NOTE = (150, 0.6, 30, 600)  # tokens of an AE's note on an unrecorded meeting
THREADS = (6, 0.5, 2, 15)  # email threads an AE has open at the start
MESSAGE = (180, 0.6, 40, 900)  # tokens of an email
EXCHANGES = (2, 0.6, 1, 6)  # inbound emails a thread still gets
GAP = (4 * HOUR, 1.0, 10 * MINUTE, 30 * HOUR)  # until the customer writes back
READ = (30 * MINUTE, 1.0, 2 * MINUTE, 4 * HOUR)  # until the AE asks for a reply suggestion
REWRITE = 0.25  # suggestions asked again in another tone, 0.5..2.5 minutes later
COMPOSE = (2.0, (30, 0.7, 10, 150), (220, 0.4, 80, 500), 0.35)  # a day per AE, instruction,
# the draft, share the customer answers
CHATS_A_DAY, ON_ACCOUNT = 1.5, 0.45  # quick chats per rep; share opened on an AE's account
ENABLEMENT, CARD_SHARE = 0.8, 0.45  # questions a day per rep; share about a battlecard
RUSH = (2.0, 8 * HOUR, 0.5)  # launch: extra sessions per rep over the hours after; new product
PROPOSALS = {"quarter_end": (1.0, 3.0)}  # per AE on day 0, 1 (others 0.4), on stage 3 or later
TERMS = (200, 0.5, 80, 600)  # tokens of a proposal's terms (discount, term, seats)
REVISIONS = ((0, 0.4), (1, 0.35), (2, 0.15), (3, 0.1))


@dataclass
class CrmChat(Chat):
    """A Chat (owner: the rep; fixed after the system prompt: the account's profile and its
    history as the chat opened, or nothing) and, for enablement, the document it is about
    ("card" or "sheet", its index)."""

    account: int | None = None
    doc: tuple[str, int] = ("", -1)


@dataclass
class Meeting:
    """A meeting: AE, account, opportunity (chosen at the first prep), start, minutes,
    whether recorded, its agenda; the preps' request indices."""

    rep: int
    account: int
    start: float
    minutes: int
    recorded: bool
    agenda: Segment
    opp: int | None = None
    sent: list[int] = field(default_factory=list)


@dataclass
class Thread:
    """An email thread of an AE with an account: its messages and how many more the customer
    will send; ``sent``: its suggestion requests."""

    rep: int
    account: int
    messages: list[Segment]
    left: int
    sent: list[int] = field(default_factory=list)


class Desk(Jobs):
    """The whole replica: the world, the jobs (``Jobs``) and the reps' requests."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        self.desk = {k: self.new(n) for k, n in DESK.items()}
        self.desk_cues = {k: [self.new(n) for n in v] for k, v in DESK_CUES.items()}
        self.chat_system = {k: self.new(v[0]) for k, v in CHATS.items()}
        self.chats: list[CrmChat] = []
        self.meetings: list[Meeting] = []
        self.threads: list[Thread] = []
        self.proposals: list[tuple[int, list[int]]] = []  # (opportunity, request indices)
        for r, rep in enumerate(self.reps):
            tz = self.tz_of(r)
            self.daily(tz, CHATS_A_DAY, OFFICE, 8, "chat", r)
            self.daily(tz, ENABLEMENT, OFFICE, 8, "enablement", r)
            if self.launch is not None:
                for _ in range(poisson(rng, RUSH[0])):
                    t = self.launch + rng.uniform(0, RUSH[1])
                    self.later(self.office(t, tz), "enablement", r)
            if rep.sdr:
                continue
            self.daily(tz, BRIEFS, OFFICE, 8, "brief", r)
            self.daily(tz, COMPOSE[0], OFFICE, 8, "compose", r)
            for d, rate in enumerate(PROPOSALS.get(scenario, (0.4, 0.4))):
                self.daily_on(d, tz, rate, OFFICE, 8, "proposal", r)
            self._plan_meetings(r)
            for _ in range(clipped_length(rng, *THREADS)):
                self._open_thread(r)

    def _plan_meetings(self, r: int) -> None:
        """An AE's meetings each workday: their preps before, the call's end after."""
        rng, tz = self.rng, self.tz_of(r)
        for d in (-1, 0, 1, 2):
            if not self.workday(d):
                continue
            for _ in range(poisson(rng, MEETINGS)):
                start = utc(d, int(2 * hour_of(rng, MEET_HOURS, 9)) / 2, tz)
                m = Meeting(r, self.account_of(r), start, pick(rng, MINUTES),
                            rng.random() < RECORDED, self.new(clipped_length(rng, *ATTENDEES)))
                self.meetings.append(m)
                n = len(self.meetings) - 1
                lead = clipped_length(rng, *PREP_LEAD) * MINUTE
                self.later(start - lead, "prep", (n, 0))
                if rng.random() < REPREP:
                    self.later(min(start, start - lead + rng.uniform(2, 15) * MINUTE), "prep",
                               (n, 1))
                if rng.random() < SECOND:
                    self.later(start - lead * rng.uniform(0.1, 0.9), "prep", (n, 2))
                self.later(start + m.minutes * MINUTE, "met", n)

    def play(self, segment: int, stage: int) -> list[Segment]:
        """The playbook's sections a prep retrieves: the first, and the stage's."""
        secs = self.playbooks[segment].at(self.now)
        return [secs[0], secs[1 + (stage - 1) * (len(secs) - 1) // 6]]

    def _on_prep(self, arg: tuple[int, int]) -> None:
        """Meeting prep: the stage's playbook sections, the opportunity's product sheets, the
        account's profile and history, its record, the agenda, a cue (attempt 1: another
        one; attempt 2, a second attendee: the first's)."""
        n, attempt = arg
        m = self.meetings[n]
        acc = self.accounts[m.account]
        if not m.sent and acc.opps and self.rng.random() < WITH_OPP:
            m.opp = self.rng.choice(acc.opps)
        opp = self.opps[m.opp] if m.opp is not None else None
        segment = self.teams[self.reps[m.rep].team].segment
        segs = [self.desk["prep"], *self.play(segment, opp.stage if opp else 1),
                *(self.sheets_of(opp.products) if opp else []), acc.profile,
                *self.history(m.account), *(opp.record.at(self.now) if opp else []), m.agenda,
                self.desk_cues["prep"][attempt == 1]]
        m.sent.append(self.emit("prep", n, attempt, segs))

    def _on_met(self, n: int) -> None:
        """A meeting ends: a recorded one goes to the call jobs; half of the others get the
        AE's notes within 3 hours."""
        m = self.meetings[n]
        if m.recorded:
            self.record_call(m.account, None, m.opp, m.minutes * self.rng.uniform(0.7, 1.0))
        elif self.rng.random() < NOTED:
            self.later(self.now + self.rng.uniform(0.15, 3) * HOUR, "noted", m.account)

    def _on_noted(self, a: int) -> None:
        self.note(a, self.new(clipped_length(self.rng, *NOTE)))

    def _on_brief(self, r: int) -> None:
        """An AE opens an account: its brief from the profile and the whole history."""
        a = self.account_of(r)
        hist = self.history(a)
        segs = [self.desk["brief"], self.accounts[a].profile, *hist, self.desk_cues["brief"][0]]
        self.emit("brief", a, len(hist), segs)

    def _open_thread(self, r: int) -> None:
        """An open thread at the start: 1..5 messages so far, waiting on the AE (half) or on
        the customer."""
        rng = self.rng
        msgs = [self.new(clipped_length(rng, *MESSAGE)) for _ in range(rng.randint(1, 5))]
        self.threads.append(Thread(r, self.account_of(r), msgs, clipped_length(rng, *EXCHANGES)))
        n = len(self.threads) - 1
        if rng.random() < 0.5:
            self.later(self.office(rng.uniform(0, 6) * HOUR, self.tz_of(r)), "suggest", (n, 0))
        else:
            self.at(clipped_length(rng, *GAP), "inbound", n)

    def email_prompt(self, n: int, cue: int) -> list[Segment]:
        """A reply suggestion: system prompt, the AE's style, the profile, the thread."""
        th = self.threads[n]
        return [self.desk["email"], self.reps[th.rep].style, self.accounts[th.account].profile,
                *th.messages, self.desk_cues["email"][cue]]

    def _on_inbound(self, n: int) -> None:
        """The customer writes back: the email joins the thread and the account's history;
        the AE asks for a suggestion after reading it (in office hours)."""
        th, rng = self.threads[n], self.rng
        msg = self.new(clipped_length(rng, *MESSAGE))
        th.messages.append(msg)
        th.left -= 1
        self.note(th.account, msg)
        t = self.office(self.now + clipped_length(rng, *READ), self.tz_of(th.rep))
        self.later(t, "suggest", (n, 0))

    def _on_suggest(self, arg: tuple[int, int]) -> None:
        """A reply suggestion (cue 0), or asked again in one of three tones; after the last,
        the AE's reply (5..15 minutes on) joins the thread."""
        n, cue = arg
        self.threads[n].sent.append(self.emit("email", n, cue, self.email_prompt(n, cue)))
        if cue == 0 and self.rng.random() < REWRITE:
            self.at(self.now + self.rng.uniform(0.5, 2.5) * MINUTE, "suggest",
                    (n, self.rng.randint(1, 3)))
        else:
            self.at(self.now + self.rng.uniform(5, 15) * MINUTE, "reply", n)

    def _on_reply(self, n: int) -> None:
        """The AE's reply joins the thread and the history; the customer may write back."""
        th, rng = self.threads[n], self.rng
        msg = self.new(clipped_length(rng, *MESSAGE))
        th.messages.append(msg)
        self.note(th.account, msg)
        if th.left > 0:
            self.later(self.now + clipped_length(rng, *GAP), "inbound", n)

    def _on_compose(self, r: int) -> None:
        """A new email to an account from an instruction: system prompt, style, profile,
        the recent history, the instruction; the draft opens a thread."""
        rng, a = self.rng, self.account_of(r)
        acc = self.accounts[a]
        segs = [self.desk["email"], self.reps[r].style, acc.profile,
                *self.history(a)[-RECENT:], self.new(clipped_length(rng, *COMPOSE[1])),
                self.desk_cues["email"][4]]
        draft = self.new(clipped_length(rng, *COMPOSE[2]))
        left = clipped_length(rng, *EXCHANGES) if rng.random() < COMPOSE[3] else 0
        self.threads.append(Thread(r, a, [draft], left))
        self.threads[-1].sent.append(self.emit("email", len(self.threads) - 1, 4, segs))
        self.note(a, draft)
        if left:
            self.later(self.now + clipped_length(rng, *GAP), "inbound", len(self.threads) - 1)

    def _on_chat(self, r: int) -> None:
        """A quick chat in the sidebar, opened on one of an AE's accounts (its profile and
        history as they stood) or on nothing."""
        rng = self.rng
        fixed, a = [], None
        if not self.reps[r].sdr and rng.random() < ON_ACCOUNT:
            a = self.account_of(r)
            fixed = [self.accounts[a].profile, *self.history(a)]
        self.start_chat(CrmChat("chat", r, clipped_length(rng, *CHATS["chat"][1]), fixed,
                                account=a))

    def _on_enablement(self, r: int) -> None:
        """A question to the enablement assistant over the team's playbook and a battlecard
        (by 1 / rank) or a product sheet (by 1 / rank; after a launch, the new one half the
        time)."""
        rng = self.rng
        if rng.random() < CARD_SHARE:
            doc = ("card", rng.choices(range(len(self.cards)),
                                       [1 / (c + 1) for c in range(len(self.cards))])[0])
        elif self.launch is not None and self.now >= self.launch and rng.random() < RUSH[2]:
            doc = ("sheet", len(self.sheets) - 1)
        else:
            live = self.live_products()
            doc = ("sheet", rng.choices(live, [1 / (p + 1) for p in live])[0])
        turns = clipped_length(rng, *CHATS["enablement"][1])
        self.start_chat(CrmChat("enablement", r, turns, [], doc=doc))

    def start_chat(self, chat: CrmChat) -> None:
        self.chats.append(chat)
        self.at(self.now, "turn", len(self.chats) - 1)

    def head(self, chat: CrmChat) -> list[Segment]:
        """What a chat's turn sends before its history (enablement: the documents as they
        stand at the turn)."""
        if chat.kind == "chat":
            return [self.chat_system["chat"], *chat.fixed]
        segment = self.teams[self.reps[chat.owner].team].segment
        kind, k = chat.doc
        doc = (self.cards if kind == "card" else self.sheets)[k].at(self.now)
        return [self.chat_system["enablement"], *self.playbooks[segment].at(self.now), *doc]

    def _on_turn(self, n: int) -> None:
        chat_turn(self, n, CHATS[self.chats[n].kind], MAX_CONTEXT, RATE)

    def _on_proposal(self, r: int) -> None:
        """A proposal on one of an AE's opportunities at stage 3 or later: drafted now,
        revised 0..3 times."""
        opps = [o for a in self.reps[r].accounts for o in self.accounts[a].opps
                if self.opps[o].stage >= 3]
        if opps:
            self.proposals.append((self.rng.choice(opps), []))
            self.at(self.now, "draft", (len(self.proposals) - 1, 1 + pick(self.rng, REVISIONS)))

    def _on_draft(self, arg: tuple[int, int]) -> None:
        """A draft: system prompt, the price book, the product sheets, the profile, the
        record (as they stand), the terms, a cue; a revision changes the terms on."""
        n, left = arg
        o, sent = self.proposals[n]
        opp = self.opps[o]
        segs = [self.desk["proposal"], *self.pricing.at(self.now), *self.sheets_of(opp.products),
                self.accounts[opp.account].profile, *opp.record.at(self.now),
                self.new(clipped_length(self.rng, *TERMS)), self.desk_cues["proposal"][0]]
        sent.append(self.emit("proposal", n, len(sent), segs))
        if left > 1:
            hi = 40 if self.scenario == "quarter_end" else 90
            self.at(self.now + self.rng.uniform(5, hi) * MINUTE, "draft", (n, left - 1))
