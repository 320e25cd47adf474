"""bench.heldout's ``moderation`` shape, its world: a social platform's content-moderation service
as one replica sees it. The policy prompt's parts (the classifier's system prompt, the
community guidelines in versions, each surface's rules and few-shot examples, each language's
guidance), the senior reviewer's playbook and hard cases, the appeal rubric, the platform's
surfaces (root items such as posts, threads, videos or listings, and the items that sit under
them), the regions and their time zones, the users (a few repeat offenders) and their
moderation histories. See bench/heldout_moderation.py's docstring for the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson
from bench.heldout_recruit_parts import sections

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # Monday 00:00 UTC to Wednesday 00:00 UTC
PAST = -1e18  # "before the trace"
# how active users are in each local hour (an evening peak, a trough at 03..05)
ACTIVE = (0.35, 0.22, 0.14, 0.09, 0.07, 0.09, 0.18, 0.35, 0.5, 0.55, 0.58, 0.62, 0.7, 0.65,
          0.62, 0.66, 0.72, 0.8, 0.9, 1.0, 1.0, 0.95, 0.8, 0.55)
# region -> UTC offset (hours), its items' languages and their shares
REGIONS = (("americas", -5.0, (("en", 0.65), ("es", 0.25), ("pt", 0.1))),
           ("europe", 1.0, (("en", 0.35), ("de", 0.2), ("fr", 0.2), ("es", 0.1), ("it", 0.15))),
           ("south_asia", 5.5, (("en", 0.5), ("hi", 0.4), ("bn", 0.1))),
           ("east_asia", 9.0, (("ja", 0.5), ("ko", 0.3), ("zh", 0.2))))
SYSTEM = {"classify": 500, "senior": 1100, "appeal": 700}  # the three prompts' system parts
CUE = {"classify": 40, "senior": 60, "appeal": 50}  # the instruction at a request's end
GUIDELINES = ((9, 12), 450)  # community guidelines: sections (one a policy area), tokens each
RULES = (1100, 0.4, 400, 2500)  # a surface's rules, in SECTION sections
EXAMPLES = ((4, 7), (420, 0.4, 200, 900))  # a surface's few-shot examples, tokens each
LANGUAGE = (650, 0.4, 250, 1400)  # a language's guidance (slurs, dialect, local law)
PLAYBOOK = (5000, 0.3, 3000, 8000)  # the senior reviewer's enforcement playbook
HARD_CASES = ((8, 14), (550, 0.4, 250, 1200))  # its hard-case examples
RUBRIC = 600  # the appeal re-review rubric
SECTION = 500
CAPTION = (150, 0.5, 40, 400)  # an image's caption and the vision model's description of it
USERS = 50000  # ordinary users (ids TROLLS[0]..); spam accounts come after
TROLLS = (300, 0.15)  # repeat offenders, their share of the organic items
ACCOUNT = (220, 0.4, 100, 500)  # a user's account summary, first in their history
STRIKE = (140, 0.5, 60, 400)  # a decision in a user's history
PRIOR = (0.4, 2.5)  # mean strikes before the trace: an ordinary user, a repeat offender
ROOTS = 150  # roots from before the trace still discussed (x scale, at least 30)
LIVE = 400  # the latest roots a new item can sit under
CANARY = 0.1  # share of requests a new guidelines version gets during its canary window
# NOTE(moderation-head): the order of the first pass's head (system, guidelines, surface rules,
# examples, language guidance) is this writer's guess at how such a service assembles its
# prompt: most stable first. A guidelines version thus makes every later part of the head new.


@dataclass(frozen=True)
class Surface:
    """Where items are posted: its share of the organic items, the item's tokens (median,
    sigma, lo, hi), the root surface it sits under (None: a root) and, for a root, the odds
    it has parts (images, transcript chunks), how many and their tokens."""

    name: str
    share: float
    item: tuple[int, float, int, int]
    parent: str | None = None
    parts: tuple[float, tuple[int, int], tuple] = (0.0, (0, 0), CAPTION)


@dataclass(frozen=True)
class Layout:
    """The seed's platform: surfaces (the first a root, the second under it), the regions'
    shares (REGIONS' order), organic items a day, trending threads a day and their echoes
    (lo, hi), the share of echoes that are quote-posts, spam waves a day and the surface they
    hit, hours a root stays in discussion, odds a reply also sends the reply it answers."""

    name: str
    surfaces: tuple[Surface, ...]
    regions: tuple[float, float, float, float]
    items: float
    viral: tuple[float, tuple[int, int]]
    quotes: float
    spam: tuple[float, str]
    linger: float
    nested: float


LAYOUTS = (
    Layout("short", (Surface("post", 0.45, (70, 0.8, 10, 400), None, (0.3, (1, 4), CAPTION)),
                     Surface("reply", 0.55, (40, 0.8, 5, 300), "post")),
           (0.45, 0.25, 0.15, 0.15), 600.0, (2.0, (60, 220)), 0.3, (1.0, "reply"), 8.0, 0.0),
    Layout("forum", (Surface("thread", 0.15, (700, 0.8, 100, 4000), None,
                             (0.1, (1, 3), CAPTION)),
                     Surface("comment", 0.85, (160, 0.9, 10, 2500), "thread")),
           (0.55, 0.3, 0.1, 0.05), 650.0, (1.0, (40, 150)), 0.0, (1.0, "thread"), 36.0, 0.45),
    Layout("video", (Surface("video", 0.15, (250, 0.5, 60, 800), None,
                             (1.0, (2, 6), (1100, 0.4, 400, 2500))),
                     Surface("comment", 0.85, (35, 0.9, 5, 400), "video")),
           (0.35, 0.2, 0.25, 0.2), 600.0, (1.5, (60, 220)), 0.0, (1.5, "comment"), 24.0, 0.2),
    Layout("market", (Surface("listing", 0.4, (600, 0.6, 150, 2500), None,
                              (0.9, (1, 5), CAPTION)),
                      Surface("message", 0.45, (50, 0.8, 8, 400), "listing"),
                      Surface("review", 0.15, (90, 0.8, 15, 600), "listing")),
           (0.5, 0.3, 0.1, 0.1), 450.0, (0.75, (30, 120)), 0.0, (1.0, "listing"), 72.0, 0.0))


@dataclass
class Item:
    """A post, comment, caption track or listing: surface, language, author, when it was
    posted, its own text (``body``), its region (-1: not an organic item), what its requests
    send before it (``context``: the root it sits under, then the reply it answers), its
    parts (each a request of its own), the root's popularity, the guidelines version its
    first pass used, the decision and its outcome, the replies under it (a root's)."""

    surface: str
    lang: str
    author: int
    time: float
    body: list[Segment]
    region: int = -1
    context: list[Segment] = field(default_factory=list)
    parts: list[Segment] = field(default_factory=list)
    weight: float = 1.0
    version: int = 0
    decision: Segment | None = None
    removed: bool = False
    children: list[int] = field(default_factory=list)

    def texts(self) -> list[list[Segment]]:
        """What its first-pass requests send after the head: the item, then each part."""
        whole = [*self.context, *self.body]
        return [whole, *([*whole, p] for p in self.parts)]


class World(ClockedState):
    """The platform on the clock. bench.heldout_moderation_desk.Desk builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, 0, scale)
        self.layout, new = layout, self.new
        self.system = {k: new(v) for k, v in SYSTEM.items()}
        self.cue = {k: new(v) for k, v in CUE.items()}
        n = rng.randint(*GUIDELINES[0])
        self.guidelines: list[list[Segment]] = [[new(GUIDELINES[1]) for _ in range(n)]]
        self.rollouts: list[tuple[float, float]] = []  # version k >= 1: (canary, full)
        self.surfaces = {s.name: s for s in layout.surfaces}
        self.rules = {s: Versioned([(PAST, sections(new, clipped_length(rng, *RULES),
                                                    SECTION))]) for s in self.surfaces}
        self.examples = {s: Versioned([(PAST, [new(clipped_length(rng, *EXAMPLES[1]))
                                               for _ in range(rng.randint(*EXAMPLES[0]))])])
                         for s in self.surfaces}
        langs = sorted({lang for _, _, mix in REGIONS for lang, _ in mix})
        self.language = {lang: new(clipped_length(rng, *LANGUAGE)) for lang in langs}
        self.playbook = sections(new, clipped_length(rng, *PLAYBOOK), SECTION)
        self.hard_cases = [new(clipped_length(rng, *HARD_CASES[1]))
                           for _ in range(rng.randint(*HARD_CASES[0]))]
        self.rubric = new(RUBRIC)
        self.items: list[Item] = []
        self.histories: dict[int, list[Segment]] = {}
        self.roots: dict[str, list[int]] = {s.name: [] for s in layout.surfaces
                                            if s.parent is None}
        for s in self.roots:
            for _ in range(max(30, round(ROOTS * scale))):
                self.add_item(s, self.a_lang(self.a_region()), self.author(),
                              -rng.uniform(0.0, 2 * layout.linger) * HOUR)

    def a_region(self) -> int:
        return self.rng.choices(range(len(REGIONS)), self.layout.regions)[0]

    def a_lang(self, region: int) -> str:
        mix = REGIONS[region][2]
        return self.rng.choices([m[0] for m in mix], [m[1] for m in mix])[0]

    def author(self) -> int:
        """An organic item's author: a repeat offender (TROLLS) or an ordinary user."""
        if self.rng.random() < TROLLS[1]:
            return self.rng.randrange(TROLLS[0])
        return self.rng.randrange(TROLLS[0], USERS)

    def history(self, user: int) -> list[Segment]:
        """A user's moderation history as it stands (made when first needed): the account
        summary, then the strikes before the trace, then this trace's removals."""
        if user not in self.histories:
            rng = self.rng
            mean = PRIOR[1] if user < TROLLS[0] else PRIOR[0] if user < USERS else 0.0
            strikes = [self.new(clipped_length(rng, *STRIKE))
                       for _ in range(poisson(rng, mean))]
            self.histories[user] = [self.new(clipped_length(rng, *ACCOUNT)), *strikes]
        return self.histories[user]

    def add_item(self, surface: str, lang: str, author: int, when: float,
                 body: list[Segment] | None = None, parent: int | None = None,
                 listed: bool = True) -> int:
        """A new item (its text drawn unless ``body``); under ``parent`` it sends the root
        and, by the layout's odds, the reply it answers; a listed root can be replied to and
        may have parts (spam is never listed: the bots post text only)."""
        rng, s = self.rng, self.surfaces[surface]
        body = body or [self.new(clipped_length(rng, *s.item))]
        item = Item(surface, lang, author, when, body)
        if parent is not None:
            root = self.items[parent]
            item.context = list(root.body)
            if root.children and rng.random() < self.layout.nested:
                item.context += self.items[rng.choice(root.children[-30:])].body
            root.children.append(len(self.items))
        elif listed and rng.random() < s.parts[0]:
            item.parts = [self.new(clipped_length(rng, *s.parts[2]))
                          for _ in range(rng.randint(*s.parts[1]))]
        if parent is None and listed:
            item.weight = rng.lognormvariate(0.0, 1.2)
            self.roots[surface].append(len(self.items))
        self.items.append(item)
        return len(self.items) - 1

    def pick_root(self, surface: str) -> int:
        """A root of ``surface`` to reply under: popular and recent ones most."""
        roots, tau = self.roots[surface][-LIVE:], self.layout.linger * HOUR
        w = [self.items[i].weight * math.exp(-max(0.0, self.now - self.items[i].time) / tau)
             for i in roots]
        return self.rng.choices(roots, w)[0]

    def version_at(self, t: float) -> int:
        """The guidelines version a request at ``t`` gets: the last fully rolled out, or
        one in its canary window by CANARY's odds (an rng draw only inside a window)."""
        k = 0
        for v, (start, full) in enumerate(self.rollouts, 1):
            if t >= full or t >= start and self.rng.random() < CANARY:
                k = v
        return k

    def policy(self, kind: str, surface: str, version: int) -> list[Segment]:
        """A prompt's system part, the guidelines of ``version`` and the surface's rules."""
        return [self.system[kind], *self.guidelines[version], *self.rules[surface].at(self.now)]

    def head(self, item: Item) -> list[Segment]:
        """The first pass's head: the policy, the surface's examples, the language's
        guidance (NOTE(moderation-head))."""
        return [*self.policy("classify", item.surface, item.version),
                *self.examples[item.surface].at(self.now), self.language[item.lang]]

