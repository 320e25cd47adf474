"""bench.heldout's ``airline_ops`` shape, the people's side: the customer-service agent
(policy sections retrieved by the passenger's intent, the booking record fetched as a tool
result, chats that come back after a rebooking with the new record), its disruption mode
(the notice as last issued, the flight's status and the record rendered live each turn),
operations controllers' copilot sessions over the hub's board, the loyalty-program Q&A over
the terms as they stand, and one-off content: contact-center after-call summaries,
free-text complaints, travel agencies' emails. See bench/heldout_airline_ops.py's docstring
for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_air_ops import Irrop, Ops
from bench.heldout_air_world import HUBS, OPS_HOURS, PAX_HOURS
from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_meeting_parts import pick
from bench.heldout_recruit_parts import DAY, HOUR, MINUTE

# kind -> (system tokens, turns, message, reply, pause (median s, sigma), a day at scale 1.0)
CHATS = {"agent": (2200, (3, 0.6, 1, 10), (35, 0.8, 4, 400), (140, 0.5, 30, 600),
                   (35.0, 0.8), 100),
         "rebook": (0, (2, 0.4, 1, 4), (25, 0.7, 4, 200), (160, 0.4, 60, 500), (30.0, 0.8), 0),
         "ops": (1800, (5, 0.5, 2, 14), (60, 0.8, 15, 400), (300, 0.5, 80, 1000),
                 (120.0, 1.0), 20),
         "loyalty": (800, (2, 0.6, 1, 5), (30, 0.8, 5, 200), (150, 0.5, 50, 500),
                     (30.0, 0.8), 100)}
BUSY = 1.25  # passenger-facing volumes on the holiday seeds
# intent -> (share, topics retrieved: a policy (sections by Zipf), "fare" (the PNR's fare
# rules, whole), "terms" (loyalty terms sections); sections of a policy, comes back after a
# rebooking)
INTENTS = {"change": (0.25, ("fare", "change"), 2, 0.25), "baggage": (0.22, ("baggage",), 3, 0),
           "refund": (0.12, ("fare", "refund"), 2, 0.25), "irrops": (0.12, ("irrops",), 3, 0.25),
           "assist": (0.08, ("assist",), 2, 0), "upgrade": (0.11, ("terms",), 2, 0),
           "status": (0.10, (), 0, 0)}
RETRIEVE = 0.15  # later agent turns on a new intent (sections retrieved again)
BACK = ((20.0, 180.0), (1, 3))  # an agent chat comes back: minutes later, turns
REBOOK_SECTIONS = 2  # irrops policy sections in the disruption mode's head (fixed)
REBOOK_BACK = (0.2, (30.0, 240.0), (1, 2))  # rebooked passengers who come back: minutes, turns
OLD_PNR = 0.25  # agent chats on a booking seen before (else a new one)
TOOL = (0.3, (450, 0.7, 120, 2000))  # ops turns with a tool result (flight, tail, crew)
OPS_STORM = 1.5  # extra ops sessions an hour at scale 1.0 at a disrupted hub
PROFILE = (250, 0.4, 120, 500)  # tokens of a loyalty member's profile
TERMS_PICKS = (2, 3)  # terms sections a loyalty session retrieves (Zipf(1) by section)
MAX_CONTEXT = 32000  # tokens of a chat's context that end it
RATE = 40.0  # tokens a second a reply decodes at
# one-offs: kind -> (system, shared part (dispositions, taxonomy; email: none), text, cue,
# a day at scale 1.0)
ONE_OFFS = {"acw": (700, 1400, (1500, 0.6, 400, 7000), 40, 240),
            "complaint": (600, 1100, (600, 0.7, 150, 3000), 35, 240),
            "email": (500, 0, (700, 0.7, 200, 4000), 30, 250)}
CALL_TYPES = (0.3, 0.2, 0.15, 0.15, 0.1, 0.1)  # acw: bookings, disruption, baggage, refunds,
# loyalty, other (a summary template each, 200..500 tokens)
ACW_STORM = 30.0  # extra calls an hour at scale 1.0 at a disrupted hub, to 3 h after
COMPLAINT_AFTER = 12.0  # extra complaints an hour at scale 1.0 for a day after a disruption
AGENCIES = (60, 1.1, (550, 0.4, 300, 900))  # travel agencies, Zipf, profile tokens
OFFICE = (0.8, 1.0, 1.0, 1.0, 0.8, 0.9, 1.0, 1.0, 0.7)  # local 09..17


@dataclass
class AirChat(Chat):
    """A Chat (owner: the PNR for agent and rebook, the hub for ops and loyalty; fixed: the
    irrops sections for rebook, the member's profile for loyalty), its intent, the sections
    retrieved (agent) or the terms sections' indices (loyalty), the disruption (rebook),
    whether it comes back after a rebooking, and the turns it came back at."""

    intent: str = ""
    retrieved: list[Segment] = field(default_factory=list)
    picks: list[int] = field(default_factory=list)
    irrop: int = -1
    back: bool = False
    returns: list[int] = field(default_factory=list)


class Desk(Ops):
    """The whole replica: the world, the operations jobs (``Ops``) and the people's side."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        new, busy = self.new, BUSY if scenario == "holiday" else 1.0
        self.chat_system = {k: new(v[0]) for k, v in CHATS.items()}
        self.chat_system["rebook"] = self.chat_system["agent"]
        self.one_off = {k: (new(v[0]), new(v[1]), new(v[3])) for k, v in ONE_OFFS.items()}
        self.call_templates = [new(rng.randint(200, 500)) for _ in CALL_TYPES]
        self.agencies = [new(clipped_length(rng, *AGENCIES[2])) for _ in range(AGENCIES[0])]
        self.chats: list[AirChat] = []
        self.daily(CHATS["agent"][5] * busy, PAX_HOURS, "agent")
        self.daily(CHATS["loyalty"][5] * busy, PAX_HOURS, "loyalty")
        self.daily(CHATS["ops"][5], OPS_HOURS, "ops")
        self.daily(ONE_OFFS["acw"][4] * busy, PAX_HOURS, "acw")
        self.daily(ONE_OFFS["complaint"][4] * busy, PAX_HOURS, "complaint")
        self.daily(ONE_OFFS["email"][4], (0,) * 9 + OFFICE, "email")
        for x in self.irrops:
            if x.kind != "mechanical":
                for h in x.hubs:
                    self.desk_surge(x, h, 1.0 if len(x.hubs) == 1 else HUBS[h][1])

    def desk_surge(self, x: Irrop, h: int, share: float) -> None:
        """What a weather event or an outage adds at hub ``h``: ops sessions and calls
        through it (and 3 h after), complaints for a day after it."""
        self.spread(OPS_STORM * share, x.start, x.end, "ops", h)
        self.spread(ACW_STORM * share, x.start, x.end + 3 * HOUR, "acw", h)
        self.spread(COMPLAINT_AFTER * share, x.end, x.end + DAY, "complaint", h)

    def retrieve(self, intent: str, p: int) -> list[Segment]:
        """The sections an intent's retrieval returns, by score: a policy's by Zipf(1) over
        its sections, the PNR's fare rules whole, loyalty terms sections as they stand."""
        rng, out = self.rng, []
        _, topics, k, _ = INTENTS[intent]
        for topic in topics:
            if topic == "fare":
                out += self.fare_rules[self.pnrs[p].fare]
                continue
            secs = self.terms.at(self.now) if topic == "terms" else self.policies[topic]
            pool = list(range(len(secs)))
            for _ in range(min(k, len(pool))):
                i = rng.choices(pool, [1 / (j + 1) for j in pool])[0]
                pool.remove(i)
                out.append(secs[i])
        return out

    def head(self, chat: AirChat) -> list[Segment]:
        """What a chat's turn sends before the history."""
        sys = self.chat_system[chat.kind]
        if chat.kind == "agent":
            return [sys, *chat.retrieved]
        if chat.kind == "rebook":
            x, f = self.irrops[chat.irrop], self.pnrs[chat.owner].flight
            return [sys, *chat.fixed, *x.notice.at(self.now),
                    *self.flights[f].status.at(self.now), self.record(chat.owner)]
        if chat.kind == "ops":
            hub = self.hubs[chat.owner]
            return [sys, hub.head, *hub.board.at(self.now)]
        secs = self.terms.at(self.now)
        return [sys, *self.terms_summary.at(self.now), *(secs[i] for i in chat.picks),
                *chat.fixed]

    def start(self, chat: AirChat) -> None:
        self.chats.append(chat)
        self.at(self.now, "turn", len(self.chats) - 1)

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, the message; the reply joins the history. A later
        agent turn may be on a new intent (sections retrieved again); an ops turn may carry
        a tool result. At the end a chat may come back after a rebooking."""
        chat, rng = self.chats[n], self.rng
        _, _, message, reply, pause, _ = CHATS[chat.kind]
        if chat.kind == "agent" and chat.sent and rng.random() < RETRIEVE:
            chat.intent = pick(rng, tuple((k, v[0]) for k, v in INTENTS.items()))
            chat.retrieved = self.retrieve(chat.intent, chat.owner)
        if chat.kind == "ops" and chat.sent and rng.random() < TOOL[0]:
            chat.history.append(self.new(clipped_length(rng, *TOOL[1])))
        msg = self.new(clipped_length(rng, *message))
        segs, out = self.turn(chat, self.head(chat), msg, reply, (chat.kind, n, len(chat.sent)))
        size = sum(t for _, t in segs) + out[1]
        if chat.turns > 0 and size < MAX_CONTEXT:
            gap = out[1] / RATE + rng.lognormvariate(0.0, pause[1]) * pause[0]
            self.at(self.now + gap, "turn", n)
        elif chat.back and size < MAX_CONTEXT:
            chat.back = False
            self.moved(chat.owner)
            lo_hi, turns = (BACK[0], BACK[1]) if chat.kind == "agent" else REBOOK_BACK[1:]
            chat.turns = rng.randint(*turns)
            self.at(self.now + rng.uniform(*lo_hi) * MINUTE, "back", n)
        elif chat.kind == "rebook":
            self.moved(chat.owner)

    def moved(self, p: int) -> None:
        """PNR ``p`` is rebooked onto a later departure of its hub (its flight if none)."""
        f = self.pnrs[p].flight
        later = self.upcoming(self.now + HOUR, self.now + 30 * HOUR, {self.flights[f].hub})
        self.rebook(p, self.rng.choice(later) if later else f)

    def _on_back(self, n: int) -> None:
        """A chat comes back after its rebooking: an agent chat gets the new record as a
        tool result in its history; the disruption mode renders it live anyway."""
        chat = self.chats[n]
        chat.returns.append(len(chat.sent))
        if chat.kind == "agent":
            chat.history.append(self.record(chat.owner))
        self._on_turn(n)

    def _on_agent(self, h: int) -> None:
        """A passenger of hub ``h``'s region asks the agent: a booking seen before or a new
        one on a departure of the next two days; the intent's sections retrieved."""
        rng = self.rng
        if self.pnrs and rng.random() < OLD_PNR:
            p = rng.randrange(len(self.pnrs))
        else:
            p = self.new_pnr(rng.choice(self.upcoming(self.now - 6 * HOUR, self.now + 2 * DAY,
                                                      {h}) or [0]))
        intent = pick(rng, tuple((k, v[0]) for k, v in INTENTS.items()))
        self.agent_chat(p, intent)

    def agent_chat(self, p: int, intent: str) -> None:
        """An agent chat on PNR ``p``: its record is the first tool result of the history."""
        rng = self.rng
        chat = AirChat("agent", p, clipped_length(rng, *CHATS["agent"][1]), [], intent=intent,
                       retrieved=self.retrieve(intent, p))
        chat.history.append(self.record(p))
        chat.back = rng.random() < INTENTS[intent][3]
        self.start(chat)

    def _on_follow(self, p: int) -> None:
        """A re-accommodated passenger asks the agent about the change."""
        self.agent_chat(p, "change")

    def _on_rebook(self, arg: tuple[int, int]) -> None:
        """A passenger of a disrupted flight writes in: the disruption mode's chat."""
        (n, f), rng = arg, self.rng
        x = self.irrops[n]
        p = self.new_pnr(f)
        fixed = self.policies["irrops"][:REBOOK_SECTIONS]
        chat = AirChat("rebook", p, clipped_length(rng, *CHATS["rebook"][1]), fixed, irrop=n,
                       back=rng.random() < REBOOK_BACK[0])
        x.chats.append(len(self.chats))
        self.start(chat)

    def _on_ops(self, h: int) -> None:
        """A controller at hub ``h`` opens a copilot session over the board."""
        self.start(AirChat("ops", h, clipped_length(self.rng, *CHATS["ops"][1]), []))

    def _on_loyalty(self, h: int) -> None:
        """A member asks about the program: the summary and the terms sections retrieved,
        as they stand at each turn, then the member's profile."""
        rng = self.rng
        picks = sorted(rng.sample(range(len(self.terms.current)), rng.randint(*TERMS_PICKS)))
        chat = AirChat("loyalty", h, clipped_length(rng, *CHATS["loyalty"][1]),
                       [self.new(clipped_length(rng, *PROFILE))], picks=picks)
        self.start(chat)

    def _on_acw(self, h: int) -> None:
        """An after-call summary: the dispositions, the call type's template, the
        transcript."""
        sys, shared, cue = self.one_off["acw"]
        kind = self.rng.choices(range(len(CALL_TYPES)), CALL_TYPES)[0]
        text = self.new(clipped_length(self.rng, *ONE_OFFS["acw"][2]))
        self.emit("acw", h, kind, [sys, shared, self.call_templates[kind], text, cue])

    def _on_complaint(self, h: int) -> None:
        """A free-text complaint to triage: the taxonomy, the text."""
        sys, shared, cue = self.one_off["complaint"]
        text = self.new(clipped_length(self.rng, *ONE_OFFS["complaint"][2]))
        self.emit("complaint", h, 0, [sys, shared, text, cue])

    def _on_email(self, h: int) -> None:
        """A travel agency's email (agencies by Zipf): the agency's profile, the email."""
        rng, (count, s, _) = self.rng, AGENCIES
        a = rng.choices(range(count), [1 / (k + 1) ** s for k in range(count)])[0]
        text = self.new(clipped_length(rng, *ONE_OFFS["email"][2]))
        sys, _, cue = self.one_off["email"]
        self.emit("email", a, h, [sys, self.agencies[a], text, cue])
