"""bench.heldout's ``tax_prep`` shape, the people's side: preparers' sessions over a client's
return (the profile, last year's return and every record extracted so far, then the growing
history), the rules assistant quoting publication sections and the firm's memo, amended-return
sessions re-opening an earlier year's file, quick sessions with walk-in clients, and one-off
questions. The seed's scenario: the "surge" of walk-ins on the deadline's eve and the "notice"
(new IRS guidance that becomes the hottest section) live here. See bench/heldout_tax_prep.py's
docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_pv_desk import chat_turn
from bench.heldout_taxp_jobs import Jobs
from bench.heldout_taxp_world import HOUR, MINUTE, OFFICE, PUB

# kind -> (system tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"prep": (1800, (7, 0.6, 2, 25), (70, 1.0, 8, 1500), (320, 0.5, 60, 1500),
                  (90.0, 1.0)),
         "rules": (900, (1, 0.6, 1, 5), (60, 0.7, 10, 400), (380, 0.4, 100, 1200), (50.0, 0.8)),
         "amend": (1100, (4, 0.5, 2, 10), (60, 0.8, 10, 600), (300, 0.5, 60, 1200),
                   (80.0, 0.9)),
         "walkin": (1200, (5, 0.4, 3, 10), (40, 0.8, 8, 300), (200, 0.5, 50, 700), (40.0, 0.8)),
         "oneoff": (350, (1, 0.0, 1, 1), (90, 1.0, 10, 800), (250, 0.6, 30, 1000), (1.0, 0.1))}
RATES = {"prep": 45.0, "rules": 70.0, "walkin": 9.0, "oneoff": 260.0}  # a day at scale 1.0
FINISH = 0.45  # prep sessions after which the return is finished (all documents in)
WALKIN_FINISH = 0.6
RETRIEVED = (1, 4)  # publication sections a rules session quotes
MEMO_QUOTED = ((0, 0.4), (1, 0.4), (2, 0.2))  # memo sections it quotes too
AMEND_SESSIONS = (1, 3)  # sessions per amended-return file over the two days
WALKIN_DOCS = (1, 4)
WALKIN_WAIT = (25 * MINUTE, 45 * MINUTE)  # from walking in to the session (documents read)
SURGE = ((1, 12, 22), 8.0)  # (day, from hour, to hour), walk-in rate multiplier
NOTICE_AT = (32.0, 34.0)  # hours: the "notice" scenario's new guidance is published
NOTICE_WEIGHT = 3.0  # its weight, as a share of the top section's
RATE = 40.0  # tokens a second a reply decodes at
MAX_CONTEXT = 32000  # tokens of a chat's context that end it


@dataclass
class TaxChat(Chat):
    """A Chat (owner: the client, the amended file, or the session for rules and oneoff;
    fixed: the quoted publication sections for rules) and the memo sections it quotes."""

    memo: list[int] = field(default_factory=list)


class Desk(Jobs):
    """The whole replica: the world, the jobs and the people's chats."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        self.chat_system = {k: self.new(v[0]) for k, v in CHATS.items()}
        self.chats: list[TaxChat] = []
        self.notice: tuple[float, int] | None = None
        for kind in ("prep", "rules", "oneoff"):
            self.daily(RATES[kind], kind)
        self.daily(RATES["walkin"], "walkin", boost=self.surge)
        for n in range(len(self.amends)):
            for _ in range(rng.randint(*AMEND_SESSIONS)):
                h = rng.choices(range(48), OFFICE * 2)[0]
                self.at((h + rng.random()) * HOUR, "amend", n)
        if scenario == "notice":
            self.at(rng.uniform(*NOTICE_AT) * HOUR, "notice", None)

    def surge(self, day: int, hour: int) -> float:
        """The walk-in rate's multiplier (the "surge" scenario's deadline-eve rush)."""
        (d, lo, hi), x = SURGE
        return x if self.scenario == "surge" and day == d and lo <= hour < hi else 1.0

    def head(self, chat: TaxChat) -> list[Segment]:
        """What a chat's turn sends before the history."""
        sys = self.chat_system[chat.kind]
        if chat.kind in ("prep", "walkin"):
            c = self.clients[chat.owner]
            prior = c.prior if chat.kind == "prep" else []
            return [sys, c.profile, *prior, *self.records(chat.owner)]
        if chat.kind == "amend":
            return [sys, *self.amends[chat.owner]]
        if chat.kind == "rules":
            memo = self.memo.at(self.now)
            return [sys, *chat.fixed, *(memo[k] for k in chat.memo)]
        return [sys]

    def start(self, kind: str, owner: int, fixed=None, memo=None) -> None:
        """A chat of ``kind`` on ``owner`` starts now."""
        turns = clipped_length(self.rng, *CHATS[kind][1])
        self.chats.append(TaxChat(kind, owner, turns, fixed or [], memo=memo or []))
        self.at(self.now, "turn", len(self.chats) - 1)

    def _on_turn(self, n: int) -> None:
        if not chat_turn(self, n, CHATS[self.chats[n].kind], MAX_CONTEXT, RATE):
            self.ended(self.chats[n])

    def ended(self, chat: TaxChat) -> None:
        """A preparer's session may finish the return (when every document is in)."""
        c = self.clients[chat.owner] if chat.kind in ("prep", "walkin") else None
        if c is None or c.draft is not None or c.extended:
            return
        if any(self.docs[d].done > self.now for d in c.docs):
            return
        odds = FINISH if chat.kind == "prep" else WALKIN_FINISH
        if self.rng.random() < odds:
            self.finished(chat.owner)

    def _on_prep(self, _) -> None:
        """A preparer opens a client in progress with records in."""
        clients = self.active()
        if clients:
            c = self.rng.choice(clients)
            self.clients[c].sessions += 1
            self.start("prep", c)

    def _on_rules(self, _) -> None:
        """A question to the rules assistant: sections retrieved by weight (hot ones first
        more often), some memo sections."""
        rng = self.rng
        picks: list[int] = []
        while len(picks) < rng.randint(*RETRIEVED):
            k = rng.choices(range(len(self.library)), self.weights)[0]
            if k not in picks:
                picks.append(k)
        m = rng.choices([k for k, _ in MEMO_QUOTED], [w for _, w in MEMO_QUOTED])[0]
        memo = sorted(rng.sample(range(len(self.memo.current)), m))
        self.start("rules", len(self.chats), [self.library[k] for k in picks], memo)

    def _on_amend(self, n: int) -> None:
        self.start("amend", n)

    def _on_oneoff(self, _) -> None:
        self.start("oneoff", len(self.chats))

    def _on_walkin(self, _) -> None:
        """A walk-in client: documents scanned at once, a quick session once they are read."""
        c = self.client(self.now, False, self.rng.randint(*WALKIN_DOCS), walkin=True)
        self.at(self.now + self.rng.uniform(*WALKIN_WAIT), "walkin_session", c)

    def _on_walkin_session(self, c: int) -> None:
        self.start("walkin", c)

    def _on_notice(self, _) -> None:
        """New IRS guidance: a new section, at once the hottest in the index."""
        self.library.append(self.new(clipped_length(self.rng, *PUB)))
        self.weights.append(NOTICE_WEIGHT * max(self.weights))
        self.notice = (self.now, len(self.library) - 1)

