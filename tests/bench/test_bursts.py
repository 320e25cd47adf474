"""bench/bursts.py: its variants differ from the product only where NOTE(bursts) says."""

from __future__ import annotations

from bench.bursts import ARMS, Before, Early, EarlyTuner, verdict
from bench.cold_start import rates
from kvpool.core.eviction.admit_tuner import AdmitTuner
from tests.core.test_tuner_bursts import BONUS, feed


def test_early_passes_on_the_long_window_before_it_is_full():
    """50 hits one period in 15: ``early`` moves off LRU within the slow window's length,
    the product only once the long window is full, ``before`` never."""
    early = feed(EarlyTuner(4096, lambda c: 1), 700, 15, 50).index(BONUS)
    product = feed(AdmitTuner(4096, lambda c: 1), 700, 15, 50).index(BONUS)
    assert EarlyTuner.BURST_STEPS <= early < 150 < AdmitTuner.BURST_STEPS - 1 <= product
    assert set(feed(AdmitTuner(4096, lambda c: 1, bursts=False), 700, 15, 50)) == {0}


def test_the_policies_hand_their_tuners_the_flag():
    assert Before.BURSTS is False and Early.BURSTS is True and Early.TUNER is EarlyTuner


def test_rates_replays_every_arm_and_the_verdict_reads_the_target():
    """A loop of 300 one-block requests over a 200-block pool, twice: LRU hits nothing."""
    reqs = [[i + 1] for i in range(300)] * 2
    r = rates(reqs, 200, True, ARMS)
    assert set(r) >= {"lru", "adaptive", "before", "early", "arc", "s3fifo"}
    assert r["lru"] == 0.0 and all(0.0 <= v <= 0.5 for v in r.values())
    best = max(v for k, v in r.items() if k not in ("adaptive", "before", "early"))
    assert verdict({**r, "x": best}, "x") == "met"
    assert verdict({**r, "x": best - 0.01}, "x").startswith("lost")
    assert verdict({**r, "x": -1.0}, "x") == "lost <lru"
