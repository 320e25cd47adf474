"""bench.heldout's ``recruiting`` shape, the people's side: recruiters' sessions over a
requisition's shortlist (the candidates' profiles re-sent in the order the recruiter sorted
them, re-sorted mid-session now and then), hiring managers' debriefs over the day's interview
loops, candidates' scheduling chats over the employer's interviewer availability (refreshed
every hour), the applicant-facing FAQ bot per employer, and offer letters drafted and revised.
See bench/heldout_recruiting.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_meeting_parts import pick
from bench.heldout_recruit_jobs import OFFICE, Jobs
from bench.heldout_recruit_parts import APPLY_HOURS, MINUTE, HOUR

# kind -> (system prompt tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"shortlist": (1400, (4, 0.7, 1, 12), (40, 0.9, 8, 300), (250, 0.5, 80, 900),
                       (60.0, 1.0)),
         "debrief": (900, (4, 0.5, 2, 8), (50, 0.8, 10, 300), (280, 0.5, 80, 900), (45.0, 0.8)),
         "schedule": (700, (4, 0.4, 2, 8), (20, 0.7, 5, 80), (70, 0.4, 30, 200), (40.0, 0.8)),
         "faq": (500, (2, 0.6, 1, 5), (30, 0.7, 8, 150), (160, 0.5, 60, 400), (30.0, 0.8))}
SHORTLISTS = 60  # recruiters' shortlist sessions a day at scale 1.0 (office hours)
SHORTLIST = (4, 12)  # candidates on a shortlist (the best-scored, fewer if fewer screened)
ORDERS = ("score", "recent", "name")  # how a recruiter sorts the shortlist
RESORT = 0.25  # turns after the first that re-sort it
DEBRIEF = (0.6, (16.5, 18.0))  # requisitions with loops that day that debrief, local hours
SCHEDULES = 150  # scheduling chats a day at scale 1.0, local 08..20
CONTEXT = (110, 0.4, 60, 200)  # tokens of the candidate and role the chat is about
SLOTS = (600, 0.4, 300, 1200)  # tokens of an employer's interviewer availability
FAQS = 180  # FAQ sessions a day at scale 1.0 (by APPLY_HOURS)
FAIR_FAQ = 0.3  # job-fair applicants who then ask the FAQ bot
OFFERS = 20  # offer letters a day at scale 1.0 (office hours)
OFFER_SYSTEM, OFFER_CUE = 500, 30
TERMS = (180, 0.4, 100, 300)  # tokens of an offer's terms (pay, start date, location)
REVISIONS = ((0, 0.5), (1, 0.35), (2, 0.15))  # offer revisions, 20..120 minutes apart
RATE = 35.0  # tokens a second a reply decodes at
MAX_CONTEXT = 24000  # tokens of a chat's context that end it
SCHEDULE_HOURS = (0.6, 1.0, 1.0, 1.0, 0.8, 0.9, 1.0, 1.0, 0.9, 0.8, 0.7, 0.5)  # 08..19


@dataclass
class RecruitChat(Chat):
    """A Chat (owner: the requisition, or the employer for schedule and faq; fixed after the
    system prompt: debrief, each loop's profile and summary; schedule, the candidate and
    role), the shortlist's order and sort, and the re-sorts as (turn, sort)."""

    order: list[int] = field(default_factory=list)
    sort: str = ""
    resorts: list[tuple[int, str]] = field(default_factory=list)


class Desk(Jobs):
    """The whole replica: the world and the jobs (``Jobs``) and the people's chats."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.chat_system = {k: self.new(v[0]) for k, v in CHATS.items()}
        self.offer_system, self.offer_cue = self.new(OFFER_SYSTEM), self.new(OFFER_CUE)
        self.chats: list[RecruitChat] = []
        self.slots: dict[tuple[int, int], Segment] = {}
        self.offers: list[tuple[int, list[int]]] = []  # (application, request indices)
        self.debriefs: set[tuple[int, int]] = set()
        for e in range(len(self.employers)):
            self.daily(e, SHORTLISTS, OFFICE, 9, "shortlist")
            self.daily(e, SCHEDULES, SCHEDULE_HOURS, 8, "schedule")
            self.daily(e, FAQS, APPLY_HOURS, 0, "faq")
            self.daily(e, OFFERS, OFFICE, 9, "offer")

    def slot(self, e: int) -> Segment:
        """Employer ``e``'s interviewer availability this hour (a new one each hour)."""
        key = (e, int(self.now // HOUR))
        if key not in self.slots:
            self.slots[key] = self.new(clipped_length(self.rng, *SLOTS))
        return self.slots[key]

    def head(self, chat: RecruitChat) -> list[Segment]:
        """What a chat's turn sends before the history."""
        sys = self.chat_system[chat.kind]
        if chat.kind == "schedule":
            return [sys, self.slot(chat.owner), *chat.fixed]
        if chat.kind == "faq":
            emp = self.employers[chat.owner]
            return [sys, emp.company, *emp.faq]
        req = self.reqs[chat.owner]
        return [sys, req.jd, *req.rubric.at(self.now), *chat.fixed,
                *(self.apps[a].profile for a in chat.order)]

    def start(self, chat: RecruitChat) -> None:
        self.chats.append(chat)
        self.at(self.now, "turn", len(self.chats) - 1)

    def ordered(self, apps: list[int], sort: str) -> list[int]:
        """A shortlist sorted the recruiter's way (ties by application id)."""
        if sort == "score":
            return sorted(apps, key=lambda a: (-self.apps[a].score, a))
        if sort == "recent":
            return sorted(apps, key=lambda a: (-self.apps[a].time, a))
        return sorted(apps, key=lambda a: (self.apps[a].cand, a))

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, the message; the reply joins the history. A
        shortlist may be re-sorted first (its profiles re-sent in the new order)."""
        chat, rng = self.chats[n], self.rng
        _, turns, message, reply, pause = CHATS[chat.kind]
        if chat.kind == "shortlist" and chat.sent and rng.random() < RESORT:
            chat.sort = rng.choice([s for s in ORDERS if s != chat.sort])
            chat.order = self.ordered(chat.order, chat.sort)
            chat.resorts.append((len(chat.sent), chat.sort))
        msg = self.new(clipped_length(rng, *message))
        segs, out = self.turn(chat, self.head(chat), msg, reply, (chat.kind, n, len(chat.sent)))
        if chat.turns > 0 and sum(t for _, t in segs) + out[1] < MAX_CONTEXT:
            gap = out[1] / RATE + rng.lognormvariate(0.0, pause[1]) * pause[0]
            self.at(self.now + gap, "turn", n)

    def _on_shortlist(self, e: int) -> None:
        """A recruiter opens one of ``e``'s requisitions with at least 3 screened
        applications (by how many) and works its shortlist, sorted one of ORDERS' ways."""
        rng = self.rng
        rs = {r: sum(self.apps[a].score is not None for a in self.reqs[r].apps)
              for r in self.open_reqs(e)}
        rs = {r: k for r, k in rs.items() if k >= 3}
        if not rs:
            return
        r = rng.choices(list(rs), list(rs.values()))[0]
        scored = [a for a in self.reqs[r].apps if self.apps[a].score is not None]
        best = self.ordered(scored, "score")[:rng.randint(*SHORTLIST)]
        sort = rng.choice(ORDERS)
        turns = clipped_length(rng, *CHATS["shortlist"][1])
        order = self.ordered(best, sort)
        self.start(RecruitChat("shortlist", r, turns, [], order=order, sort=sort))

    def loop_started(self, n: int) -> None:
        """The first loop of a requisition on a local day may get a debrief that evening."""
        loop = self.loops[n]
        key = (loop.req, loop.day)
        if key in self.debriefs:
            return
        self.debriefs.add(key)
        if self.rng.random() < DEBRIEF[0]:
            tz = self.employers[self.reqs[loop.req].employer].tz
            self.at_local(loop.day, self.rng.uniform(*DEBRIEF[1]), tz, "debrief", key)

    def _on_debrief(self, key: tuple[int, int]) -> None:
        """A hiring manager's debrief over the day's loops of a requisition that have a
        summary: each candidate's profile and latest summary, in the loops' order."""
        r, day = key
        loops = [x for x in self.loops if x.req == r and x.day == day and x.summaries]
        if not loops:
            return
        fixed = [s for x in loops for s in (self.apps[x.app].profile, x.summaries[-1])]
        turns = clipped_length(self.rng, *CHATS["debrief"][1])
        self.start(RecruitChat("debrief", r, turns, fixed))

    def _on_schedule(self, e: int) -> None:
        """A candidate books interviews with ``e`` through the scheduling assistant."""
        context = [self.new(clipped_length(self.rng, *CONTEXT))]
        turns = clipped_length(self.rng, *CHATS["schedule"][1])
        self.start(RecruitChat("schedule", e, turns, context))

    def _on_faq(self, e: int) -> None:
        """An applicant asks ``e``'s FAQ bot."""
        self.start(RecruitChat("faq", e, clipped_length(self.rng, *CHATS["faq"][1]), []))

    def fair_applied(self, r: int) -> None:
        if self.rng.random() < FAIR_FAQ:
            self.at(self.now + self.rng.uniform(1, 10) * MINUTE, "faq", self.fair_employer)

    def _on_offer(self, e: int) -> None:
        """An offer letter for the best-scored screened application of ``e`` without one (an
        interviewed one if any): system prompt, the offer template, the job description, the
        profile, the terms, the instruction; each revision new from the terms on."""
        looped, offered = {x.app for x in self.loops}, {a for a, _ in self.offers}
        apps = [a for r in self.open_reqs(e) for a in self.reqs[r].apps
                if self.apps[a].score is not None and a not in offered]
        if not apps:
            return
        a = max(apps, key=lambda a: (a in looped, self.apps[a].score))
        self.offers.append((a, []))
        self.at(self.now, "draft", (len(self.offers) - 1, 1 + pick(self.rng, REVISIONS)))

    def _on_draft(self, arg: tuple[int, int]) -> None:
        n, left = arg
        a, sent = self.offers[n]
        app = self.apps[a]
        req = self.reqs[app.req]
        segs = [self.offer_system, self.employers[req.employer].offer, req.jd, app.profile,
                self.new(clipped_length(self.rng, *TERMS)), self.offer_cue]
        sent.append(self.emit("offer", n, len(sent), segs))
        if left > 1:
            self.at(self.now + self.rng.uniform(20, 120) * MINUTE, "draft", (n, left - 1))
