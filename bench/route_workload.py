"""bench.route_live's workload: conversations of the Mooncake trace as token ids (the
conversation and system-prompt rules are in bench/route_live.py's docstring), and the same
workload through bench/route.py's Simulation."""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.route import Req, Simulation

TOKEN_LO, TOKEN_HI = 10, 250  # inside the tiny model's byte vocabulary, clear of specials


@dataclass(frozen=True, slots=True)
class Turn:
    """One request of the replay: its blocks (system prompt ids < 0, trace hash ids >= 1)."""

    index: int
    output_length: int
    blocks: tuple[int, ...]


def build_workload(reqs: list[Req], conversations: int, *, max_blocks: int = 24,
                   system_prompts: int = 4, system_blocks: int = 1, seed: int = 0) -> list[Turn]:
    """Sample ``conversations`` trace conversations; their turns in trace order."""
    groups: dict[int, list[Req]] = {}
    for r in reqs:
        if len(r.hash_ids) > 1:  # a lone [0] is only the system prompt: no conversation key
            groups.setdefault(r.hash_ids[1], []).append(r)
    rng = random.Random(seed)
    keys = sorted(groups)
    chosen = set(rng.sample(keys, min(conversations, len(keys))))
    system = {k: rng.randrange(system_prompts) for k in sorted(chosen)}
    turns: list[Turn] = []
    for r in reqs:  # trace order
        if len(r.hash_ids) > 1 and r.hash_ids[1] in chosen:
            s = system[r.hash_ids[1]]
            head = tuple(-(s * system_blocks + j + 1) for j in range(system_blocks))
            turns.append(Turn(len(turns), r.output_length, head + r.hash_ids[1:max_blocks]))
    return turns


def block_tokens(h: int, salt: str, block_size: int) -> list[int]:
    rng = random.Random(f"{salt}:{h}")
    return [rng.randrange(TOKEN_LO, TOKEN_HI) for _ in range(block_size)]


def prompt_ids(turn: Turn, salt: str, block_size: int) -> list[int]:
    ids = [t for h in turn.blocks for t in block_tokens(h, salt, block_size)]
    return ids + block_tokens(10**9 + turn.index, salt, block_size // 2)  # own tail


def simulate(turns: list[Turn], policy: str, replicas: int, local_blocks: int) -> float:
    """bench/route.py's model on this workload (one request at a time: loads stay 0)."""
    reqs = [Req(1e6 * t.index, t.output_length, t.blocks) for t in turns]  # each runs alone
    routing = "prefix_aware" if policy == "prefix" else policy
    return Simulation(routing, replicas=replicas, local_blocks=local_blocks).run(
        reqs)["total_hit_rate"]
