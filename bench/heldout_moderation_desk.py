"""bench.heldout's ``moderation`` shape, the service on the clock: organic items by each region's
local hours, each classified by a first pass (one request for the item, one per part), trending
threads whose echoes (near-duplicate replies, quote-posts resending the original) pile up in a
burst, spam waves of templated items, escalations to the senior reviewer's longer prompt,
appeals re-reviewed with the item, its decision and the user's history, and the policy team's
changes (guidelines versions rolled out behind a canary, surface rules rewritten, few-shot
examples added). See bench/heldout_moderation.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_parts import poisson
from bench.heldout_moderation_world import (ACTIVE, END, EXAMPLES, GUIDELINES, HOUR, MINUTE,
                                            REGIONS, TROLLS, USERS, Layout, World)

REMOVE = {"classify": 0.05, "viral": 0.08, "quote": 0.06, "spam": 0.9}  # first-pass removals
TROLL_REMOVE = 0.3  # a repeat offender's items are removed at least this often
ESCALATE = {"classify": 0.06, "viral": 0.04, "quote": 0.06, "spam": 0.01}
SENIOR_REMOVE = 0.5  # an escalated item is removed by the senior reviewer
SENIOR_DELAY = (1.0, 6.0)  # seconds after the first pass (its decoding, the queue)
APPEAL = (0.25, 0.02)  # odds a removal is appealed: a person's, a spam account's
APPEAL_DELAY = (3 * HOUR, 1.0, 10 * MINUTE, 40 * HOUR)
APPEAL_TEXT = (150, 0.8, 20, 1200)
APPEAL_SENIOR = 0.25  # appeals the re-review escalates to the senior reviewer
OUTPUT = {"classify": (90, 0.6, 30, 400), "senior": (320, 0.5, 80, 1200),
          "appeal": (200, 0.5, 60, 800)}  # tokens of each prompt's verdict and rationale
ECHO_TAU = (20 * MINUTE, 90 * MINUTE)  # mean delay of a trending thread's echoes
TRENDING = 40.0  # a trending root's popularity (organic replies pile on too)
TEMPLATES = ((2, 4), (60, 0.6, 20, 200))  # a trend's copypasta variants and their tokens
NEAR_DUP = 0.4  # echoes that are a copypasta variant and a short tail
TAIL = (12, 0.6, 3, 60)  # tokens of such a tail (a handle, an emoji, a word changed)
QUOTE = (45, 0.8, 5, 300)  # tokens of a quote-post's own text
WAVE = ((30, 150), (1, 3), (120, 0.6, 40, 300), 0.8, (5 * MINUTE, 60 * MINUTE))  # items,
# templates, template tokens, templated share, span
SPAM_TAIL = (20, 0.5, 8, 60)  # a spam item's unique tail (a link, a handle)
VERSIONS = (2, 3)  # guidelines versions rolled out over the two days
SLOTS = (14.0, 18.0)  # UTC hours a rollout may start (each day, HQ's office hours)
CANARY_HOURS = (1.0, 3.0)
RULE_EDITS = (1, 2)
EXAMPLE_ADDS = ((1, 2), (1, 3))  # refreshes of a surface's examples, examples each adds


@dataclass
class Burst:
    """A trending thread: its root, language, copypasta variants, the echo items."""

    root: int
    lang: str
    templates: list[Segment]
    echoes: list[int] = field(default_factory=list)


@dataclass
class Wave:
    """A spam wave: surface, language, templates, its start and span, the items."""

    surface: str
    lang: str
    templates: list[Segment]
    start: float
    span: float
    items: list[int] = field(default_factory=list)


class Desk(World):
    """The whole replica: the world and the service's requests."""

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, scale, layout)
        self.first: dict[int, list[int]] = {}  # item -> its first-pass requests
        self.bursts: list[Burst] = []
        self.waves: list[Wave] = []
        self.escalations: list[tuple[int, int, int]] = []  # (item, step, request)
        self.appeals: list[tuple[int, int, list[Segment]]] = []  # (item, request, history)
        self.revisions: list[tuple[float, int]] = []  # (canary start, first section changed)
        self.edits: list[tuple[float, str, str, int]] = []  # (when, "rules" or "examples",
        # surface, first section changed)
        for h in range(48):
            for r, share in enumerate(layout.regions):
                local = ACTIVE[int(h + REGIONS[r][1]) % 24]
                for _ in range(poisson(rng, layout.items * scale * share * local / sum(ACTIVE))):
                    self.at((h + rng.random()) * HOUR, "item", r)
        for _ in range(max(1, poisson(rng, 2 * layout.viral[0] * scale))):
            self.at(self.busy_time(), "trend", None)
        for _ in range(max(1, poisson(rng, 2 * layout.spam[0] * scale))):
            self.at(rng.uniform(0.0, END - HOUR), "wave", None)
        self.plan_policy()

    def busy_time(self) -> float:
        """A time over the two days by the regions' shares of activity."""
        w = [sum(s * ACTIVE[int(h + REGIONS[r][1]) % 24]
                 for r, s in enumerate(self.layout.regions)) for h in range(48)]
        return (self.rng.choices(range(48), w)[0] + self.rng.random()) * HOUR

    def plan_policy(self) -> None:
        """Guidelines rollouts in distinct slots, surface-rule edits, example refreshes."""
        rng = self.rng
        slots = [(d, s) for d in (0, 1) for s in SLOTS]
        for d, s in sorted(rng.sample(slots, rng.randint(*VERSIONS))):
            self.at((24 * d + s + rng.random()) * HOUR, "rollout", None)
        for _ in range(rng.randint(*RULE_EDITS)):
            self.at((24 * rng.randint(0, 1) + rng.uniform(14.0, 23.0)) * HOUR, "rules", None)
        for _ in range(rng.randint(*EXAMPLE_ADDS[0])):
            self.at((24 * rng.randint(0, 1) + rng.uniform(14.0, 23.0)) * HOUR, "examples", None)

    def classify(self, i: int, kind: str) -> None:
        """The first pass over item ``i``: one request for the item, one per part; then the
        decision, or an escalation seconds later."""
        item, rng = self.items[i], self.rng
        item.version = self.version_at(self.now)
        head = self.head(item)
        self.first[i] = [self.emit(kind, i, k, [*head, *text, self.cue["classify"]])
                         for k, text in enumerate(item.texts())]
        verdict = self.new(clipped_length(rng, *OUTPUT["classify"]))
        if rng.random() < ESCALATE[kind]:
            self.at(self.now + rng.uniform(*SENIOR_DELAY), "senior", (i, [verdict], 0))
            return
        troll = item.author < TROLLS[0]
        self.decide(i, verdict, max(REMOVE[kind], TROLL_REMOVE) if troll else REMOVE[kind])

    def decide(self, i: int, verdict: Segment, odds: float) -> None:
        """The decision on item ``i``; a removal joins the author's history and may be
        appealed hours later."""
        item, rng = self.items[i], self.rng
        item.decision = verdict
        if rng.random() >= odds:
            return
        item.removed = True
        self.history(item.author).append(self.new(clipped_length(rng, *OUTPUT["classify"])))
        if rng.random() < APPEAL[item.author >= USERS]:
            t = self.now + clipped_length(rng, *APPEAL_DELAY)
            if t < END:
                self.at(t, "appeal", i)

    def senior_prompt(self, i: int, version: int, tail: list[Segment]) -> list[Segment]:
        """The senior reviewer's prompt: the policy, the playbook, the hard cases, the
        language's guidance, the item and its parts, ``tail``, the cue."""
        item = self.items[i]
        return [*self.policy("senior", item.surface, version), *self.playbook,
                *self.hard_cases, self.language[item.lang], *item.context, *item.body,
                *item.parts, *tail, self.cue["senior"]]

    def _on_senior(self, arg: tuple[int, list[Segment], int]) -> None:
        """An escalation (step 0: from the first pass, 1: from an appeal)."""
        i, tail, step = arg
        item = self.items[i]
        version = item.version if step == 0 else self.version_at(self.now)
        j = self.emit("escalate", i, step, self.senior_prompt(i, version, tail))
        self.escalations.append((i, step, j))
        if step == 0:
            self.decide(i, self.new(clipped_length(self.rng, *OUTPUT["senior"])),
                        SENIOR_REMOVE)

    def _on_appeal(self, i: int) -> None:
        """An appeal: the item, its decision, the user's history as it stands, the user's
        statement, behind the appeal prompt; a quarter go on to the senior reviewer."""
        item, rng = self.items[i], self.rng
        history = list(self.history(item.author))
        statement = self.new(clipped_length(rng, *APPEAL_TEXT))
        tail = [item.decision, *history, statement]
        segs = [*self.policy("appeal", item.surface, self.version_at(self.now)), self.rubric,
                *item.context, *item.body, *item.parts, *tail, self.cue["appeal"]]
        self.appeals.append((i, self.emit("appeal", i, 0, segs), history))
        if rng.random() < APPEAL_SENIOR:
            out = self.new(clipped_length(rng, *OUTPUT["appeal"]))
            self.at(self.now + rng.uniform(*SENIOR_DELAY), "senior", (i, [*tail, out], 1))

    def _on_item(self, region: int) -> None:
        """An organic item: a surface by share, a root or a reply under a live root."""
        s = self.rng.choices(self.layout.surfaces, [x.share for x in self.layout.surfaces])[0]
        parent = self.pick_root(s.parent) if s.parent else None
        i = self.add_item(s.name, self.a_lang(region), self.author(), self.now, parent=parent)
        self.items[i].region = region
        self.classify(i, "classify")

    def _on_trend(self, _) -> None:
        """A thread starts trending: its root, then echoes over the next hours."""
        rng, layout = self.rng, self.layout
        lang = self.a_lang(self.a_region())
        root = self.add_item(layout.surfaces[0].name, lang, self.author(), self.now)
        self.items[root].weight = TRENDING
        templates = [self.new(clipped_length(rng, *TEMPLATES[1]))
                     for _ in range(rng.randint(*TEMPLATES[0]))]
        self.bursts.append(Burst(root, lang, templates))
        self.classify(root, "viral")
        tau = rng.uniform(*ECHO_TAU)
        for _ in range(rng.randint(*layout.viral[1])):
            self.at(self.now + rng.expovariate(1.0 / tau), "echo", len(self.bursts) - 1)

    def _on_echo(self, b: int) -> None:
        """An echo of a trend: a quote-post resending the original, or a reply (by NEAR_DUP
        a copypasta variant and a short tail)."""
        burst, rng, layout = self.bursts[b], self.rng, self.layout
        if rng.random() < layout.quotes:
            body = [self.new(clipped_length(rng, *QUOTE))]
            i = self.add_item(layout.surfaces[0].name, burst.lang, self.author(), self.now,
                              body, burst.root)
            kind = "quote"
        else:
            body = None
            if rng.random() < NEAR_DUP:
                body = [rng.choice(burst.templates), self.new(clipped_length(rng, *TAIL))]
            i = self.add_item(layout.surfaces[1].name, burst.lang, self.author(), self.now,
                              body, burst.root)
            kind = "viral"
        burst.echoes.append(i)
        self.classify(i, kind)

    def _on_wave(self, _) -> None:
        """A spam wave: 1..3 templates sprayed from new accounts over minutes."""
        rng = self.rng
        lang = "en" if rng.random() < 0.7 else self.a_lang(self.a_region())
        templates = [self.new(clipped_length(rng, *WAVE[2])) for _ in range(rng.randint(*WAVE[1]))]
        wave = Wave(self.layout.spam[1], lang, templates, self.now, rng.uniform(*WAVE[4]))
        self.waves.append(wave)
        for _ in range(rng.randint(*WAVE[0])):
            self.at(self.now + rng.uniform(0.0, wave.span), "spam", len(self.waves) - 1)

    def _on_spam(self, w: int) -> None:
        """One spam item: a template and a unique tail (or all unique), from a new account,
        under a random live root where the surface has one; never a root others answer."""
        wave, rng = self.waves[w], self.rng
        body = [self.new(clipped_length(rng, *WAVE[2]))]
        if rng.random() < WAVE[3]:
            body = [rng.choice(wave.templates), self.new(clipped_length(rng, *SPAM_TAIL))]
        parent_surface = self.surfaces[wave.surface].parent
        parent = rng.choice(self.roots[parent_surface][-100:]) if parent_surface else None
        author = USERS + len(self.items)
        i = self.add_item(wave.surface, wave.lang, author, self.now, body, parent, listed=False)
        wave.items.append(i)
        self.classify(i, "spam")

    def _on_rollout(self, _) -> None:
        """A guidelines version: one policy area rewritten and, 30 % of the time, a new one
        after it; its canary window, then everyone."""
        rng, secs = self.rng, list(self.guidelines[-1])
        k = rng.randrange(len(secs))
        secs[k] = self.new(GUIDELINES[1])
        if rng.random() < 0.3:
            secs.insert(k + 1, self.new(GUIDELINES[1]))
        self.guidelines.append(secs)
        self.rollouts.append((self.now, self.now + rng.uniform(*CANARY_HOURS) * HOUR))
        self.revisions.append((self.now, k))

    def _on_rules(self, _) -> None:
        """A surface's rules get one section rewritten, at once."""
        s = self.rng.choice(sorted(self.surfaces))
        rules = self.rules[s]
        secs = list(rules.current)
        k = self.rng.randrange(len(secs))
        secs[k] = self.new(max(40, round(secs[k][1] * self.rng.uniform(0.8, 1.25))))
        rules.versions.append((self.now, secs))
        self.edits.append((self.now, "rules", s, k))

    def _on_examples(self, _) -> None:
        """A surface's few-shot examples get 1..3 new ones at the end."""
        s = self.rng.choice(sorted(self.surfaces))
        ex, rng = self.examples[s], self.rng
        new = [self.new(clipped_length(rng, *EXAMPLES[1]))
               for _ in range(rng.randint(*EXAMPLE_ADDS[1]))]
        ex.versions.append((self.now, [*ex.current, *new]))
        self.edits.append((self.now, "examples", s, len(ex.current) - len(new)))
