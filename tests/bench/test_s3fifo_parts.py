"""bench/s3fifo_parts.py: each variant changes one part of S3-FIFO, and the defaults replay
bench/baselines.py's S3-FIFO exactly."""

from __future__ import annotations

import json
import random

from bench.baselines import S3FIFO, S3FIFO1, replay
from bench.s3fifo_parts import Parts, cell, main, variants


def _trace(seed: int = 3) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(400) for _ in range(rng.randint(1, 6))] for _ in range(3000)]


def test_the_defaults_are_the_baselines():
    reqs = _trace()
    assert replay(reqs, Parts(100, 2)) == replay(reqs, S3FIFO(100))
    assert replay(reqs, Parts(100, 1)) == replay(reqs, S3FIFO1(100))


def _main_hit(c: Parts) -> Parts:
    """20 ids used twice fill a 20-id cache; a new id moves the small queue's used ids to
    main (its head 1; 0, promoted first, was main's first victim); then 1 is hit."""
    for h in [*range(20), *range(20), 100]:
        c.access(h)
    assert list(c.m)[0] == 1 and 0 not in c
    c.access(1)
    return c


def test_an_lru_main_moves_a_hit_to_its_tail_with_no_lap():
    lru = _main_hit(Parts(20, 1, main_lru=True))
    assert list(lru.m)[-1] == 1 and lru.freq[1] == 0
    lap = _main_hit(Parts(20, 1))  # S3-FIFO: the hit stays in place, counted for a lap
    assert list(lap.m)[0] == 1 and lap.freq[1] == 1
    for c in (lru, lap):
        c.access(101)  # the small queue's next used id goes to main, then main evicts
    assert 1 in lru and 2 not in lru
    assert 1 in lap and list(lap.m)[-1] == 1  # its lap: back to the tail, count spent


def test_without_a_ghost_an_evicted_id_comes_back_as_new():
    with_g, without = Parts(10, 2), Parts(10, 2, ghost=False)
    for c in (with_g, without):
        for h in range(12):  # 0 and 1 leave the small queue unused: ghosts (or not)
            c.access(h)
        c.access(0)
    assert 0 in with_g.m and 0 in without.s and not without.g


def test_variants_and_the_report(tmp_path, capsys):
    assert Parts(100, 1, small=0.2).small_cap == 20
    assert set(variants(50)) == {f"s3fifo{t}{p}" for t in (1, 2)
                                 for p in ("", ".mainlru", ".noghost", ".small20")}
    key = "agent@1@300"
    r = cell(key, 0.05)
    assert 0 < r["lru_hit_rate"] < 1 and all(-1 < v < 1 for v in r.values())
    out = tmp_path / "p.json"
    res = main(["--cells", key, "--scale", "0.05", "--json", str(out)])
    assert res["cells"][key] == r and json.loads(out.read_text())["cells"][key] == r
    assert f"{key}: lru hit rate" in capsys.readouterr().out
