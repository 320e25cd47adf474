"""bench.heldout's ``catalog_backfill`` shape, the daytime side: shoppers' assistant chats
behind the assistant's system prompt and the store's policy pages (multi-turn, item records
looked up as tool results, shoppers coming back after minutes), and merchandisers rewriting
groups of item descriptions behind the brand's style guide (each rewrite re-sends the item
record; an accepted rewrite is the record's new description). See
bench/heldout_catalog_backfill.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_catalog_parts import DAY, DESCRIPTION, HOUR, HOURS, MINUTE, World, resized
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned, sections
from bench.heldout_meeting_parts import poisson

SYSTEM = {"chat": 1400, "merch": 900, "rec": 650}  # tokens of each application's system prompt
PAGES = (900, 0.4, 300, 2000)  # tokens of each of the store's 6 policy pages
POLICY_EDIT = (0.7, (7.0, 11.0))  # chance of a policy page update on a day, and its hours
CHATS = 320  # conversations a day at scale 1.0, by the shoppers' clock
TURNS = (3, 0.8, 1, 20)  # turns of a conversation
MESSAGE = (30, 0.9, 6, 400)  # tokens of a shopper's message
REPLY = (140, 0.6, 30, 700)  # tokens of the assistant's reply
CALL = (10, 30)  # tokens of a product-lookup tool call before the record it returns
ENTRY = 0.7  # conversations opened from a product page (its record in the first turn)
LOOKUP = (0.4, (1, 3))  # later turns that look items up, and how many
THINK = (50.0, 1.0)  # seconds between a reply and the next message (median, sigma)
AWAY = (0.12, (5.0, 40.0))  # gaps where the shopper leaves and comes back (minutes)
MAX_CONTEXT = 12000  # tokens of a conversation's context that end it
RATE = 40.0  # tokens a second a reply decodes at
MERCH = 10  # rewrite sessions a day at scale 1.0 (at least 1), starting 09:00..17:00
GROUP = (14, 0.6, 4, 40)  # items in a session's group (consecutive in a department)
GUIDE = (3000, 0.3, 2000, 4500)  # tokens of the brand style guide (in sections)
BRIEF = (180, 0.6, 60, 500)  # tokens of a group's brief (collection, season, angle)
ATTEMPTS = ((0.55, "done"), (0.25, "regenerate"), (0.2, "feedback"))  # after a draft
FEEDBACK = (40, 0.6, 10, 200)  # tokens of a merchandiser's note on a draft
ACCEPT = 0.85  # rewrites accepted as the item's new description
REVIEW = (40.0, 240.0)  # seconds a merchandiser spends on an item before the next
INSTRUCTION = {"merch": 35, "feedback": 20, "rec": 45}


@dataclass
class Chat:
    """A shopper's conversation: its turns left, history (messages, looked-up records,
    replies), the items looked up per turn and its request indices."""

    turns: int
    history: list[Segment] = field(default_factory=list)
    looked: list[list[int]] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


@dataclass
class Rewrite:
    """A merchandiser's session: the group's department, brief and items (catalog order),
    its requests as (index, item, attempt: "draft", "regenerate" or "feedback") and the
    accepted rewrites as (item, new description)."""

    dept: int
    brief: Segment
    items: list[int]
    sent: list[tuple[int, int, str]] = field(default_factory=list)
    accepted: list[tuple[int, Segment]] = field(default_factory=list)


class Shop(World):
    """The daytime work on the catalog (``World``): chats and merchandisers' rewrites."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {role: self.new(n) for role, n in SYSTEM.items()}
        self.instructions = {step: self.new(n) for step, n in INSTRUCTION.items()}
        self.policies = Versioned([(-1e18, [self.new(clipped_length(rng, *PAGES))
                                            for _ in range(6)])])
        self.guide = sections(self.new, clipped_length(rng, *GUIDE))
        self.chats: list[Chat] = []
        self.rewrites: list[Rewrite] = []
        self.at(0.0, "shoppers", None)
        for day in (0.0, DAY):
            self.at(day, "merch_day", None)
            if rng.random() < POLICY_EDIT[0]:
                self.at(day + rng.uniform(*POLICY_EDIT[1]) * HOUR, "policy", None)

    def _on_policy(self, _: object) -> None:
        """A policy page is updated (a shipping cut-off, a returns rule): from it on, every
        chat prompt is new content."""
        pages = list(self.policies.current)
        k = self.rng.randrange(len(pages))
        pages[k] = resized(self.rng, self.new, pages[k], 0.9, 1.2)
        self.policies.versions.append((self.now, pages))

    def _on_shoppers(self, _: object) -> None:
        """Each hour, the conversations that start in it (Poisson, by the shoppers' clock)."""
        rng = self.rng
        self.at(self.now + HOUR, "shoppers", None)
        mean = CHATS * self.scale * HOURS[int(self.now / HOUR) % 24] / sum(HOURS)
        for _ in range(poisson(rng, mean)):
            self.chats.append(Chat(clipped_length(rng, *TURNS)))
            self.at(self.now + rng.uniform(0, HOUR), "turn", len(self.chats) - 1)

    def lookup(self, k: int) -> list[Segment]:
        """A product-lookup tool call and the record it returns (as it stands now)."""
        return [self.new(self.rng.randint(*CALL)), *self.catalog.record(k, self.now)]

    def _on_turn(self, c: int) -> None:
        """A turn: system prompt, policy pages, history, the message, the records looked up;
        the reply joins the history and the shopper may come back."""
        chat, rng, cat = self.chats[c], self.rng, self.catalog
        first = not chat.sent
        n = (1 if rng.random() < ENTRY else 0) if first else (
            rng.randint(*LOOKUP[1]) if rng.random() < LOOKUP[0] else 0)
        items = list(dict.fromkeys(cat.popular(rng, self.now) for _ in range(n)))
        msg = [self.new(clipped_length(rng, *MESSAGE))]
        for k in items:
            msg += self.lookup(k)
        segs = [self.system["chat"], *self.policies.at(self.now), *chat.history, *msg]
        chat.sent.append(self.emit("chat", c, len(chat.sent), segs))
        chat.looked.append(items)
        reply = self.new(clipped_length(rng, *REPLY))
        chat.history += [*msg, reply]
        chat.turns -= 1
        if chat.turns <= 0 or sum(t for _, t in segs) + reply[1] > MAX_CONTEXT:
            return
        gap = reply[1] / RATE + rng.lognormvariate(0.0, THINK[1]) * THINK[0]
        if rng.random() < AWAY[0]:
            gap += rng.uniform(*AWAY[1]) * MINUTE
        self.at(self.now + gap, "turn", c)

    def _on_merch_day(self, _: object) -> None:
        """The day's rewrite sessions, each on a run of consecutive items of a department."""
        rng, cat = self.rng, self.catalog
        for _ in range(max(1, round(MERCH * self.scale * rng.uniform(0.6, 1.4)))):
            d = rng.choices(range(len(cat.depts)), [len(x) for x in cat.depts])[0]
            n = clipped_length(rng, *GROUP)
            at = rng.randint(0, max(0, len(cat.depts[d]) - n))
            group = cat.depts[d][at:at + n]
            if not group:
                continue
            self.rewrites.append(Rewrite(d, self.new(clipped_length(rng, *BRIEF)), group))
            when = self.now + rng.uniform(9.0, 17.0) * HOUR
            self.at(when, "merch_item", (len(self.rewrites) - 1, 0))

    def _on_merch_item(self, arg: tuple[int, int]) -> None:
        """One item of a session: the rewrite prompt re-sends the item's record as it stands
        (system prompt, style guide, brief, record, instruction); the draft comes back."""
        s, i = arg
        rw, rng = self.rewrites[s], self.rng
        k = rw.items[i]
        if not self.catalog.items[k].live(self.now):
            self.next_item(s, i)
            return
        rec = self.catalog.record(k, self.now)
        segs = [self.system["merch"], *self.guide, rw.brief, *rec, self.instructions["merch"]]
        rw.sent.append((self.emit("merch", s, k, segs), k, "draft"))
        draft = resized(rng, self.new, rec[DESCRIPTION], 0.6, 1.2)
        self.at(self.now + draft[1] / RATE + rng.uniform(10, 40), "merch_try",
                (s, i, segs, draft))

    def _on_merch_try(self, arg: tuple[int, int, list[Segment], Segment]) -> None:
        """The merchandiser reads the draft: done (accepted or not), regenerate (the same
        prompt again) or revise (the prompt, the draft and a note); at most three tries."""
        s, i, segs, draft = arg
        rw, rng, k = self.rewrites[s], self.rng, self.rewrites[s].items[i]
        step = rng.choices([a for _, a in ATTEMPTS], [w for w, _ in ATTEMPTS])[0]
        if step != "done" and sum(x[1] == k for x in rw.sent) < 3:
            if step == "feedback":
                note = self.new(clipped_length(rng, *FEEDBACK))
                segs = [*segs, draft, note, self.instructions["feedback"]]
            rw.sent.append((self.emit("merch", s, k, segs), k, step))
            draft = resized(rng, self.new, draft, 0.8, 1.2)
            self.at(self.now + draft[1] / RATE + rng.uniform(10, 40), "merch_try",
                    (s, i, segs, draft))
            return
        if rng.random() < ACCEPT and self.catalog.items[k].live(self.now):
            self.edit(k, DESCRIPTION, "rewrite", draft)
            rw.accepted.append((k, draft))
        self.next_item(s, i)

    def next_item(self, s: int, i: int) -> None:
        """The session's next item after a review pause, if any is left."""
        if i + 1 < len(self.rewrites[s].items):
            self.at(self.now + self.rng.uniform(*REVIEW), "merch_item", (s, i + 1))
