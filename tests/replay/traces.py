"""Synthetic traces for the replay tests: ``write_trace`` writes a seeded JSONL trace in the
trace format (timestamp, input/output lengths, hash ids) whose requests often extend an
earlier one's prefix."""

from __future__ import annotations

import json
import random
from pathlib import Path


def write_trace(path: Path, n: int = 40, seed: int = 1, max_out: int = 24) -> list[dict]:
    """Conversation-like: a request often extends an earlier one's hash ids."""
    rng = random.Random(seed)
    rows, next_id, t = [], 0, 0
    for _ in range(n):
        if rows and rng.random() < 0.6:
            ids = list(rng.choice(rows)["hash_ids"])
        else:
            ids = []
        extra = rng.randint(1, 3)
        ids += list(range(next_id, next_id + extra))
        next_id += extra
        ids = ids[:6]
        length = (len(ids) - 1) * 512 + rng.randint(1, 512)
        t += rng.randint(0, 400)
        rows.append({"timestamp": t, "input_length": length,
                     "output_length": rng.randint(1, max_out), "hash_ids": ids})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows
