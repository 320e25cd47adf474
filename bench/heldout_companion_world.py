"""bench.heldout's ``companion_chat`` shape, its world: a consumer character-chat platform as one
replica sees it. The platform's system prompt (one deploy rewrites a section of it), the
character cards creators made (a definition that its creator edits now and then, example
dialogues, a greeting, for some a lorebook; Zipf popularity by a random rank, a few
mega-popular ones in some layouts), the users this replica's sticky routing sends it (a time
zone, an optional persona, a memory summary where the layout keeps one, the chats they had
before the trace with their histories) and the clock. See bench/heldout_companion_chat.py's
docstring for the numbers."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Chat, ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_recruit_parts import sections

HOUR, MINUTE = 3600.0, 60.0
DAY = 24 * HOUR
END = 2 * DAY  # Saturday 00:00 UTC to Monday 00:00 UTC
PAST = -1e18  # "before the trace"
# how likely a user starts a session in each hour of their local day: the evening peak
# (20..23), after school and work (15..19), a lunch bump, the small hours nearly empty
LOCAL = (0.45, 0.25, 0.12, 0.06, 0.03, 0.03, 0.04, 0.08, 0.12, 0.16, 0.2, 0.25, 0.32, 0.3,
         0.32, 0.42, 0.52, 0.58, 0.62, 0.72, 0.9, 1.0, 0.95, 0.7)
PLATFORM = (1200, 400)  # the platform's system prompt (rules, format, safety): tokens, section
POST = 90  # the post-history instruction after the user's message ("stay in character ...")
RESERVE = 400  # tokens a prompt leaves free for the reply (the platform's max_tokens)
DEFINITION = (900, 0.7, 150, 4000)  # a card's description, personality and scenario
DEF_SECTION = 500
EXAMPLES = (0.7, (600, 0.7, 100, 3000))  # cards with example dialogues, their tokens
GREETING = (250, 0.6, 40, 1200)  # the character's first message, every new chat's first
LORE = (0.2, (8, 60), (150, 0.6, 50, 500))  # cards with a lorebook, its entries, entry tokens
MEGA = 3.0  # a mega-popular character's weight, times the top of the Zipf ranks
PERSONA = (0.45, (180, 0.7, 30, 800))  # users with a persona, its tokens
MEMORY = (300, 0.5, 100, 1000)  # a user's memory summary when the trace starts
MEMORY_CAP = 1200
MEMORY_EVERY = (8, 20)  # a user's turns between the background summarizer's rewrites
CHATS_BEFORE = ((0, 0.15), (1, 0.35), (2, 0.25), (3, 0.15), (4, 0.1))
PAST_HISTORY = (5000, 1.0, 300, 120000)  # tokens of a chat's history from before the trace
MESSAGE = (40, 0.9, 3, 600)  # a user's message
REPLY = (250, 0.6, 40, 1000)  # a character's reply
GROUP_PROMPT = (220, 0.6, 60, 600)  # a group chat's scenario, written by its user
NUDGE = 20  # "write the next reply only as <name>" after a group chat's history
MEMBERS = (2, 4)  # characters in a group chat


@dataclass(frozen=True)
class Layout:
    """How the seed's platform is set up: cards in the catalogue, their Zipf exponent and how
    many are mega-popular, whether users have a memory summary, what the frontend does with a
    history past the context ("slide": drop the oldest messages every turn until it fits;
    "half": drop the oldest to half the room at once, folded into the memory where there is
    one), the context, a session's user turns (median, sigma, lo, hi), the share of new chats
    that are group chats, the users this replica serves at scale 1.0 (x 0.9..1.1, at least 6)
    and their time zones ((UTC offset, share), ...)."""

    name: str
    cards: int
    zipf: float
    mega: int
    memory: bool
    drop: str
    context: int
    turns: tuple[float, float, int, int]
    group: float
    users: int
    zones: tuple[tuple[int, float], ...]


AMERICAS = ((-8, 0.3), (-6, 0.2), (-5, 0.35), (-3, 0.15))
LAYOUTS = (
    Layout("hits", 400, 1.1, 3, True, "half", 8192, (12, 0.7, 2, 80), 0.05, 66, AMERICAS),
    Layout("longtail", 3000, 0.7, 0, False, "slide", 16384, (6, 0.7, 1, 40), 0.08, 130,
           ((-8, 0.15), (-5, 0.2), (-3, 0.1), (0, 0.1), (1, 0.15), (3, 0.05), (7, 0.1),
            (8, 0.1), (9, 0.05))),
    Layout("memory", 800, 1.0, 1, True, "half", 24576, (16, 0.6, 3, 90), 0.1, 27,
           ((0, 0.2), (1, 0.3), (2, 0.1), (7, 0.1), (8, 0.2), (9, 0.1))),
    Layout("groups", 1200, 0.9, 2, False, "slide", 12288, (10, 0.7, 1, 60), 0.3, 55,
           ((-8, 0.2), (-5, 0.3), (0, 0.15), (1, 0.25), (2, 0.1))))


@dataclass
class Card:
    """A character: popularity, definition (versions as its creator edits it), example
    dialogues (None: none), greeting and lorebook entries (empty: none)."""

    weight: float
    definition: Versioned
    examples: Segment | None
    greeting: Segment
    lore: list[Segment]


@dataclass
class User:
    """A user on this replica: UTC offset, persona (None: none), memory summary (None where
    the layout keeps none), their chats (most recent last), turns since the summarizer last
    ran and after how many it runs, and the chat of the session going on (None: offline)."""

    zone: int
    persona: Segment | None
    memory: Versioned | None
    chats: list[int] = field(default_factory=list)
    since: int = 0
    every: int = 12
    online: int | None = None


@dataclass
class Companion(Chat):
    """A chat (kind "chat": one character, "group": several): owner is the user, ``fixed``
    the group's scenario (empty for one character), ``cast`` the cards; ``start`` the first
    history message still sent; the active lorebook entries; the swipes as (request,
    copies); trims as (request, start); the positions in ``sent`` of the requests after a
    rewind; the active lorebook entries at each of ``sent`` (one-character chats); and the
    positions in ``sent`` of each session's first request."""

    cast: list[int] = field(default_factory=list)
    start: int = 0
    lore: list[int] = field(default_factory=list)
    swipes: list[tuple[int, list[int]]] = field(default_factory=list)
    trims: list[tuple[int, int]] = field(default_factory=list)
    rewinds: list[int] = field(default_factory=list)
    lores: list[tuple[int, ...]] = field(default_factory=list)
    sessions: list[int] = field(default_factory=list)


def tokens(segs: list[Segment]) -> int:
    return sum(n for _, n in segs)


class World(ClockedState):
    """The platform on the clock. bench.heldout_companion_chats.Desk builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, 0, scale)
        self.layout, new = layout, self.new
        self.platform = Versioned([(PAST, sections(new, PLATFORM[0], PLATFORM[1]))])
        self.post = new(POST)
        ranks = rng.sample(range(1, layout.cards + 1), layout.cards)
        self.cards = [self.card(r) for r in ranks]
        self.cum = list(itertools.accumulate(c.weight for c in self.cards))
        self.nudges: dict[int, Segment] = {}
        self.chats: list[Companion] = []
        people = max(6, round(layout.users * scale * rng.uniform(0.9, 1.1)))
        self.users = [self.user() for _ in range(people)]
        for u in range(people):
            for _ in range(rng.choices(*zip(*CHATS_BEFORE))[0]):
                self.open_chat(u, self.past_history())

    def card(self, rank: int) -> Card:
        """A card of popularity ``rank`` (1 the top; the layout's first ranks mega)."""
        rng, new = self.rng, self.new
        weight = rank ** -self.layout.zipf * (MEGA if rank <= self.layout.mega else 1.0)
        text = sections(new, clipped_length(rng, *DEFINITION), DEF_SECTION)
        examples = new(clipped_length(rng, *EXAMPLES[1])) if rng.random() < EXAMPLES[0] else None
        lore = []
        if rng.random() < LORE[0]:
            lore = [new(clipped_length(rng, *LORE[2])) for _ in range(rng.randint(*LORE[1]))]
        return Card(weight, Versioned([(PAST, text)]), examples,
                    new(clipped_length(rng, *GREETING)), lore)

    def user(self) -> User:
        rng, new = self.rng, self.new
        zone = rng.choices(*zip(*self.layout.zones))[0]
        persona = new(clipped_length(rng, *PERSONA[1])) if rng.random() < PERSONA[0] else None
        memory = None
        if self.layout.memory:
            memory = Versioned([(PAST, [new(clipped_length(rng, *MEMORY))])])
        return User(zone, persona, memory, every=rng.randint(*MEMORY_EVERY))

    def past_history(self) -> list[Segment]:
        """The messages (user, character, ...) of a chat from before the trace."""
        rng, total, out = self.rng, clipped_length(self.rng, *PAST_HISTORY), []
        while tokens(out) < total:
            out += [self.new(clipped_length(rng, *MESSAGE)), self.new(clipped_length(rng, *REPLY))]
        return out

    def a_card(self, avoid: list[int] = ()) -> int:
        """A card by popularity, not one of ``avoid``."""
        while True:
            k = self.rng.choices(range(len(self.cards)), cum_weights=self.cum)[0]
            if k not in avoid:
                return k

    def open_chat(self, u: int, before: list[Segment]) -> int:
        """User ``u``'s new chat (a group chat by the layout's share) with the messages
        ``before`` it had before the trace; its index. The greeting comes first."""
        rng, cast = self.rng, [self.a_card()]
        kind, fixed = "chat", []
        if rng.random() < self.layout.group:
            kind, fixed = "group", [self.new(clipped_length(rng, *GROUP_PROMPT))]
            size = rng.randint(*MEMBERS)
            while len(cast) < size:
                cast.append(self.a_card(cast))
        greeting = self.cards[cast[0]].greeting
        chat = Companion(kind, u, 0, fixed, [greeting, *before], cast=cast)
        self.chats.append(chat)
        self.users[u].chats.append(len(self.chats) - 1)
        return len(self.chats) - 1

    def nudge(self, card: int) -> Segment:
        """The group chat's "next reply as <name>" line for ``card`` (one per card)."""
        if card not in self.nudges:
            self.nudges[card] = self.new(NUDGE)
        return self.nudges[card]

    def persona_memory(self, u: int) -> list[Segment]:
        """The user's persona and memory as they stand (what of them there is)."""
        user = self.users[u]
        out = [user.persona] if user.persona else []
        return out + (user.memory.at(self.now) if user.memory else [])

    def head(self, chat: Companion) -> list[Segment]:
        """What a chat's request sends before the history: the platform's prompt, the card
        (definition, active lorebook entries, example dialogues) or, for a group, the
        scenario and every member's definition in order, then the persona and the memory."""
        # NOTE(card-first): the card goes before the persona and the memory, as frontends'
        # story templates put the character first; so users who open a chat with the same
        # card share the platform prompt and the card, and the per-user parts come after.
        # A group sends its members' definitions only (examples and lorebooks would not fit
        # several cards into the context)
        out = [*self.platform.at(self.now), *chat.fixed]
        for k in chat.cast:
            card = self.cards[k]
            out += card.definition.at(self.now)
            if chat.kind == "chat":
                out += [card.lore[e] for e in sorted(chat.lore)]
                out += [card.examples] if card.examples else []
        return out + self.persona_memory(chat.owner)

    def revise(self, text: Versioned) -> int:
        """A new version of ``text`` from now: one section rewritten (every one from it on is
        then new in a prompt); which."""
        secs = list(text.current)
        k = self.rng.randrange(len(secs))
        secs[k] = self.new(max(40, round(secs[k][1] * self.rng.uniform(0.8, 1.25))))
        text.versions.append((self.now, secs))
        return k
