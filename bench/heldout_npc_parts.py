"""The clock and the player population, the catalog of regions and NPCs, and the world-state,
live-event, raid, chat-moderation and quest-walk parts of bench.heldout's ``npc_world`` shape;
bench/heldout_npc.py's docstring states what each part models and its parameters, and adds the
NPC dialogue. Every handler sends at most one request."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from bench.heldout_fewshot import EventState, Segment, clipped_length
from bench.heldout_vision_parts import Length, Profile

DAY = 86400.0
START_HOUR = 12  # server time (UTC) at the trace's start
MIN_PER_DAY = 4.0  # a stream's rate when scaled down, at least
COHORTS = ((-6, 0.35), (1, 0.45), (8, 0.2))  # players' UTC offset (hours) and share
GAMING: Profile = (0.6, 0.4, 0.25, 0.15, 0.1, 0.08, 0.08, 0.12, 0.2, 0.3, 0.4, 0.45, 0.5,
                   0.55, 0.6, 0.65, 0.75, 0.9, 1.1, 1.3, 1.4, 1.4, 1.2, 0.9)  # by local hour
# the prompt's shared head
LORE = (1500, 3000)  # game-wide lore, rules and style system prompt
WORLD = (200, 450)  # a world-state version: current events, weather, season, server news
WORLD_EVERY = (20 * 60.0, 90 * 60.0)  # seconds between scheduled world-state regenerations
# the catalog
REGIONS = 30  # regions of the map (the event's new zone is one more)
REGION_TEXT = (250, 600)  # a region's context: geography, factions, local state
REGION_ZIPF, COHORT_SWAPS = 0.7, 8  # region popularity, and how each cohort's ranking differs
NPCS_PER_REGION = (5, 12)  # this replica's NPCs in a region (scaled, rounded)
EVENT_NPCS = 12  # this replica's NPCs in the event zone (scaled, at least 3)
PERSONA = {"quest": (400, 1000), "merchant": (300, 700), "villager": (120, 400)}
ROLE_ODDS = (0.15, 0.15)  # below the top two ranks: quest givers, merchants; else villagers
NPC_ZIPF, HOT = 1.0, 2.0  # NPC popularity by rank, times HOT for quest givers and merchants
# the live event (a patch opens a new zone)
EVENT_START, EVENT_LENGTH = (16, 18), (3 * 3600.0, 5 * 3600.0)  # server hour; seconds
EVENT_ONLINE, EVENT_CHAT = 1.3, 2.0  # players online during it; chat in its first hour
# raids
RAID_HOURS = ((19, 22), (8, 10))  # server hours of this replica's two world-boss spawns
RAID_LENGTH = (600.0, 1500.0)  # seconds
BARKS = (160, 300)  # boss lines a raid asks for (scaled, at least 8)
BOSS = (600, 1200)  # a world boss's persona
PHASE = (80, 200)  # an encounter phase's state block; 3 phases a raid
ACTION: Length = (14, 0.6, 6, 60)  # a player's action or shout the boss reacts to
RAID_CHAT = 2.5  # chat while a raid is on
# chat moderation
CHATS_PER_DAY = 2350  # chat exchanges (scaled); each 1 + geometric messages (mean 2.5)
MORE_MESSAGES = 0.6  # chance an exchange has another message
MESSAGE_GAP = (1.0, 8.0)  # seconds between an exchange's messages
MESSAGE: Length = (12, 0.9, 2, 150)
MOD_HEAD, MOD_TAIL = (250, 450), (40, 80)  # the classifier's policy and its answer format
# the nightly quest walk
QUEST_AT, QUEST_GAP = 3.0, 3.0  # server hour it starts; seconds a request
QUEST_TEMPLATE = (600, 1200)  # quest-generator instructions and JSON schema
QUEST_SPEC = (20, 60)  # the day's seed, level band and slot


def server_hour(t: float) -> float:
    """The server hour (0..24, UTC) at ``t`` seconds into the trace."""
    return (START_HOUR + t / 3600.0) % 24


def cohort_levels(t: float) -> list[float]:
    """Each cohort's players online at ``t``: its share times GAMING at its local hour."""
    h = server_hour(t)
    return [w * GAMING[int(h + off) % 24] for off, w in COHORTS]


GAMING_MEAN = sum(GAMING) / len(GAMING)
ONLINE_PEAK = max(sum(cohort_levels(h * 3600.0)) for h in range(24)) / GAMING_MEAN


def online(t: float) -> float:
    """Players online at ``t``, relative to the day's mean (1.0)."""
    return sum(cohort_levels(t)) / GAMING_MEAN


def at_hour(hour: float) -> float:
    """Seconds into the trace of the first time the server clock shows ``hour``."""
    return (hour - START_HOUR) % 24 * 3600.0


def _role(rng: random.Random, rank: int) -> str:
    """An NPC's role by its popularity rank in its region: rank 0 a quest giver, rank 1 a
    merchant, the rest either by ROLE_ODDS or a villager."""
    if rank < 2:
        return ("quest", "merchant")[rank]
    u = rng.random()
    return "quest" if u < ROLE_ODDS[0] else "merchant" if u < sum(ROLE_ODDS) else "villager"


@dataclass(frozen=True)
class Npc:
    """An NPC on this replica: its region, role (quest, merchant, villager), popularity rank
    in its region (0 the most asked) and persona card."""

    region: int
    role: str
    rank: int
    persona: Segment


@dataclass(frozen=True)
class Raid:
    """A world-boss raid: its window (seconds), region, boss persona, phase blocks and the
    times phases 2 and 3 begin, and its boss lines' times."""

    start: float
    end: float
    region: int
    boss: Segment
    phases: tuple[Segment, ...]
    bounds: tuple[float, ...]
    times: tuple[float, ...]

    def phase(self, t: float) -> int:
        """The encounter phase (0..2) at ``t``."""
        return sum(t >= b for b in self.bounds)


class NpcState(EventState):
    """The generator's clock, event heap, catalog, world state, live event, raids, chat
    moderation and quest walk; bench/heldout_npc.py's state adds the NPC dialogue."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        new = self.new
        self.lore = new(rng.randint(*LORE))
        self.worlds: list[tuple[float, Segment, str]] = [(0.0, new(rng.randint(*WORLD)), "start")]
        self.mod = (new(rng.randint(*MOD_HEAD)), new(rng.randint(*MOD_TAIL)))
        self.quest = new(rng.randint(*QUEST_TEMPLATE))
        self.regions = [new(rng.randint(*REGION_TEXT)) for _ in range(REGIONS + 1)]
        self.npcs: list[Npc] = []
        self.region_npcs = [self._populate(r, n) for r, n in enumerate(self._shard_sizes())]
        self.cohort_cdf = self._cohort_regions()
        start = at_hour(rng.randint(*EVENT_START))
        self.event = (start, start + rng.uniform(*EVENT_LENGTH))
        self.event_on, self.walk, self.exchanges = False, [], 0
        self.raids = [self._raid(window) for window in RAID_HOURS]
        for r, raid in enumerate(self.raids):
            self.at(raid.start, "raid", r)
        self.at(self.event[0], "event", True)
        self.at(self.event[1], "event", False)
        self.at(rng.uniform(*WORLD_EVERY), "world", None)
        self.at(at_hour(QUEST_AT), "quest", 0)
        self.at(self.arrival(CHATS_PER_DAY, self.chat_level), "chat", None)

    def world(self) -> Segment:
        """The current world-state version."""
        return self.worlds[-1][1]

    def arrival(self, per_day: float, level) -> float:
        """The next arrival after now of a Poisson stream of ``per_day`` a day (scaled, at
        least MIN_PER_DAY) at players online 1.0, whose rate follows ``level(t)`` (thinning;
        level stays under ONLINE_PEAK * EVENT_ONLINE * EVENT_CHAT * RAID_CHAT)."""
        cap = ONLINE_PEAK * EVENT_ONLINE * EVENT_CHAT * RAID_CHAT
        top = max(MIN_PER_DAY, per_day * self.scale) / DAY * cap
        t = self.now
        while True:
            t += self.rng.expovariate(top)
            if self.rng.random() * cap < level(t):
                return t

    def talk_level(self, t: float) -> float:
        """Players online at ``t``, more while the live event is on."""
        return online(t) * (EVENT_ONLINE if self.event[0] <= t < self.event[1] else 1.0)

    def chat_level(self, t: float) -> float:
        """Chat at ``t``: players online, more in the event's first hour and during raids."""
        level = self.talk_level(t)
        if self.event[0] <= t < self.event[0] + 3600.0:
            level *= EVENT_CHAT
        if any(r.start <= t < r.end for r in self.raids):
            level *= RAID_CHAT
        return level

    def _shard_sizes(self) -> list[int]:
        """How many NPCs this replica holds in each region (scaled: a scaled-down replica
        may hold none of a region's, but holds some) and in the event zone (last)."""
        rng = self.rng
        sizes = [round(rng.randint(*NPCS_PER_REGION) * self.scale) for _ in range(REGIONS)]
        if not any(sizes):
            sizes[rng.randrange(REGIONS)] = 1
        return sizes + [max(3, round(EVENT_NPCS * self.scale))]

    def _populate(self, region: int, n: int) -> list[int]:
        """This replica's ``n`` NPCs of ``region`` (the event zone when REGIONS), in catalog
        order; their popularity ranks are a shuffle, the top two a quest giver and a
        merchant."""
        rng = self.rng
        ranks = list(range(n))
        rng.shuffle(ranks)
        first = len(self.npcs)
        for rank in ranks:
            role = _role(rng, rank)
            self.npcs.append(Npc(region, role, rank, self.new(rng.randint(*PERSONA[role]))))
        return list(range(first, first + n))

    def npc_weight(self, n: int) -> float:
        """An NPC's popularity in its region: Zipf by rank, HOT for quest givers, merchants."""
        npc = self.npcs[n]
        return (HOT if npc.role != "villager" else 1.0) / (npc.rank + 1) ** NPC_ZIPF

    def _cohort_regions(self) -> list[list[float]]:
        """Each cohort's cumulative region weights: Zipf over one shuffled ranking of the
        regions, COHORT_SWAPS pairs of ranks traded per cohort; none for a region where this
        replica holds no NPC (the router sends those talks elsewhere)."""
        order = list(range(REGIONS))
        self.rng.shuffle(order)
        out = []
        for _ in COHORTS:
            mine = list(order)
            for _ in range(COHORT_SWAPS):
                a, b = self.rng.randrange(REGIONS), self.rng.randrange(REGIONS)
                mine[a], mine[b] = mine[b], mine[a]
            weights = [0.0] * REGIONS
            for rank, region in enumerate(mine):
                weights[region] = bool(self.region_npcs[region]) / (rank + 1) ** REGION_ZIPF
            out.append(list(itertools.accumulate(weights)))
        return out

    def _raid(self, window: tuple[int, int]) -> Raid:
        """A raid at a whole server hour in ``window``: its region, boss and phase blocks,
        and its boss lines' times (fast ramp-up, long tail)."""
        rng = self.rng
        start = at_hour(rng.randint(*window))
        end = start + rng.uniform(*RAID_LENGTH)
        span = end - start
        bounds = (start + span * rng.uniform(0.25, 0.45), start + span * rng.uniform(0.55, 0.8))
        barks = max(8, round(rng.randint(*BARKS) * self.scale))
        times = sorted(start + span * rng.betavariate(1.2, 1.6) for _ in range(barks))
        phases = tuple(self.new(rng.randint(*PHASE)) for _ in range(3))
        return Raid(start, end, rng.randrange(REGIONS), self.new(rng.randint(*BOSS)), phases,
                    bounds, tuple(times))

    def regenerate(self, reason: str) -> None:
        """A new world-state version from now on."""
        self.worlds.append((self.now, self.new(self.rng.randint(*WORLD)), reason))

    def _on_world(self, _: object) -> None:
        """The scheduled world-state regeneration, every WORLD_EVERY."""
        self.regenerate("tick")
        self.at(self.now + self.rng.uniform(*WORLD_EVERY), "world", None)

    def _on_event(self, on: bool) -> None:
        """The live event starts or ends: the world state is regenerated."""
        self.event_on = on
        self.regenerate("event" if on else "event over")

    def _on_raid(self, r: int) -> None:
        """A raid starts: the world state announces it; its boss lines are scheduled."""
        self.regenerate("raid")
        for k, t in enumerate(self.raids[r].times):
            self.at(t, "bark", (r, k))

    def _on_bark(self, rk: tuple[int, int]) -> None:
        """A boss line: lore + world + the raid's region + boss + current phase + action."""
        r, k = rk
        raid = self.raids[r]
        action = self.new(clipped_length(self.rng, *ACTION))
        self.send("raid", r, k, [self.lore, self.world(), self.regions[raid.region], raid.boss,
                                 raid.phases[raid.phase(self.now)], action])

    def _on_chat(self, _: object) -> None:
        """A chat exchange starts: its first message; the next exchange is scheduled."""
        self.at(self.arrival(CHATS_PER_DAY, self.chat_level), "chat", None)
        self.exchanges += 1
        self._on_message((self.exchanges - 1, 0))

    def _on_message(self, ek: tuple[int, int]) -> None:
        """A chat message to classify: policy + message + answer format; the exchange goes on
        MORE_MESSAGES of the time, seconds later."""
        e, k = ek
        message = self.new(clipped_length(self.rng, *MESSAGE))
        self.send("mod", e, k, [self.mod[0], message, self.mod[1]])
        if self.rng.random() < MORE_MESSAGES:
            self.at(self.now + self.rng.uniform(*MESSAGE_GAP), "message", (e, k + 1))

    def _on_quest(self, step: int) -> None:
        """The nightly quest walk: every NPC in catalog order, one every QUEST_GAP seconds:
        lore + quest template + its region + its persona + the slot's spec."""
        if step == 0:
            self.walk = list(range(len(self.npcs)))
        npc = self.npcs[self.walk[step]]
        spec = self.new(self.rng.randint(*QUEST_SPEC))
        self.send("quest", self.walk[step], step,
                  [self.lore, self.quest, self.regions[npc.region], npc.persona, spec])
        if step + 1 < len(self.walk):
            self.at(self.now + QUEST_GAP, "quest", step + 1)
