"""bench.heldout's ``insurance_claims`` shape, the people's side: first-notice-of-loss intake
chats behind the line's script (with the catastrophe bulletin once the storm is declared),
the storm's claims arriving over the days after landfall, adjusters' sessions over a claim
file as it stood when they opened it, coverage questions over a policy's wording (a shared
base form, then its endorsements and declarations), customers' status questions re-sending
the claim's summary (the portal re-sends a question exactly on a refresh), and the notes
adjusters and the phone desk add to the files. See bench/heldout_claims.py's docstring for
the numbers."""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field

from bench.heldout_claims_parts import (DAY, END, ENTRIES, HOUR, LINES, MINUTE, REGIONS,
                                        World, hour_at)
from bench.heldout_fewshot import Segment, clipped_length

SYSTEM = {"fnol": 700, "adjuster": 1200, "coverage": 800, "status": 600}  # system prompts
GUIDE = (2000, 0.3, 1000, 3500)  # tokens of a line's adjusting guide
CLAIMS = 80  # everyday new claims a day at scale 1.0 (x 0.85..1.15)
CHAT = {False: 0.6, True: 0.3}  # claims reported through the intake chat (everyday, storm)
# customers' hours (00..23): intake chats, storm claims and status questions
CUSTOMER = (0.2, 0.1, 0.1, 0.1, 0.1, 0.2, 0.4, 0.7, 1.0, 1.0, 0.9, 0.9, 0.8, 0.8, 0.8, 0.8,
            0.9, 1.0, 1.0, 0.9, 0.7, 0.5, 0.4, 0.3)
OFFICE = (0.6, 1.0, 1.0, 0.9, 0.6, 0.9, 1.0, 0.9, 0.8, 0.5)  # adjusters' hours, 08..17
# kind -> (turns, message tokens, reply tokens, think seconds (median, sigma))
TALK = {"fnol": ((6, 0.4, 3, 14), (30, 0.8, 4, 200), (110, 0.5, 30, 350), (20.0, 0.8)),
        "cat": ((4, 0.4, 2, 10), (30, 0.8, 4, 200), (110, 0.5, 30, 350), (20.0, 0.8)),
        "adjuster": ((3, 0.6, 1, 12), (60, 0.9, 8, 1200), (250, 0.6, 40, 1000), (60.0, 1.0)),
        "coverage": ((2, 0.6, 1, 6), (50, 0.7, 10, 400), (200, 0.5, 50, 700), (90.0, 0.8)),
        "status": ((1, 0.5, 1, 4), (25, 0.6, 5, 120), (90, 0.4, 30, 250), (30.0, 0.8))}
DECODE = 35.0  # tokens a second a reply is written at
ADJUSTERS = (35, 30)  # adjusters' sessions a day (everyday; the CAT team's on storm claims)
DEPLOY = 6.0  # hours after the CAT is declared that the CAT team starts
RECENT = (0.4, 3.0)  # everyday sessions on a claim opened in the last this many days
COVERAGE = (16, 0.3)  # coverage sessions a day; the share on storm claims once there are any
STATUS = (80, 0.8, 1.2)  # status sessions a day on the book; per new claim (everyday, storm)
REFRESH = (0.06, (3.0, 40.0))  # status questions re-sent exactly, seconds later
DESK_NOTES = 90  # notes the phone desk adds a day (08..18)
NOTE_DELAY = (2.0, 15.0)  # minutes after a session that its note joins the file
STORM_NEAR = 0.85  # storm claims in the storm's region (the rest next to it)


@dataclass
class Session:
    """A conversation: its kind ("fnol" for both intake kinds, "adjuster", "coverage",
    "status"), the claim (-1 for an intake until its claim opens), the head it re-sends
    (pinned when it opened), turns left, history, request indices; an intake's policy,
    region and whether the storm caused it."""

    kind: str
    claim: int
    head: list[Segment]
    turns: int
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    intake: tuple = ()


class Desk(World):
    """The people's work on the book (``World``)."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.guides = {ln: self.new(clipped_length(rng, *GUIDE)) for ln in LINES}
        self.sessions: list[Session] = []
        self.refreshes: list[tuple[int, int]] = []  # (request, the request it re-sends)
        for day in (0.0, DAY):
            self.at(day, "desk_day", None)
        for t in self.storm_times():
            self.at(t, "claim", True)

    def storm_times(self) -> list[float]:
        """The storm's claims from its declaration to the trace's end: by the hour, a ramp
        over 6 hours after landfall decaying with a 20-hour time constant, x CUSTOMER."""
        s, rng = self.storm, self.rng
        hours = range(math.ceil(s.declared / HOUR), int(END / HOUR))
        w = [CUSTOMER[h % 24] * min(1.0, (h - s.landfall / HOUR) / 6)
             * math.exp(-(h - s.landfall / HOUR) / 20) for h in hours]
        picks = rng.choices(list(hours), w, k=s.claims)
        return sorted(max(s.declared, (h + rng.random()) * HOUR) for h in picks)

    def _on_desk_day(self, _: object) -> None:
        """The day's everyday claims, adjusters' and coverage sessions, status questions on
        the book and the desk's notes."""
        rng, day, sc = self.rng, self.now, self.scale
        for _ in range(max(1, round(CLAIMS * sc * rng.uniform(0.85, 1.15)))):
            self.at(hour_at(rng, day, CUSTOMER, 0), "claim", False)
        for cat, n in enumerate(ADJUSTERS):
            for _ in range(round(n * sc * rng.uniform(0.8, 1.2))):
                t = hour_at(rng, day, OFFICE, 8)
                if not cat or t > self.storm.declared + DEPLOY * HOUR:
                    self.at(t, "adjuster", bool(cat))
        for _ in range(round(COVERAGE[0] * sc * rng.uniform(0.8, 1.2))):
            self.at(hour_at(rng, day, OFFICE, 8), "coverage", None)
        for _ in range(round(STATUS[0] * sc * rng.uniform(0.8, 1.2))):
            self.at(hour_at(rng, day, CUSTOMER[7:22], 7), "status", -1)
        for _ in range(round(DESK_NOTES * sc * rng.uniform(0.8, 1.2))):
            self.at(hour_at(rng, day, OFFICE, 8), "note", -1)

    def _on_claim(self, cat: bool) -> None:
        """A loss is reported: a new policy's claim (the storm's in or next to its region);
        through the intake chat or, from the phone or an agent, as a notice."""
        rng = self.rng
        line = rng.choices(list(LINES), [v[1 if cat else 0] for v in LINES.values()])[0]
        region = rng.randrange(REGIONS)
        if cat:
            near = rng.random() < STORM_NEAR
            region = (self.storm.region + (0 if near else 1)) % REGIONS
        p = self.policy(line)
        if rng.random() >= CHAT[cat]:
            self.open_claim(p, region, cat, self.notice())
            return
        head = [self.system["fnol"], self.lines[line].script,
                *(self.storm.bulletin.at(self.now) if cat else []), p.declarations]
        turns = clipped_length(rng, *TALK["cat" if cat else "fnol"][0])
        self.talk(Session("fnol", -1, head, turns, intake=(p, region, cat)))

    def notice(self) -> Segment:
        return self.new(clipped_length(self.rng, 550, 0.4, 200, 1400))

    def talk(self, ses: Session) -> None:
        self.sessions.append(ses)
        self.at(self.now, "talk", len(self.sessions) - 1)

    def _on_talk(self, n: int) -> None:
        """A turn: the head, the history, the message; a status question may be re-sent
        exactly on a refresh. After the last turn the intake opens its claim and an
        adjuster's note joins the file."""
        ses, rng = self.sessions[n], self.rng
        talk = TALK["cat" if ses.intake and ses.intake[2] else ses.kind]
        msg = self.new(clipped_length(rng, *talk[1]))
        segs = [*ses.head, *ses.history, msg]
        ses.sent.append(i := self.emit(ses.kind, n, len(ses.sent), segs))
        reply = self.new(clipped_length(rng, *talk[2]))
        ses.history += [msg, reply]
        ses.turns -= 1
        if ses.kind == "status" and rng.random() < REFRESH[0]:
            self.at(self.now + rng.uniform(*REFRESH[1]), "refresh", i)
        wait = reply[1] / DECODE + rng.lognormvariate(0.0, talk[3][1]) * talk[3][0]
        if ses.turns > 0:
            self.at(self.now + wait, "talk", n)
        elif ses.kind == "fnol":
            self.at(self.now + reply[1] / DECODE, "intake_done", n)
        elif ses.kind == "adjuster":
            self.at(self.now + wait + rng.uniform(*NOTE_DELAY) * MINUTE, "note", ses.claim)

    def _on_refresh(self, i: int) -> None:
        kind, n, step, segs = self.meta[i]
        self.refreshes.append((self.emit(kind, n, step, segs), i))

    def _on_intake_done(self, n: int) -> None:
        ses = self.sessions[n]
        p, region, cat = ses.intake
        ses.claim = self.open_claim(p, region, cat, self.notice())

    def _on_note(self, c: int) -> None:
        """A note joins a claim's file (-1: the phone desk's, on any open claim)."""
        c = self.rng.choice(self.open) if c < 0 else c
        self.add_entry(c, "note", self.new(clipped_length(self.rng, *ENTRIES["note"][1])))

    def recent(self, days: float) -> list[int]:
        """Open claims opened in the last ``days`` days (the tail of ``open``)."""
        k = bisect.bisect_left(self.open, self.now - days * DAY,
                               key=lambda c: self.claims[c].opened)
        return self.open[k:]

    def _on_adjuster(self, cat: bool) -> None:
        """An adjuster opens a claim (a storm claim for the CAT team; else a recent one
        RECENT of the time) and the file as it stands."""
        rng = self.rng
        if cat and self.cat_claims:
            c = rng.choice(self.cat_claims)
        else:
            pool = [c for c in self.recent(RECENT[1]) if not self.claims[c].cat]
            c = rng.choice(pool if pool and rng.random() < RECENT[0] else self.open)
        line = self.claims[c].policy.line
        head = [self.system["adjuster"], self.guides[line], *self.claims[c].file_at(self.now)]
        self.talk(Session("adjuster", c, head, clipped_length(rng, *TALK["adjuster"][0])))

    def _on_coverage(self, _: object) -> None:
        """A coverage question on an open claim's policy (a storm claim COVERAGE[1] of the
        time once there are any): the system prompt and the policy's wording."""
        rng = self.rng
        cat = self.cat_claims and rng.random() < COVERAGE[1]
        c = rng.choice(self.cat_claims if cat else self.open)
        head = [self.system["coverage"], *self.wording(self.claims[c].policy)]
        self.talk(Session("coverage", c, head, clipped_length(rng, *TALK["coverage"][0])))

    def _on_status(self, c: int) -> None:
        """A customer asks about a claim (-1: any open one): the claim's summary as it
        stands."""
        c = self.rng.choice(self.open) if c < 0 else c
        head = [self.system["status"], self.claims[c].summary_at(self.now)]
        self.talk(Session("status", c, head, clipped_length(self.rng, *TALK["status"][0])))

    def follow_status(self, c: int) -> None:
        """A new claim's customer comes back (Poisson) 4..36 hours later, in 07..22."""
        rng = self.rng
        mean = STATUS[2 if self.claims[c].cat else 1]
        k, p, limit = 0, rng.random(), math.exp(-mean)
        while p > limit:
            k, p = k + 1, p * rng.random()
        for _ in range(k):
            t = self.now + rng.uniform(4.0, 36.0) * HOUR
            if not 7 <= t % DAY / HOUR < 22:  # to 07..11 that morning or the next
                t = (t + 2 * HOUR) // DAY * DAY + rng.uniform(7.0, 11.0) * HOUR
            self.at(t, "status", c)
