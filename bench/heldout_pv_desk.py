"""bench.heldout's ``pv_intake`` shape, the people's side: a reviewer and the model writing the
narrative of each serious case over its source and extraction, PSUR section drafting over the
product's label and the line listing of its cases at the data lock point, safety physicians'
signal-detection chats over the label and the signal dossier (its table refreshed nightly),
replies to regulators' queries over the letter, the label and the cases they ask about, label
(SmPC) lookups, and one-off requests. See bench/heldout_pv_intake.py's docstring for the
numbers."""

from __future__ import annotations

import random

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_meeting_parts import poisson
from bench.heldout_pv_cases import Cases
from bench.heldout_pv_world import HOUR, INTAKE_HOURS, OFFICE_HOURS, PRODUCTS, hour_at

# kind -> (system prompt tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"narrative": (800, (3, 0.5, 1, 8), (60, 0.9, 10, 600), (650, 0.35, 250, 1500),
                       (150.0, 0.8)),
         "psur": (1000, (5, 0.5, 2, 12), (200, 0.9, 30, 1500), (700, 0.4, 250, 1800),
                  (180.0, 0.8)),
         "signal": (700, (4, 0.6, 1, 12), (70, 0.8, 10, 500), (350, 0.5, 80, 1200),
                    (90.0, 0.9)),
         "regulator": (900, (3, 0.5, 2, 6), (120, 0.8, 20, 800), (600, 0.4, 200, 1500),
                       (240.0, 0.8)),
         "label": (500, (1, 0.5, 1, 3), (40, 0.8, 8, 300), (200, 0.5, 50, 600), (45.0, 0.8)),
         "oneoff": (300, (1, 0.6, 1, 4), (250, 1.2, 10, 4000), (300, 0.6, 30, 1500),
                    (60.0, 1.0))}
# kind -> (sessions a day at scale 1.0, hour profile (UTC))
DAILY = {"signal": (24, OFFICE_HOURS), "regulator": (6, OFFICE_HOURS),
         "label": (180, INTAKE_HOURS), "oneoff": (160, INTAKE_HOURS)}
STYLE = 2200  # tokens of the narrative style guide (template, wording conventions)
NARRATIVE_DELAY = (2 * HOUR, 0.8, 0.3 * HOUR, 20 * HOUR)  # from the intake to the narrative
PSURS = (1, 2)  # PSUR projects under way (by seed)
PSUR_GUIDE = 1500  # tokens of the PSUR section guidance
PSUR_SESSIONS = 5  # drafting sessions a day per project at scale 1.0
LISTING = (110, 0.4, 40, 250)  # cases in a PSUR's line listing (not scaled)
LINE = (120, 0.3, 60, 300)  # tokens of a case's line
LETTER = (1500, 0.5, 400, 5000)  # tokens of a regulator's query letter
QUERY_CASES = (8, 25)  # cases the query asks about
RATE = 40.0  # tokens a second a reply decodes at
MAX_CONTEXT = 48000  # tokens of a chat's context that end it


# a Chat's owner: a case for narrative, a project for psur, else a product; what it holds
# fixed: narrative, the case's texts; regulator, the letter, then the cases


class Desk(Cases):
    """The whole replica: the world and the case pipeline (``Cases``) and the people's chats."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.chat_system = {k: self.new(v[0]) for k, v in CHATS.items()}
        self.style, self.psur_guide = self.new(STYLE), self.new(PSUR_GUIDE)
        self.chats: list[Chat] = []
        self.psurs = [(p, [self.new(clipped_length(rng, *LINE)) for _ in
                           range(clipped_length(rng, *LISTING))])
                      for p in rng.sample(range(PRODUCTS), rng.randint(*PSURS))]
        for day in (0, 1):
            for n in range(len(self.psurs)):
                self.daily(day, PSUR_SESSIONS, OFFICE_HOURS, ("psur", n))
            for kind, (rate, hours) in DAILY.items():
                self.daily(day, rate, hours, (kind, -1))

    def daily(self, day: int, rate: float, hours: tuple, payload: tuple[str, int]) -> None:
        """Poisson(rate x scale) chats opening on ``day`` at hours by ``hours``."""
        for _ in range(poisson(self.rng, rate * self.scale)):
            self.at(hour_at(self.rng, hours, day), "open", payload)

    def serious_case(self, c: int) -> None:
        """A serious case's narrative, once a reviewer is on shift after a delay."""
        t = self.now + clipped_length(self.rng, *NARRATIVE_DELAY)
        while OFFICE_HOURS[int(t // HOUR) % 24] < 0.3:
            t = (t // HOUR + 1) * HOUR + self.rng.uniform(0, 0.5) * HOUR
        self.at(t, "open", ("narrative", c))

    def head(self, chat: Chat) -> list[Segment]:
        """What a chat's turn sends before the history."""
        sys = self.chat_system[chat.kind]
        if chat.kind == "narrative":
            return [sys, self.style, *chat.fixed]
        if chat.kind == "psur":
            p, listing = self.psurs[chat.owner]
            return [sys, self.psur_guide, *self.label(p), *listing]
        if chat.kind == "signal":
            return [sys, *self.label(chat.owner), *self.dossiers[chat.owner].at(self.now)]
        if chat.kind == "regulator":
            return [sys, chat.fixed[0], *self.label(chat.owner), *chat.fixed[1:]]
        if chat.kind == "label":
            return [sys, *self.label(chat.owner)]
        return [sys]

    def _owner(self, kind: str, owner: int) -> tuple[int, list[Segment]]:
        """A new chat's owner and fixed content: signal chats pick a product under review,
        regulator queries and label lookups one by weight."""
        if kind == "narrative":
            case = self.cases[owner]
            return owner, [case.source, *case.outputs]
        if kind == "signal":
            return self.rng.choice(self.signals), []
        if kind == "regulator":
            p = self.by_weight()
            pool = [("prior", i) for i in range(len(self.products[p].prior))]
            pool += [("case", x) for x in self.products[p].cases if self.cases[x].outputs]
            picked = self.rng.sample(pool, min(len(pool), self.rng.randint(*QUERY_CASES)))
            letter = self.new(clipped_length(self.rng, *LETTER))
            return p, [letter, *(self.candidate_text(p, x) for x in picked)]
        return (self.by_weight() if kind == "label" else owner), []

    def _on_open(self, payload: tuple[str, int]) -> None:
        kind, owner = payload
        owner, fixed = self._owner(kind, owner)
        self.chats.append(Chat(kind, owner, clipped_length(self.rng, *CHATS[kind][1]), fixed))
        self._on_turn(len(self.chats) - 1)

    def _on_turn(self, n: int) -> None:
        chat_turn(self, n, CHATS[self.chats[n].kind], MAX_CONTEXT, RATE)


def chat_turn(state, n: int, spec: tuple, max_context: int, rate: float) -> bool:
    """Turn ``n`` of ``state.chats`` (a ClockedState with ``head``): the head, the history,
    the message; the reply joins the history. ``spec`` is the kind's row of a CHATS table,
    (.., .., message, reply, pause). The next turn comes after the reply's decoding at
    ``rate`` tokens a second and the person's pause, while the context stays under
    ``max_context`` tokens. Whether one was scheduled (the desks of pv_intake, sales_crm
    and tax_prep)."""
    chat, rng = state.chats[n], state.rng
    _, _, message, reply, pause = spec
    msg = state.new(clipped_length(rng, *message))
    segs, out = state.turn(chat, state.head(chat), msg, reply, (chat.kind, n, len(chat.sent)))
    if chat.turns > 0 and sum(t for _, t in segs) + out[1] < max_context:
        gap = out[1] / rate + rng.lognormvariate(0.0, pause[1]) * pause[0]
        state.at(state.now + gap, "turn", n)
        return True
    return False
