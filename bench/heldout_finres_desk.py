"""bench.heldout's ``fin_research`` shape, the people's side: the morning notes drafted per
sector over the night's outputs, compliance review of every outgoing note behind the policy
manual and the restricted list, analysts comparing a company with its peers (their releases
re-sent in the tool's or the analyst's order), model updates after guidance changes (the
analyst's model, tab by tab, then the new guidance) and the portfolio risk bot over each
fund's daily risk report and half-hourly snapshot. See bench/heldout_finres.py's docstring
for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_finres_filings import DECODE, PREFILL, Filings
from bench.heldout_finres_parts import BEFORE, DAY, HOUR, MINUTE, tokens
from bench.heldout_legal_parts import Versioned

# kind -> (system prompt tokens, turns, message tokens, reply tokens, think seconds (median))
CHAT = {"note": (1000, (3, 0.5, 2, 6), (60, 0.9, 10, 500), (700, 0.4, 200, 1600), 180.0),
        "peer": (1400, (3, 0.7, 1, 12), (60, 0.9, 8, 900), (320, 0.5, 60, 1400), 75.0),
        "model": (800, (4, 0.5, 2, 8), (50, 0.8, 8, 600), (260, 0.5, 60, 900), 120.0),
        "risk": (1300, (2, 0.6, 1, 6), (35, 0.6, 8, 300), (220, 0.5, 60, 700), 60.0)}
THINK_SIGMA, AWAY = 0.8, (0.08, (5.0, 40.0))  # think times' spread; leaving (minutes)
MAX_CONTEXT = 60000  # tokens of a session's context that end it
STYLE, POLICY = (2200, 0.3, 1200, 3500), (8000, 0.25, 5000, 12000)  # house style, manual
PART = 700  # tokens per section of the house style and the compliance manual
RESTRICTED = (900, 0.4, 300, 1800)  # tokens of the restricted list
LIST_CHANGES = (1, 3)  # restricted-list updates over the trace (at 08..18 either day)
NOTE_HOURS, SINCE = (5.5, 6.25), 8 * HOUR  # drafting starts; outputs since 16:00 the day before
NOTE_TEXT = (1200, 0.35, 500, 2500)  # tokens of a finished note
REVIEW_AFTER, REVIEW_CUES = (5.0, 25.0), (80, 60)  # minutes; tokens of each step's cue
REVIEW_OUT = (180, 0.4, 60, 500)
PEERS_A_DAY, RECENT = 32, 0.6  # peer sessions a day (x scale); on a recent reporter
PEER_HOURS = (0.5, 0.9, 1.0, 0.8, 0.6, 0.8, 1.0, 0.9, 0.8, 0.9, 0.7)  # starts, 08..18
TOOL_ORDER = 0.5  # sessions sending the peers in the tool's order (else the analyst's)
TAB_EDITS, FLASH = (1, 3), 0.7  # tabs rewritten after a model update; a flash note's chance
FUNDS = (6, 12)
SNAPSHOT, REPORT = (4200, 0.4, 2000, 8000), (2600, 0.35, 1500, 4000)  # a fund's, tokens
RISK_A_DAY = 90  # risk-bot sessions a day (x scale)
RISK_HOURS = (0.3, 1.0, 0.8, 0.5, 0.4, 0.4, 0.5, 0.9, 0.7)  # starts, 08..16
MACRO = (0.35, 1.6, 3)  # chance of Wednesday's 08:30 macro shock; risk x; extra bursts


@dataclass
class Chat:
    """A session with the assistant: its kind ("note", "peer", "model", "risk"), what it is
    about (a sector, the companies compared, the document whose guidance changed, a fund),
    the head it sends (for "risk" the fund's, as it stands at each turn), turns left, history
    and request indices."""

    kind: str
    about: list[int]
    head: list[Segment]
    turns: int
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


@dataclass
class Review:
    """A compliance review of a note: the chat that wrote it, the note, the head both steps
    send (system prompt, manual, restricted list as it stood), the first step's finding and
    the request indices."""

    chat: int
    note: Segment
    head: list[Segment]
    finding: Segment | None = None
    sent: list[int] = field(default_factory=list)


@dataclass
class Fund:
    """A portfolio: its daily risk report and its snapshot (refreshed in market hours)."""

    report: Versioned
    snapshot: Versioned


class Desk(Filings):
    """The whole replica: the universe and its pipelines (``Filings``) and the people's
    sessions; ``run`` ends at the second midnight."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system |= {k: self.new(v[0]) for k, v in CHAT.items()}
        self.system["compliance"] = self.new(1500)
        self.style = self.parts(STYLE)
        self.policy = self.parts(POLICY)
        self.restricted = Versioned([(BEFORE, [self.new(clipped_length(rng, *RESTRICTED))])])
        self.review_cues = [self.new(n) for n in REVIEW_CUES]
        self.funds = [Fund(Versioned([(BEFORE, [self.new(clipped_length(rng, *REPORT))])]),
                           Versioned([(BEFORE, [self.new(clipped_length(rng, *SNAPSHOT))])]))
                      for _ in range(rng.randint(*FUNDS))]
        self.chats: list[Chat] = []
        self.reviews: list[Review] = []
        self.tab_edits: list[tuple[float, int, list[int]]] = []  # (time, company, tabs)
        self.tool_order: set[int] = set()  # peer sessions sending the peers in the list's order
        self.macro = rng.random() < MACRO[0]
        for _ in range(rng.randint(*LIST_CHANGES)):
            self.at(rng.randrange(2) * DAY + rng.uniform(8, 18) * HOUR, "restrict", None)
        for day in (0.0, DAY):
            self.plan_day(day)

    def parts(self, size: tuple) -> list[Segment]:
        total = clipped_length(self.rng, *size)
        return [self.new(PART) for _ in range(total // PART)] + [self.new(total % PART + 8)]

    def plan_day(self, day: float) -> None:
        """A day's morning notes, risk reports and snapshots, peer and risk sessions (more
        of those on a macro shock's day, and more news)."""
        rng, shock = self.rng, self.macro and day == DAY
        self.at(day + rng.uniform(*NOTE_HOURS) * HOUR, "notes", None)
        self.at(day + 6 * HOUR, "fund_reports", None)
        for k in range(14):
            self.at(day + 9.5 * HOUR + k * HOUR / 2, "refresh", None)
        for _ in range(max(1, round(PEERS_A_DAY * self.scale * rng.uniform(0.8, 1.2)))):
            h = rng.choices(range(8, 19), PEER_HOURS)[0]
            self.at(day + (h + rng.random()) * HOUR, "peer", None)
        risk = RISK_A_DAY * self.scale * rng.uniform(0.8, 1.2) * (MACRO[1] if shock else 1)
        for _ in range(max(1, round(risk))):
            h = rng.choices(range(8, 17), RISK_HOURS)[0]
            self.at(day + (h + rng.random()) * HOUR, "risk", None)
        for _ in range(MACRO[2] if shock else 0):
            self.at(day + rng.uniform(8.5, 10.0) * HOUR, "burst", None)

    def _on_restrict(self, _: object) -> None:
        """The restricted list changes (a name added or lifted): a new list."""
        n = clipped_length(self.rng, *RESTRICTED)
        self.restricted.versions.append((self.now, [self.new(n)]))

    def _on_fund_reports(self, _: object) -> None:
        for f in self.funds:
            f.report.versions.append((self.now, [self.new(clipped_length(self.rng, *REPORT))]))

    def _on_refresh(self, _: object) -> None:
        for f in self.funds:
            n = clipped_length(self.rng, *SNAPSHOT)
            f.snapshot.versions.append((self.now, [self.new(n)]))

    def start(self, kind: str, about: list[int], head: list[Segment]) -> None:
        turns = clipped_length(self.rng, *CHAT[kind][1])
        self.chats.append(Chat(kind, about, head, turns))
        self.at(self.now, "turn", len(self.chats) - 1)

    def _on_notes(self, _: object) -> None:
        """Each sector's morning note over the summaries of the releases and transcripts that
        came in since the previous day's close (in arrival order), then last night's screen
        hits."""
        night = int(self.now // DAY)
        for s in range(len(self.schemas)):
            docs = [d for d in self.docs if self.companies[d.company].sector == s
                    and night * DAY - SINCE <= d.time and "summary" in d.outputs]
            hits = [o for c, o in sorted(self.screens[night].hits.items())
                    if self.companies[c].sector == s] if len(self.screens) > night else []
            if docs or hits:
                body = [d.outputs["summary"] for d in docs] + hits
                self.start("note", [s], [self.system["note"], *self.style, *body])

    def _on_peer(self, _: object) -> None:
        """An analyst compares a company (often one that just reported) with 1..4 of its
        peers: each one's card and latest release, the company first."""
        rng, t = self.rng, self.now
        recent = sorted({d.company for d in self.docs if d.form == "press"
                         and 0 <= t - d.time < DAY})
        c = rng.choice(recent) if recent and rng.random() < RECENT else self.pick()
        peers = self.companies[c].peers[:rng.randint(1, 4)]
        if rng.random() < TOOL_ORDER:
            self.tool_order.add(len(self.chats))
        else:
            peers = rng.sample(peers, len(peers))
        head = [self.system["peer"]]
        for p in [c, *peers]:
            head += [self.companies[p].card, *self.companies[p].press.at(t)]
        self.start("peer", [c, *peers], head)

    def _on_model(self, d: int) -> None:
        """An analyst updates a core name's model after its guidance changed: the model's
        tabs as they stand, then the guidance stage's output."""
        doc = self.docs[d]
        tabs = self.companies[doc.company].tabs
        self.start("model", [d], [self.system["model"], *tabs.current, doc.outputs["guidance"]])

    def _on_risk(self, _: object) -> None:
        self.start("risk", [self.rng.randrange(len(self.funds))], [self.system["risk"]])

    def head(self, chat: Chat) -> list[Segment]:
        """What a turn sends before the history; a fund's report and snapshot as they stand."""
        if chat.kind != "risk":
            return chat.head
        f = self.funds[chat.about[0]]
        return [*chat.head, *f.report.at(self.now), *f.snapshot.at(self.now)]

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, the message; the reply joins the history, and the
        next message follows a think time (now and then a long one)."""
        chat, rng = self.chats[n], self.rng
        _, _, message, reply, think = CHAT[chat.kind]
        msg = self.new(clipped_length(rng, *message))
        segs, out = self.turn(chat, self.head(chat), msg, reply, (chat.kind, n, len(chat.sent)))
        if chat.turns <= 0 or tokens(segs) + out[1] > MAX_CONTEXT:
            self.closed(n)
            return
        gap = out[1] / DECODE + rng.lognormvariate(0.0, THINK_SIGMA) * think
        if rng.random() < AWAY[0]:
            gap += rng.uniform(*AWAY[1]) * MINUTE
        self.at(self.now + gap, "turn", n)

    def closed(self, n: int) -> None:
        """A morning note goes out (to review); a model update rewrites 1..3 tabs of the
        model and often ends in a flash note (to review)."""
        chat, rng = self.chats[n], self.rng
        if chat.kind == "model":
            c = self.docs[chat.about[0]].company
            tabs = self.companies[c].tabs
            new = list(tabs.current)
            edit = sorted(rng.sample(range(len(new)), min(len(new), rng.randint(*TAB_EDITS))))
            for k in edit:
                new[k] = self.new(max(100, round(new[k][1] * rng.uniform(0.9, 1.15))))
            tabs.versions.append((self.now, new))
            self.tab_edits.append((self.now, c, edit))
        if chat.kind == "note" or (chat.kind == "model" and rng.random() < FLASH):
            note = self.new(clipped_length(rng, *NOTE_TEXT))
            self.at(self.now + rng.uniform(*REVIEW_AFTER) * MINUTE, "review", (n, note))

    def _on_review(self, arg: tuple[int, Segment]) -> None:
        """Compliance's first check: system prompt, manual, restricted list, note, cue."""
        head = [self.system["compliance"], *self.policy, *self.restricted.at(self.now)]
        self.reviews.append(Review(arg[0], arg[1], head))
        self.at(self.now, "check", len(self.reviews) - 1)

    def _on_check(self, n: int) -> None:
        """A compliance step; the second re-sends the first and its finding."""
        rev, rng = self.reviews[n], self.rng
        step = len(rev.sent)
        extra = [rev.note] if step == 0 else [rev.note, self.review_cues[0], rev.finding]
        segs = [*rev.head, *extra, self.review_cues[step]]
        rev.sent.append(self.emit("compliance", n, step, segs))
        out = clipped_length(rng, *REVIEW_OUT)
        if step == 0:
            rev.finding = self.new(out)
            self.at(self.now + tokens(segs) / PREFILL + out / DECODE + 1, "check", n)
