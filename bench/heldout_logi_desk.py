"""bench.heldout's ``logistics_dispatch`` shape, the people's side: dispatchers' chats over
their region's live board, customers' "where is my order" chats re-sending a shipment's
tracking record, drivers' chat threads translated message by message, and adjusters' claim
chats over a damaged shipment's file. See bench/heldout_logistics_dispatch.py's docstring
for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_logi_parts import DAY, HOUR, MINUTE, Network, sections

SYSTEM = {"board": 1800, "wismo": 1200, "translate": 500, "claim": 1600}  # system prompts
FAQ = (2800, 0.3, 1500, 4500)  # tokens of the customer bot's policies (600-token sections)
TERMS = (5500, 0.25, 3500, 8000)  # tokens of the liability terms a claim is judged by
GLOSSARY = (550, 0.3, 300, 900)  # tokens of the carrier's term glossary for translation
PAIR = (650, 0.3, 400, 900)  # tokens of a language pair's (and direction's) prompt
LANGS = (0.45, 0.2, 0.12, 0.1, 0.08, 0.05)  # drivers' languages by share (none is English)
CONTEXT = 4  # a translation carries the thread's last this many messages
TRANSLATE_CUE = 30
# kind -> (a day at scale 1.0, hour weights from its first hour, first hour)
DAILY = {"session": (14, (0.4, 0.9, 1.0, 1.0, 0.9, 0.8, 0.8, 0.9, 0.9, 0.8, 0.7, 0.7, 0.6,
                          0.5, 0.4, 0.4, 0.3), 5),
         "wismo": (120, (0.3, 0.6, 0.8, 0.9, 0.9, 1.0, 0.9, 0.8, 0.8, 0.8, 0.9, 1.0, 1.1, 1.2,
                         1.2, 1.0, 0.7, 0.4), 6),
         "thread": (100, (0.6, 1.0, 1.0, 0.9, 0.8, 0.8, 0.7, 0.8, 0.9, 0.9, 0.8, 0.7, 0.6,
                          0.5, 0.4, 0.3, 0.3, 0.2), 4),
         "claim": (10, (0.6, 1.0, 1.0, 0.9, 0.5, 0.8, 1.0, 0.9, 0.7, 0.4), 8)}
# kind -> turns, message tokens, reply tokens (median, sigma, lo, hi), seconds between turns
CHATS = {"board": ((8, 0.7, 2, 30), (40, 0.9, 6, 600), (220, 0.6, 30, 1000), (60, 600)),
         "wismo": ((2, 0.6, 1, 6), (20, 0.7, 4, 200), (120, 0.5, 30, 500), (20, 90)),
         "claim": ((5, 0.6, 2, 12), (60, 0.8, 8, 600), (300, 0.5, 60, 1200), (60, 480))}
AWAY = (0.1, (10.0, 40.0))  # dispatchers' turns after a break (minutes)
MAX_CONTEXT = 24000  # tokens of a chat's context that end it
THREAD = ((6, 0.6, 2, 20), (30, 0.7, 4, 200), (20.0, 240.0))  # messages, tokens, gaps
RECENT = (0.35, 0.15, DAY)  # wismo: a shipment with an exception in the last day, one asked
# about before (2 hours ago or more), else a new one
DAMAGED = 0.6  # claims on a shipment with a damage exception here (else one seen first now)
PHOTOS = ((1, 4), (350, 0.4, 150, 700))  # a claim's photo notes: count, tokens each


@dataclass
class Chat:
    """A chat: what it is about (the region for a board session, the shipment otherwise), its
    turns left, its fixed head (a claim's file; None where the head is read each turn), the
    history (messages and replies) and its request indices."""

    about: int
    turns: int
    fixed: list[Segment] | None = None
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


@dataclass
class Thread:
    """A driver's chat thread: region, language, messages left, the messages so far (each is
    translated, driver's into English and dispatch's into the driver's language in turn)
    and its request indices."""

    region: int
    lang: int
    left: int
    messages: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


class Desk(Network):
    """The people's work on the network (``Network``): dispatcher, customer and claim chats and
    the drivers' translated threads."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {tool: self.new(n) for tool, n in SYSTEM.items()}
        self.faq = sections(rng, self.new, clipped_length(rng, *FAQ))
        self.terms = sections(rng, self.new, clipped_length(rng, *TERMS), 700)
        self.glossary = self.new(clipped_length(rng, *GLOSSARY))
        self.pairs = [[self.new(clipped_length(rng, *PAIR)) for _ in (0, 1)] for _ in LANGS]
        self.translate_cue = self.new(TRANSLATE_CUE)
        self.chats: dict[str, list[Chat]] = {k: [] for k in CHATS}
        self.threads: list[Thread] = []
        self.excepted: list[tuple[float, int]] = []  # (time, shipment) of each exception
        self.damaged: list[int] = []  # shipments with a damage exception, not yet claimed
        self.asked: list[tuple[float, int]] = []  # (time, shipment) of each wismo chat
        for name, (per_day, hours, first) in DAILY.items():
            self.daily(name, per_day, hours, first)

    def head(self, kind: str, chat: Chat) -> list[Segment]:
        """What a turn starts with: the board session's system prompt, board head and board
        as it stands; the customer bot's prompt, policies and tracking record as it stands; a
        claim's file as opened."""
        if kind == "board":
            g = self.regions[chat.about]
            return [self.system["board"], g.head, *g.board.current]
        if kind == "wismo":
            return [self.system["wismo"], *self.faq, *self.shipments[chat.about].history(self.now)]
        return chat.fixed

    def open_chat(self, kind: str, about: int, fixed: list[Segment] | None = None) -> None:
        self.chats[kind].append(Chat(about, clipped_length(self.rng, *CHATS[kind][0]), fixed))
        self.at(self.now, "turn", (kind, len(self.chats[kind]) - 1))

    def _on_turn(self, arg: tuple[str, int]) -> None:
        """A turn: the chat's head, history and a new message; the reply joins the history
        and the next turn follows the reply's decoding and a pause."""
        kind, n = arg
        chat, rng = self.chats[kind][n], self.rng
        _, message, reply, gap = CHATS[kind]
        msg = self.new(clipped_length(rng, *message))
        segs, out = self.turn(chat, self.head(kind, chat), msg, reply, (kind, n, len(chat.sent)))
        if chat.turns <= 0 or sum(t for _, t in segs) + out[1] > MAX_CONTEXT:
            return
        wait = out[1] / 35.0 + rng.uniform(*gap)
        if kind == "board" and rng.random() < AWAY[0]:
            wait += rng.uniform(*AWAY[1]) * MINUTE
        self.at(self.now + wait, "turn", arg)

    def _on_session(self, _: object) -> None:
        """A dispatcher opens the assistant on their region's board."""
        self.open_chat("board", self.region_by_volume())

    def _on_wismo(self, _: object) -> None:
        """A customer asks where a shipment is: one with an exception in the last day, one
        asked about before (2 hours ago or more), else one first asked about now."""
        rng, t = self.rng, self.now
        u = rng.random()
        late = [s for at, s in self.excepted if t - at < RECENT[2]]
        again = [s for at, s in self.asked if t - at > 2 * HOUR]
        if u < RECENT[0] and late:
            s = rng.choice(late)
        elif u < RECENT[0] + RECENT[1] and again:
            s = rng.choice(again)
        else:
            s = self.new_shipment(self.region_by_volume())
        self.asked.append((t, s))
        self.open_chat("wismo", s)

    def _on_claim(self, _: object) -> None:
        """An adjuster opens a damage claim: the shipment's tracking record as it stands goes
        into the file with the claim form and the photo notes, sent as is every turn."""
        rng = self.rng
        if self.damaged and rng.random() < DAMAGED:
            s = self.damaged.pop(rng.randrange(len(self.damaged)))
            history = self.shipments[s].history(self.now)
        else:
            s = self.new_shipment(self.region_by_volume())
            history = self.except_(s)
        photos = [self.new(clipped_length(rng, *PHOTOS[1])) for _ in range(rng.randint(*PHOTOS[0]))]
        form = self.new(clipped_length(rng, 600, 0.4, 300, 1200))
        self.open_chat("claim", s, [self.system["claim"], *self.terms, *history, form, *photos])

    def _on_thread(self, _: object) -> None:
        """A driver starts a chat thread with dispatch in their language."""
        rng = self.rng
        lang = rng.choices(range(len(LANGS)), LANGS)[0]
        th = Thread(self.region_by_volume(), lang, clipped_length(rng, *THREAD[0]))
        self.threads.append(th)
        self.at(self.now, "message", len(self.threads) - 1)

    def translation(self, th: Thread, k: int) -> list[Segment]:
        """The translation of message ``k``: the system prompt, its direction's prompt (even
        messages are the driver's), the glossary, the last CONTEXT messages, the message."""
        ctx = th.messages[max(0, k - CONTEXT):k]
        return [self.system["translate"], self.pairs[th.lang][k % 2], self.glossary, *ctx,
                th.messages[k], self.translate_cue]

    def _on_message(self, n: int) -> None:
        th, rng = self.threads[n], self.rng
        th.messages.append(self.new(clipped_length(rng, *THREAD[1])))
        k = len(th.messages) - 1
        th.sent.append(self.emit("translate", n, k, self.translation(th, k)))
        th.left -= 1
        if th.left > 0:
            self.at(self.now + rng.uniform(*THREAD[2]), "message", n)
