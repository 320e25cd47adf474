"""bench.heldout's ``npc_world`` shape: one inference replica of a multiplayer online game's
LLM service, serving NPC (non-player character) dialogue, world-boss raid lines, a chat
moderation classifier and a nightly quest-generation job. Written after ``adaptive`` was
frozen (at 395a810), by someone who had not read the eviction policies; the workload is
modelled on how such traffic looks, not on any policy. Prompts are laid out in token segments
and cut into 16-token blocks by ``bench.heldout_fewshot.Blocks``. The router hashes an NPC (and
so every player's talk with it, a boss's raid and the NPC's quest job) or a chat channel to a
replica; this replica holds about 1/16 of the game's 4000 NPCs. Time is a clock in seconds
from 12:00 server time (UTC); requests are in arrival order (replies decode at 50 tokens/s).

Every NPC prompt starts with the game-wide lore/rules system prompt (1500..3000 tokens), then
the current world-state block (200..450: events, weather, season, server news). The world
state is regenerated every 20..90 min (uniform), at each raid start and when the live event
starts and ends: a new version makes every later block of every NPC prompt new content, while
the lore stays shared. Then come the region's context (250..600; 30 regions and the event's
zone), the NPC's persona card, and what is particular to the request.

Players come from three time zones (UTC-6 35 %, UTC+1 45 %, UTC+8 20 %), each online by its
local hour (evening peak 19..22, a twentieth of it at 05..06), so the day has several
waves. Each cohort ranks the regions Zipf(0.7) over one shuffled order with 8 pairs of ranks
traded (so the region mix shifts as time zones wake and sleep). Rates are per day at scale
1.0 and at the day's mean of players online, Poisson, following players online.

- NPC dialogue: 170 new conversations a day (1.3 times as many while the event is on). The
  region is drawn by a cohort (by who is online) and its ranking; the NPC in it Zipf(1.0) by
  rank, quest givers and merchants twice as likely (rank 0 is a quest giver, rank 1 a
  merchant, the rest 15 % / 15 % / 70 % villagers). This replica holds 5..12 NPCs a region
  (scaled and rounded: a scaled-down replica holds none of some regions, which then send it
  no talk). Personas: quest givers 400..1000 tokens, merchants 300..700, villagers
  120..400. A turn sends lore + world + region + persona + the player's memory with
  this NPC (every earlier line and reply) + a new line (3..120 tokens, median 14); the reply
  (15..300, median 60) joins the memory. A visit has 1 turn (30 %), 2..4 (45 %) or 5..12
  (25 %), the player answering 3 s..3 min after the reply (lognormal, median 12 s). After a
  visit the memory service summarises a memory over 1200 tokens into 150..400 tokens (new
  content), and 30 % of visits are followed by a return to the same NPC 15 min..20 h later
  (lognormal, median 3 h).
- the live event: a patch opens a new zone at 16:00..18:00 for 3..5 hours (12 NPCs on this
  replica, scaled, at least 3); while it is on 65 % of new conversations go there, then the
  players go back; chat runs at 1.3 times its rate while it is on, 2.6 times in its first
  hour.
- raids: this replica holds two world bosses, spawning at a whole hour in 19..22 and the
  next morning in 8..10. A raid lasts 10..25 min and asks the boss for 160..300 lines
  (scaled, at least 8), the times Beta(1.2, 1.6) over the window (a fast ramp, a long tail):
  lore + world (regenerated at the spawn) + region + boss persona (600..1200) + the
  encounter phase's state (3 phases, 80..200 tokens each) + the player's action (6..60
  tokens). Chat runs at 2.5 times its rate while a raid is on.
- chat moderation: 2350 chat exchanges a day, each 1 + geometric messages (mean 2.5) 1..8 s
  apart; each message (2..150 tokens, median 12) is classified: the policy head (250..450
  tokens) + the message + the answer format (40..80), so requests share only the head.
- quest walk: at 03:00 a batch job walks every NPC on this replica in catalog order (region
  by region, the event's zone last), one request every 3 s: lore + the quest generator's
  instructions and JSON schema (600..1200) + region + persona + the day's slot spec (20..60
  tokens).

9000 requests at scale 1.0 span 24.8..26.9 hours: 493k..724k blocks requested, 57k..70k
distinct (8.7..14.1 %; every NPC prompt repeats the lore) over seeds 1..10; 79..84 %
moderation, 8.5..12 % dialogue, 5..6.5 % raid and 3 % quest requests, so moderation is most
requests but 27..36 % of the blocks (dialogue 34..42 %, raids 18..23 %, the walk 10..13 %).
Rates (each at least 4 a day), the catalog and the raids scale with the trace, so a
scaled-down trace spans about as many hours and has every part, though with more spread (at
scale 0.05, 16..30 hours: the morning raid is past the end for 4 of seeds 1..40).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_npc_parts import COHORTS, REGIONS, Npc, NpcState, Raid, cohort_levels
from bench.heldout_vision_parts import Length, lognormal

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, key, step, segments (see ``Run``)
KINDS = ("talk", "raid", "mod", "quest")
TALKS_PER_DAY = 170  # new conversations (scaled)
EVENT_PULL = 0.65  # new conversations that go to the event's zone while it is on
LINE: Length = (14, 0.8, 3, 120)  # a player's line
REPLY: Length = (60, 0.6, 15, 300)  # an NPC's reply
RATE = 50.0  # tokens a second a reply decodes at
THINK = (12.0, 0.8, 3.0, 180.0)  # seconds from a reply to the player's next line
RETURN, RETURN_AFTER = 0.3, (3 * 3600.0, 1.0, 900.0, 20 * 3600.0)  # after a visit
MEMORY_CAP, SUMMARY = 1200, (150, 400)  # tokens: memory summarised after a visit


@dataclass
class Bond:
    """A player's history with one NPC: the memory (segments), the current visit's planned
    and sent turns, the turns sent over all visits and the request index of each visit's
    first turn."""

    npc: int
    memory: list[Segment] = field(default_factory=list)
    turns: int = 0
    turn: int = 0
    sent: int = 0
    visits: list[int] = field(default_factory=list)


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, key, step, segments):
    ("talk", bond, turn over all visits), ("raid", raid, line), ("mod", exchange, message) or
    ("quest", NPC, position in the walk). ``times``: seconds. ``worlds``: (time, segment,
    reason) per world-state version. ``event``: the live event's start and end."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    lore: Segment
    worlds: list[tuple[float, Segment, str]]
    regions: list[Segment]
    npcs: list[Npc]
    region_npcs: list[list[int]]
    bonds: list[Bond]
    raids: list[Raid]
    event: tuple[float, float]
    templates: dict[str, object]
    walk: list[int]


def npc_world(seed: int, scale: float = 1.0) -> Trace:
    """One replica of a game's LLM service: NPC dialogue behind shared lore and a regenerated
    world state, a live event, raid bursts to one boss, chat moderation and a nightly quest
    walk. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(9000 * scale)`` requests and its metadata (see ``Run``)."""
    s = _State(random.Random(seed), int(9000 * scale), scale)
    s.run()
    templates = {"mod": s.mod, "quest": s.quest}
    return Run(s.out, s.meta, s.times, s.lore, s.worlds, s.regions, s.npcs, s.region_npcs,
               s.bonds, s.raids, s.event, templates, s.walk)


def _turns(rng: random.Random) -> int:
    """Turns of a visit: 1 (30 %), 2..4 (45 %) or 5..12 (25 %)."""
    u = rng.random()
    return 1 if u < 0.3 else rng.randint(2, 4) if u < 0.75 else rng.randint(5, 12)


class _State(NpcState):
    """NpcState with the NPC dialogue."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.bonds: list[Bond] = []
        self.at(self.arrival(TALKS_PER_DAY, self.talk_level), "talk", None)

    def _region(self) -> int:
        """A new conversation's region: the event's zone EVENT_PULL of the time while it is
        on, else by a cohort drawn by who is online and that cohort's ranking."""
        rng = self.rng
        if self.event_on and rng.random() < EVENT_PULL:
            return REGIONS
        c = rng.choices(range(len(COHORTS)), cohort_levels(self.now))[0]
        return rng.choices(range(REGIONS), cum_weights=self.cohort_cdf[c])[0]

    def _on_talk(self, _: object) -> None:
        """A player starts talking to an NPC (by region and popularity): a new bond."""
        self.at(self.arrival(TALKS_PER_DAY, self.talk_level), "talk", None)
        npcs = self.region_npcs[self._region()]
        n = self.rng.choices(npcs, [self.npc_weight(k) for k in npcs])[0]
        self.bonds.append(Bond(n))
        self._on_visit(len(self.bonds) - 1)

    def _on_visit(self, b: int) -> None:
        """A visit starts: its turns are planned and the first is sent."""
        bond = self.bonds[b]
        bond.turns, bond.turn = _turns(self.rng), 0
        bond.visits.append(len(self.out))
        self._on_turn(b)

    def _on_turn(self, b: int) -> None:
        """A turn: lore + world + region + persona + memory + the player's line; the line and
        the reply join the memory; the next turn or the visit's end follows."""
        rng, bond = self.rng, self.bonds[b]
        npc = self.npcs[bond.npc]
        line = self.new(clipped_length(rng, *LINE))
        self.send("talk", b, bond.sent, [self.lore, self.world(), self.regions[npc.region],
                                    npc.persona, *bond.memory, line])
        reply = clipped_length(rng, *REPLY)
        bond.memory += [line, self.new(reply)]
        bond.turn, bond.sent = bond.turn + 1, bond.sent + 1
        after = self.now + reply / RATE
        if bond.turn < bond.turns:
            self.at(after + lognormal(rng, *THINK), "turn", b)
            return
        if sum(t for _, t in bond.memory) > MEMORY_CAP:
            bond.memory = [self.new(rng.randint(*SUMMARY))]
        if rng.random() < RETURN:
            self.at(after + lognormal(rng, *RETURN_AFTER), "visit", b)
