"""bench/route.py's simulation on hand-worked traces: every routing and write policy."""

import random

from hypothesis import given
from hypothesis import strategies as st

from bench.route import LRU, Req, Simulation, simulate_all
from kvpool.router.scoring import LoadGuard

FAST = dict(prefill_tps=1e12, decode_tps=1.0)  # a request occupies its replica output_length s


def reqs(*ids_list, t=0.0, out=1):
    return [Req(t, out, tuple(ids)) for ids in ids_list]


def sim(routing, policy="off", **kw):
    args = dict(replicas=2, local_blocks=2, shared_blocks=100, **FAST)
    args.update(kw)
    return Simulation(routing, policy, **args)


def test_round_robin_alternates_and_counts_leading_hits():
    s = sim("round_robin", local_blocks=10)
    res = s.run(reqs([1, 2], [1, 2], [1, 2]))
    assert s.placed == [0, 1, 0]
    assert s.local == 2 and res["local_hit_rate"] == round(2 / 6, 6)
    assert res["remote_hit_rate"] == 0 and res["total_hit_rate"] == res["local_hit_rate"]


def test_random_follows_its_seeded_generator():
    s = sim("random", replicas=3, local_blocks=10, seed=7)
    s.run(reqs(*[[i] for i in range(20)]))
    rng = random.Random(7)
    assert s.placed == [rng.randrange(3) for _ in range(20)]


def test_least_loaded_counts_in_flight_requests():
    s = sim("least_loaded", local_blocks=10)
    trace = [Req(0, 10, (1,)), Req(1, 10, (2,)), Req(2, 10, (3,)), Req(3, 10, (4,)),
             Req(20, 10, (5,))]  # by t=20 all finished: loads (0, 0) again
    s.run(trace)
    assert s.placed == [0, 1, 0, 1, 0]


def test_prefix_aware_follows_the_prefix_and_round_robins_misses():
    s = sim("prefix_aware", local_blocks=10)
    res = s.run(reqs([1, 2, 3], [7, 8], [1, 2, 3, 4], [7, 8, 9]))
    assert s.placed == [0, 1, 0, 1]
    assert s.local == 3 + 2
    assert res["reasons"] == {"prefix": 2, "round_robin": 2}


def test_prefix_aware_load_guard_sends_to_least_loaded():
    s = sim("prefix_aware", local_blocks=10, guard=LoadGuard(abs_threshold=1, rel_ratio=1.5))
    trace = [Req(0, 100, (1, 2)), Req(1, 100, (1, 2)), Req(2, 100, (1, 2))]
    s.run(trace)
    # loads at t=1: (1, 0) -> 1-0 not > 1 -> prefix; at t=2: (2, 0) -> guard trips -> replica 1
    assert s.placed == [0, 0, 1]
    assert s.reasons == {"round_robin": 1, "prefix": 1, "load": 1}
    assert s.local == 2  # the guarded request lost its hit


def test_off_has_no_remote_hits():
    s = sim("round_robin", replicas=1)
    res = s.run(reqs([1, 2], [3, 4], [1, 2]))
    assert s.local == 0 and res["remote_hit_rate"] == 0 and s.shared is None


def test_write_through_serves_other_replicas_and_evicted_blocks():
    s = sim("round_robin", "write_through")
    s.run(reqs([1, 2], [1, 2]))  # replica 1 reads what replica 0 wrote
    assert (s.local, s.remote) == (0, 2)
    s = sim("round_robin", "write_through", replicas=1)
    s.run(reqs([1, 2], [3, 4], [1, 2]))
    assert (s.local, s.remote) == (0, 2)


def test_write_back_writes_only_on_local_eviction():
    s = sim("round_robin", "write_back")
    s.run(reqs([1, 2], [1, 2]))  # nothing was evicted: replica 1 finds nothing
    assert (s.local, s.remote) == (0, 0)
    s = sim("round_robin", "write_back", replicas=1)
    s.run(reqs([1, 2], [3, 4], [1, 2]))  # [3, 4] evicted 1 and 2 into the tier
    assert (s.local, s.remote) == (0, 2)


def test_write_through_selective_needs_two_local_hits():
    once = sim("round_robin", "write_through_selective", replicas=1)
    once.run(reqs([1, 2], [1, 2], [3, 4], [1, 2]))  # one reuse: never written
    assert (once.local, once.remote) == (2, 0)
    twice = sim("round_robin", "write_through_selective", replicas=1)
    twice.run(reqs([1, 2], [1, 2], [1, 2], [3, 4], [1, 2]))  # second hit writes both
    assert (twice.local, twice.remote) == (4, 2)


def test_shared_tier_is_bounded_and_remote_hits_are_a_leading_run():
    s = sim("round_robin", "write_through", replicas=1, shared_blocks=1)
    s.run(reqs([1, 2], [3, 4]))  # the tier keeps only 3 (put tail first)
    assert len(s.shared) == 1 and 3 in s.shared
    s.step(Req(0, 1, (1, 2)))  # 1 and 2 were pushed out of the tier: no remote hit
    assert s.remote == 0 and 1 in s.shared
    s = sim("round_robin", "write_back", replicas=1, local_blocks=2, shared_blocks=1)
    s.run(reqs([1, 2, 3], [1, 2, 3]))  # evicted 3 is in the tier, after a 2-block local run
    assert (s.local, s.remote) == (2, 1)


def test_simulate_all_reports_every_pair_and_the_ratio():
    res = simulate_all(reqs([1, 2], [1, 2], [1, 2, 3]), replicas=2, local_blocks=4,
                       shared_blocks=8, **FAST)
    assert len(res["rows"]) == 16
    assert res["best_shared"]["total_hit_rate"] >= max(
        r["total_hit_rate"] for r in res["rows"] if r["write_policy"] == "off")


@given(st.integers(1, 5), st.lists(st.integers(0, 9), max_size=60))
def test_lru_matches_a_list_model(cap, keys):
    lru, model = LRU(cap), []
    for h in keys:
        evicted = lru.touch(h)
        expect = None
        if h in model:
            model.remove(h)
        elif len(model) == cap:
            expect = model.pop(0)
        model.append(h)
        assert evicted == expect
        assert list(lru.order) == model and len(lru) <= cap
