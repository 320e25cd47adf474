"""bench.heldout's ``ci_triage`` shape, the developers' side and the bots a failure wakes: a
developer's follow-up chat on a triaged failure (the triage prompt and its answer, then the
history and a message, growing turn by turn), the flaky-test classifier reading a test's run
history as it stands, the code-owner router reading the repository's ownership file, and
one-off questions with pasted content. See bench/heldout_ci_triage.py's docstring for the
numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_ci_jobs import Jobs
from bench.heldout_ci_parts import MINUTE

SYSTEM = {"flaky": 700, "owners": 400, "oneoff": 350}
CUE = {"flaky": 45, "owners": 30}
FOLLOWUP = (0.18, (2.0, 40.0))  # failures (triage, storm) a developer asks about, minutes after
ANSWER = (350, 0.4, 120, 900)  # tokens of the triage's answer, the chat's first reply
TURNS = (2, 0.7, 1, 12)  # turns of a follow-up chat
MESSAGE = (40, 0.9, 5, 400)  # tokens of a developer's message
PASTE = (0.1, (1200, 0.7, 300, 5000))  # messages that paste more log, their tokens
REPLY = (250, 0.5, 60, 900)  # tokens of a chat reply
PAUSE = (60.0, 1.0)  # seconds between a reply's end and the next message (median, sigma)
RATE = 40.0  # tokens a second a reply decodes at
MAX_CONTEXT = 32000  # tokens of a chat's context that end it
FLAKY = (0.35, (3.0, 15.0))  # triage failures whose failing test is classified, minutes after
OWNERS = ({"triage": 0.45, "storm": 0.3}, (1.0, 5.0))  # failures routed, minutes after
PATHS = (90, 0.6, 30, 400)  # tokens of the changed paths and the failing test's path
ONEOFF = 90  # one-off questions a day at scale 1.0 (office hours)
PASTED = (800, 1.0, 60, 8000)  # tokens pasted into a one-off question
QUESTION = (40, 0.8, 8, 300)


@dataclass
class Chat:
    """A follow-up chat: the failure it is on, its head (the triage prompt and answer),
    turns left, the history and its request indices."""

    failure: int
    head: list[Segment]
    turns: int
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


class Desk(Jobs):
    """The whole replica: the world, the CI machinery (``Jobs``), the chats and the bots."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.desk_system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.desk_cue = {k: self.new(n) for k, n in CUE.items()}
        self.chats: list[Chat] = []
        self.flaky: list[tuple[int, int]] = []  # (test, request index)
        self.routed: list[tuple[int, int]] = []  # (failure, request index)
        self.daily(ONEOFF, "oneoff", None)

    def failed(self, n: int) -> None:
        """A triaged failure may get a follow-up chat, a flaky classification of its failing
        test (not a storm's: that test is not flaky) and an owner lookup."""
        rng, f = self.rng, self.failures[n]
        if f.kind not in ("triage", "storm"):
            return
        if rng.random() < FOLLOWUP[0]:
            self.at(self.now + rng.uniform(*FOLLOWUP[1]) * MINUTE, "chat", n)
        if f.kind == "triage" and rng.random() < FLAKY[0]:
            self.at(self.now + rng.uniform(*FLAKY[1]) * MINUTE, "flaky", n)
        if rng.random() < OWNERS[0][f.kind]:
            self.at(self.now + rng.uniform(*OWNERS[1]) * MINUTE, "route", n)

    def _on_chat(self, n: int) -> None:
        """A developer opens a chat on failure ``n``: the triage prompt and its answer."""
        f = self.failures[n]
        answer = self.new(clipped_length(self.rng, *ANSWER))
        self.chats.append(Chat(n, [*f.segs, answer], clipped_length(self.rng, *TURNS)))
        self._on_turn(len(self.chats) - 1)

    def _on_turn(self, c: int) -> None:
        """A turn: the head, the history, a message (now and then more pasted log); the
        reply joins the history; the next turn after the reply and a pause."""
        chat, rng = self.chats[c], self.rng
        paste = rng.random() < PASTE[0]
        msg = self.new(clipped_length(rng, *(PASTE[1] if paste else MESSAGE)))
        segs, out = self.turn(chat, chat.head, msg, REPLY, ("followup", c, len(chat.sent)))
        if chat.turns > 0 and sum(t for _, t in segs) + out[1] < MAX_CONTEXT:
            gap = out[1] / RATE + rng.lognormvariate(0.0, PAUSE[1]) * PAUSE[0]
            self.at(self.now + gap, "turn", c)

    def _on_flaky(self, n: int) -> None:
        """The classifier on failure ``n``'s failing test (one of the repository's flaky
        candidates by flakiness): system prompt, the test's header, its run history now."""
        repo = self.repos[self.prs[self.failures[n].owner].repo]
        if not repo.tests:
            return
        t = self.rng.choices(repo.tests, [self.tests[t].weight for t in repo.tests])[0]
        segs = [self.desk_system["flaky"], self.tests[t].header, *self.history(t),
                self.desk_cue["flaky"]]
        self.flaky.append((t, self.emit("flaky", t, n, segs)))

    def _on_route(self, n: int) -> None:
        """The owner router on failure ``n``: system prompt, the ownership file as it stands,
        the changed paths and the failing test's path."""
        r = self.prs[self.failures[n].owner].repo
        segs = [self.desk_system["owners"], *self.repos[r].owners.at(self.now),
                self.new(clipped_length(self.rng, *PATHS)), self.desk_cue["owners"]]
        self.routed.append((n, self.emit("owners", r, n, segs)))

    def _on_oneoff(self, _: object) -> None:
        """A developer's one-off question: system prompt, pasted content, the question."""
        rng = self.rng
        segs = [self.desk_system["oneoff"], self.new(clipped_length(rng, *PASTED)),
                self.new(clipped_length(rng, *QUESTION))]
        self.emit("oneoff", len(self.out), 0, segs)
