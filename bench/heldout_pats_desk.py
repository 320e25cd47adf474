"""bench.heldout's ``patent_search`` shape, the attorneys' side: office-action responses drafted
over several turns that re-read the examiner's rejection and the cited art (some in two
sittings hours apart), claim amendments that follow many of them and make a new version of
the matter's claims (then a quick re-screen of its key references against them), and
attorneys' chats over a matter's claims with a reference or two pinned. See
bench/heldout_patent_search.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_meeting_parts import poisson
from bench.heldout_pats_jobs import BATCH, PENDING, Jobs
from bench.heldout_pats_world import DAY, HOUR, MINUTE

# kind -> (turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"oa": ((6, 0.5, 3, 16), (90, 0.8, 15, 700), (550, 0.5, 150, 1800), (150.0, 0.9)),
         "amend": ((2, 0.4, 1, 4), (120, 0.6, 30, 500), (600, 0.4, 250, 1500), (120.0, 0.8)),
         "chat": ((5, 0.7, 1, 20), (50, 0.9, 5, 600), (280, 0.6, 40, 1200), (90.0, 1.0))}
SESSION = ((0.5, (1.0, 6.0)), 0.3)  # same day (hours after arrival), next day; else later
BREAK = (0.15, (1.0, 4.0))  # a response turn after which the attorney breaks, for hours
AMEND = 0.65  # responses that amend the claims
RESCREEN = (0.5, (10.0, 90.0))  # amendments followed by a re-screen, minutes after
CHATS_A_DAY = {"pros": 36.0, "lit": 28.0}  # attorneys' chats at scale 1.0, office hours
LIT_CHAT = {"pros": 0.05, "lit": 0.35}  # of them on a litigation
PINNED = ((0, 0.4), (1, 0.4), (2, 0.2))  # key references pinned to a chat
RATE = 40.0  # tokens a second a reply decodes at
MAX_CONTEXT = 40000  # tokens of a chat's context that end it


@dataclass
class PatChat(Chat):
    """A Chat (owner: the matter; ``fixed`` unused): the office action it answers (-1 for
    none), the references pinned to it, when it breaks (turn numbers), the claim version it
    made (an amendment)."""

    oa: int = -1
    pinned: list[int] = field(default_factory=list)
    breaks: list[int] = field(default_factory=list)
    made: float | None = None


class Desk(Jobs):
    """The whole replica: the world, the jobs (``Jobs``) and the attorneys' chats."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.chats: list[PatChat] = []
        self.rescreens: list[tuple[int, float]] = []  # (matter, the amendment's time)
        pros = [m for m, x in enumerate(self.matters) if x.kind == "pros"]
        for _ in range(max(2, round(PENDING * scale))):
            m = rng.choice(pros)
            oa = self.office_action(m, -rng.uniform(1, 60) * DAY)
            self.at_local(rng.choice((0, 1)), self.office_hour(), self.matters[m].tz,
                          "session", oa)
        for d in (0, 1):
            for _ in range(poisson(rng, CHATS_A_DAY[self.modes[d]] * scale)):
                self.at(d * DAY + self.office_hour() * HOUR, "chat", d)

    def oa_arrived(self, oa: int) -> None:
        """A response session later that day (half), the next day (30 %), else after the
        clock; at the attorney's office hours."""
        rng, day = self.rng, int(self.now // DAY)
        tz = self.matters[self.oas[oa].matter].tz
        u = rng.random()
        if u < SESSION[0][0]:
            self.at(self.now + rng.uniform(*SESSION[0][1]) * HOUR, "session", oa)
        elif u < SESSION[0][0] + SESSION[1]:
            self.at_local(day + 1, self.office_hour(), tz, "session", oa)

    def head(self, kind: str, chat: PatChat | None = None) -> list[Segment]:
        """The firm's prompt and instruction; for a chat, then what its turns send before the
        history: the claims as they stand and the rejection (and for a response the cited
        art as it reads now), or the pinned references."""
        out = super().head(kind)
        if chat is None:
            return out
        out += self.claim_segs(chat.owner)
        if kind == "chat":
            return out + [s for d in chat.pinned for s in self.shown(d)]
        out += self.oas[chat.oa].rejection
        return out + self.cited_text(chat.oa) if kind == "oa" else out

    def begin(self, chat: PatChat) -> None:
        self.chats.append(chat)
        self.at(self.now, "turn", len(self.chats) - 1)

    def _on_session(self, oa: int) -> None:
        """An attorney drafts the response to office action ``oa``."""
        m = self.oas[oa].matter
        chat = PatChat("oa", m, clipped_length(self.rng, *CHATS["oa"][0]), [], oa=oa)
        self.oas[oa].sessions.append(len(self.chats))
        self.begin(chat)

    def _on_chat(self, day: int) -> None:
        """An attorney's chat over a matter (a litigation of the day some of the time)."""
        rng = self.rng
        lits = self.lit_days[day] or [m for m, x in enumerate(self.matters) if x.kind == "lit"]
        lit = rng.random() < LIT_CHAT[self.modes[day]]
        m = rng.choice(lits) if lit else self.matter_by_weight("pros")
        keys = self.matters[m].keys
        pinned = rng.sample(keys[:5], min(len(keys), rng.choices(*zip(*PINNED))[0]))
        for d in pinned:
            self.translate(d)
        turns = clipped_length(rng, *CHATS["chat"][0])
        self.begin(PatChat("chat", m, turns, [], pinned=pinned))

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, a message; the reply joins the history. A response
        may break for hours; a finished one may lead to an amendment."""
        chat, rng = self.chats[n], self.rng
        turns, message, reply, pause = CHATS[chat.kind]
        msg = self.new(clipped_length(rng, *message))
        segs, out = self.turn(chat, self.head(chat.kind, chat), msg, reply,
                              (chat.kind, n, len(chat.sent)))
        if chat.turns > 0 and sum(t for _, t in segs) + out[1] < MAX_CONTEXT:
            gap = out[1] / RATE + rng.lognormvariate(0.0, pause[1]) * pause[0]
            if chat.kind == "oa" and rng.random() < BREAK[0]:
                chat.breaks.append(len(chat.sent))
                gap += rng.uniform(*BREAK[1]) * HOUR
            self.at(self.now + gap, "turn", n)
        elif chat.kind == "oa" and rng.random() < AMEND:
            turns = clipped_length(rng, *CHATS["amend"][0])
            self.at(self.now + gap_after(rng, out[1]), "amend",
                    PatChat("amend", chat.owner, turns, [], oa=chat.oa))
        elif chat.kind == "amend":
            self.amend(chat)

    def _on_amend(self, chat: PatChat) -> None:
        self.begin(chat)

    def amend(self, chat: PatChat) -> None:
        """The amendment lands: a new version of the matter's claims (an independent claim
        rewritten, up to two of its dependents cancelled, up to two new ones at the end);
        half the time its key references are screened again against it."""
        rng, matter = self.rng, self.matters[chat.owner]
        claims = list(matter.claims(self.now))
        indep = [i for i, c in enumerate(claims) if c.indep]
        i = indep[0] if rng.random() < 0.7 else rng.choice(indep)
        claims[i] = self.claim(True)
        deps = 0
        while i + 1 + deps < len(claims) and not claims[i + 1 + deps].indep:
            deps += 1
        del claims[i + 1:i + 1 + min(deps, rng.randint(0, 2))]
        claims += [self.claim(False) for _ in range(rng.randint(0, 2))]
        matter.versions.append((self.now, claims))
        chat.made = self.now
        if rng.random() < RESCREEN[0]:
            self.rescreens.append((chat.owner, self.now))
            self.at(self.now + rng.uniform(*RESCREEN[1]) * MINUTE, "search",
                    (chat.owner, "screen", BATCH["screen"], self.now))


def gap_after(rng: random.Random, reply: int) -> float:
    """Seconds from a response's last turn to the amendment: the reply, then 5..40 minutes."""
    return reply / RATE + rng.uniform(5, 40) * MINUTE
