"""The shoppers' conversations of bench.heldout's ``marketplace`` shape: product-page questions,
shopping-assistant sessions (tool calls, a growing cart, returns minutes or days later) and
customer-service chats about orders; bench/heldout_marketplace.py's docstring states what
each part models and its parameters. bench/heldout_marketplace_jobs.py adds the sellers' and
nightly jobs on top of ``ChatState`` here."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import EventState, Segment, clipped_length, segment_tokens
from bench.heldout_marketplace_parts import (DAY, HOUR, LOCALES, MINUTE, RATE, REGIONS,
                                             SHARES, SHOPPING, WEEKEND, Catalog,
                                             shopper_rate, thin)
from bench.heldout_vision_parts import Length, lognormal

# prompts (tokens, uniform lo..hi)
HEADS = {"qa": (1800, 2600), "assist": (2600, 4000), "support": (1400, 2400),
         "listing": (900, 1800), "reviews": (500, 1100), "seller": (800, 1500)}
LOCALE_LINE = (20, 40)  # the storefront line after a shopper-facing prompt
INSTRUCTION = (10, 25)  # "write it for de-DE", at the end of a job's request
ISSUES = (("where", 0.34), ("return", 0.22), ("refund", 0.15), ("damaged", 0.11),
          ("cancel", 0.10), ("payment", 0.08))
POLICY: Length = (1200, 0.5, 400, 3000)  # an issue's policy prompt, per region
ORDER: Length = (350, 0.5, 120, 1200)  # an order's details: items, prices, address, tracking
PROFILE = (40, 200)  # a shopper's profile line in an assistant session
PER_DAY = {"qa": 1100, "assist": 55, "support": 45}  # a weekday's (scaled)
FLOOR = 2.0  # a conversation stream's rate a day, at least
QA_MORE = (0.15, (1, 2))  # product questions followed by 1..2 more
MESSAGES: dict[str, Length] = {"qa": (22, 0.8, 4, 300), "assist": (20, 0.8, 3, 300),
                               "support": (30, 0.8, 5, 400)}
REPLIES: dict[str, Length] = {"qa": (110, 0.6, 20, 600), "assist": (150, 0.6, 30, 800),
                              "support": (110, 0.5, 30, 500)}
THINK: dict[str, Length] = {"qa": (40.0, 0.8, 8.0, 300.0), "assist": (45.0, 0.8, 8.0, 600.0),
                            "support": (45.0, 0.8, 10.0, 400.0)}
TURNS: dict[str, Length] = {"assist": (4, 0.6, 1, 20), "support": (4, 0.6, 1, 14)}
BACK_TURNS: Length = (3, 0.6, 1, 12)
TOOLS = (("search", 0.45), ("view", 0.30), ("cart", 0.15), ("none", 0.10))
CALL = (15, 50)  # a tool call's tokens
RESULTS = (3, 8)  # products a search returns
CARD = (60, 140)  # a product's card in the search results
FROM_SEARCH = 0.6  # product views that open a product the session's searches showed
CART_LINE, CART_ITEM, VIEWED_ITEM = 40, 45, 15  # a cart listing's or cart note's tokens
TOOL_TIME = (0.2, 1.5)  # seconds a tool takes
SOON, DAYS, AGAIN = 0.3, 0.15, 0.5  # assistant sittings followed by a return; x after a return
SOON_AFTER: Length = (25 * MINUTE, 1.0, 3 * MINUTE, 4 * HOUR)
DAYS_AFTER: Length = (1.5 * DAY, 0.6, 0.6 * DAY, 6 * DAY)
SUPPORT_BACK, SUPPORT_AFTER = 0.15, (6 * HOUR, 1.0, HOUR, 48 * HOUR)
UPDATE = (40, 150)  # an order's tracking update, noted when its customer comes back
CAP = 32000  # tokens of context past which a conversation ends


@dataclass
class Conv:
    """A conversation: its kind (qa, assist, support), storefront, what its requests start
    with (prompt, storefront line, then a shopper's profile, or an issue's policy and the
    order), turns left in this sitting, the product (qa; its page follows the system part),
    the issue (support), a note the next message follows (a returning shopper's cart, an
    order's update), its history, the request index of each request, the request each
    sitting started at, the tool each turn called, and the products its searches showed,
    the shopper viewed and put in the cart."""

    kind: str
    locale: int
    system: list[Segment]
    turns: int
    product: int = -1
    issue: int = -1
    note: list[Segment] = field(default_factory=list)
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    sittings: list[int] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    shown: list[int] = field(default_factory=list)
    viewed: list[int] = field(default_factory=list)
    cart: list[int] = field(default_factory=list)


class ChatState(EventState):
    """The catalog, the prompts and the shoppers' conversation streams."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.catalog = Catalog(rng, self.new, scale)
        self.heads = {k: self.new(rng.randint(*v)) for k, v in HEADS.items()}
        self.lines = [self.new(rng.randint(*LOCALE_LINE)) for _ in LOCALES]
        self.instructions = [self.new(rng.randint(*INSTRUCTION)) for _ in LOCALES]
        self.policies = {(i, g): self.new(clipped_length(rng, *POLICY))
                         for i in range(len(ISSUES)) for g in range(len(REGIONS))}
        self.convs: list[Conv] = []
        for kind in PER_DAY:
            self.next_chat(kind)

    def storefront(self) -> int:
        """A storefront by its share of shoppers."""
        return self.rng.choices(range(len(LOCALES)), SHARES)[0]

    def next_chat(self, kind: str) -> None:
        """Plan the next conversation of ``kind`` (by the storefronts' local hours)."""
        per_day = max(FLOOR, PER_DAY[kind] * self.scale)
        t, loc = thin(self.rng, self.now, per_day, self.storefront, shopper_rate, SHOPPING)
        self.at(t, "chat", (kind, loc))

    def _on_chat(self, payload: tuple[str, int]) -> None:
        """A shopper opens a product question (about a product picked by popularity), an
        assistant session or a support chat (an issue, its region's policy, the order)."""
        kind, loc = payload
        self.next_chat(kind)
        rng = self.rng
        system = [self.heads[kind], self.lines[loc]]
        if kind == "qa":
            turns = 1 + (rng.randint(*QA_MORE[1]) if rng.random() < QA_MORE[0] else 0)
            conv = Conv(kind, loc, system, turns, product=self.catalog.pick(loc, self.now))
        elif kind == "assist":
            system.append(self.new(rng.randint(*PROFILE)))
            conv = Conv(kind, loc, system, clipped_length(rng, *TURNS[kind]))
        else:
            issue = rng.choices(range(len(ISSUES)), [w for _, w in ISSUES])[0]
            system += [self.policies[issue, LOCALES[loc][3]],
                       self.new(clipped_length(rng, *ORDER))]
            conv = Conv(kind, loc, system, clipped_length(rng, *TURNS[kind]), issue=issue)
        self.convs.append(conv)
        self.sitting(len(self.convs) - 1, conv.turns)

    def sitting(self, i: int, turns: int) -> None:
        """A sitting of conversation ``i`` (its first, or the shopper back) starts now."""
        conv = self.convs[i]
        conv.turns = turns
        conv.sittings.append(len(conv.sent))
        self._on_turn(i)

    def prefix(self, conv: Conv) -> list[Segment]:
        """What the conversation's requests start with now (a product question's system
        part is followed by the product's page as it is now)."""
        if conv.kind == "qa":
            return [*conv.system, *self.catalog.page(conv.product, conv.locale, self.now)]
        return conv.system

    def ask(self, i: int, message: list[Segment]) -> None:
        """Send conversation ``i``'s next request: prefix + history + ``message``."""
        conv = self.convs[i]
        conv.sent.append(len(self.out))
        self.send(conv.kind, i, len(conv.sent) - 1, [*self.prefix(conv), *conv.history, *message])

    def _on_turn(self, i: int) -> None:
        """A turn: the message (after any note); an assistant turn that calls a tool sends a
        second request with the call and its result once the tool answers."""
        conv, rng = self.convs[i], self.rng
        message = [*conv.note, self.new(clipped_length(rng, *MESSAGES[conv.kind]))]
        conv.note = []
        self.ask(i, message)
        tool = self.tool(conv) if conv.kind == "assist" else []
        if tool:
            delay = tool[0][1] / RATE + rng.uniform(*TOOL_TIME)
            self.at(self.now + delay, "tool", (i, [*message, *tool]))
        else:
            self.answer(i, message)

    def _on_tool(self, payload: tuple[int, list[Segment]]) -> None:
        """The tool has answered: the request again with the call and its result."""
        i, message = payload
        self.ask(i, message)
        self.answer(i, message)

    def tool(self, conv: Conv) -> list[Segment]:
        """An assistant turn's tool call and result (none: []): a search (cards of products
        picked by popularity), a product's page (one the searches showed, FROM_SEARCH) or
        the cart with a viewed product added (the whole cart listed)."""
        rng, catalog = self.rng, self.catalog
        name = rng.choices([t for t, _ in TOOLS], [w for _, w in TOOLS])[0]
        if name == "cart" and not set(conv.viewed) - set(conv.cart):
            name = "search"
        conv.tools.append(name)
        if name == "none":
            return []
        call = self.new(rng.randint(*CALL))
        if name == "search":
            found = [catalog.pick(conv.locale, self.now) for _ in range(rng.randint(*RESULTS))]
            conv.shown += found
            return [call, self.new(sum(rng.randint(*CARD) for _ in found))]
        if name == "view":
            p = (rng.choice(conv.shown) if conv.shown and rng.random() < FROM_SEARCH
                 else catalog.pick(conv.locale, self.now))
            conv.viewed.append(p)
            return [call, *catalog.page(p, conv.locale, self.now)]
        conv.cart.append(rng.choice([p for p in conv.viewed if p not in conv.cart]))
        return [call, self.new(CART_LINE + CART_ITEM * len(conv.cart))]

    def answer(self, i: int, message: list[Segment]) -> None:
        """The reply joins the history; the next turn follows a think time unless the
        sitting's turns are done or the context is past CAP."""
        conv, rng = self.convs[i], self.rng
        reply = self.new(clipped_length(rng, *REPLIES[conv.kind]))
        conv.history += [*message, reply]
        conv.turns -= 1
        if segment_tokens([*self.prefix(conv), *conv.history]) > CAP:
            return
        if conv.turns:
            self.at(self.now + reply[1] / RATE + lognormal(rng, *THINK[conv.kind]), "turn", i)
        else:
            self.ended(i)

    def ended(self, i: int) -> None:
        """A sitting is over: an assistant shopper comes back SOON or DAYS later (AGAIN x
        after a return), a support customer (SUPPORT_BACK) hours later, at a waking hour."""
        conv, rng = self.convs[i], self.rng
        u, first = rng.random(), len(conv.sittings) == 1
        if conv.kind == "assist":
            f = 1.0 if first else AGAIN
            lag = SOON_AFTER if u < SOON * f else DAYS_AFTER if u < (SOON + DAYS) * f else None
        else:
            lag = SUPPORT_AFTER if conv.kind == "support" and first and u < SUPPORT_BACK else None
        t = self.later(lag, conv.locale) if lag else None
        if t is not None:
            self.at(t, "back", i)

    def _on_back(self, i: int) -> None:
        """The shopper is back: the conversation is re-sent whole, the next message after the
        cart as it is now (assistant) or the order's tracking update (support)."""
        conv, rng = self.convs[i], self.rng
        if conv.kind == "assist":
            size = CART_LINE + CART_ITEM * len(conv.cart) + VIEWED_ITEM * len(conv.viewed)
        else:
            size = rng.randint(*UPDATE)
        conv.note = [self.new(size)]
        self.sitting(i, clipped_length(rng, *BACK_TURNS))

    def later(self, lag: Length, loc: int) -> float | None:
        """A time ``lag`` (lognormal, seconds) from now that shoppers' hours in storefront
        ``loc`` accept (drawn again, at most 200 times)."""
        rng, peak = self.rng, max(SHOPPING) * WEEKEND
        for _ in range(200):
            t = self.now + lognormal(rng, *lag)
            if rng.random() * peak < shopper_rate(t, loc):
                return t
        return None
